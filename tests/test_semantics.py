"""The semantics package: one rule per op class, backend tables that cover every op class, and the
rules' accesses and flows consistent with the ops they describe."""

from __future__ import annotations

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.semantics import backends, rules
from clockworks_dist.semantics.backends import Backend, Unsupported


@cw.schedule(ranks=(2,))
def every_op(r):
    """Every op class of the IR, once at least (the DSL must be able to write each)."""
    other = 1 - r.rank
    x = r.buffer("x", count=4, role="inout")
    y = r.buffer("y", count=8, role="scratch")
    s = r.symmetric("s", count=4, dtype="int64", role="scratch")
    t = r.buffer("t", count=4, dtype="int64", role="scratch")
    flag = r.signal("flag", count=2)
    with r.group():
        r.send(other, x)
        r.recv(other, y.region(0, 4))
    r.send(other, x) if r.rank == 0 else r.recv(other, x)
    r.recv(other, x) if r.rank == 0 else r.send(other, x)
    r.all_reduce(x, x)
    r.all_gather(x, y)
    r.reduce_scatter(y, x)
    r.broadcast(x, x, root=0)
    r.reduce_to(0, x, x if r.rank == 0 else None)
    r.all_to_all(x, y.region(4, 8))
    r.barrier()
    r.put(other, s, t)
    r.get(other, t, s)
    r.get_nbi(other, t, s)
    r.put_signal(other, s, t, flag[0], 1, op="add")
    r.signal_op(other, flag[1], 1, op="add")
    r.atomic_add(other, flag[1], 1)
    r.fetch_add(other, s.element(0), 1, t.element(0))
    r.fence()
    r.quiet()
    r.wait_until(flag[0], "ge", 1)
    r.signal_store(flag[0], 0)
    r.wait_until_all([flag[0], flag[1]], "ge", 1)
    r.wait_until_any(flag, "ge", 2)
    r.barrier_all()
    r.sync_all()
    team = r.team_split_strided("pair", start=0, stride=1, size=2)
    r.team_barrier(team)
    r.team_sync(team)
    r.team_reduce(team, s, s)
    r.reduce(x, x, y.region(0, 4))
    r.copy(y.region(0, 4), x)
    r.fill(x, 0)
    r.compute("kernel", reads=[x], writes=[y])


@cw.schedule(ranks=(2,))
def every_thread_sync_op(r):
    """The ops that order a rank's threads (they exist only inside threads): a kernel on a stream is
    made of events, and its blocks meet at a barrier."""
    with r.kernel("k", stream="s0"):
        for b in ("b0", "b1"):
            with r.block(b):
                r.thread_barrier("grid")


def _ops(sched: ir.Schedule):
    for program in sched.programs:
        for op in program.all_ops():
            for member in (op.ops if op.kind == "group" else (op,)):
                yield program.rank, member
            if op.kind == "group":
                yield program.rank, op


@pytest.fixture(scope="module")
def traced() -> ir.Schedule:
    return every_op.trace(2)


def test_every_op_class_has_one_rule_and_a_unique_kind():
    assert set(rules.RULES) == set(ir.OP_CLASSES)
    assert len(set(ir.KINDS)) == len(ir.KINDS) == len(ir.OP_CLASSES)
    assert all(rules.rule(kind).op_class.model_fields["kind"].default == kind for kind in ir.KINDS)


def test_the_dsl_writes_every_op_class(traced):
    threaded = every_thread_sync_op.trace(2)
    assert {op.kind for _, op in _ops(traced)} | {op.kind for _, op in _ops(threaded)} == set(ir.KINDS)


def test_describe_renders_every_op_from_its_rule(traced):
    for _, op in _ops(traced):
        text = rules.describe(op)
        assert text and text != op.kind and "\n" not in text, (op.kind, text)
    shown = {op.kind: rules.describe(op) for _, op in _ops(traced)}
    assert shown["wait_until_all"] == "wait_until_all([flag[0], flag[1]] ge 1)"
    assert shown["get_nbi"] == "get_nbi(pe=0, t[0:4] <- s[0:4])"  # rank 1's


