"""`python -m clockworks_dist.cli ...`: the `clockworks` command."""

import sys

from . import main

sys.exit(main())
