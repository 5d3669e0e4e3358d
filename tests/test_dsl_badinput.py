"""Bad input to the DSL: every mistake is a `ScheduleError` at trace (or decoration) time that names
the user's file:line, the rank and the op where they apply, never a crash (the CLI's exit 4) and never
a schedule that silently means something else. One section per family found by the user study."""

from __future__ import annotations

import fractions
import inspect
import json
import os
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

import clockworks_dist as cw
from clockworks_dist import cli, ir
from clockworks_dist.dsl.trace import MAX_SIGNAL_WORDS, Comm
from clockworks_dist.errors import ScheduleError

HERE = os.path.basename(__file__)
SAVED: dict = {}

# Module level, as users declare sizes; the schedules below pick it up from their globals.
ALIGNED = cw.size("ALIGNED", 4, min=4, multiple_of=4)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    found = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(found) == 1, f"{marker!r} marks {len(found)} lines"
    return found[0]


def trace_error(fn, world: int = 2, **kwargs) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        cw.schedule(fn, name="t").trace(world, **kwargs)
    return info.value


def assert_error(err: ScheduleError, line: int, *fragments: str, rank: int | None = None,
                 op: str | None = None) -> None:
    text = str(err)
    assert (err.file, err.line, err.rank, err.op) == (HERE, line, rank, op), text
    assert text.startswith(f"{HERE}:{line}: "), text
    for fragment in fragments:
        assert fragment in text, text


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user.py"
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


# ------------------------------------------------------------------ 1. size constraints
@pytest.mark.parametrize("kwargs, fragment", [
    (dict(default=4, min=10, max=5), "CHUNK has no admissible value: min=10, max=5"),
    (dict(default=5, min=5, max=7, multiple_of=8), "no admissible value: min=5, max=7, multiple_of=8"),
    (dict(default=4, max=3), "CHUNK's default 4 is above max=3"),
    (dict(default=2, min=4), "CHUNK's default 2 is below min=4"),
    (dict(default=6, multiple_of=4), "CHUNK's default 6 is not a multiple of 4"),
    (dict(default=4, multiple_of=0), "CHUNK has multiple_of=0, but it must be at least 1"),
    (dict(default=4, min=0), "CHUNK has min=0"),
    (dict(default=4.5), "CHUNK's default must be an integer, got float 4.5"),
    (dict(default=True), "CHUNK's default must be an integer, got bool True"),
    (dict(default="4"), "CHUNK's default must be an integer, got str '4'"),
    (dict(default=4, max=8.0), "CHUNK's max must be an integer, got float 8.0"),
    (dict(default=4, multiple_of=True), "CHUNK's multiple_of must be an integer, got bool True"),
])
def test_impossible_size_declarations_name_the_users_line(kwargs, fragment):
    def declare():
        cw.size("CHUNK", **kwargs)  # HERE
    with pytest.raises(ScheduleError) as info:
        declare()
    assert_error(info.value, line_of(declare), fragment, op="size")
    assert "pydantic" not in str(info.value)


def uses_aligned(r):
    r.buffer("x", count=ALIGNED)


@pytest.mark.parametrize("value, fragment", [
    (3, "ALIGNED = 3 is below min=4 (it is declared with min=4, multiple_of=4)"),
    (6, "ALIGNED = 6 is not a multiple of 4"),
    (8.0, "ALIGNED = 8.0 is not an integer"),
    ("8", "ALIGNED = '8' is not an integer"),
])
def test_a_bound_size_must_meet_its_constraints(value, fragment):
    with pytest.raises(ScheduleError) as info:
        cw.schedule(uses_aligned).trace(2, sizes={"ALIGNED": value})
    assert_error(info.value, ALIGNED.loc.line, fragment, "--size ALIGNED=4", op="size")
    assert cw.schedule(uses_aligned).trace(2, sizes={"ALIGNED": 8}).symbols[0].value == 8


def test_cli_size_binding_outside_the_constraints_is_bad_input(tmp_path, capsys):
    path = write(tmp_path, """
        import clockworks_dist as cw
        CHUNK = cw.size("CHUNK", 4, min=4, multiple_of=4)

        @cw.schedule(expect=cw.allreduce("x"))
        def f(r):
            x = r.buffer("x", CHUNK)
            r.all_reduce(x)
    """)
    assert cli.main(["check", path, "--ranks", "2", "--size", "CHUNK=3"]) == 2
    assert "user.py:2: size: CHUNK = 3 is below min=4" in capsys.readouterr().err


def test_a_size_the_schedule_does_not_declare():
    # Declared inside the function, the size escapes the symbolic checks and --size: refuse it.
    def sched(r):
        inner = cw.size("INNER", 4, min=4)
        r.buffer("x", 2 * inner)  # HERE
    assert_error(trace_error(sched), line_of(sched), "size INNER is used, but the schedule does not declare it",
                 "at module level", rank=0)


def test_sizes_compare_and_divide_exactly_with_floats():
    # Comparisons and % used to truncate the float: CHUNK < 4.5 was False, CHUNK % 2.5 was 0.
    assert ALIGNED < 4.5 and not ALIGNED > 4.5 and ALIGNED == 4.0 and ALIGNED != 4.5
    assert ALIGNED % 2.5 == 1.5 and 10.5 // ALIGNED == 2.0 and 10.5 % ALIGNED == 2.5
    assert ALIGNED / 8 == 0.5 and 2 / ALIGNED == 0.5

    def sched(r):
        x = r.buffer("x", 2 * ALIGNED)
        r.fill(x.region(0, ALIGNED / 2), 0.0)  # HERE
    assert_error(trace_error(sched), line_of(sched), "region stop must be an integer, got float 2.0", "use an int: //",
                 rank=0, op="x.region")


