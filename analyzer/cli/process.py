"""The ``hangscope`` process among others: the signals a supervisor sends, and standard
streams that are closed or full.

- **Signals.** SIGTERM and SIGHUP unwind the run as Ctrl-C (SIGINT) does: the exception
  :class:`Signalled` goes up through every ``finally`` (the parser processes are ended, the
  batch folder and any file being written are removed) and the process exits with 128 plus
  the signal's number (143, 129, 130). A second signal while unwinding ends the process at
  once with the same code (the parser processes end with it: :mod:`analyzer.load`), and so
  does a run still going :data:`GRACE_S` seconds after the signal. A signal that lands in a
  finalizer (``__del__``, a weakref callback, where Python prints and drops any exception)
  is delivered again a moment later, outside it, and nothing is printed.
- **Streams.** A standard stream that was closed when the process started is opened on
  ``/dev/null``, so that no file the run opens takes its number (and receives what is
  printed). What the run writes to stdout and cannot (closed, a full device) is exit code 6
  with one line on stderr; a pipe whose reader went away (``| head``) is exit code 141 and
  nothing said (:data:`~analyzer.cli.exits.EXIT_PIPE`); stderr that cannot be written
  never changes the exit code (its lines are lost, the verdict is not).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
import threading
import time
import warnings
from types import FrameType

__all__ = [
    "STDOUT_CLOSED",
    "Signalled",
    "drop_stdout",
    "exit_code_of",
    "guard_streams",
    "install_signal_handlers",
    "received",
]

#: The signals that unwind a run, each giving the exit code 128 + its number.
UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_RECEIVED: list[int] = []
#: Whether stdout was closed when the process started (anything written to it fails).
STDOUT_CLOSED = {"closed": False}


class Signalled(KeyboardInterrupt):
    """A signal asked the run to stop: raised in the main thread, unwound as Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: Seconds the run has to unwind after a signal before it is ended anyway: the exception
#: raised by the handler is lost when the signal lands in a finalizer (``__del__``, a weakref
#: callback), where Python ignores exceptions.
GRACE_S = 5.0


def _end_after_grace(code: int) -> None:
    time.sleep(GRACE_S)
    os._exit(code)


#: Signals whose exception a finalizer dropped, to be raised again when delivered again.
_DROPPED: list[int] = []
#: Seconds before a signal whose exception a finalizer dropped is delivered again.
REDELIVER_S = 0.05


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _DROPPED:  # the same signal again, its first exception dropped in a finalizer
        _DROPPED.clear()
        raise Signalled(signum)
    if _RECEIVED:  # a second signal while unwinding: end now
        os._exit(128 + _RECEIVED[0])
    _RECEIVED.append(signum)
    threading.Thread(
        target=_end_after_grace, args=(128 + signum,), name="hangscope-grace", daemon=True
    ).start()
    raise Signalled(signum)


def _redeliver(signum: int) -> None:
    time.sleep(REDELIVER_S)  # the finalizer has returned by then
    signal.raise_signal(signum)  # its Python handler runs in the main thread


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A :class:`Signalled` that a finalizer dropped: say nothing, and deliver the signal
    again from another thread (the handler then raises outside the finalizer). Any other
    exception goes to Python's own hook."""
    exc = unraisable.exc_value
    if isinstance(exc, Signalled) and not _DROPPED:
        _DROPPED.append(exc.signum)
        threading.Thread(
            target=_redeliver, args=(exc.signum,), name="hangscope-redeliver", daemon=True
        ).start()
        return
    if isinstance(exc, Signalled):
        return
    sys.__unraisablehook__(unraisable)


def install_signal_handlers() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind the run (see the module's doc). A signal that was
    ignored when the process started (``nohup``) stays ignored."""
    sys.unraisablehook = _on_unraisable
    for sig in UNWINDING:
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue
            signal.signal(sig, _on_signal)
        except (OSError, ValueError):  # not the main thread, or no such signal here
            continue


def received() -> int | None:
    """The signal that stopped the run, if one did."""
    return _RECEIVED[0] if _RECEIVED else None


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """The exit code of a run stopped by ``exc``: 128 + the signal's number (130: Ctrl-C)."""
    return 128 + getattr(exc, "signum", received() or signal.SIGINT)


class _Closed(io.RawIOBase):
    """A stream that was closed when the process started: every write fails as it would."""

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


class _Forgiving(io.RawIOBase):
    """stderr: what cannot be written (closed, full) is dropped, never raised."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def write(self, b: object) -> int:
        data = memoryview(b)  # type: ignore[arg-type]
        done = 0
        with contextlib.suppress(OSError):
            while done < len(data):  # a pipe may take part of it at a time
                done += os.write(self._fd, data[done:])
        return len(data)


def _text(raw: io.RawIOBase, like: object) -> io.TextIOWrapper:
    encoding = getattr(like, "encoding", None) or "utf-8"
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=encoding, errors="backslashreplace", line_buffering=True
    )


def guard_streams() -> None:
    """Closed standard streams opened on ``/dev/null``; stdout marked closed if it was;
    stderr made forgiving (see the module's doc). Call it first thing."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:  # lowest free number first: each lands on its own
        got = os.open(os.devnull, os.O_RDWR)
        if got != fd:
            os.dup2(got, fd)
            os.close(got)
    if 1 in closed:
        STDOUT_CLOSED["closed"] = True
        sys.stdout = _text(_Closed(), None)
    sys.stderr = _text(_Forgiving(2), sys.stderr)
    warnings.showwarning = _show_warning


def drop_stdout() -> None:
    """stdout failed: what is still buffered for it is dropped, later writes fail at once."""
    STDOUT_CLOSED["closed"] = True
    sys.stdout = _text(_Closed(), None)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """A warning of the library as one line on stderr, like the CLI's own warnings."""
    from analyzer.escape import clean

    sys.stderr.write(f"hangscope: warning: {clean(str(message))}\n")
