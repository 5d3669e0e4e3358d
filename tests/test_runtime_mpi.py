"""The mpi-cpu executor under mpiexec: every correct protocol matches the checker at 2 and 4 ranks,
random verified schedules match (many per mpiexec job), and hangs, crashes and mismatches are
reported with the ranks, ops and file:lines involved, within the timeout, leaving no process.

Skipped without mpi4py or an mpiexec on PATH (`pip install 'clockworks-dist[mpi]'`)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("numpy")
pytest.importorskip("mpi4py", reason="the mpi-cpu executor needs mpi4py: pip install 'clockworks-dist[mpi]'")
import shutil  # noqa: E402

if shutil.which("mpiexec") is None:
    pytest.skip("no mpiexec on PATH (pip install mpich)", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402

import clockworks_dist as cw  # noqa: E402
from clockworks_dist import ir  # noqa: E402
from clockworks_dist.check import check  # noqa: E402
from clockworks_dist.runtime import job as job_mod  # noqa: E402
from clockworks_dist.runtime import launch, verdict  # noqa: E402
from clockworks_dist.runtime.expected import build_reference  # noqa: E402
from clockworks_dist.runtime.worker import FAULT_ENV  # noqa: E402
from test_por_properties import build, matched, plans  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = os.path.join(os.path.dirname(HERE), "protocols")
CORRECT = sorted(glob.glob(os.path.join(PROTOCOLS, "*.py")))
RANDOM_EXAMPLES = 200
MIN_RUN = 30


def _item(sched: ir.Schedule, timeout: float = 60.0) -> job_mod.Item:
    return job_mod.Item(name=sched.name, world=sched.world, schedule_json=sched.to_json(),
                        reference=build_reference(sched), timeout=timeout)


def _run(schedules: list[ir.Schedule], ranks: int, **options) -> dict:
    items = [_item(s) for s in schedules]
    job = job_mod.Job(items=items, ranks=ranks, **options)
    outcome = launch.run(job, timeout=None, stall=60.0)
    return verdict.summarize(schedules, outcome)


def _workers() -> list[int]:
    """Processes of this machine running a rank of a job."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if b"clockworks_dist.runtime.worker" in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def no_process_left():
    """Fails the test if a rank of a job outlives it."""
    before = set(_workers())
    yield
    assert set(_workers()) <= before


# --------------------------------------------------------------------------- the corpus
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_correct_protocol_matches(world, no_process_left):
    schedules = [defn.trace(world) for path in CORRECT for defn in cw.load_file(path)]
    summary = _run(schedules, world)
    failed = [(r["schedule"], r["message"]) for r in summary["results"] if r["verdict"] != "match"]
    assert not failed
    assert len(summary["results"]) == len(schedules) >= 12


MASK = 2**64 - 1


@cw.schedule(ranks=(4,))
def collectives_every_dtype(r):
    """Every collective, in every dtype but float32, prod/max/min too, on a split communicator whose
    members are listed in reverse (member order is key order, not world order)."""
    n, me = r.world, r.rank
    for dt in ("float16", "bfloat16", "int32", "uint64", "float64"):
        x = r.buffer(f"x_{dt}", count=2 * n, dtype=dt, role="input")
        y = r.buffer(f"y_{dt}", count=2 * n, dtype=dt, role="output")
        z = r.buffer(f"z_{dt}", count=2 * n, dtype=dt, role="output")
        r.all_to_all(x, y)
        r.reduce_scatter(x, z.region(0, 2), op="prod")
        r.reduce_to(1, x, z if me == 1 else None, op="max")
        r.broadcast(x.region(0, 2), z.region(2, 4), root=2)
        half = r.comm(f"half_{dt}", [q for q in range(n) if q % 2 == me % 2][::-1])
        r.all_gather(x.region(0, 2), y.region(0, 4), comm=half)
        r.all_reduce(x.region(4, 6), z.region(4, 6), op="min", comm=half)
        if me % 2:
            r.recv(me - 1, z.region(6, 8), reduce="sum")
        else:
            r.send(me + 1, x.region(6, 8))