def test_the_ir_refuses_an_inadmissible_symbol():
    with pytest.raises(ValidationError, match="violates its constraints"):
        ir.Symbol(name="CHUNK", value=3, min=4)
    with pytest.raises(ValidationError, match="min=10 > max=5"):
        ir.Symbol(name="CHUNK", value=10, min=10, max=5)


# -------------------------------------------------------- 2. postconditions and the decorator
def declares_x(r):
    r.buffer("x", 4)
    r.buffer("y", 8)
    r.buffer("n", 4, dtype="int32")


@pytest.mark.parametrize("make, fragments, rank", [
    (lambda: cw.broadcast("x", root=5), ["postcondition broadcast('x', root=5): root 5 is out of range",
                                         "ranks 0..1"], None),
    (lambda: cw.reduce("x", root=2), ["postcondition reduce('x', root=2): root 2 is out of range"], None),
    (lambda: cw.allreduce("z"), ["names buffer 'z', which rank 0 does not declare"], 0),
    (lambda: cw.allreduce("x", dst="y"), ["y[0:8] on rank 0 has 8 elements", "x[0:4] of rank 0 has 4"], 0),
    (lambda: cw.allreduce("x", dst="n"), ["n[0:4] on rank 0 is int32", "is float32"], 0),
    (lambda: cw.alltoall("x", "y"), ["has 4 elements, but the contribution x[0:2]"], 0),
])
def test_postconditions_that_do_not_fit_the_schedule(make, fragments, rank):
    spec = make()
    with pytest.raises(ScheduleError) as info:
        cw.schedule(declares_x, expect=spec).trace(2)
    assert_error(info.value, make.__code__.co_firstlineno, *fragments, rank=rank)


@pytest.mark.parametrize("make, op, fragment", [
    (lambda: cw.allreduce("x", op="xor"), "allreduce", "unknown reduction op 'xor' (one of sum, prod, max, min)"),
    (lambda: cw.reduce_scatter("x", op=None), "reduce_scatter", "unknown reduction op None"),
    (lambda: cw.broadcast("x", root=True), "broadcast", "root must be an integer, got bool True"),
    (lambda: cw.broadcast("x", root=-1), "broadcast", "root must be at least 0, got -1"),
    (lambda: cw.allgather(3), "allgather", "buffer name 3 is not a valid identifier"),
    (lambda: cw.alltoall("x", "a b"), "alltoall", "buffer name 'a b' is not a valid identifier"),
    (lambda: cw.custom(5), "custom", "cw.custom needs a function of the world size"),
])
def test_postcondition_arguments_are_checked_where_written(make, op, fragment):
    with pytest.raises(ScheduleError) as info:
        make()
    assert_error(info.value, make.__code__.co_firstlineno, fragment, op=op)


def test_a_custom_postcondition_that_raises_names_its_line():
    def post(world):
        table = {}
        return [table[world]]  # HERE
    with pytest.raises(ScheduleError) as info:
        cw.schedule(declares_x, expect=cw.custom(post)).trace(2)
    assert_error(info.value, line_of(post), "the custom expectation raised KeyError: 2", op="custom")
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("returns, fragment", [
    (lambda world: None, "the custom expectation returned NoneType None, not a list"),
    (lambda world: [5], "the custom expectation's item 0 is int 5, not an expectation"),
    (lambda world: [cw.equals(0, "x", 0, 9, (1, "x", 0))], "the expected region x[0:9] on rank 0 is out of bounds"),
    (lambda world: [cw.equals(0, "x", 0, 2, (world, "x", 0))], "a contribution names rank 2"),
    (lambda world: [cw.equals(0, "x", 0, 2, (1, "z", 0))], "a contribution names buffer 'z'"),
    (lambda world: [cw.equals(0, "x", 0, 2, (1, "n", 0))], "x[0:2] on rank 0 is float32, but the contribution"),
])
def test_a_custom_postcondition_returning_nonsense_names_its_function(returns, fragment):
    with pytest.raises(ScheduleError) as info:
        cw.schedule(declares_x, expect=cw.custom(returns)).trace(2)
    assert info.value.file == HERE and info.value.line == returns.__code__.co_firstlineno, str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("call, fragment", [
    (lambda: cw.equals(0, "x", 0, 2, (1, "x", 0), op="xor"), "unknown reduction op 'xor'"),
    (lambda: cw.equals(0, "x", 0, 2), "needs at least one contribution"),
    (lambda: cw.equals(0, "x", 2, 2, (1, "x", 0)), "stop must be at least 3, got 2"),
    (lambda: cw.equals(0.5, "x", 0, 2, (1, "x", 0)), "rank must be an integer, got float 0.5"),
    (lambda: cw.equals(0, "x", 0, 2, (1, "x")), "must be a (rank, buffer, start) tuple, got (1, 'x')"),
])
def test_equals_checks_its_arguments(call, fragment):
    with pytest.raises(ScheduleError) as info:
        call()
    assert_error(info.value, call.__code__.co_firstlineno, fragment, op="equals")


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(ranks_per_node="2"), "ranks_per_node must be a positive int, got str '2'"),
    (dict(ranks_per_node=0), "ranks_per_node must be a positive int, got int 0"),
    (dict(ranks=[0]), "ranks must hold positive ints (world sizes), got int 0"),
    (dict(ranks="4"), "ranks must be a list of world sizes, got str '4'"),
    (dict(ranks=4), "ranks must be a list of world sizes, got int 4"),
    (dict(ranks=[2.5]), "got float 2.5"),
    (dict(ranks=[True]), "got bool True"),
    (dict(ranks=[]), "ranks lists no world size"),
    (dict(name=3), "schedule name 3 is not a valid identifier"),
    (dict(expect=5), "expect must be a postcondition such as cw.allreduce('x'), got int 5"),
    (dict(expect=[cw.allreduce("x"), "x"]), "expect[1] must be a postcondition"),
    (dict(sizes=[5]), "sizes must hold cw.size(...) symbols, got int 5"),
])
def test_decorator_arguments_are_checked_at_the_decorator(kwargs, fragment):
    def decorate():
        @cw.schedule(**kwargs)  # HERE
        def sched(r):
            pass
    with pytest.raises(ScheduleError) as info:
        decorate()
    assert_error(info.value, line_of(decorate), fragment, op="schedule")


