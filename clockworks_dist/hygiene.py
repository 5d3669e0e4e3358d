"""What every command that writes files or starts processes shares: output folders that are folders
(and stay the only place written), paths safe to hand to a shell, bounds on what a command starts,
and signals that end the whole process tree.

- `prepare_out_dir(path, option)`: create the output folder or say why it cannot be one (exit 2,
  naming the option and the path); refuse a folder that holds a symlink (a write through it would
  land outside the folder).
- `inside(out_dir, path, option)`: `path` resolves inside `out_dir`, else exit 2.
- `shell_safe(text)`, `SHELL_SAFE`: a path that a shell reads as one word, as it is (no quoting
  needed); nvcc runs its own steps through a shell, so nothing else may reach it.
- `on_signals()`: inside the block SIGTERM and SIGHUP raise `KeyboardInterrupt` as Ctrl-C does, so
  every `finally` that stops a process group or removes a temporary folder runs; `exit_code()` is
  then 128 + the signal's number.
- `MAX_RANKS`, `max_local_ranks()`: the ranks a command starts or generates without
  `--max-ranks`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator

from .errors import ClockworksError

# A word a POSIX shell reads as itself: no quoting, expansion, globbing or word splitting.
SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,:=@%-]+")
# Ranks that codegen, build and validate generate programs for, without --max-ranks: the largest
# single job the generated programs are tested at is far below; past it a trace takes minutes and
# the generated file tens of MB.
MAX_RANKS = 128
# Ranks `clockworks run` starts on this machine (mpi-cpu: one process each), without --max-ranks:
# this many per available core, and never fewer than MIN_LOCAL_RANKS.
RANKS_PER_CORE = 4
MIN_LOCAL_RANKS = 16
# The largest generated source file (bytes) codegen writes.
MAX_SOURCE_BYTES = 32 * 1024 * 1024
# Entries of an output folder looked at for symlinks (a folder larger than this is not looked at
# further: the writes themselves refuse symlinks where they are made with `open_new`).
SCAN_LIMIT = 20_000


class OutputPathError(ClockworksError):
    """An output folder that cannot be one, or that would send a write outside itself."""


def shell_safe(text: str) -> bool:
    return bool(SHELL_SAFE.fullmatch(text))


def max_local_ranks() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(MIN_LOCAL_RANKS, RANKS_PER_CORE * cores)


def check_ranks(world: int, limit: int | None, what: str) -> None:
    """`world` ranks within `limit` (None: no bound), else exit 2 saying how to raise it."""
    if limit is not None and world > limit:
        raise ClockworksError(f"{what} at {world} ranks: more than the {limit} this command allows by default "
                              f"(raise the bound with --max-ranks {world} if you mean it)")


def _describe(path: str) -> str:
    return repr(path) if path == "" or not path.isprintable() else path


def check_out_dir(path: str, option: str) -> None:
    """Exit 2 now if `path` cannot be an output folder (it is not created: `prepare_out_dir`)."""
    shown = _describe(path)
    if path == "":
        raise OutputPathError(f"{option} '': the output folder's name is empty (name a folder, e.g. {option} out)")
    if "\0" in path:
        raise OutputPathError(f"{option} {shown}: a folder name cannot hold a NUL byte")
    if os.path.islink(path) and not os.path.exists(path):
        raise OutputPathError(f"{option} {shown}: is a symlink that leads nowhere (a loop, or a missing target); "
                              "name a folder")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutputPathError(f"{option} {shown}: exists and is not a folder (a file or a device); name a folder "
                              "to write into")
    if os.path.isdir(path):
        refuse_symlinks(path, option)
        return
    if any(len(os.fsencode(part)) > 255 for part in path.split(os.sep)):
        raise OutputPathError(f"{option} {shown[:80]}...: cannot create the folder (the name is too long); name a "
                              "shorter folder")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise OutputPathError(f"{option} {shown}: cannot create the folder ({_describe(parent)} is not a folder)")
    if not os.access(parent, os.W_OK | os.X_OK) or parent == "/proc" or parent.startswith("/proc/"):
        raise OutputPathError(f"{option} {shown}: cannot create the folder in {_describe(parent)} (not writable); "
                              "name a folder you can write")


def prepare_out_dir(path: str, option: str) -> str:
    """Create the output folder `path` (given as `option`) and return it; exit 2 (`OutputPathError`)
    if it cannot be a folder or holds a symlink."""
    shown = _describe(path)
    check_out_dir(path, option)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENAMETOOLONG:
            reason = "the name is too long"
            shown = shown[:80] + "..."
        raise OutputPathError(f"{option} {shown}: cannot create the folder ({reason}); name a folder you can "
                              "write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputPathError(f"{option} {shown}: the folder cannot be written (permission denied)")
    refuse_symlinks(path, option)
    return path


def refuse_symlinks(path: str, option: str) -> None:
    """Exit 2 if the folder `path` holds a symlink (at any depth): clockworks writes only inside its
    output folder, and a write through a link would land wherever the link points."""
    seen = 0
    for root, dirs, files in os.walk(path):
        entries = dirs + files
        # build's own link folders (`codegen.build.link_dir_for`: links to the NVSHMEM libraries, kept
        # after a failed build) are removed and made again by each build: not looked into
        dirs[:] = [name for name in dirs if not (name.startswith(".") and name.endswith(".link"))]
        for name in entries:
            seen += 1
            full = os.path.join(root, name)
            if os.path.islink(full):
                raise OutputPathError(f"{option} {_describe(path)}: holds a symlink, {_describe(full)}; clockworks "
                                      "does not write through symlinks in its output folder (remove the link, or "
                                      "choose another folder)")
            if seen > SCAN_LIMIT:
                return


def inside(out_dir: str, path: str, option: str) -> str:
    """`path`, checked to resolve inside `out_dir` (no symlink sends it elsewhere)."""
    root = os.path.realpath(out_dir)
    where = os.path.realpath(path)
    if os.path.commonpath([root, where]) != root:
        raise OutputPathError(f"{option} {_describe(out_dir)}: writing {_describe(path)} would land outside the "
                              f"folder (at {_describe(where)}): remove the symlink")
    return path


def write_new(out_dir: str, path: str, text: str, option: str) -> None:
    """Write `text` to `path` inside `out_dir`, never through a symlink (the file itself or a folder
    on the way)."""
    inside(out_dir, os.path.dirname(path) or ".", option)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputPathError(f"{option} {_describe(out_dir)}: {_describe(path)} is a symlink; clockworks does "
                                  "not write through symlinks (remove it)") from None
        raise OutputPathError(f"{option} {_describe(out_dir)}: cannot write {_describe(path)} "
                              f"({exc.strerror or exc})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


# ------------------------------------------------------------------------------------- signals
_received: list[int] = []
ENDING_SIGNALS = ("SIGTERM", "SIGHUP")


def received() -> int | None:
    """The signal (SIGTERM, SIGHUP) that ended the command, if one did."""
    return _received[0] if _received else None


def exit_code(interrupted: int) -> int:
    """The exit code of a command a signal ended: 128 + its number (`interrupted` for Ctrl-C)."""
    return 128 + _received[0] if _received else interrupted


@contextlib.contextmanager
def on_signals(received_one: Callable[[], None] = lambda: None) -> Iterator[None]:
    """SIGTERM and SIGHUP end the block as Ctrl-C does (`KeyboardInterrupt`, a real one for
    `dsl.guard.interrupted`), once: a second signal during the clean-up is ignored, so the clean-up
    (stopping process groups, removing temporary folders) finishes. Main thread only; a signal that
    is ignored when the block starts (nohup) stays ignored. `received_one()` runs first when one
    arrives (the command marks the interrupt real for `dsl.guard.interrupted`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {}

    def on_signal(signum, frame):
        if _received:
            return
        _received.append(signum)
        received_one()
        kill_tracked()
        raise KeyboardInterrupt

    interrupt = signal.getsignal(signal.SIGINT)
    if callable(interrupt):  # Ctrl-C (dsl.guard's handler, or Python's): our process groups go first
        def on_interrupt(signum, frame):
            kill_tracked()
            interrupt(signum, frame)

        previous[signal.SIGINT] = interrupt
        signal.signal(signal.SIGINT, on_interrupt)

    for name in ENDING_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue
        current = signal.getsignal(number)
        if current is signal.SIG_IGN:
            continue
        previous[number] = current
        signal.signal(number, on_signal)
    try:
        yield
    finally:
        kill_tracked()
        for number, handler in previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)