@cw.schedule(ranks=(4,))
def one_sided_and_local(r):
    """A compute kernel, a fill that float32 rounds, atomics on int32 words fetched into int64
    (a decrement that wraps, xor, compare-and-swap), put_signal with adds, a wrapping signal add,
    wait_until_any, get_nbi completed by quiet, an atomic fetch of a signal word."""
    n, me = r.world, r.rank
    w = r.buffer("w", count=6, role="output")
    r.compute("mix", reads=[r.buffer("in_f32", count=3, role="input").all()], writes=[w.region(0, 4)])
    r.fill(w.region(4, 5), 0.1)
    r.reduce(w.region(5, 6), w.region(0, 1), w.region(1, 2), w.region(2, 3), op="min")
    ctr = r.symmetric("ctr", count=2, dtype="int32", role="scratch")
    tick = r.buffer("tick", count=3, dtype="int64", role="scratch")
    sig = r.signal("sig", count=2)
    r.fetch_add(0, ctr.element(0), MASK, tick.element(0))
    r.atomic(1, ctr.element(1), "xor", 5)
    r.barrier_all()
    r.compare_swap(2, ctr.element(1), 0, 9, tick.element(1))
    r.barrier_all()
    s = r.symmetric("s", count=n, role="output")
    r.put_signal((me + 1) % n, s.element(me), w.region(5, 6), sig[0], value=1, op="add")
    r.signal_op((me + 2) % n, sig[1], MASK, op="add")
    r.wait_until_any([sig[0]], "ge", 1)
    r.barrier_all()
    g = r.buffer("g", count=1, role="output")
    r.get_nbi((me + 3) % n, g, s.element((me + 2) % n))
    r.quiet()
    r.atomic_fetch(me, sig[1], tick.element(2))


def test_every_collective_dtype_and_one_sided_op_matches(no_process_left):
    schedules = [collectives_every_dtype.trace(4), one_sided_and_local.trace(4)]
    assert all(check(s).verdict == "verified" for s in schedules)
    summary = _run(schedules, 4, iters=2, jitter=3)
    assert [r["verdict"] for r in summary["results"]] == ["match", "match"], summary["results"][0]["message"]


# --------------------------------------------------------------------- grouped collectives
@cw.schedule(ranks=(2, 4))
def grouped_rooted(r):
    """An all-reduce and a broadcast on `a` and a reduce on `b` in one group; the odd ranks post b's
    first. The rooted ones start with their members' barrier, posted in each communicator's order."""
    n, me = r.world, r.rank
    a, b = r.comm("a", range(n)), r.comm("b", range(n))
    x = r.buffer("x", count=4, role="inout")
    bsrc = r.buffer("bsrc", count=3, role="input")
    bdst = r.buffer("bdst", count=3, role="output")
    rsrc = r.buffer("rsrc", count=2, role="input")
    rdst = r.buffer("rdst", count=2, role="output") if me == 0 else None
    on_a = [lambda: r.all_reduce(x, comm=a), lambda: r.broadcast(bsrc, bdst, root=n - 1, comm=a)]
    on_b = [lambda: r.reduce_to(0, rsrc, rdst, comm=b)]
    with r.group():
        for call in (on_a + on_b if me % 2 == 0 else on_b + on_a):
            call()


@cw.schedule(ranks=(2, 4))
def grouped_with_p2p(r):
    """A send, an all-gather on `a`, a reduce-scatter on `b` (posted in a different order by the odd
    ranks) and a recv in one group; then an all-to-all alone in a group."""
    n, me = r.world, r.rank
    a, b = r.comm("a", range(n)), r.comm("b", range(n))
    part = r.buffer("part", count=2, role="input")
    whole = r.buffer("whole", count=2 * n, role="output")
    spread = r.buffer("spread", count=2 * n, role="input")
    mine = r.buffer("mine", count=2, role="output")
    out = r.buffer("out", count=2, role="input")
    got = r.buffer("got", count=2, role="output")
    on_a = [lambda: r.all_gather(part, whole, comm=a)]
    on_b = [lambda: r.reduce_scatter(spread, mine, comm=b)]
    with r.group():
        r.send(me ^ 1, out)
        for call in (on_a + on_b if me % 2 == 0 else on_b + on_a):
            call()
        r.recv(me ^ 1, got)
    tosend = r.buffer("tosend", count=n, role="input")
    toget = r.buffer("toget", count=n, role="output")
    with r.group():
        r.all_to_all(tosend, toget, comm=a)