def test_the_decorated_function_must_take_the_handle():
    def decorate():
        @cw.schedule  # HERE
        def sched():
            pass
    with pytest.raises(ScheduleError) as info:
        decorate()
    assert_error(info.value, line_of(decorate), "must take one argument, the rank handle", op="schedule")
    with pytest.raises(ScheduleError, match="decorates a function of the rank handle, got int 5"):
        cw.schedule(5)


def test_a_size_declared_twice_differently():
    def decorate():
        first = cw.size("TWICE", 4)
        second = cw.size("TWICE", 8)  # HERE
        return cw.schedule(uses_aligned, sizes=[first, second])
    with pytest.raises(ScheduleError) as info:
        decorate()
    assert_error(info.value, line_of(decorate), "size TWICE is declared twice, differently", op="schedule")


@pytest.mark.parametrize("body", [
    """
    @cw.schedule(expect=cw.broadcast("x", root=5))
    def f(r):
        r.broadcast(r.buffer("x", 4))
    """,
    """
    @cw.schedule(expect=cw.allreduce("x", op="xor"))
    def f(r):
        r.all_reduce(r.buffer("x", 4))
    """,
    """
    @cw.schedule(expect=cw.custom(lambda world: [1 / 0]))
    def f(r):
        r.all_reduce(r.buffer("x", 4))
    """,
    """
    @cw.schedule(expect=cw.custom(lambda world: [cw.equals(0, "y", 0, 2, (1, "x", 0))]))
    def f(r):
        r.all_reduce(r.buffer("x", 4))
    """,
    """
    @cw.schedule(ranks_per_node="2")
    def f(r):
        r.all_reduce(r.buffer("x", 4))
    """,
    """
    @cw.schedule(expect=5)
    def f(r):
        r.all_reduce(r.buffer("x", 4))
    """,
], ids=["broadcast_root", "unknown_op", "custom_raises", "custom_unknown_buffer", "ranks_per_node", "expect_int"])
def test_cli_reports_postcondition_and_decorator_mistakes_as_bad_input(tmp_path, capsys, body):
    path = write(tmp_path, "import clockworks_dist as cw\n\n" + textwrap.dedent(body).lstrip("\n"))
    assert cli.main(["check", path, "--ranks", "2"]) == 2
    err = capsys.readouterr().err
    assert "user.py:3: " in err and "internal error" not in err, err


# ------------------------------------------------------------------------------ 3. regions
@pytest.mark.parametrize("make, op, fragment", [
    (lambda x: x.region(1.5, 3), "x.region", "region start must be an integer, got float 1.5"),
    (lambda x: x.region(0, True), "x.region", "region stop must be an integer, got bool True"),
    (lambda x: x[True], "x[...]", "element index must be an integer, got bool True"),
    (lambda x: x[1.0], "x[...]", "element index must be an integer, got float 1.0"),
    (lambda x: x[0:2.5], "x[...]", "region stop must be an integer, got float 2.5"),
    (lambda x: x[1:2:2], "x[...]", "strided regions are not supported: step 2"),
    (lambda x: x[::True], "x[...]", "strided regions are not supported: step True"),
    (lambda x: x[-1], "x[...]", "has a negative bound: regions count from 0, not from the end"),
    (lambda x: x[-2:], "x[...]", "region x[-2:4] has a negative bound"),
    (lambda x: x[2:9], "x[...]", "region x[2:9] is out of bounds: x has 4 elements"),
    (lambda x: x.region(3, 1), "x.region", "region x[3:1] is out of bounds"),
    (lambda x: x.element(4), "x.element", "region x[4:5] is out of bounds"),
    (lambda x: x.element(True), "x.element", "element index must be an integer, got bool True"),
    (lambda x: x.chunk(1, 2.5), "x.chunk", "the number of chunks must be an integer, got float 2.5"),
    (lambda x: x.chunk(0, True), "x.chunk", "the number of chunks must be an integer, got bool True"),
    (lambda x: x.chunk(True, 2), "x.chunk", "chunk index must be an integer, got bool True"),
    (lambda x: x.chunk(0, 0), "x.chunk", "cannot split x[0:4] into 0 chunks"),
    (lambda x: x.chunk(0, -2), "x.chunk", "cannot split x[0:4] into -2 chunks"),
    (lambda x: x.chunk(5, 4), "x.chunk", "chunk index 5 is out of range 0..3"),
    (lambda x: x.chunk(0, 3), "x.chunk", "cannot split x[0:4] (4 elements) into 3 equal chunks"),
    (lambda x: x.chunk(0, 2).chunk(0, 2.0), "x.chunk", "the number of chunks must be an integer, got float 2.0"),
    (lambda x: list(x), "iter(x)", "buffer x is not iterable"),
])
def test_region_bounds_are_integers_in_range(make, op, fragment):
    def sched(r):
        x = r.buffer("x", 4)
        r.fill(make(x), 0.0)
    assert_error(trace_error(sched), make.__code__.co_firstlineno, fragment, rank=0, op=op)


