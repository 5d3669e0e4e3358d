"""A hang on purpose: the signal goes to the wrong PE, so rank 0 waits forever.

Rank 1 puts its data into rank 0's buffer and sets the ready flag, but on itself (pe=1) instead of
on rank 0. Rank 0's wait_until never holds: the checker reports a deadlock (an unsatisfiable wait),
and `clockworks run` ends at --timeout with rank 0 in its wait_until, the word's current value, and
this file's line. The fix: signal pe=0.
"""

import clockworks_dist as cw


@cw.schedule(ranks=(2,))
def signal_to_wrong_pe(r):
    data = r.symmetric("data", count=4, role="inout")
    ready = r.signal("ready", count=1)
    if r.rank == 1:
        r.put_signal(1, data, data, ready[0], value=1)  # BUG: pe=1 is this rank, not the reader
    else:
        r.wait_until(ready[0], "ge", 1)
