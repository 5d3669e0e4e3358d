"""The runtime layer without MPI: inputs exact in every dtype, the checker's values as numbers, the
comparison, the mpi-cpu table, and `clockworks run`'s bad-input errors."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")

import clockworks_dist as cw  # noqa: E402
from clockworks_dist import cli, ir  # noqa: E402
from clockworks_dist.runtime import select  # noqa: E402
from clockworks_dist.runtime import compare, expected  # noqa: E402
from clockworks_dist.semantics import numeric  # noqa: E402
from clockworks_dist.semantics.arithmetic import MASK64  # noqa: E402
from clockworks_dist.semantics.backends import Backend  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = os.path.join(os.path.dirname(HERE), "protocols")
FLOATS = ("float16", "bfloat16", "float32", "float64")


def _trace(path: str, world: int) -> ir.Schedule:
    return cw.load_file(os.path.join(PROTOCOLS, path))[0].trace(world)


# ------------------------------------------------------------------------------------- inputs
def test_inputs_are_deterministic_small_powers_of_two():
    first = numeric.input_values(3, "x", "float32", 0, 1000)
    assert np.array_equal(first, numeric.input_values(3, "x", "float32", 0, 1000))
    assert set(first.tolist()) == {1.0, 2.0, 4.0}
    assert np.array_equal(numeric.input_values(3, "x", "float32", 10, 20), first[10:20])
    assert not np.array_equal(first, numeric.input_values(4, "x", "float32", 0, 1000))
    assert not np.array_equal(first, numeric.input_values(3, "y", "float32", 0, 1000))
    assert numeric.input_values(0, "ctr", "uint64", 0, 5).dtype == np.uint64


@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions_over_8_ranks_are_exact_in_any_order(dtype):
    """Every partial sum and product of the inputs of 8 ranks is representable, so any
    association order gives the same bits (what lets MPI's and NCCL's order agree with the
    checker's)."""
    columns = [numeric.input_values(rank, "x", dtype, 0, 256) for rank in range(8)]
    rng = np.random.default_rng(0)
    for op in ("sum", "prod", "max", "min"):
        results = []
        for _ in range(6):
            order = rng.permutation(8)
            acc = columns[order[0]]
            for rank in order[1:]:
                acc = numeric.combine(op, acc, columns[rank], dtype)
            results.append(acc)
        exact = np.array(columns, dtype=np.float64)
        want = {"sum": exact.sum(0), "prod": exact.prod(0), "max": exact.max(0), "min": exact.min(0)}[op]
        for got in results:
            assert numeric.same_bits(got, results[0]).all()
            assert np.array_equal(got.astype(np.float64), want)


def test_float16_sums_of_512_inputs_stay_exact():
    columns = [numeric.input_values(rank, "x", "float16", 0, 64) for rank in range(512)]
    acc = columns[0]
    for column in columns[1:]:
        acc = numeric.combine("sum", acc, column, "float16")
    assert np.array_equal(acc.astype(np.float64), np.array(columns, dtype=np.float64).sum(0))


def test_bfloat16_rounds_to_nearest_even():
    values = numeric.to_dtype(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 257.0, 259.0, -0.0]), "bfloat16")
    assert values.tolist() == [1.0, 1 + 2 ** -6, 256.0, 260.0, -0.0]


def test_atomic_arithmetic_wraps_in_the_words_dtype():
    old = numeric.from_int(5, "int32")
    assert numeric.atomic_update("add", old, MASK64, "int32").tolist() == [4]  # 2**64 - 1 is a decrement
    assert numeric.atomic_update("add", numeric.from_int(0, "uint64"), MASK64, "uint64").tolist() == [MASK64]
    assert numeric.atomic_update("compare_swap", old, (9, 5), "int32").tolist() == [9]
    assert numeric.atomic_update("compare_swap", old, (9, 6), "int32").tolist() == [5]
    assert numeric.from_int(MASK64, "int64").tolist() == [-1]


def test_opaque_output_depends_on_the_bytes_read_only():
    a, b = np.arange(6, dtype=np.float32), np.arange(6, 9, dtype=np.float32)
    whole = numeric.opaque_output("k", 0, 3, [np.concatenate([a, b])], 20)
    assert np.array_equal(whole, numeric.opaque_output("k", 0, 3, [a[:2], a[2:], b], 20))
    assert set(whole.tolist()) <= {1.0, 2.0, 4.0}
    assert not np.array_equal(whole, numeric.opaque_output("k", 0, 3, [a, b + 1], 20))
    assert not np.array_equal(whole, numeric.opaque_output("k", 1, 3, [a, b], 20))


# ---------------------------------------------------------------------------- expected values
def test_ring_allreduce_expects_the_sum_of_every_rank():
    sched = _trace("ring_allreduce.py", 4)
    ref = expected.build_reference(sched)
    assert ref.complete and not ref.possible
    total = sum(numeric.input_values(rank, "x", "float32", 0, 16) for rank in range(4))
    for rank in range(4):
        mine = expected.expect_rank(ref, rank).buffers["x"]
        assert np.array_equal(mine.expected, total) and np.array_equal(mine.post, total)
        assert mine.checked.all() and mine.post_mask.all()