def test_every_region_and_signal_an_op_names_is_one_of_its_accesses(traced):
    for rank, op in _ops(traced):
        if op.kind == "group":
            continue
        named = {(field, region) for field, region in ir.op_regions(op)}
        for field in ("signal", "target"):
            value = getattr(op, field, None)
            if isinstance(value, ir.SignalRef):
                named.add((field, value))
        named |= {("signal", ref) for ref in getattr(op, "signals", ())}
        accessed = {(a.field, a.where) for a in rules.rule(op).accesses(op, rank)}
        if op.kind == "reduce_to" and op.dst is None:
            named = {n for n in named if n[0] != "dst"}
        assert named == accessed, (op.kind, named ^ accessed)


def test_deliveries_touch_memory_only_when_they_land_and_joint_ops_only_jointly(traced):
    joint = (rules.Sync.P2P, rules.Sync.COLLECTIVE, rules.Sync.BARRIER_ALL, rules.Sync.SYNC_ALL)
    for rank, op in _ops(traced):
        whens = {a.when for a in rules.rule(op).accesses(op, rank)}
        if rules.rule(op).sync in joint:
            assert whens <= {rules.When.JOINT}, op.kind
        elif op.kind in ir.DELIVERY_KINDS:
            assert rules.When.DELIVERY in whens, op.kind
        else:
            assert whens <= {rules.When.ISSUE}, op.kind


def test_every_move_keeps_shapes(traced):
    for rank, op in _ops(traced):
        moves = list(rules.rule(op).flows(op, rank))
        for move in moves:
            if move.opaque is None:
                counts = {region.count for _, region in move.srcs + move.dsts}
                assert len(counts) == 1, (op.kind, move)


@pytest.mark.parametrize("kind,world", [(k, w) for k in ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                         "reduce_to", "all_to_all") for w in (1, 2, 3)])
def test_collective_flows_write_every_destination_element_once(kind, world):
    """The chunk maps: each element of each member's dst is written by exactly one move."""
    n = 2 * world
    make = rules.rule(kind).op_class
    src_count, dst_count = {"all_gather": (n // world, n), "reduce_scatter": (n, n // world)}.get(kind, (n, n))
    loc = ir.SourceLoc(file="t.py", line=1)
    extra = {"root": 0} if kind in ("broadcast", "reduce_to") else {}
    ops = [make(src=ir.Region(buffer="a", start=0, stop=src_count), dst=ir.Region(buffer="b", start=0, stop=dst_count),
                loc=loc, **extra) for _ in range(world)]
    written: dict[tuple[int, int], int] = {}
    for move in rules.collective_flows(ops, list(range(world))):
        for rank, region in move.dsts:
            for element in range(region.start, region.stop):
                written[(rank, element)] = written.get((rank, element), 0) + 1
    expected = {(r, e) for r in range(world) for e in range(dst_count)}
    if kind == "reduce_to":
        expected = {(0, e) for e in range(dst_count)} | {(r, e) for r in range(1, world) for e in range(dst_count)}
    assert set(written) == expected and set(written.values()) == {1}


def test_a_backend_table_must_decide_every_op_class():
    loc = ir.SourceLoc(file="sched.py", line=7)
    partial = Backend("partial", table={ir.Send: print}, unsupported={ir.Recv: "no two-sided"})
    assert "put" in partial.missing() and "send" not in partial.missing() and "recv" not in partial.missing()
    with pytest.raises(ValueError, match="backend partial: no implementation"):
        partial.check_complete()
    with pytest.raises(Unsupported, match="sched.py:7: the partial backend cannot run recv: no two-sided"):
        partial.lookup(ir.Recv(peer=0, dst=ir.Region(buffer="x", start=0, stop=1), loc=loc))
    assert partial.lookup(ir.Send(peer=0, src=ir.Region(buffer="x", start=0, stop=1), loc=loc)) is print
    both = Backend("both", table={c: print for c in ir.OP_CLASSES}, unsupported={ir.Send: "no"})
    with pytest.raises(ValueError, match="both implemented and UNSUPPORTED: send"):
        both.check_complete()


def test_every_registered_backend_decides_every_op_class():
    import clockworks_dist.codegen.nccl  # noqa: F401  (backends register when their module loads)
    import clockworks_dist.codegen.nvshmem  # noqa: F401
    import clockworks_dist.perf.simulate  # noqa: F401

    assert "semantics" in backends.BACKENDS
    assert {"nccl-codegen", "nvshmem-codegen"} <= set(backends.BACKENDS)
    for backend in backends.BACKENDS.values():
        backend.check_complete()
