"""A schedule for one PE on one GPU: it puts its input into its own symmetric slot with a signal,
waits for the signal and copies the slot out. Run as `validate --np 1 --calls K` on a machine with
one GPU, it exercises what a kernel per call launches (plain launches for the calls before the
last, NVSHMEM's collective launch for the last) on real hardware, eagerly and in a CUDA graph,
with every output checked bit for bit."""

import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.allreduce("x", "out"), ranks=(1,))
def one_pe_calls(r):
    x = r.symmetric("x", count=CHUNK, role="input")
    slot = r.symmetric("slot", count=CHUNK, role="scratch")
    out = r.buffer("out", count=CHUNK, role="output")
    ready = r.signal("ready")
    r.put_signal(r.rank, slot, x, ready, value=1, op="set")
    r.wait_until(ready, "ge", 1)
    r.copy(out, slot)
