"""C++ text for generated programs: what may reach the compiler, and how.

Identifiers come only from names that `ir.name_problem` accepts (ASCII letters, digits and '_', no
keyword of C, C++, CUDA or Python, checked when a schedule is traced or loaded); `ident` checks
again and prefixes each with its kind (`b_` buffers, `s_` signals, `c_` communicators, `k_`
compute kernels), so no name can collide with a name of the program, a library or a macro. Every
other string of the user's (file names in comments and in the hang report, op descriptions) goes
through `comment` (comments) or `literal` (string literals): printable ASCII only, everything else
escaped or replaced, so nothing can close a comment, splice a line or end a string early.
"""

from __future__ import annotations

from .. import ir

PREFIX = {"buffer": "b_", "signal": "s_", "comm": "c_", "kernel": "k_", "rank": "rank"}

C_TYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
          "int32": "int32_t", "int64": "int64_t", "uint32": "uint32_t", "uint64": "uint64_t"}
# The program's dtype codes (`CW_F16` ...), shared with the expectation file's itemsize.
DTYPE_CODE = {"float16": "CW_F16", "bfloat16": "CW_BF16", "float32": "CW_F32", "float64": "CW_F64",
              "int32": "CW_I32", "int64": "CW_I64", "uint32": "CW_U32", "uint64": "CW_U64"}
REDUCE_CODE = {"sum": "CW_SUM", "prod": "CW_PROD", "max": "CW_MAX", "min": "CW_MIN"}
# Generated comments are `//` comments, which end only at a newline: what could end one early is a
# newline or a backslash before it (a line splice); '?' goes too (no trigraph can form).
_SAFE_COMMENT = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:;=+*/()[]<>{}'\"!#%&|^~@$`")


class UnsafeName(ValueError):
    """A name that must not reach generated C++."""


def ident(kind: str, name: str) -> str:
    """The C++ identifier of schedule name `name` of `kind` (buffer, signal, comm, kernel)."""
    problem = ir.name_problem(name)
    if problem is not None:
        raise UnsafeName(f"{kind} name {name!r} cannot appear in generated code: {problem}")
    return PREFIX[kind] + name


def comment(text: str) -> str:
    """`text` made safe inside a `//` comment: printable ASCII without backslash or '?', anything
    else as '_'."""
    return "".join(ch if ch in _SAFE_COMMENT else "_" for ch in str(text))


def literal(text: str) -> str:
    """A C string literal holding `text` exactly (UTF-8), every byte outside printable ASCII, and
    '"', '\\' and '?', as a three-digit octal escape (an octal escape never runs into the next
    character, unlike a hex one)."""
    out = []
    for byte in str(text).encode("utf-8"):
        ch = chr(byte)
        if 32 <= byte < 127 and ch not in '"\\?':
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def u64(value: int) -> str:
    """A uint64 constant."""
    return f"{int(value) % (1 << 64)}ULL"


def region_comment(region: ir.Region) -> str:
    return comment(str(region))
