"""A schedule for one PE on one GPU whose local op is a copy or a reduce (`LOCAL`): it puts its input into its
own symmetric slot with a signal, waits for the signal, then copies the slot out (copy: out = x) or adds it
to its input (reduce: out = x + x). Run as `validate --np 1 --calls K --fuse-calls` at sizes from 1 KiB up,
the two variants side by side give what a reduce costs a kernel's blocks against a copy of the same
destination (scripts/gpu/one_pe_local_h200.sh)."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
LOCAL = cw.choice("LOCAL", ["copy", "reduce"])


def _out(world):
    twice = () if LOCAL == "copy" else ((0, "x", 0),)
    return [cw.equals(0, "out", 0, int(CHUNK), (0, "x", 0), *twice)]


@cw.schedule(expect=cw.custom(_out, label="out = x, or x + x"), ranks=(1,))
def one_pe_local(r):
    x = r.symmetric("x", count=CHUNK, role="input")
    slot = r.symmetric("slot", count=CHUNK, role="scratch")
    out = r.buffer("out", count=CHUNK, role="output")
    ready = r.signal("ready")
    r.put_signal(r.rank, slot, x, ready, value=1, op="set")
    r.wait_until(ready, "ge", 1)
    if LOCAL == "copy":
        r.copy(out, slot)
    else:
        r.reduce(out, slot, x)
