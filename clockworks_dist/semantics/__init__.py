"""The one operational semantics every engine shares (DESIGN.md: checker, simulator, executors and
code generators read these rules instead of restating them). It imports only `ir`.

So far: `arithmetic`, the uint64 signal and atomic arithmetic with its answer on wrap-around.
"""

from .arithmetic import COMPARE, MASK64, atomic_result, compare, fetch_result, signal_effect

__all__ = ["COMPARE", "MASK64", "atomic_result", "compare", "fetch_result", "signal_effect"]
