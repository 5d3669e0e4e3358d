"""The IR (frozen, strict, exact JSON) and the tracing DSL (errors that name the user's line and
rank, symbolic sizes, postconditions)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

import clockworks_dist as cw
from clockworks_dist import ir, load_file
from clockworks_dist.errors import ScheduleError

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = sorted((ROOT / "protocols").glob("*.py"))
HERE = os.path.basename(__file__)

# Module level, as users declare sizes: `cw.schedule` finds it in the function's globals.
CHUNK = cw.size("CHUNK", 4)

LOC = {"file": "f.py", "line": 1}
REGION = {"buffer": "x", "start": 0, "stop": 2}


def line_of(fn, marker: str = "# HERE") -> int:
    """The line of `fn`'s source that carries `marker`."""
    lines, first = inspect.getsourcelines(fn)
    found = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(found) == 1, f"{marker!r} marks {len(found)} lines"
    return found[0]


# ------------------------------------------------------------------------------------------ IR
def test_ir_is_frozen():
    region = ir.Region(buffer="x", start=0, stop=2)
    with pytest.raises(ValidationError, match="frozen"):
        region.start = 1
    send = ir.Send(peer=1, src=region, loc=ir.SourceLoc(**LOC))
    with pytest.raises(ValidationError, match="frozen"):
        send.peer = 0
    assert region.start == 0 and send.peer == 1


def test_extra_fields_are_forbidden_and_named():
    with pytest.raises(ValidationError) as info:
        ir.Send.model_validate({"peeer": 1, "src": REGION, "loc": LOC})
    errors = {e["loc"][-1]: e["type"] for e in info.value.errors()}
    assert errors["peeer"] == "extra_forbidden"
    assert errors["peer"] == "missing"
    assert "peeer" in str(info.value)
    with pytest.raises(ValidationError, match="lenght"):
        ir.BufferDecl.model_validate({"name": "x", "count": 2, "lenght": 3, "loc": LOC})


def test_op_union_is_discriminated_by_kind():
    with pytest.raises(ValidationError) as info:
        ir.Program.model_validate({"rank": 0, "ops": [{"kind": "sendd", "peer": 1, "src": REGION, "loc": LOC}]})
    (error,) = info.value.errors()
    assert error["type"] == "union_tag_invalid"
    assert "'sendd'" in error["msg"]
    # a bad op shows that op's errors only, not one per member of the union
    with pytest.raises(ValidationError) as info:
        ir.Program.model_validate({"rank": 0, "ops": [
            {"kind": "fence", "loc": LOC},
            {"kind": "put", "pe": 1, "dst": REGION, "src": REGION, "nbi": True, "signal": "s", "loc": LOC}]})
    assert [e["loc"] for e in info.value.errors()] == [("ops", 1, "put", "signal")]
    program = ir.Program.model_validate({"rank": 0, "ops": [{"kind": "quiet", "loc": LOC}]})
    assert isinstance(program.ops[0], ir.Quiet)


@pytest.mark.parametrize("path", PROTOCOLS, ids=lambda p: p.stem)
def test_protocol_json_round_trip_is_exact(path):
    for defn in load_file(str(path)):
        sched = defn.trace(4)
        text = sched.to_json()
        again = ir.Schedule.from_json(text)
        assert again == sched
        assert again.to_json() == text
        assert ir.Schedule.from_json(sched.to_json(indent=2)) == sched


# --------------------------------------------------------------------- DSL trace-time errors
def trace_error(fn, world: int = 3, **kwargs) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        cw.schedule(fn).trace(world, **kwargs)
    return info.value


def assert_points_at(err: ScheduleError, fn, rank: int, *fragments: str, marker: str = "# HERE") -> None:
    line = line_of(fn, marker)
    text = str(err)
    assert (err.file, err.line, err.rank) == (HERE, line, rank), text
    assert text.startswith(f"{HERE}:{line}: rank {rank}: "), text
    for fragment in fragments:
        assert fragment in text, text


