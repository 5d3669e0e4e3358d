"""Guards around the user's code. A schedule file is Python we run: it must not pick the verdict
(`sys.exit(0)`), write into our output (`print` under `--json`), or run past `--timeout`.

- `describe(exc)`: what an exception escaping the user's code did, in words ("called sys.exit(0)").
- `user_line(tb, path)`, `user_where(...)`: the user's line in a traceback.
- `TimeUp`, `time_bound(seconds)`: raise `TimeUp` in the main thread once the bound has passed.
- `catch_sigint()`, `interrupted()`: tell a real Ctrl-C from a `KeyboardInterrupt` the user's code raises.
- `user_code()`: while the user's code runs, its output goes to stderr and `os._exit` cannot end us.
- `end_process(code, ...)`: the last resort of a time bound the user's code defeats.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType

# A TimeUp the user's code swallows is raised again this often, until the block ends.
REFIRE_S = 0.5
# Bounds longer than this arm no timer (no run lasts months; setitimer overflows near 1e12 s).
LONGEST_S = 1e7
# The timer needs a positive delay: 0 would disarm it.
SHORTEST_S = 1e-3
# The longest message we quote from the user's exception.
QUOTE_CHARS = 300

_interrupted = False
# Captured before any user code runs: `user_code()` replaces os._exit while it does.
_exit_now = os._exit
# While `user_code()` redirects file descriptor 1, a copy of the real stdout.
_real_stdout: int | None = None


class TimeUp(BaseException):
    """The time bound passed. A BaseException, so a schedule's `except Exception:` does not catch
    it; `where` is the user's file:line and `rank` the rank being traced, when known."""

    def __init__(self, seconds: float):
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds
        self.where: str | None = None
        self.rank: int | None = None


class OsExitCalled(BaseException):
    """The user's code called `os._exit(code)`; raised instead of ending the process."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def describe(exc: BaseException, when: str = "") -> str:
    """What an exception escaping the user's code did: "called sys.exit(0)", "raised KeyError: 'x'";
    `when` (" while loading") goes before the exception's message."""
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else _quote(repr, exc.code)
        return f"called sys.exit({code}){when}"
    if isinstance(exc, OsExitCalled):
        return f"called os._exit({_quote(repr, exc.code)}){when}"
    text = _quote(str, exc)
    return f"raised {type(exc).__name__}{when}" + (f": {text}" if text else "")


def _quote(show: Callable[[object], str], value: object) -> str:
    """`show(value)`, shortened; the user's `__str__` may itself raise."""
    try:
        text = show(value)
    except BaseException as exc:  # noqa: BLE001 (the user's __str__ or __repr__ is broken; say so)
        if not is_user_error(exc):
            raise
        return "<the exception cannot be printed>"
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


def user_line(tb: TracebackType | None, path: str) -> int | None:
    """The innermost line of file `path` in traceback `tb` (None if the file is not in it)."""
    target = os.path.abspath(path)
    line = None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def user_where(tb: TracebackType | None, path: str, package_dir: str, fallback) -> tuple[str, int]:
    """(file name, line) to blame in traceback `tb`: the innermost line of the user's file `path`,
    else the innermost frame outside `package_dir` (a module the user's file imports), else
    `fallback` (a SourceLoc)."""
    line = user_line(tb, path)
    if line is not None:
        return os.path.basename(path), line
    where = fallback.file, fallback.line
    while tb is not None:
        frame_path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not frame_path.startswith(package_dir):
            where = os.path.basename(frame_path), tb.tb_lineno
        tb = tb.tb_next
    return where


