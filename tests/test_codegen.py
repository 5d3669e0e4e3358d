"""Generated CUDA (`clockworks_dist.codegen`): what reaches the compiler is safe, the program follows the
runtime's numbers, every protocol generates or says why not, and two programs per backend are pinned
as golden files (CLOCKWORKS_UPDATE_GOLDEN=1 writes them again).

No GPU is needed here; compiling and running is in tests/test_codegen_build.py and on the GPU machine."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import numpy as np
import pytest

from clockworks_dist import ir
from clockworks_dist.codegen import cuda, program
from clockworks_dist.dsl.load import load_file
from clockworks_dist.semantics import numeric
from clockworks_dist.semantics.backends import Unsupported

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "codegen"
UPDATE = os.environ.get("CLOCKWORKS_UPDATE_GOLDEN") == "1"


def trace(path: str, ranks: int, **sizes) -> ir.Schedule:
    return load_file(str(ROOT / path))[0].trace(ranks, sizes=sizes or None)


# ------------------------------------------------------------------------------------- safety
@pytest.mark.parametrize("name", ['x"; system("rm -rf /"); //', "a*/b", "class", "naïve", "main", "1x", "",
                                  "x" * 65])
def test_unsafe_names_never_become_identifiers(name):
    with pytest.raises(cuda.UnsafeName):
        cuda.ident("buffer", name)


def test_identifiers_get_a_prefix_of_their_kind():
    assert cuda.ident("buffer", "x") == "b_x"
    assert cuda.ident("signal", "ready") == "s_ready"
    assert cuda.ident("comm", "node") == "c_node"


@pytest.mark.parametrize("text", ['evil*/ int x; /*', 'line\\\nspliced', 'a"b', "tri??/graph", "é\x00\x7f",
                                  "ok.py"])
def test_line_comments_cannot_be_ended_or_spliced(text):
    out = cuda.comment(text)  # generated comments are // comments: only a newline or a splice ends them
    assert "\\" not in out and "?" not in out
    assert "\n" not in out and all(32 <= ord(ch) < 127 for ch in out)


def _c_string_value(literal: str) -> bytes:
    """What a C compiler makes of a string literal that uses only octal escapes."""
    assert literal[0] == literal[-1] == '"'
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        if body[i] == "\\":
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            assert body[i] not in '"?'
            out.append(ord(body[i]))
            i += 1
    return bytes(out)


@pytest.mark.parametrize("text", ['x"; system("...', "a\\b", "*/", "??=", "naïve ünïcode", "\x01\n\t", "1234"])
def test_string_literals_hold_the_text_exactly(text):
    literal = cuda.literal(text)
    assert all(32 <= ord(ch) < 127 for ch in literal)
    assert _c_string_value(literal) == text.encode("utf-8")


def test_a_schedule_that_bypassed_validation_is_refused():
    sched = trace("protocols/ring_allreduce.py", 2)
    bad_decl = sched.programs[0].buffers[0].model_copy(update={"name": 'x"; system("id'})
    bad = sched.model_copy(update={"programs": (sched.programs[0].model_copy(update={"buffers": (bad_decl,)}),
                                                *sched.programs[1:])})
    with pytest.raises(cuda.UnsafeName, match="cannot appear in generated code"):
        program.generate(bad, "nccl")


def test_a_hostile_file_name_stays_inside_comments_and_literals():
    sched = trace("protocols/ring_allreduce.py", 2)
    hostile = 'evil*/ #include "x" /*\\\n#error'
    ops = tuple(op.model_copy(update={"loc": ir.SourceLoc(file=hostile, line=op.loc.line)})
                for op in sched.programs[0].ops)
    sched = sched.model_copy(update={"programs": (sched.programs[0].model_copy(update={"ops": ops}),
                                                  *sched.programs[1:])})
    text = program.generate(sched, "nccl")
    assert hostile not in text
    assert not any(line.lstrip().startswith("#error") for line in text.splitlines())
    seen = 0
    for line in text.splitlines():
        if "evil" in line:
            seen += 1
            code, _sep, note = line.partition("//")
            # in code only as a literal with every quote and backslash escaped; in a comment, no splice
            assert "evil" not in code or '"evil*/ #include \\042x\\042 /*\\134\\012#error"' in code
            assert not line.endswith("\\")
    assert seen


# ------------------------------------------------------------------------- the runtime's numbers
@pytest.mark.parametrize("rank,buffer", [(0, "x"), (3, "grads"), (1, "a_long_buffer_name_42")])
def test_input_key_is_the_runtimes(rank, buffer):
    base = np.uint64(program.input_base(rank, buffer))
    levels = numeric._levels(base, 0, 64)
    assert np.array_equal(levels, numeric.input_values(rank, buffer, "float64", 0, 64))


@pytest.mark.parametrize("value,dtype,word", [(1.0, "float32", 0x3F800000), (-2.5, "float64", 0xC004000000000000),
                                              (1.0, "float16", 0x3C00), (1.0, "bfloat16", 0x3F80),
                                              (3.9, "int32", 3), (-1.0, "uint32", 0xFFFFFFFF)])
def test_fill_constants_are_the_exact_stored_bits(value, dtype, word):
    assert program.bits(value, dtype) == f"cw_bits<{cuda.C_TYPE[dtype]}>({word}ULL)"


def test_opaque_hash_is_a_sum_of_terms_over_positions():
    a = np.array([1.0, 2.0, 4.0, 1.0], dtype=np.float32)
    b = np.array([2, 4], dtype=np.int32)
    whole = numeric.opaque_output("fwd", 1, 5, [a, b], 8)
    assert np.array_equal(whole, numeric.opaque_output("fwd", 1, 5, [a[:1], a[1:], b], 8))
    assert not np.array_equal(whole, numeric.opaque_output("fwd", 1, 5, [a[::-1], b], 8))
    # the formula of the module docstring, term by term (what the device kernel adds up)
    seed = np.uint64(numeric.opaque_seed("fwd", 1, 5))
    words = np.concatenate([a.astype(np.float64).view(np.uint64), b.astype(np.int64).view(np.uint64)])
    with np.errstate(over="ignore"):
        h = seed + np.add.reduce(numeric._mix(words ^ numeric._mix(seed + np.arange(6, dtype=np.uint64))),
                                 dtype=np.uint64)
    assert np.array_equal(whole, numeric._levels(h, 0, 8))


# ---------------------------------------------------------------------------- every protocol
PROTOCOLS = sorted(glob.glob(str(ROOT / "protocols" / "*.py")))


@pytest.mark.parametrize("path", PROTOCOLS, ids=lambda p: Path(p).stem)
def test_every_protocol_generates_for_nccl_or_names_the_op(path):
    defn = load_file(path)[0]
    sched = defn.trace(defn.ranks[0] if defn.ranks else 2)
    problems = program.unsupported(sched, "nccl")
    if any(prog.threads for prog in sched.programs):
        # a rank's concurrent threads are refused by every code generator, at the thread's line
        with pytest.raises(Unsupported, match=r"\.py:\d+: rank \d+ runs threads .*does not emit threads yet"):
            program.generate(sched, "nccl")
        return
    if problems:
        with pytest.raises(Unsupported, match=r"\.py:\d+: the nccl-codegen backend cannot run"):
            program.generate(sched, "nccl")
        # each refusal names what does run it: the other backend, or the mpi-cpu executor
        assert all("--backend nvshmem" in p or "mpi-cpu" in p for p in problems), problems
        return
    text = program.generate(sched, "nccl")
    # the user's file:line above the code of every op, and a progress mark for each
    for prog in sched.programs:
        for index, op in enumerate(prog.ops):
            assert f"// {op.loc.file}:{op.loc.line}: " in text
        assert f"cw_mark(s, {len(prog.ops)});  // every op enqueued" in text
    assert text.count("static void rank") == sched.world


def test_split_communicators_use_the_schedules_color_and_key():
    sched = trace("protocols/hierarchical_allreduce.py", 4)
    text = program.generate(sched, "nccl")
    for comm in sched.comms:
        name = cuda.ident("comm", comm.name)
        colors = ", ".join("NCCL_SPLIT_NOCOLOR" if c is None else str(c) for c in comm.color)
        assert f"static const int CW_COLOR_{name}[] = {{{colors}}};" in text
        assert f"ncclCommSplit(cw_world_comm, CW_COLOR_{name}[cw_rank], CW_KEY_{name}[cw_rank], &{name}" in text


def test_peers_on_a_split_communicator_are_its_ranks():
    sched = trace("protocols/hierarchical_allreduce.py", 4)
    gen = program.Gen(sched, program.target("nccl"), rank=3)
    for comm in sched.comms:
        members = sched.members(comm.name, 3)
        for i, member in enumerate(members):
            assert gen.comm_rank(comm.name, member) == i


def test_a_recv_that_reduces_lands_in_scratch_then_combines():
    sched = trace("protocols/tree_allreduce.py", 4)
    text = program.generate(sched, "nccl")
    recvs = [op for prog in sched.programs for op in prog.ops
             for m in (op.ops if isinstance(op, ir.Group) else (op,)) if getattr(m, "reduce", None)]
    assert recvs, "tree_allreduce was chosen for its recvs that reduce"
    assert "dst = dst sum received" in text and "what a recv that reduces receives" in text


# ------------------------------------------------------------------------------ golden files
GOLDEN_CASES = [("protocols/ring_allreduce.py", 2, "nccl"), ("protocols/hierarchical_allreduce.py", 4, "nccl"),
                ("protocols/nvshmem_oneshot_allreduce.py", 2, "nvshmem"),
                ("protocols/nvshmem_alltoall_dispatch.py", 2, "nvshmem")]


@pytest.mark.parametrize("path,ranks,backend", GOLDEN_CASES,
                         ids=[f"{Path(p).stem}-{n}-{b}" for p, n, b in GOLDEN_CASES])
def test_generated_code_is_pinned(path, ranks, backend):
    sched = trace(path, ranks)
    text = program.generate(sched, backend)
    golden = GOLDEN / f"{sched.name}_{backend}_{ranks}.cu"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run with CLOCKWORKS_UPDATE_GOLDEN=1 to write it"
    assert text == golden.read_text(), (f"{golden.name} differs from what the generator writes now; if the change "
                                        "is intended, run with CLOCKWORKS_UPDATE_GOLDEN=1 and review the diff")


def test_cli_codegen_writes_one_file_per_schedule(tmp_path):
    from clockworks_dist import cli

    code = cli.main(["codegen", str(ROOT / "protocols" / "ring_allreduce.py"), "--backend", "nccl", "--ranks", "4",
                     "-o", str(tmp_path)])
    assert code == 0
    written = tmp_path / "ring_allreduce_nccl_4.cu"
    assert written.exists() and "static const int CW_WORLD = 4;" in written.read_text()


def test_cli_codegen_names_the_op_and_the_backend_that_can(tmp_path, capsys):
    from clockworks_dist import cli

    code = cli.main(["codegen", str(ROOT / "protocols" / "nvshmem_oneshot_allreduce.py"), "--backend", "nccl",
                     "--ranks", "2", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"nvshmem_oneshot_allreduce\.py:\d+: the nccl-codegen backend cannot run put_signal", err)
    assert "--backend nvshmem" in err