def test_integer_bounds_and_sizes_still_work():
    def sched(r):
        x = r.buffer("x", 2 * ALIGNED)
        r.fill(x[ALIGNED:], 0.0)
        r.fill(x.chunk(1, 2), 1.0)
        r.fill(x[0:2:1], 2.0)
        r.fill(x.region(ALIGNED - 1, ALIGNED), 3.0)
    fills = cw.schedule(sched).trace(2).programs[0].ops
    assert [(f.dst.start, f.dst.stop) for f in fills] == [(4, 8), (4, 8), (0, 2), (3, 4)]
    assert fills[0].dst.start_sym == ir.Affine(terms=(("ALIGNED", 1),))


# ------------------------------------------------------------------------ 4. redeclarations
def test_a_communicator_redeclared_with_other_members():
    # The user study's case: the later singleton split silently turned the all-reduce into a no-op.
    def sched(r):
        x = r.buffer("x", 4)
        group = r.comm("g", [0, 1])
        r.all_reduce(x, comm=group)
        r.comm("g", [r.rank])  # HERE
    assert_error(trace_error(sched), line_of(sched), "communicator g is declared again with ranks [0]",
                 "it has ranks [0, 1]", "give the new one another name", rank=0, op="comm")


def test_a_communicator_redeclared_with_the_same_members_is_the_same():
    def sched(r):
        x = r.buffer("x", 4)
        r.all_reduce(x, comm=r.node_comm())
        r.all_reduce(x, comm=r.node_comm())
    sched_ir = cw.schedule(sched).trace(2)
    assert [c.name for c in sched_ir.comms] == ["intra"]
    assert [op.comm for op in sched_ir.programs[1].ops] == ["intra", "intra"]


def test_a_communicator_this_rank_did_not_declare():
    def sched(r):
        x = r.buffer("x", 4)
        r.all_reduce(x, comm=Comm("nope", (0, 1), r.rank))  # HERE
    assert_error(trace_error(sched), line_of(sched), "communicator nope is not declared on rank 0",
                 rank=0, op="all_reduce")


@pytest.mark.parametrize("second", [
    lambda r: r.buffer("x", 8),
    lambda r: r.buffer("x", 4, dtype="int32"),
    lambda r: r.symmetric("x", 4),
    lambda r: r.signal("x"),
    lambda r: r.buffer("x", 4),
])
def test_a_buffer_or_signal_name_is_declared_once(second):
    def sched(r):
        r.buffer("x", 4)  # FIRST
        second(r)
    err = trace_error(sched)
    assert err.line == second.__code__.co_firstlineno and err.rank == 0
    assert f"'x' is declared twice: first at {HERE}:{line_of(sched, '# FIRST')}" in str(err)


def test_a_signal_name_is_declared_once():
    def sched(r):
        r.signal("s", 2)
        r.signal("s", 4)  # HERE
    assert_error(trace_error(sched), line_of(sched), "'s' is declared twice", rank=0, op="signal")


# ----------------------------------------------------------------------------------- 5. names
HOSTILE_NAMES = [
    ('x"); system("id"); /*', "contains '\"'"),
    ("n*/ #define", "contains '*'"),
    ("__global__", "reserved in C and C++"),
    ("_Bool", "reserved in C and C++"),
    ("a__b", "reserved in C and C++"),
    ("_x", "starts with '_'"),
    ("unsigned", "'unsigned' is a C++ keyword"),
    ("signed", "C++ keyword"),
    ("volatile", "C++ keyword"),
    ("register", "C++ keyword"),
    ("restrict", "'restrict' is a C keyword"),
    ("nullptr", "C++ keyword"),
    ("bitor", "'bitor' is a C++ keyword"),
    ("not_eq", "C++ keyword"),
    ("co_await", "C++ keyword"),
    ("threadIdx", "'threadIdx' is a CUDA built-in name"),
    ("warpSize", "CUDA built-in name"),
    ("main", "'main' is the entry point of a C or C++ program"),
    ("NULL", "standard library"),
    ("EOF", "standard library"),
    ("uint64_t", "standard library"),
    ("lambda", "'lambda' is a Python keyword"),
    ("world", "communicator of every rank"),
    ("café", "contains 'é'"),
    ("a b", "contains ' '"),
    ("9lives", "starts with a digit"),
    ("", "the name is empty"),
    ("x" * 65, "has 65 characters, more than 64"),
    (123, "a name must be a string, got int 123"),
    (None, "a name must be a string, got NoneType None"),
]


