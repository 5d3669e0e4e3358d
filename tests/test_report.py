"""Rendering of hand-made check results: exact text, so a change to the layout is a visible diff."""

from __future__ import annotations

from clockworks_dist import ir
from clockworks_dist.check.result import CheckResult, OpRef, Step, Violation
from clockworks_dist.report import render_listing, render_result, render_violation
from clockworks_dist.semantics.rules import describe

FILE = "pingpong.py"


def loc(line: int) -> ir.SourceLoc:
    return ir.SourceLoc(file=FILE, line=line)


def region(name: str, start: int, stop: int) -> ir.Region:
    return ir.Region(buffer=name, start=start, stop=stop)


def schedule(world: int, ops_of) -> ir.Schedule:
    """`world` ranks, each with x (inout, 4) and a symmetric y (4); `ops_of(rank)` gives the ops."""
    programs = []
    for rank in range(world):
        buffers = (ir.BufferDecl(name="x", count=4, role="inout", loc=loc(3)),
                   ir.BufferDecl(name="y", count=4, role="scratch", symmetric=True, loc=loc(4)))
        programs.append(ir.Program(rank=rank, buffers=buffers, ops=tuple(ops_of(rank))))
    return ir.Schedule(name="pingpong", world=world, ranks_per_node=world, loc=loc(1), programs=tuple(programs))


def ref(sched: ir.Schedule, rank: int, index: int, sub: int | None = None) -> OpRef:
    op = sched.programs[rank].ops[index]
    if sub is not None:
        op = op.ops[sub]
    return OpRef(rank=rank, index=index, sub=sub, kind=op.kind, loc=op.loc, text=describe(op))


def head_to_head(world: int = 2) -> ir.Schedule:
    """Every rank fills x, then sends to its right neighbour before receiving: a rendezvous deadlock."""
    return schedule(world, lambda r: [
        ir.Fill(dst=region("x", 0, 4), value=r, loc=loc(6)),
        ir.Send(peer=(r + 1) % world, src=region("x", 0, 4), loc=loc(7)),
        ir.Recv(peer=(r - 1) % world, dst=region("x", 0, 4), loc=loc(8)),
    ])


def deadlock_result(world: int = 2) -> CheckResult:
    sched = head_to_head(world)
    trace = tuple(Step(action=("local", r, 0), label=f"rank {r}: x[0:4] = {r}", ops=(ref(sched, r, 0),))
                  for r in range(world))
    violation = Violation(
        kind="deadlock", message="every rank waits in send for a receive that is never posted",
        ranks=tuple(range(world)), ops=tuple(ref(sched, r, 1) for r in range(world)), trace=trace,
        details={"cycle": [*range(world), 0]})
    return CheckResult(schedule=sched, verdict="violated", violations=[violation], states=5, transitions=4,
                       seconds=0.01, complete=True, terminal_states=0)


DEADLOCK = """\
pingpong, 2 ranks: violated (1 error)
  5 states, 4 transitions (dfs, partial-order reduction)

error: deadlock (ranks 0, 1)
  every rank waits in send for a receive that is never posted
  ops:
    pingpong.py:7  rank 0 #1  send(peer=1, x[0:4])
    pingpong.py:7  rank 1 #1  send(peer=0, x[0:4])
  wait-for cycle: rank 0 -> rank 1 -> rank 0
  counterexample (2 steps):
  step | rank 0                           | rank 1
  -----+----------------------------------+---------------------------------
  1    | x[0:4] = 0 :6                    |
  2    |                                  | x[0:4] = 1 :6
  end  | blocked: send(peer=1, x[0:4]) :7 | blocked: send(peer=0, x[0:4]) :7"""


def test_deadlock_renders_timeline_and_blocked_ops():
    text = render_result(deadlock_result())
    assert text == DEADLOCK
    assert all(line == line.rstrip() for line in text.splitlines())
    assert "verified" not in text