def test_peer_out_of_range():
    def sched(r):
        x = r.buffer("x", 2)
        r.send(r.world, x)  # HERE
    err = trace_error(sched)
    assert_points_at(err, sched, 0, "peer 3 is out of range", "ranks 0..2", "(rank + 1) % world")


def test_peer_out_of_range_names_the_first_failing_rank_and_op():
    def sched(r):
        x = r.buffer("x", 2)
        if r.rank > 0:
            r.send(r.rank + 1, x)  # HERE
    assert_points_at(trace_error(sched), sched, 2, "send: peer 3 is out of range")


def test_region_out_of_bounds():
    def sched(r):
        x = r.buffer("x", 4)
        r.fill(x.region(2, 5), 0.0)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "x[2:5] is out of bounds", "x has 4 elements")


def test_region_out_of_bounds_on_a_late_rank():
    def sched(r):
        x = r.buffer("x", 4)
        r.fill(x[r.rank * 2:r.rank * 2 + 2], 1.0)  # HERE
    assert_points_at(trace_error(sched), sched, 2, "x[4:6] is out of bounds")


def test_size_mismatch_in_a_local_copy():
    def sched(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 3)
        r.copy(x, y)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "copy", "size mismatch", "y[0:3] has 3 elements", "x[0:2] has 2")


def test_size_mismatch_in_a_put():
    def sched(r):
        s = r.symmetric("s", 2)
        x = r.buffer("x", 1)
        r.put(0, s, x)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "put", "size mismatch")


def test_dtype_mismatch():
    def sched(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 2, dtype="int32")
        r.reduce(x, x, y)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "reduce", "dtype mismatch", "int32", "float32")


def test_put_to_a_non_symmetric_buffer():
    def sched(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 2)
        r.put((r.rank + 1) % r.world, x, y)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "put", "per-rank buffer", "symmetric heap",
                     "r.symmetric('x', ...)")


def test_get_from_a_non_symmetric_buffer():
    def sched(r):
        x = r.buffer("x", 2)
        r.get(0, x, x)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "get", "src x[0:2] is in a per-rank buffer")


def test_non_integer_rank():
    def sched(r):
        x = r.buffer("x", 2)
        r.send("1", x)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "peer must be an integer rank", "str '1'")


def test_boolean_is_not_a_rank():
    def sched(r):
        s = r.symmetric("s", 2)
        r.put(True, s, s)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "pe must be an integer rank", "bool")


def test_unknown_signal():
    def sched(r):
        r.wait_until(ir.SignalRef(signal="nope"), "ge", 1)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "wait_until", "unknown signal 'nope'")


def test_signal_array_needs_an_index():
    def sched(r):
        flags = r.signal("flags", count=2)
        r.signal_op(0, flags, 1)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "flags has 2 words", "flags[i]")


def test_signal_index_out_of_range():
    def sched(r):
        flags = r.signal("flags", count=2)
        r.wait_until(flags[2], "ge", 1)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "signal index of flags 2 is out of range 0..1")


def test_only_send_recv_and_nccl_collectives_may_be_grouped():
    def sched(r):
        x = r.buffer("x", 2)
        with r.group():
            r.send((r.rank + 1) % r.world, x)
            r.fill(x, 0.0)  # HERE
    assert_points_at(trace_error(sched), sched, 0, "may be grouped, not fill")


def test_groups_do_not_nest():
    def sched(r):
        with r.group():
            with r.group():  # HERE
                pass
    assert_points_at(trace_error(sched), sched, 0, "groups do not nest")


@pytest.mark.parametrize("name", ["my-buf", "int", "9lives", "", "world", "class", "x" * 65])
def test_invalid_buffer_names(name):
    def sched(r):
        r.buffer(name, 2)  # HERE
    assert_points_at(trace_error(sched), sched, 0, f"buffer name {name!r} is not a valid identifier")