@pytest.mark.parametrize("name, reason", HOSTILE_NAMES, ids=lambda v: repr(v)[:20])
@pytest.mark.parametrize("what, op, declare", [
    ("buffer", "buffer", lambda r, name: r.buffer(name, 4)),
    ("buffer", "symmetric", lambda r, name: r.symmetric(name, 4)),
    ("signal", "signal", lambda r, name: r.signal(name)),
    ("communicator", "comm", lambda r, name: r.comm(name, range(r.world))),
    ("compute kernel", "compute", lambda r, name: r.compute(name)),
])
def test_names_must_be_safe_identifiers(name, reason, what, op, declare):
    def sched(r):
        declare(r, name)
    err = trace_error(sched)
    assert_error(err, declare.__code__.co_firstlineno, f"{what} name {name!r} is not a valid identifier",
                 reason, rank=0, op=op)
    assert err.hint == ir.NAME_HINT


@pytest.mark.parametrize("name, reason", HOSTILE_NAMES[:8], ids=lambda v: repr(v)[:20])
def test_size_and_schedule_names_must_be_safe_identifiers(name, reason):
    def declare_size():
        cw.size(name, 4)  # HERE
    with pytest.raises(ScheduleError, match="size name") as info:
        declare_size()
    assert_error(info.value, line_of(declare_size), reason, op="size")

    def decorate():
        @cw.schedule(name=name)  # HERE
        def sched(r):
            pass
    with pytest.raises(ScheduleError, match="schedule name") as info:
        decorate()
    assert_error(info.value, line_of(decorate), reason, op="schedule")


def test_the_function_name_is_the_schedule_name_and_is_checked_too():
    def main(r):
        pass
    with pytest.raises(ScheduleError, match="schedule name 'main' is not a valid identifier: 'main' is the entry"):
        cw.schedule(main)
    assert cw.schedule(lambda r: None).trace(1).name == "anonymous"


def test_the_reasons_come_from_the_one_rule_in_the_ir():
    for name, reason in HOSTILE_NAMES:
        assert reason in ir.name_problem(name)
    for good in ("x", "recv_buf", "CHUNK", "ring_allreduce", "tmp2"):
        assert ir.name_problem(good) is None


@pytest.mark.parametrize("path, field", [
    (("name",), "schedule"),
    (("programs", 0, "buffers", 0, "name"), "buffer"),
    (("programs", 0, "signals", 0, "name"), "signal"),
    (("programs", 0, "ops", 0, "name"), "compute kernel"),
    (("programs", 0, "ops", 1, "comm"), "communicator reference"),
    (("programs", 0, "ops", 1, "src", "buffer"), "buffer reference"),
    (("programs", 0, "ops", 2, "signal", "signal"), "signal reference"),
    (("comms", 0, "name"), "communicator"),
    (("symbols", 0, "name"), "size"),
])
@pytest.mark.parametrize("hostile", ['x"); system("id"); /*', "__global__", "unsigned"])
def test_loading_json_enforces_the_same_rule(path, field, hostile):
    def sched(r):
        x = r.buffer("x", count=ALIGNED)
        s = r.signal("s")
        r.compute("kernel", writes=[x])
        r.all_reduce(x, comm=r.comm("pair", [0, 1]))
        r.wait_until(s, "ge", 0)
    text = cw.schedule(sched).trace(2).to_json()
    data = json.loads(text)
    assert ir.Schedule.from_json(text).to_json() == text
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = hostile
    with pytest.raises(ValidationError) as info:
        ir.Schedule.from_json(json.dumps(data))
    assert ir.name_problem(hostile) in str(info.value), field


# ------------------------------------------------------------- 6. hostile arguments to every op
def test_ops_after_the_function_returned():
    def sched(r):
        x = r.buffer("x", 4)
        if r.rank == 0:
            SAVED["r"], SAVED["x"] = r, x
        else:
            SAVED["r"].fill(SAVED["x"], 0.0)  # HERE
    assert_error(trace_error(sched), line_of(sched), "the handle of rank 0 is used after its schedule function "
                 "returned", rank=0, op="fill")

    def declares(r):
        if r.rank == 0:
            SAVED["r"] = r
        else:
            SAVED["r"].buffer("late", 4)  # HERE
    assert_error(trace_error(declares), line_of(declares), "used after its schedule function returned",
                 rank=0, op="buffer")


def test_groups_take_only_sends_receives_and_nccl_collectives():
    def collective(r):
        with r.group():
            r.barrier()  # HERE
    assert_error(trace_error(collective), line_of(collective), "only send, recv and the NCCL collectives",
                 rank=0, op="barrier")
    assert_error(trace_error(collective), line_of(collective), "may be grouped, not barrier", rank=0, op="barrier")

    def nested(r):
        with r.group():
            with r.group():  # HERE
                pass
    assert_error(trace_error(nested), line_of(nested), "groups do not nest", rank=0, op="group")

    def left_open(r):
        x = r.buffer("x", 4)
        SAVED["group"] = r.group()
        SAVED["group"].__enter__()  # HERE
        r.send((r.rank + 1) % r.world, x)
    assert_error(trace_error(left_open), line_of(left_open), "this group is never closed", rank=0, op="group")


def _env(r) -> dict:
    return {"x": r.buffer("x", 4), "y": r.buffer("y", 4), "n": r.buffer("n", 4, dtype="int64"),
            "s": r.symmetric("s", 4), "sn": r.symmetric("sn", 4, dtype="int64"), "sig": r.signal("sig", 2)}


