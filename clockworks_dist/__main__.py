"""`python -m clockworks_dist ...`: the `clockworks` command, for machines where the console script
is not on PATH (e.g. a GPU machine with the package on PYTHONPATH)."""

import sys

from .cli import main

sys.exit(main())