def test_invalid_signal_and_kernel_names():
    def sig(r):
        r.signal("ready flag")  # HERE
    assert_points_at(trace_error(sig), sig, 0, "signal name 'ready flag' is not a valid identifier")

    def kernel(r):
        x = r.buffer("x", 2)
        r.compute("for", reads=[x])  # HERE
    assert_points_at(trace_error(kernel), kernel, 0, "compute kernel name 'for'")


def test_duplicate_declaration():
    def sched(r):
        r.buffer("x", 2)
        r.signal("x")  # HERE
    assert_points_at(trace_error(sched), sched, 0, "'x' is declared twice")


def test_symmetric_buffer_with_different_sizes():
    def sched(r):
        r.symmetric("s", 2 if r.rank < 2 else 3)  # HERE
    assert_points_at(trace_error(sched), sched, 2, "symmetric buffer 's' differs between rank 0 and rank 2",
                     "2 x float32 vs 3 x float32")


def test_symmetric_buffer_missing_on_one_rank():
    def sched(r):
        if r.rank != 1:
            r.symmetric("s", 2)  # HERE
    assert_points_at(trace_error(sched), sched, 1, "symmetric buffer 's' differs", "vs missing")


def test_communicator_declared_inconsistently():
    def sched(r):
        if r.rank < 2:
            r.comm("pair", [0, 1] if r.rank == 0 else [1, 0])  # HERE
    assert_points_at(trace_error(sched), sched, 0, "communicator 'pair'", "rank 0 lists [0, 1]",
                     "rank 1 lists [1, 0]")


def test_communicator_missing_on_a_member():
    def sched(r):
        if r.rank == 0:
            r.comm("pair", [0, 1])  # HERE
    assert_points_at(trace_error(sched), sched, 0, "communicator 'pair'", "rank 1 does not declare it")


def test_communicator_without_this_rank():
    def sched(r):
        r.comm("others", [q for q in range(r.world) if q != 0] if r.rank == 0 else range(r.world))  # HERE
    assert_points_at(trace_error(sched), sched, 0, "communicator others does not contain this rank")


def test_an_exception_in_the_schedule_names_its_line():
    def sched(r):
        x = r.buffer("x", 2)
        if r.rank == 1:
            {}["missing"]  # HERE
        r.fill(x, 0.0)
    assert_points_at(trace_error(sched), sched, 1, "the schedule raised KeyError")


def test_ops_record_the_callers_line_and_groups_their_with_line():
    def sched(r):
        x = r.buffer("x", 2)  # DECL
        with r.group():  # GROUP
            r.send((r.rank + 1) % r.world, x)  # SEND
            r.recv((r.rank - 1) % r.world, x.chunk(0, 1))  # RECV
        r.barrier()  # BARRIER
    s = cw.schedule(sched).trace(2)
    prog = s.programs[1]
    assert prog.buffers[0].loc == ir.SourceLoc(file=HERE, line=line_of(sched, "# DECL"))
    group, barrier = prog.ops
    assert group.loc.line == line_of(sched, "# GROUP")
    assert [m.loc.line for m in group.ops] == [line_of(sched, "# SEND"), line_of(sched, "# RECV")]
    assert barrier.loc == ir.SourceLoc(file=HERE, line=line_of(sched, "# BARRIER"))
    assert s.loc == ir.SourceLoc(file=HERE, line=sched.__code__.co_firstlineno)
    assert s.name == "sched"


# ------------------------------------------------------------------------------ symbolic sizes
def chunked(r):
    n = r.world
    x = r.buffer("x", count=n * CHUNK)
    tmp = r.buffer("tmp", count=CHUNK + 1)
    r.copy(tmp.region(1, CHUNK + 1), x.chunk(n - 1, n))
    r.fill(x.region(2, 3), 0.0)