def test_deliveries_are_marked_and_only_informative_labels_shown():
    sched = schedule(2, lambda r: [
        ir.Put(pe=1 - r, dst=region("y", 0, 4), src=region("x", 0, 4), loc=loc(10)),
        ir.Quiet(loc=loc(11)),
    ])
    put = ref(sched, 0, 0)
    trace = (Step(action=("step", 0, 0), label=f"rank 0: {put.text}", ops=(put,)),
             Step(action=("deliver", 0, 0), label="delivery to rank 1 of rank 0's put", ops=(put,), at=1),
             Step(action=("step", 0, 1), label="rank 0: quiet()", ops=(ref(sched, 0, 1),)))
    race = Violation(kind="data_race", message="m", ranks=(1,), ops=(put,), trace=trace)
    lines = render_violation(race, 2).splitlines()
    rows = [[c.strip() for c in line.split("|")] for line in lines[lines.index("  counterexample (3 steps):") + 3:]]
    assert rows == [["1", "put(pe=1, y[0:4] <- x[0:4]) :10", ""],
                    ["2", "", "from rank 0: put(pe=1, y[0:4] <- x[0:4]) :10"],
                    ["3", "quiet() :11", ""]]
    odd = Step(action=("magic", 1), label="rank 1 wakes up", ops=(ref(sched, 1, 1),))
    race = Violation(kind="data_race", message="m", ranks=(1,), ops=(put,), trace=trace + (odd,))
    lines = render_violation(race, 2).splitlines()
    assert lines[-1].split("|")[-1].strip() == "rank 1 wakes up"
    assert lines[-2].split("|")[-1].strip() == ""


def test_rendering_is_deterministic_and_has_no_timings():
    result = deadlock_result()
    text = render_violation(result.violations[0], 2)
    result.seconds = 123.0
    assert render_violation(result.violations[0], 2) == text
    assert "123" not in render_result(result)
    assert "123.00 s" in render_result(result, timing=True)


def test_many_ranks_show_only_the_ranks_involved():
    sched = head_to_head(8)
    trace = tuple(Step(action=("local", r, 0), label="", ops=(ref(sched, r, 0),)) for r in range(8))
    violation = Violation(kind="deadlock", message="ranks 6 and 7 wait for each other", ranks=(6, 7),
                          ops=(ref(sched, 6, 1), ref(sched, 7, 1)), trace=trace, details={"finished": [0]})
    lines = render_violation(violation, 8).splitlines()
    header = next(line for line in lines if line.strip().startswith("step"))
    assert [c.strip() for c in header.split("|")] == ["step", "rank 6", "rank 7"]
    rows = [[c.strip() for c in line.split("|")] for line in lines[lines.index(header) + 2:]]
    assert rows[0] == ["...", "(6 steps on other ranks)", ""]
    assert rows[1] == ["7", "x[0:4] = 6 :6", ""]
    assert rows[2] == ["8", "", "x[0:4] = 7 :6"]
    assert rows[3][0] == "end" and rows[3][1].startswith("blocked: send(peer=7")
    assert any("showing ranks 6, 7, involved in the violation" in line for line in lines)


def test_long_traces_keep_the_last_steps():
    sched = head_to_head(2)
    step = Step(action=("local", 0, 0), label="", ops=(ref(sched, 0, 0),))
    violation = Violation(kind="deadlock", message="stuck", ranks=(0, 1),
                          ops=(ref(sched, 0, 1), ref(sched, 1, 1)), trace=(step,) * 100)
    lines = render_violation(violation, 2).splitlines()
    assert any("60 earlier rows not shown" in line for line in lines)
    assert lines[-2].split("|")[0].strip() == "100"
    assert lines[-1].split("|")[0].strip() == "end"