def raised_by_user(exc: BaseException, package_dir: str) -> bool:
    """Whether the innermost frame of `exc` is outside `package_dir`: the user's own `raise` (of
    one of our error classes, say), not ours."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package_dir)


def is_user_error(exc: BaseException) -> bool:
    """Whether an exception escaping the user's code is the user's to fix: everything but our time
    bound and a real Ctrl-C."""
    if isinstance(exc, TimeUp):
        return False
    return not (isinstance(exc, KeyboardInterrupt) and interrupted())


# ------------------------------------------------------------------------------- time bound
def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextlib.contextmanager
def time_bound(seconds: float | None, on_stuck: Callable[[], None] | None = None,
               grace: float = 5.0) -> Iterator[None]:
    """Raise `TimeUp` in the block once `seconds` have passed (None: no bound), and again every
    `REFIRE_S` while the block goes on. If the block still runs `grace` seconds after the bound
    (code that swallows every `TimeUp`, or C code that never returns to Python), `on_stuck` is
    called from another thread; it is expected to end the process.

    The timer is SIGALRM, so it works in the main thread only; elsewhere the block is unbounded."""
    if seconds is None or seconds > LONGEST_S or not _in_main_thread():
        yield
        return
    active = True
    fired = False

    def on_alarm(signum, frame):
        nonlocal fired
        if active:
            fired = True
            raise TimeUp(seconds)

    # The alarm can land in a finalizer (`__del__`, a weakref callback), where Python prints the
    # exception as "Exception ignored in ..." with a traceback and drops it. Keep that quiet: the
    # block ends with TimeUp anyway (below), once the bound has passed.
    previous_hook = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, TimeUp):
            previous_hook(unraisable)

    sys.unraisablehook = hook
    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    earlier, _ = signal.setitimer(signal.ITIMER_REAL, max(seconds, SHORTEST_S), REFIRE_S)
    watchdog = None
    if on_stuck is not None:
        watchdog = threading.Timer(max(seconds, 0.0) + grace, on_stuck)
        watchdog.daemon = True
        watchdog.start()
    try:
        yield
        if fired:  # the bound passed, but its TimeUp was dropped (in a finalizer): raise it now
            raise TimeUp(seconds)
    finally:
        try:
            active = False
        finally:  # even if the alarm fired on the line above
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            sys.unraisablehook = previous_hook
            if earlier:  # someone else's timer (pytest-timeout, say) was running: put it back
                signal.setitimer(signal.ITIMER_REAL, max(earlier - (time.monotonic() - started), SHORTEST_S))
            if watchdog is not None:
                watchdog.cancel()


# --------------------------------------------------------------------------------- Ctrl-C
def mark_interrupted() -> None:
    """A signal that ends the command arrived (SIGTERM, SIGHUP): `interrupted()` is True, as for a
    real Ctrl-C."""
    global _interrupted
    _interrupted = True


def interrupted() -> bool:
    """Whether a real Ctrl-C (SIGINT) arrived inside `catch_sigint()`."""
    return _interrupted


@contextlib.contextmanager
def catch_sigint() -> Iterator[None]:
    """Inside the block a Ctrl-C raises KeyboardInterrupt as usual, and `interrupted()` says it
    was a real one. Where SIGINT is ignored (a background job) it stays ignored."""
    global _interrupted
    _interrupted = False
    if not _in_main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_sigint(signum, frame):
        global _interrupted
        _interrupted = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main_thread_line(package_dir: str) -> str | None:
    """file:line where the main thread runs code outside `package_dir` now (from another thread)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(package_dir):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def end_process(code: int, err: str, out: str | None = None) -> None:
    """End the process now, from any thread, without running the user's exit handlers: write `err`
    to stderr and `out` (if any) to the real stdout, even inside `user_code()`."""
    for fd, text in ((2, err), (_real_stdout if _real_stdout is not None else 1, out)):
        if text:
            with contextlib.suppress(OSError):
                os.write(fd, text.encode("utf-8", "backslashreplace"))
    _exit_now(code)


# ---------------------------------------------------------------------------- user's code
@contextlib.contextmanager
def user_code() -> Iterator[None]:
    """While the user's code runs: what it writes to stdout (print, sys.stdout, file descriptor 1)
    goes to stderr, so it cannot corrupt our output; `os._exit` raises `OsExitCalled`; exit handlers
    it registers (`atexit.register`, also by modules it imports first) are dropped; and the streams
    and recursion limit it may have replaced are put back afterwards."""
    saved_streams = sys.stdout, sys.stderr
    saved_limit = sys.getrecursionlimit()
    saved_exit, saved_register = os._exit, atexit.register
    global _real_stdout
    _flush(sys.stdout)
    _flush(sys.__stdout__)  # what was written before goes where it was meant to
    saved_fd = _redirect_fd(1, 2)
    _real_stdout = saved_fd
    sys.stdout = sys.stderr

    def no_exit(code):
        raise OsExitCalled(code)

    def no_register(func, *args, **kwargs):  # the handler would run after our output, and could exit
        return func

    os._exit, atexit.register = no_exit, no_register
    try:
        yield
    finally:
        os._exit, atexit.register = saved_exit, saved_register
        sys.setrecursionlimit(saved_limit)
        _flush(sys.stdout)
        _flush(sys.__stdout__)  # the user may have written to it directly: that goes to stderr too
        sys.stdout, sys.stderr = saved_streams
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            _real_stdout = None
            os.close(saved_fd)


def _redirect_fd(fd: int, to: int) -> int | None:
    """Point `fd` at `to`; return a copy of the old `fd` to restore, or None where that fails (a
    closed descriptor)."""
    try:
        saved = os.dup(fd)
    except OSError:
        return None
    try:
        os.dup2(to, fd)
    except OSError:
        os.close(saved)
        return None
    return saved


def _flush(stream) -> None:
    """Flush a stream we do not own; what the user printed may be lost, but never our run."""
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):  # a closed pipe, a full disk, a closed file
        pass


__all__ = ["OsExitCalled", "TimeUp", "catch_sigint", "describe", "end_process", "interrupted", "main_thread_line",
           "raised_by_user", "is_user_error", "time_bound", "user_code", "user_line", "user_where"]