def test_symbolic_sizes_reach_the_ir():
    s = cw.schedule(chunked).trace(2)
    assert s.symbols == (ir.Symbol(name="CHUNK", value=4),)
    x, tmp = s.programs[0].buffers
    assert (x.count, x.count_sym) == (8, ir.Affine(terms=(("CHUNK", 2),)))
    assert (tmp.count, tmp.count_sym) == (5, ir.Affine(const=1, terms=(("CHUNK", 1),)))
    copy, fill = s.programs[0].ops
    assert (copy.dst.start, copy.dst.start_sym) == (1, None)  # constant bounds keep no symbolic form
    assert (copy.dst.stop, copy.dst.stop_sym) == (5, ir.Affine(const=1, terms=(("CHUNK", 1),)))
    assert (copy.src.start, copy.src.start_sym) == (4, ir.Affine(terms=(("CHUNK", 1),)))
    assert (copy.src.stop, copy.src.stop_sym) == (8, ir.Affine(terms=(("CHUNK", 2),)))
    assert fill.dst.start_sym is None and fill.dst.stop_sym is None
    assert str(x.count_sym) == "2*CHUNK"


def test_size_bindings_change_the_traced_values_only():
    s = cw.schedule(chunked).trace(3, sizes={"CHUNK": 8})
    assert s.symbols == (ir.Symbol(name="CHUNK", value=8),)
    x = s.programs[0].buffers[0]
    assert (x.count, x.count_sym) == (24, ir.Affine(terms=(("CHUNK", 3),)))
    copy = s.programs[0].ops[0]
    assert (copy.src.start, copy.src.stop) == (16, 24)
    assert copy.src.start_sym == ir.Affine(terms=(("CHUNK", 2),))
    assert int(CHUNK) == 4  # the binding ends with the trace
    assert cw.schedule(chunked).trace(3).programs[0].buffers[0].count == 12


def test_unknown_size_binding():
    with pytest.raises(ScheduleError, match="unknown size 'CHUNKS'; this schedule declares CHUNK"):
        cw.schedule(chunked).trace(2, sizes={"CHUNKS": 8})


def test_ring_allreduce_binds_its_chunk():
    (ring,) = load_file(str(ROOT / "protocols" / "ring_allreduce.py"))
    s = ring.trace(4, sizes={"CHUNK": 2})
    assert s.programs[0].buffer("x").count == 8
    assert s.programs[0].buffer("x").count_sym == ir.Affine(terms=(("CHUNK", 4),))


# ------------------------------------------------------------------------------ postconditions
def _region(buffer: str, start: int, stop: int) -> ir.Region:
    return ir.Region(buffer=buffer, start=start, stop=stop)


def _expectations(spec, body, world: int = 2):
    return cw.schedule(body, expect=spec).trace(world).expect


def _declare(*names, count: int = 4):
    def body(r):
        for name in names:
            r.buffer(name, count=count)
    return body


def test_allreduce_postcondition():
    exps = _expectations(cw.allreduce("x", dst="y", op="max"), _declare("x", "y"))
    assert [(e.rank, e.region, e.op) for e in exps] == [(0, _region("y", 0, 4), "max"), (1, _region("y", 0, 4), "max")]
    for e in exps:
        assert e.contributions == (ir.Contribution(rank=0, region=_region("x", 0, 4)),
                                   ir.Contribution(rank=1, region=_region("x", 0, 4)))
        assert e.label == "allreduce('x')"


def test_allgather_in_place_and_out_of_place():
    exps = _expectations(cw.allgather("x"), _declare("x"))
    assert [(e.rank, e.region, e.contributions) for e in exps] == [
        (r, _region("x", 2 * q, 2 * q + 2), (ir.Contribution(rank=q, region=_region("x", 2 * q, 2 * q + 2)),))
        for r in range(2) for q in range(2)]

    def body(r):
        r.buffer("src", count=2)
        r.buffer("dst", count=4)
    exps = _expectations(cw.allgather("src", "dst"), body)
    assert [(e.rank, e.region, e.contributions) for e in exps] == [
        (r, _region("dst", 2 * q, 2 * q + 2), (ir.Contribution(rank=q, region=_region("src", 0, 2)),))
        for r in range(2) for q in range(2)]