@pytest.mark.parametrize("call, op, fragment", [
    (lambda r, e: r.send(1.0, e["x"]), "send", "peer must be an integer rank, got float 1.0"),
    (lambda r, e: r.send(True, e["x"]), "send", "peer must be an integer rank, got bool True"),
    (lambda r, e: r.recv("1", e["x"]), "recv", "peer must be an integer rank, got str '1'"),
    (lambda r, e: r.recv(1, e["x"], reduce="xor"), "recv", "unknown reduction 'xor' (one of sum, prod, max, min)"),
    (lambda r, e: r.recv(1, e["x"], reduce=["sum"]), "recv", "unknown reduction ['sum']"),
    (lambda r, e: r.all_reduce(e["x"], op="avg"), "all_reduce", "unknown reduction 'avg'"),
    (lambda r, e: r.all_reduce(e["x"], comm="pair"), "all_reduce", "comm must be a communicator from r.comm"),
    (lambda r, e: r.broadcast(e["x"], root=0.0), "broadcast", "root must be an integer rank, got float 0.0"),
    (lambda r, e: r.reduce_to(2, e["x"]), "reduce_to", "root 2 is out of range"),
    (lambda r, e: r.reduce_to(1, e["x"], dst=5), "reduce_to", "dst must be a buffer or a region of one, got int"),
    (lambda r, e: r.put(1, e["s"], e["x"], nbi=1), "put", "nbi must be True or False, got int 1"),
    (lambda r, e: r.put_signal(1, e["s"], e["x"], e["sig"][0], nbi="yes"), "put_signal", "nbi must be True or False"),
    (lambda r, e: r.put_signal(1, e["s"], e["x"], e["sig"][0], op="inc"), "put_signal", "unknown signal op 'inc'"),
    (lambda r, e: r.signal_op(1, e["sig"][0], -1), "signal_op", "value -1 does not fit a uint64 signal word"),
    (lambda r, e: r.signal_op(1, e["sig"][0], 2**64), "signal_op", "does not fit a uint64 signal word"),
    (lambda r, e: r.signal_op(1, e["sig"][0], True), "signal_op", "value must be an integer, got bool True"),
    (lambda r, e: r.signal_op(1, e["sig"][0], 1.0), "signal_op", "value must be an integer, got float 1.0"),
    (lambda r, e: r.signal_op(1, e["sig"], 1), "signal_op", "signal sig has 2 words: name one"),
    (lambda r, e: r.signal_op(1, ir.SignalRef(signal="sig", index=7)), "signal_op",
     "signal index of sig 7 is out of range 0..1"),
    (lambda r, e: e["sig"][2], "sig[...]", "signal index of sig 2 is out of range 0..1"),
    (lambda r, e: e["sig"][True], "sig[...]", "signal index of sig must be an integer, got bool True"),
    (lambda r, e: r.wait_until(e["sig"][0], ">=", 1), "wait_until", "unknown comparison '>=' (one of eq, ne, gt"),
    (lambda r, e: r.wait_until(e["sig"][0], "ge", 2**64), "wait_until", "does not fit a uint64"),
    (lambda r, e: r.atomic(1, e["sn"].element(0), "nand"), "atomic", "unknown atomic 'nand'"),
    (lambda r, e: r.atomic_add(1.5, e["sig"][0]), "atomic_add", "pe must be an integer rank, got float 1.5"),
    (lambda r, e: r.atomic_set(1, e["sig"][0], -5), "atomic_set", "value -5 does not fit"),
    (lambda r, e: r.atomic_inc(1, e["s"].element(0)), "atomic_inc", "atomics need an integer dtype"),
    (lambda r, e: r.compare_swap(1, e["sn"].element(0), True, 1, e["n"].element(0)), "compare_swap",
     "cond must be an integer, got bool True"),
    (lambda r, e: r.atomic_fetch(1, e["sn"].element(0), e["x"].element(0)), "atomic_fetch",
     "must be one element of an integer buffer"),
    (lambda r, e: r.buffer("b", 0), "buffer", "buffer b needs 1..2**40 elements, got 0"),
    (lambda r, e: r.buffer("b", -3), "buffer", "needs 1..2**40 elements, got -3"),
    (lambda r, e: r.buffer("b", 2.0), "buffer", "the count of buffer b must be an integer, got float 2.0"),
    (lambda r, e: r.buffer("b", 2**41), "buffer", "the count is in elements, not bytes"),
    (lambda r, e: r.buffer("b", 4, dtype="float128"), "buffer", "unknown dtype 'float128'"),
    (lambda r, e: r.buffer("b", 4, dtype=["float32"]), "buffer", "unknown dtype ['float32']"),
    (lambda r, e: r.symmetric("b", 4, role="output_"), "symmetric", "unknown role 'output_'"),
    (lambda r, e: r.signal("b", 0), "signal", "signal b needs 1..65536 words, got 0"),
    (lambda r, e: r.signal("b", 1.0), "signal", "the count of signal b must be an integer, got float 1.0"),
    (lambda r, e: r.comm("c", 2), "comm", "communicator c needs a list of world ranks, got int 2"),
    (lambda r, e: r.comm("c", [0, 1.0]), "comm", "member must be an integer rank, got float 1.0"),
    (lambda r, e: r.reduce(e["x"], e["y"], op="mean"), "reduce", "unknown reduction 'mean'"),
    (lambda r, e: r.reduce(e["x"]), "reduce", "reduce needs at least one source"),
    (lambda r, e: r.fill(e["x"], "0"), "fill", "fill value must be a number, got str '0'"),
    (lambda r, e: r.fill(e["x"], True), "fill", "fill value must be a number, got bool True"),
    (lambda r, e: r.fill(e["x"], float("nan")), "fill", "fill value nan"),
    (lambda r, e: r.fill(e["x"], 10**400), "fill", "is not exact as a float64"),
    (lambda r, e: r.fill(e["x"], fractions.Fraction(10**400, 3)), "fill", "is too large for a float64"),
    (lambda r, e: r.compute("k", reads=None), "compute", "reads must be a list of buffers or regions"),
    (lambda r, e: r.compute("k", writes=[3]), "compute", "write must be a buffer or a region of one, got int"),
    (lambda r, e: r.frobnicate(), None, "unknown op or attribute r.frobnicate"),
])
def test_hostile_arguments(call, op, fragment):
    def sched(r):
        call(r, _env(r))
    assert_error(trace_error(sched), call.__code__.co_firstlineno, fragment, rank=0, op=op)


