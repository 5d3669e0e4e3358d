"""The one operational semantics every engine shares (DESIGN.md: the checker, the simulator, the
executors and the code generators read these rules instead of restating them). It imports only
`ir`; `check`, `perf` and the backends import it, never the other way round.

- `rules`: one rule per op class: accesses (whose memory, which mode, when), data flow (`Move`s,
  the collectives' chunk maps once), synchronisation (`Sync`), waits, rendering; and the
  add-an-op checklist;
- `arithmetic`: uint64 signal and atomic arithmetic, modulo 2**64, with its answer on wrap-around;
- `match`: FIFO matching of sends and recvs, the k-th collective of each communicator;
- `atoms` and `values`: the memory of a state (atoms aligned on the rules' flows, symbolic terms);
- `machine`: the transition system built from the rules (states, enabled actions, effects), which
  the checker searches and the simulator runs in time;
- `order`: the happens-before edge rules (program order, joint step and landing, issue -> delivery,
  fence, quiet and barrier_all, signal -> wait), from which the checker's vector clocks and the
  static order of the z3 checks are both built;
- `backends`: the table shape every executor, emitter and cost model fills (op class -> code, or
  an `UNSUPPORTED` reason);
- `budget`: the deadline every long phase checks.
"""

from .arithmetic import COMPARE, MASK64, atomic_result, compare, fetch_result
from .rules import RULES, Access, Mode, Move, Sync, When, describe, rule, signal_effect

__all__ = ["COMPARE", "MASK64", "RULES", "Access", "Mode", "Move", "Sync", "When", "atomic_result", "compare",
           "describe", "fetch_result", "rule", "signal_effect"]