@cw.schedule(ranks=(2, 4))
def grouped_then_alone(r):
    """Rank 0 posts all-reduces on `a` and `b` in a group; the others call b's, then a's, each alone
    (a blocking call on their side meets the group's member of the same communicator)."""
    x = r.buffer("x", count=2, role="inout")
    y = r.buffer("y", count=2, role="inout")
    a, b = r.comm("a", range(r.world)), r.comm("b", range(r.world))
    if r.rank == 0:
        with r.group():
            r.all_reduce(x, comm=a)
            r.broadcast(y, root=1, comm=b)
    else:
        r.broadcast(y, root=1, comm=b)
        r.all_reduce(x, comm=a)


@pytest.mark.parametrize("world, defns", [(2, (grouped_rooted, grouped_with_p2p, grouped_then_alone)),
                                          (4, (grouped_rooted, grouped_then_alone))], ids=["2", "4"])
def test_grouped_collectives_match_in_any_posting_order(world, defns, no_process_left):
    schedules = [d.trace(world) for d in defns]
    assert all(check(s, reduction=False).verdict == "verified" for s in schedules)
    summary = _run(schedules, world, iters=3, jitter=5)
    assert [r["verdict"] for r in summary["results"]] == ["match"] * len(schedules), \
        [r["message"] for r in summary["results"]]