# ---------------------------------------------------------------------------------- --param
def check_params(args) -> None:
    """--param NAME=VALUE given twice for one NAME, or with a schedule loaded from JSON (traced
    already: its parameters are fixed), is exit 2 naming the parameter."""
    given = list(getattr(args, "param", None) or ())
    if not given:
        return
    seen: dict[str, str] = {}
    for name, value in given:
        if name in seen:
            raise ClockworksError(f"--param {name} is given twice ({name}={seen[name]} and {name}={value}): give each "
                                  "parameter once")
        seen[name] = value
    path = getattr(args, "file", None)
    if isinstance(path, str) and path.endswith(".json"):
        raise ClockworksError(f"--param {given[0][0]}: {path} is a schedule loaded from JSON, traced with its "
                              "parameters already bound; --param applies to a Python file (trace it again with "
                              "the parameter instead)")


# ---------------------------------------------------------------------------- process groups
_groups: set[int] = set()
_groups_lock = threading.Lock()


def track(pgid: int) -> None:
    """A process group this process started (a session of its own) and must not outlive it: it is
    killed when a signal ends the command (`on_signals`), whichever thread waits on it."""
    with _groups_lock:
        _groups.add(pgid)


def untrack(pgid: int) -> None:
    with _groups_lock:
        _groups.discard(pgid)


def kill_tracked() -> None:
    """SIGKILL every tracked process group (each was started by us, with its own id)."""
    with _groups_lock:
        groups = list(_groups)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