def tickets(r):
    """Both ranks take a ticket from rank 0's counter: the tickets depend on the order."""
    counter = r.symmetric("counter", count=1, dtype="uint64", role="scratch")
    ticket = r.buffer("ticket", count=1, dtype="uint64", role="scratch")
    r.fetch_add(0, counter.element(0), 1, ticket)
    r.barrier_all()


def test_values_that_differ_between_executions_are_all_accepted():
    sched = cw.schedule(tickets).trace(2)
    assert cw.check(sched).verdict == "verified"
    ref = expected.build_reference(sched)
    want = expected.expect_rank(ref, 1)
    counter0 = int(numeric.input_values(0, "counter", "uint64", 0, 1)[0])
    memory = {"counter": numeric.input_values(1, "counter", "uint64", 0, 1), "ticket": np.array([0], np.uint64)}
    for ticket, ok in ((counter0, True), (counter0 + 1, True), (counter0 + 2, False)):
        memory["ticket"] = np.array([ticket], dtype=np.uint64)
        result = compare.compare_rank(want, memory, np.zeros(0, np.uint64))
        assert result.ok is ok
    assert result.first[0]["possible"] == [counter0, counter0 + 1]


def test_a_mismatch_names_rank_buffer_element_and_the_expected_term():
    sched = _trace("ring_allreduce.py", 2)
    ref = expected.build_reference(sched)
    want = expected.expect_rank(ref, 1)
    memory = {name: b.expected.copy() for name, b in want.buffers.items()}
    memory["x"][5] += 1
    result = compare.compare_rank(want, memory, np.zeros(0, np.uint64))
    assert (result.mismatches, result.post_failures) == (1, 1)
    records = compare.annotate(ref, result.first)
    assert records[0]["buffer"] == "x" and records[0]["element"] == 5 and records[0]["rank"] == 1
    assert records[0]["expected_term"] == "(x@r0[4:8] + x@r1[4:8]) at [1]"
    assert records[1]["against"] == "postcondition"
    text = compare.describe(records[0])
    assert text.startswith("rank 1: x[5]: expected (x@r0[4:8] + x@r1[4:8]) at [1] = ")
    assert text.endswith(f"got {records[0]['got']}")


def test_compute_kernels_are_evaluated_from_what_they_read():
    def kernel(r):
        x = r.buffer("x", count=4, role="inout")
        y = r.buffer("y", count=3, role="output")
        r.compute(reads=[x.region(0, 2), x.region(2, 4)], writes=[y, x.region(0, 1)], name="mix")

    sched = cw.schedule(kernel).trace(1)
    want = expected.expect_rank(expected.build_reference(sched), 0)
    x0 = numeric.input_values(0, "x", "float32", 0, 4)
    out = numeric.opaque_output("mix", 0, 0, [x0], 4)
    assert np.array_equal(want.buffers["y"].expected, out[:3].astype(np.float32))
    assert want.buffers["x"].expected.tolist() == [out[3]] + x0[1:].tolist()


def test_a_deadlocking_schedule_has_no_reference_execution():
    sched = cw.load_file(os.path.join(PROTOCOLS, "runtime", "signal_to_wrong_pe.py"))[0].trace(2)
    ref = expected.build_reference(sched)
    assert ref.final is None and "no execution finishes" in ref.note
    assert not expected.expect_rank(ref, 0).buffers["data"].checked.any()


# -------------------------------------------------------------------------- backend and CLI
def test_the_mpi_cpu_table_decides_every_op_class():
    from clockworks_dist.runtime.mpi_cpu import MPI_CPU
    from clockworks_dist.semantics.backends import BACKENDS

    MPI_CPU.check_complete()
    assert BACKENDS["mpi-cpu"] is MPI_CPU


def test_an_op_the_backend_cannot_run_is_named_with_its_reason():
    sched = _trace("nvshmem_oneshot_allreduce.py", 2)
    partial = Backend("partial", table={cls: print for cls in ir.OP_CLASSES if cls is not ir.PutSignal},
                      unsupported={ir.PutSignal: "no one-sided ops here"})
    with pytest.raises(select.BackendError, match=r"nvshmem_oneshot_allreduce.py:\d+: the partial backend cannot "
                                                   r"run put_signal: no one-sided ops here \(rank 0\)"):
        select.supported(partial, sched)


def test_an_unknown_backend_is_bad_input(capsys):
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--backend", "nccl"])
    assert code == 2
    assert "unknown backend 'nccl'; clockworks run knows mpi-cpu" in capsys.readouterr().err


def test_no_mpiexec_on_path_says_which_package_provides_it(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    code = cli.main(["run", os.path.join(PROTOCOLS, "ring_allreduce.py"), "--json"])
    assert code == 2
    assert "no mpiexec on PATH: the mpich package provides one (pip install mpi4py mpich" in capsys.readouterr().err


def test_an_incomplete_search_compares_only_the_outputs():
    """Without every final value, only what a verified schedule determines is compared: outputs."""
    sched = _trace("ring_allreduce.py", 2)
    ref = expected.build_reference(sched, max_states=1)
    assert not ref.complete and "only outputs are compared" in ref.note
    want = expected.expect_rank(ref, 0)
    assert want.buffers["x"].checked.all() and not want.buffers["tmp"].checked.any()