def test_race_lists_both_accesses():
    sched = schedule(2, lambda r: [
        ir.Put(pe=1 - r, dst=region("y", 0, 4), src=region("x", 0, 4), nbi=True, loc=loc(10)),
        ir.Fill(dst=region("x", 0, 4), value=0, loc=loc(11)),
        ir.Quiet(loc=loc(12)),
    ])
    trace = (Step(action=("issue", 0, 0), label="rank 0 issues put", ops=(ref(sched, 0, 0),)),)
    race = Violation(kind="data_race", message="the put reads x[0:4] when delivered, while fill writes it",
                     ranks=(0,), ops=(ref(sched, 0, 0), ref(sched, 0, 1)), trace=trace,
                     details={"region": "x[0:4]"})
    warn = Violation(kind="not_bitwise_reproducible", message="ranks 0 and 1 sum in different orders",
                     ranks=(0, 1), ops=())
    result = CheckResult(schedule=sched, verdict="violated", violations=[warn, race], states=40,
                         transitions=70, seconds=0.1, complete=True)
    text = render_result(result)
    assert text.splitlines()[0] == "pingpong, 2 ranks: violated (1 error, 1 warning)"
    assert "error: data_race (rank 0)" in text
    assert "    pingpong.py:10  rank 0 #0  put(pe=1, y[0:4] <- x[0:4], nbi)" in text
    assert "    pingpong.py:11  rank 0 #1  x[0:4] = 0" in text
    assert "  region: x[0:4]" in text
    # errors come before warnings, whatever the order in the result
    assert text.index("error: data_race") < text.index("warning: not_bitwise_reproducible")
    timeline = text[text.index("counterexample"):text.index("warning:")]
    assert "blocked" not in timeline  # only deadlocks have a final blocked row


def test_incomplete_never_says_verified():
    sched = head_to_head(2)
    result = CheckResult(schedule=sched, verdict="incomplete", violations=[], states=1_000_000,
                         transitions=2_500_000, seconds=59.0, complete=False, stopped_by="max_states")
    text = render_result(result, timing=True)
    assert text.splitlines()[0] == ("pingpong, 2 ranks: no violation found, but the search is incomplete "
                                    "(stopped at 1,000,000 states)")
    assert "verified" not in text
    result.stopped_by = "timeout"
    assert "stopped by the timeout after 1,000,000 states" in render_result(result)
    # a warning alone does not make it "no violation found"
    result.violations = [Violation(kind="unfinished_deliveries", message="a put is still in flight",
                                   ranks=(0,), ops=())]
    assert "no error found, but the search is incomplete" in render_result(result)


def test_verified_with_warning():
    sched = head_to_head(2)
    warn = Violation(kind="unfinished_deliveries", message="a put is still in flight", ranks=(1,), ops=())
    result = CheckResult(schedule=sched, verdict="verified", violations=[warn], states=9, transitions=8,
                         seconds=0.0, complete=True)
    text = render_result(result)
    assert text.splitlines()[0] == "pingpong, 2 ranks: verified, with 1 warning"
    assert "warning: unfinished_deliveries (rank 1)" in text


def test_listing_shows_groups_declarations_and_postcondition():
    def ops(rank):
        peer = 1 - rank
        group = ir.Group(ops=(ir.Send(peer=peer, src=region("x", 0, 4), loc=loc(7)),
                              ir.Recv(peer=peer, dst=region("y", 0, 4), loc=loc(8))), loc=loc(6))
        return [group, ir.LocalReduce(dst=region("x", 0, 4), srcs=(region("x", 0, 4), region("y", 0, 4)),
                                      loc=loc(9))]
    sched = schedule(2, ops)
    both = tuple(ir.Contribution(rank=q, region=region("x", 0, 4)) for q in range(2))
    sched = sched.model_copy(update={"expect": tuple(
        ir.Expectation(rank=r, region=region("x", 0, 4), contributions=both, label="allreduce('x')")
        for r in range(2))})
    text = render_listing(sched)
    lines = text.splitlines()
    assert lines[0] == "schedule pingpong  (pingpong.py:1): 2 ranks, 1 node"
    assert "  x: 4 x float32, inout, per-rank  (pingpong.py:3)" in lines
    assert "  y: 4 x float32, scratch, symmetric  (pingpong.py:4)" in lines
    assert "    ranks 0, 1: x[0:4] = sum(x[0:4] on ranks 0, 1)" in lines
    start = lines.index("rank 1: 2 ops")
    assert lines[start + 1:start + 5] == [
        "  0    pingpong.py:6  group:",
        "  0.0  pingpong.py:7    send(peer=0, x[0:4])",
        "  0.1  pingpong.py:8    recv(peer=0, y[0:4])",
        "  1    pingpong.py:9  x[0:4] = x[0:4] + y[0:4]",
    ]
