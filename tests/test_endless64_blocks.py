"""The 64 KiB all-reduce kernel of the 2-rank library at the level of its thread blocks, checked over four
calls in a row (results/h200x2/library_endless/README.md, "Why the count-per-block build was wrong").

The library's proof (`check/unbounded.py`) is over the schedule's ops, one thread per rank; the kernel
runs them on three blocks (`r.thread`): block 0 put_signals the whole buffer to the peer, every block
waits (`eq`) for the peer's signal and reduces a third (block 1 the first, block 2 the second, block 0
the last), the two copies by call parity with the signal value of the call's epoch, as emitted. The end
of a kernel, which the next call's kernel follows in stream order, is a signal word every block adds 1 to
at the end of its call and waits on before the next. Each block takes its call's copy and value from
its own call index, as a count per block does. Checked:

- as emitted: verified, every interleaving of the six blocks over four calls;
- block 0 starting its next call before blocks 1 and 2 end theirs (the one ordering a count per block
  was suspected of removing): a peer's put of two calls on races with this call's read of the same
  copy, and an `eq` wait misses its value;
- one block a call ahead of the others (the signature a disagreement of the count words would leave):
  that block's third holds the peer's next call's input in every call, and nothing else goes wrong."""

from __future__ import annotations

import clockworks_dist as cw
from clockworks_dist.check import check

K = 4  # calls: two of each copy


def kernel64k(block0_waits: bool = True, ahead: tuple[int, int] | None = None):
    """K calls of the 64 KiB kernel on 2 ranks, 3 elements a rank (one a block). `block0_waits` False:
    block 0 does not wait for the end of the call before its next; `ahead`: (rank, block) that takes the
    next call's copy and signal value in every call but the last (the last would wait for a call that
    never comes)."""
    def body(r):
        me, peer = r.rank, 1 - r.rank
        xs = [r.symmetric(f"x{n}", count=3, role="input") for n in range(K)]  # the caller's inputs of call n
        outs = [r.symmetric(f"out{n}", count=3, role="output") for n in range(K)]
        slots = [r.symmetric("slots", count=6, role="scratch"), r.symmetric("slots_alt", count=6, role="scratch")]
        ready = [r.signal("ready", count=2), r.signal("ready_alt", count=2)]
        end = r.signal("end")  # the end of a call's kernel: every block adds 1
        for block, j in ((0, 2), (1, 0), (2, 1)):  # the element (third) each block reduces
            with r.thread(f"b{block}"):
                for n in range(K):
                    if n and (block or block0_waits):
                        r.wait_until(end, "ge", 3 * n)  # the kernel before has ended
                    m = n + 1 if ahead == (me, block) and n < K - 1 else n  # the block's own call number
                    p, v = m % 2, 2 * (m // 2) + 1  # copy, and the signal value of its epoch
                    if block == 0:
                        r.put_signal(peer, slots[p].chunk(me, 2), xs[n], ready[p][me], v, "set")
                    r.wait_until(ready[p][peer], "eq", v)
                    r.reduce(outs[n][j:j + 1], *[xs[n][j:j + 1] if q == me else slots[p][3 * q + j:3 * q + j + 1]
                                                   for q in range(2)])
                    r.signal_op(me, end, 1, "add")
                r.wait_until(end, "ge", 3 * K)
    expect = cw.custom(lambda world: [cw.equals(q, f"out{n}", 0, 3, (0, f"x{n}", 0), (1, f"x{n}", 0))
                                      for q in range(world) for n in range(K)], label="every call's sum")
    return cw.schedule(body, name="kernel64k", expect=expect).trace(2)


def test_the_kernel_as_emitted_is_verified_block_by_block():
    result = check(kernel64k(), timeout=120)
    assert result.verdict == "verified" and result.complete, [v.message for v in result.violations]


def test_without_the_kernel_boundary_for_block_0_the_next_put_races_with_this_calls_reads():
    result = check(kernel64k(block0_waits=False), timeout=120)
    assert result.verdict == "violated"
    kinds = {v.kind for v in result.violations}
    assert {"data_race", "deadlock"} <= kinds, kinds
    races = [v.message for v in result.violations if v.kind == "data_race"]
    # the peer's block 0 put_signal of call 2 (copy 0, value 3) lands in slots while a block of call 0 reads them
    assert any("block b0's put_signal(pe=" in m and "slots[" in m and "<- x2[0:3], ready[0] set 3)" in m
               and "out0[" in m for m in races), races
    deadlocks = [v.message for v in result.violations if v.kind == "deadlock"]
    assert any("eq 1)" in m and "is 3, and no rank can still change it" in m for m in deadlocks), deadlocks


def test_a_block_a_call_ahead_sums_the_peers_next_input_into_its_third():
    result = check(kernel64k(ahead=(0, 1)), timeout=120)
    assert result.verdict == "violated"
    assert {v.kind for v in result.violations} == {"wrong_result"}
    wrong = sorted(v.message for v in result.violations)
    assert len(wrong) == K - 1, wrong  # every call but the last, rank 0's first element (block 1's third) only
    for n, message in enumerate(wrong):
        assert message.startswith(f"wrong result: out{n}[0:1] on rank 0 = x{n}@r0[0:1] + x{n + 1}@r1[0:1]"), message