def test_reduce_scatter_in_place_and_out_of_place():
    exps = _expectations(cw.reduce_scatter("x"), _declare("x"))
    assert [(e.rank, e.region, e.contributions) for e in exps] == [
        (r, _region("x", 2 * r, 2 * r + 2), tuple(ir.Contribution(rank=q, region=_region("x", 2 * r, 2 * r + 2))
                                                   for q in range(2)))
        for r in range(2)]

    def body(r):
        r.buffer("src", count=4)
        r.buffer("dst", count=2)
    exps = _expectations(cw.reduce_scatter("src", "dst"), body)
    assert [(e.rank, e.region) for e in exps] == [(0, _region("dst", 0, 2)), (1, _region("dst", 0, 2))]
    assert exps[1].contributions == tuple(ir.Contribution(rank=q, region=_region("src", 2, 4)) for q in range(2))


def test_alltoall_postcondition():
    exps = _expectations(cw.alltoall("src", "dst"), _declare("src", "dst"))
    got = {(e.rank, e.region.start): (e.contributions[0].rank, e.contributions[0].region.start) for e in exps}
    # chunk q of dst on rank r = chunk r of src on rank q
    assert got == {(0, 0): (0, 0), (0, 2): (1, 0), (1, 0): (0, 2), (1, 2): (1, 2)}
    assert all(len(e.contributions) == 1 and e.region.count == 2 for e in exps)


def test_broadcast_and_reduce_postconditions():
    exps = _expectations(cw.broadcast("x", root=1), _declare("x"), world=3)
    assert [e.rank for e in exps] == [0, 1, 2]
    assert all(e.contributions == (ir.Contribution(rank=1, region=_region("x", 0, 4)),) for e in exps)
    exps = _expectations(cw.reduce("x", root=2, dst="y"), _declare("x", "y"), world=3)
    (only,) = exps
    assert (only.rank, only.region, only.op) == (2, _region("y", 0, 4), "sum")
    assert [c.rank for c in only.contributions] == [0, 1, 2]


def test_custom_postcondition_and_several_specs():
    def spec(world):
        return [cw.equals(world - 1, "x", 0, 2, (0, "x", 2), (1, "x", 0), op="max")]
    exps = _expectations([cw.custom(spec, label="mine"), cw.broadcast("x")], _declare("x"))
    first = exps[0]
    assert (first.rank, first.region, first.op) == (1, _region("x", 0, 2), "max")
    assert first.contributions == (ir.Contribution(rank=0, region=_region("x", 2, 4)),
                                   ir.Contribution(rank=1, region=_region("x", 0, 2)))
    assert len(exps) == 3


def test_postcondition_on_an_undeclared_buffer():
    with pytest.raises(ScheduleError, match="postcondition allreduce\\('y'\\) names buffer 'y'"):
        cw.schedule(_declare("x"), expect=cw.allreduce("y")).trace(2)


def test_postcondition_chunks_must_divide():
    with pytest.raises(ScheduleError, match="not a multiple of 3"):
        cw.schedule(_declare("x"), expect=cw.allgather("x")).trace(3)


def test_every_op_a_user_calls_explains_itself():
    # help(r.put_signal) is where a user looks first: every public Rank method has a docstring
    import inspect

    from clockworks_dist.dsl.trace import Rank

    public = {name: fn for name, fn in inspect.getmembers(Rank, inspect.isfunction) if not name.startswith("_")}
    assert {"send", "recv", "put", "put_signal", "wait_until", "fetch_add"} <= set(public)
    assert [name for name, fn in public.items() if not inspect.getdoc(fn)] == []
    assert "fence" in inspect.getdoc(Rank.put_signal) and "2**64" in inspect.getdoc(Rank.atomic_add)