def test_fill_takes_numbers_and_sizes():
    def sched(r):
        x = r.buffer("x", 4)
        r.fill(x, ALIGNED)
        r.fill(x, -1)
        r.fill(x, float("-inf"))
    assert [op.value for op in cw.schedule(sched).trace(1).programs[0].ops] == [4.0, -1.0, float("-inf")]


def test_compute_takes_one_buffer_or_a_list():
    def sched(r):
        e = _env(r)
        r.compute("kernel", reads=e["x"], writes=[e["y"].chunk(0, 2), e["y"].chunk(1, 2)])
    (op,) = cw.schedule(sched).trace(1).programs[0].ops
    assert [str(x) for x in op.reads] == ["x[0:4]"] and [str(x) for x in op.writes] == ["y[0:2]", "y[2:4]"]


# Every public op, with each argument replaced by each hostile value: anything but a ScheduleError
# naming this file (a crash, or pydantic's message) fails.
VALID_CALLS = {
    "send": lambda e: dict(peer=1, src=e["x"]),
    "recv": lambda e: dict(peer=1, dst=e["x"], reduce="sum"),
    "all_reduce": lambda e: dict(src=e["x"], dst=e["y"], op="sum"),
    "all_gather": lambda e: dict(src=e["x"].chunk(0, 2), dst=e["y"]),
    "reduce_scatter": lambda e: dict(src=e["x"], dst=e["y"].chunk(0, 2), op="sum"),
    "broadcast": lambda e: dict(src=e["x"], dst=e["y"], root=0),
    "reduce_to": lambda e: dict(root=0, src=e["x"], dst=e["y"], op="sum"),
    "all_to_all": lambda e: dict(src=e["x"], dst=e["y"]),
    "barrier": lambda e: dict(comm=None),
    "put": lambda e: dict(pe=1, dst=e["s"], src=e["x"], nbi=True),
    "get": lambda e: dict(pe=1, dst=e["x"], src=e["s"]),
    "put_signal": lambda e: dict(pe=1, dst=e["s"], src=e["x"], sig=e["sig"][0], value=1, op="add", nbi=False),
    "signal_op": lambda e: dict(pe=1, sig=e["sig"][0], value=1, op="set"),
    "atomic": lambda e: dict(pe=1, target=e["sn"].element(0), op="xor", value=1),
    "atomic_add": lambda e: dict(pe=1, target=e["sig"][1], value=1),
    "atomic_set": lambda e: dict(pe=1, target=e["sig"][1], value=1),
    "atomic_inc": lambda e: dict(pe=1, target=e["sig"][1]),
    "fetch_add": lambda e: dict(pe=1, target=e["sn"].element(0), value=1, into=e["n"].element(0)),
    "fetch_inc": lambda e: dict(pe=1, target=e["sn"].element(0), into=e["n"].element(0)),
    "atomic_fetch": lambda e: dict(pe=1, target=e["sn"].element(0), into=e["n"].element(0)),
    "swap": lambda e: dict(pe=1, target=e["sn"].element(0), value=1, into=e["n"].element(0)),
    "compare_swap": lambda e: dict(pe=1, target=e["sn"].element(0), cond=0, value=1, into=e["n"].element(0)),
    "wait_until": lambda e: dict(sig=e["sig"][0], cmp="ge", value=0),
    "copy": lambda e: dict(dst=e["x"], src=e["y"]),
    "fill": lambda e: dict(dst=e["x"], value=0.5),
    "compute": lambda e: dict(name="k", reads=[e["x"]], writes=[e["y"]]),
    "buffer": lambda e: dict(name="b", count=4, dtype="float32", role="inout"),
    "symmetric": lambda e: dict(name="b", count=4, dtype="float32", role="inout"),
    "signal": lambda e: dict(name="g", count=1),
    "comm": lambda e: dict(name="c", ranks=[0, 1]),
}
HOSTILE_VALUES = [1.5, True, "1", None, -1, 2**64, [], object()]