def test_a_grouped_collective_a_member_never_posts_hangs_naming_it(no_process_left):
    """Rank 1's group lacks b's all-reduce: the run stops at the deadline, rank 0 naming the member it
    waits in and the communicator's members."""
    @cw.schedule(ranks=(2,))
    def half_posted(r):
        x = r.buffer("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="inout")
        a, b = r.comm("a", range(r.world)), r.comm("b", range(r.world))
        with r.group():
            r.all_reduce(x, comm=a)
            if r.rank == 0:
                r.all_reduce(y, comm=b)
    sched = half_posted.trace(2)
    item = job_mod.Item(name=sched.name, world=2, schedule_json=sched.to_json(), reference=None, timeout=3)
    started = time.monotonic()
    summary = verdict.summarize([sched], launch.run(job_mod.Job(items=[item], ranks=2), timeout=None, stall=60.0))
    assert time.monotonic() - started < 60
    message = summary["results"][0]["message"]
    assert summary["results"][0]["verdict"] == "hang", message
    assert (f"rank 0 is in all_reduce(y[0:2] -> y[0:2], sum, comm=b) at {os.path.basename(__file__)}:"
            in message), message
    assert "waiting for the other members of b (ranks 0, 1)" in message, message


# --------------------------------------------------------------------- random schedules
def test_random_verified_schedules_match_the_checker(no_process_left):
    """Random schedules (the property tests' generator) that the checker verifies run in one
    mpiexec job, with jitter, and every element and signal word matches the checker's values."""
    found: list[ir.Schedule] = []

    @settings(max_examples=RANDOM_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(plans())
    def collect(plan):
        sched = build(plan)
        if matched(sched) and check(sched).verdict == "verified":
            found.append(sched)

    collect()
    assert len(found) >= MIN_RUN  # enough verified schedules to run (the generator draws many that fail)
    summary = _run(found, ranks=3, jitter=11)
    differ = [(found[i].to_json(), r["message"]) for i, r in enumerate(summary["results"]) if r["verdict"] != "match"]
    assert not differ, differ


@pytest.mark.parametrize("name", ["get_after_allreduce", "put_races_recv_reduce", "group_send_reads_own_recv"])
def test_what_mpi_ran_differently_is_a_race_the_checker_reports(name, no_process_left):
    """MPI ran these differently from the checker when the checker completed a send with its recv,
    and a collective on every member, in one step, and read a send's source only when it met its
    recv. Now each is a race the checker reports. For the first and the last, every value MPI
    produces is one some execution of the checker's search produces; in the middle one the put may
    land between the read and the write of the recv's reduction (a torn update the checker, which
    takes each landing whole, does not list), so there only the run's clean end is required."""
    sched = cw.load_file(os.path.join(PROTOCOLS, "buggy", f"{name}.py"))[0].trace(2)
    assert "data_race" in check(sched).kinds()
    summary = _run([sched], 2, iters=10, jitter=1)
    verdict = summary["results"][0]["verdict"]
    assert verdict in (("match", "mismatch") if name == "put_races_recv_reduce" else ("match",)), \
        summary["results"][0]["message"]
    if name == "get_after_allreduce":  # the peer's old x shows in nearly every run
        assert sum(line["compare"]["other_execution"] for line in summary["results"][0]["ranks"]) > 0


# ------------------------------------------------------------------------------ the CLI
def _cli(*args: str, env: dict | None = None, mpiexec: int | None = None) -> tuple[int, str, str, float]:
    command = [sys.executable, "-m", "clockworks_dist.cli", "run", *args]
    if mpiexec:
        command = ["mpiexec", "-n", str(mpiexec), *command]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def test_run_prints_match_and_timings(no_process_left):
    code, out, err, _ = _cli(os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "4", "--iters", "3",
                             "--jitter", "5", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["verdict"] == "match" and summary["np"] == 4
    result = summary["results"][0]
    assert result["time"]["iterations"] == 3 and result["time"]["median_us"] > 0
    assert sorted(line["rank"] for line in result["ranks"]) == [0, 1, 2, 3]
    assert all(line["compare"]["checked"] == 60 for line in result["ranks"])


@pytest.mark.parametrize("name", ["put_without_quiet", "final_signal_unfenced"])
def test_an_output_read_when_its_rank_ends_shows_a_put_left_in_flight(name, no_process_left):
    """The executor reads each rank's outputs when its program ends, before the barrier it adds,
    and hands a plain put to MPI only when the issuer must have completed it: a put its target
    never waits for (the checker's unfinished_output) is missing from the output, every time."""
    code, out, err, _ = _cli(os.path.join(PROTOCOLS, "buggy", f"{name}.py"), "--np", "2", "--iters", "2",
                             "--json")
    assert code == 1, err
    summary = json.loads(out)
    assert summary["verdict"] == "mismatch"
    stale = {(first["rank"], first["buffer"]) for line in summary["results"][0]["ranks"]
             for first in line["compare"]["first"]}
    output = "mirror" if name == "put_without_quiet" else "out"
    assert stale == {(0, output), (1, output)}


@pytest.mark.parametrize("name", ["shift_put_fenced_signal", "allgather_waits_every_peer"])
def test_the_fixed_twins_match_when_their_outputs_are_read_at_the_end(name, no_process_left):
    code, out, err, _ = _cli(os.path.join(PROTOCOLS, f"{name}.py"), "--np", "2", "--iters", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "match"


def test_a_hang_ends_within_the_timeout_naming_each_ranks_op(no_process_left):
    code, out, err, seconds = _cli(os.path.join(PROTOCOLS, "buggy", "ring_allreduce_no_group.py"), "--np", "4",
                                   "--timeout", "5")
    assert code == 1, err
    assert seconds < 5 + 3  # the bound, and the start of the interpreter
    assert "hang (the deadline passed): rank 0 is in send(peer=1, x[0:2]) at ring_allreduce_no_group.py:24, " \
           "waiting for its matching recv on rank 1; rank 1 is in send(peer=2, x[2:4])" in out


def test_a_full_fifo_hang_names_the_connection(no_process_left):
    """A send blocked by a full connection (protocols/buggy/fifo_full_deadlock.py) ends at the timeout,
    each rank named at the send the checker reports, waiting for room on its connection."""
    code, out, err, seconds = _cli(os.path.join(PROTOCOLS, "buggy", "fifo_full_deadlock.py"), "--np", "3",
                                   "--timeout", "5")
    assert code == 1, err
    assert seconds < 5 + 3
    assert "hang (the deadline passed): rank 0 is in send(peer=1, x[4:8], slots=1) at fifo_full_deadlock.py:25, " \
           "waiting for room in its connection to rank 1 (1 message(s) not yet received)" in out


def test_a_one_sided_hang_shows_the_signal_word(no_process_left):
    code, out, _err, _ = _cli(os.path.join(PROTOCOLS, "runtime", "signal_to_wrong_pe.py"), "--timeout", "4")
    assert code == 1
    assert ("rank 0 is in wait_until(ready[0] ge 1) at signal_to_wrong_pe.py:19, waiting for ready[0] (now 0) "
            "to be ge 1") in out


def test_a_rank_that_raises_is_named_and_the_others_say_where_they_were(no_process_left):
    code, out, err, seconds = _cli(os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "4", "--json",
                                   env={FAULT_ENV: "1:3:raise"})
    assert code == 1, err
    result = json.loads(out)["results"][0]
    assert result["verdict"] == "crash" and result["crashed"] == [1]
    assert result["message"].startswith("crash: rank 1 raised RuntimeError: fault injected before op 3")
    assert "at ring_allreduce.py:19; when the job stopped, rank 0 was in send(peer=1, x[8:12]) at " \
           "ring_allreduce.py:17" in result["message"]
    assert seconds < 30


def test_a_rank_that_is_killed_is_named(no_process_left):
    code, out, _err, _ = _cli(os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "4", "--json",
                              env={FAULT_ENV: "2:1:kill"})
    assert code == 1
    result = json.loads(out)["results"][0]
    assert result["verdict"] == "crash" and result["crashed"] == [2]
    assert "rank 2 died (its process ended without a result; killed?) in" in result["message"]


def test_a_rank_stuck_outside_any_wait_is_found_by_its_progress_word(no_process_left):
    code, out, _err, seconds = _cli(os.path.join(PROTOCOLS, "ring_allreduce.py"), "--np", "2", "--timeout", "4",
                                    env={FAULT_ENV: "0:1:hang"})
    assert code == 1 and seconds < 4 + 3
    # rank 0 never looks at the clock: its progress word names the op (or, if rank 1 exits first,
    # its handler of mpiexec's signal does)
    assert re.search(r"hang \(the deadline passed\): rank 0 (is stuck|was) in x\[4:8\] = x\[4:8\] \+ tmp\[0:4\] at "
                     r"ring_allreduce.py:19.*; rank 1 is in send\(peer=0, x\[0:4\]\)", out)


def test_finished_schedules_keep_their_results_when_a_later_one_crashes(no_process_left):
    first = cw.load_file(os.path.join(PROTOCOLS, "ring_allgather.py"))[0].trace(2)
    second = cw.load_file(os.path.join(PROTOCOLS, "tree_allreduce.py"))[0].trace(2)
    summary = _run([first, second, first], 2, fault="1:0:raise")
    verdicts = [r["verdict"] for r in summary["results"]]
    assert verdicts == ["crash", "not run", "not run"] or verdicts[0] == "crash"
    summary = _run([first, second], 2, fault="1:2:raise")  # tree_allreduce has 2 ops on rank 1
    assert [r["verdict"] for r in summary["results"]][0] == "match"


def test_a_mismatch_against_the_postcondition(no_process_left):
    code, out, _err, _ = _cli(os.path.join(PROTOCOLS, "buggy", "double_counted_rank.py"))
    assert code == 1
    assert "mismatch: 3 elements fail the postcondition (rank(s) 0, 1, 2); rank 0: x[0]: postcondition " \
           "x@r0[0:1] + x@r1[0:1] + x@r2[0:1] = " in out


def test_a_corrupted_element_is_reported_against_the_checker(no_process_left):
    code, out, _err, _ = _cli(os.path.join(PROTOCOLS, "ring_allgather.py"), "--np", "2", "--json",
                              env={FAULT_ENV: "1:0:corrupt"})
    assert code == 1
    record = json.loads(out)["results"][0]["ranks"][1]["compare"]["first"][0]
    assert (record["rank"], record["buffer"], record["element"], record["against"]) == (1, "x", 0, "checker")
    assert record["got"] == record["expected"] + 1 and record["expected_term"]


def test_inside_an_mpi_job_every_rank_runs_and_rank_0_prints_the_verdict(no_process_left):
    code, out, err, _ = _cli(os.path.join(PROTOCOLS, "nvshmem_oneshot_allreduce.py"), mpiexec=2)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(line["rank"] for line in lines) == [0, 1] and {line["status"] for line in lines} == {"match"}
    assert "nvshmem_oneshot_allreduce, 2 ranks, mpi-cpu: results match" in out
