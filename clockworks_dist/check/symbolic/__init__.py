"""Symbolic checks with z3: sizes that hold for every admissible value, and waits that can be met.

The concrete model checker explores one traced instance of a schedule (`CHUNK = 4`). The two checks
here generalise what can be said without exploring states:

- `check_sizes` (`sizes`) proves, for every valuation of the `cw.size` symbols allowed by their min,
  max and multiple_of, that every region is inside its buffer, that transfers move equal counts (a
  send and its matched recv, put/get src and dst, copy, reduce, collectives), and that accesses which
  may run concurrently never overlap. A failed proof comes back as a `symbolic_size` violation whose
  message shows a counterexample valuation, the one closest to the traced values.
- `check_waits` (`waits`) decides, for every `wait_until`, whether some subset and order of the
  signal updates that can reach it makes the condition true; if none does, the wait can never return
  and the report is `unsatisfiable_wait`.
- `unfinished_deliveries` (`deliveries`) warns of deliveries no quiet, barrier_all or wait completes.

Every obligation is a linear integer formula over the symbols, so z3 decides it exactly. The proofs
are about the schedule as traced: Python control flow (loop counts, `if CHUNK > 4`) ran at the traced
values, and a bound computed non-affinely (`CHUNK // 3`, `CHUNK % 2`) reaches the IR without its
symbolic form and is taken as the constant it had in the trace.

Without an execution's happens-before order, the checks read the static one of `semantics.order`,
its waits ordered by value with z3 (`waits.static_order`). z3 is imported in `solver` and nowhere
else in the package, on first use. Modules: `forms` (affine forms of sizes and regions), `solver`,
`sizes`, `waits`, `deliveries`.
"""

from .deliveries import unfinished_deliveries
from .forms import show_form
from .sizes import check_sizes
from .waits import check_waits

__all__ = ["check_sizes", "check_waits", "show_form", "unfinished_deliveries"]