@pytest.mark.parametrize("method", sorted(VALID_CALLS))
def test_no_hostile_argument_escapes_as_anything_but_a_schedule_error(method):
    def run(replace: dict):
        def sched(r):
            e = _env(r)
            kwargs = VALID_CALLS[method](e) | replace
            if r.rank == 0:
                getattr(r, method)(**kwargs)
        cw.schedule(sched, name="t").trace(2)

    names = []

    def arguments(r):
        names.extend(VALID_CALLS[method](_env(r)))
    cw.schedule(arguments).trace(1)
    for name in names:
        for value in HOSTILE_VALUES:
            try:
                run({name: value})
            except ScheduleError as err:
                assert err.file == HERE and err.rank is not None, (name, value, str(err))
                assert "pydantic" not in str(err), (name, value, str(err))
            # no exception: the value is a valid one for this argument (e.g. None for a default)


# ------------------------------------------------------------------------ 7. signal array size
def test_signal_arrays_are_bounded():
    def sched(r):
        r.signal("flags", 10**8)  # HERE
    assert_error(trace_error(sched), line_of(sched), f"signal flags needs 1..{MAX_SIGNAL_WORDS} words, got 100000000",
                 "the checker keeps every signal word in its state", rank=0, op="signal")

    def largest(r):
        r.signal("flags", MAX_SIGNAL_WORDS)
    assert cw.schedule(largest).trace(1).programs[0].signals[0].count == MAX_SIGNAL_WORDS


# ------------------------------------------ schedule functions that are not plain functions (issue 28)
_HEAD = "import functools\nimport clockworks_dist as cw\n\n"
_PLAIN = '    x = r.buffer("x", count=2 * r.world, role="inout")\n    r.all_reduce(x)\n'


@pytest.mark.parametrize("source, line, fragment", [
    ('@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\nasync def f(r):\n' + _PLAIN, 4, "async def"),
    ('@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\ndef f(r):\n' + _PLAIN + "    yield\n", 4, "generator"),
    ('@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\nasync def f(r):\n' + _PLAIN + "    yield\n", 4,
     "async generator"),
    ('def g(r):\n' + _PLAIN + '    yield\n\n@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\ndef f(r):\n'
     '    return g(r)\n', 9, "returned a generator"),
    ('class F:\n    def __call__(self, r):\n        pass\nf = cw.schedule(expect=cw.allreduce("x"), ranks=(2,))(F())\n',
     7, "decorates a function"),
    ('def g(r, k):\n    pass\nf = cw.schedule(expect=cw.allreduce("x"), ranks=(2,))(functools.partial(g, k=2))\n',
     6, "decorates a function"),
    ('def g(r):\n    pass\nf = cw.schedule(expect=cw.allreduce("x"), ranks=(2,))(staticmethod(g))\n',
     6, "decorates a function"),
])
def test_a_schedule_that_is_not_a_plain_function_is_refused_at_its_line(tmp_path, capsys, source, line, fragment):
    path = write(tmp_path, _HEAD + source)
    for command in ("check", "show"):
        assert cli.main([command, path, "--ranks", "2"]) == 2
        err = capsys.readouterr().err
        assert f"user.py:{line}:" in err and fragment in err and "Traceback" not in err, err


@pytest.mark.parametrize("statement", [
    "r.world = 3", "r.rank = 5", "r.rank = (r.rank + 1) % r.world", "r.put = None", "r.all_reduce = r.barrier",
    "r.nodes = 7", "r._st = None", "del r.put", "del r.world", "setattr(r, 'world', 3)", "r.__class__ = object",
    "type(r).all_reduce = type(r).barrier", "cw.Rank.all_reduce = cw.Rank.barrier", "cw.allreduce = None",
    "del cw.size", "setattr(cw, 'schedule', None)",
])
def test_the_rank_handle_and_the_api_are_read_only(tmp_path, capsys, statement):
    """Rebinding the handle or patching cw traced something else and was called verified or violated
    (r.rank = 5 was an internal error)."""
    path = write(tmp_path, _HEAD + '@cw.schedule(expect=cw.allreduce("x"), ranks=(2,))\ndef f(r):\n'
                 f"    {statement}\n" + _PLAIN)
    assert cli.main(["check", path]) == 2
    err = capsys.readouterr().err
    assert "user.py:6:" in err and "read-only" in err and "Traceback" not in err, err


def test_a_lambda_is_still_a_schedule(tmp_path, capsys):
    path = write(tmp_path, _HEAD + 'f = cw.schedule(expect=cw.allreduce("x"), ranks=(2,))(lambda r: '
                 'r.all_reduce(r.buffer("x", count=4, role="inout")))\n')
    assert cli.main(["check", path]) == 0, capsys.readouterr().err


def test_the_package_still_imports_its_own_submodules():
    import importlib

    assert importlib.import_module("clockworks_dist.cli.perf").cmd_predict
    assert cw.check is importlib.import_module("clockworks_dist.check").check


@pytest.mark.parametrize("content, fragment", [
    (b"\x7fELF\x02\x01\x01\x00binary", "user.py"), (b"name: x\nranks: [1, 2]\n", "user.py:1"),
    (b'{"a": 1}', "user.py"), (b"", "user.py"), (b"x = 1\n\n\n  y = 2\n", "user.py:4"),
    (b"import clockworks_dist as cw\n\n\ndef f(r):\n    x = (\n", "user.py:5"), (b"x = '\xff'\n", "user.py:1"),
])
def test_a_file_that_is_not_python_source_is_bad_input_naming_file_and_line(tmp_path, capsys, content, fragment):
    path = tmp_path / "user.py"
    path.write_bytes(content)
    for command in (["check"], ["show"], ["predict", "-t", "h200x2-nv18"]):
        assert cli.main([command[0], str(path), *command[1:]]) == 2
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err, err
