"""SIGUSR1 as a trigger of :mod:`analyzer.capture.hook`, even when the main thread is stuck in C.

The C-level handler writes the signal number to a wakeup socket (``signal.set_wakeup_fd``);
the watcher thread selects on the other end. A program that uses its own wakeup fd (asyncio)
is left alone: the signal trigger is then off.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

__all__ = ["Wakeup", "current", "setup"]


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Both ends of the wakeup socket, and the signal whose number it carries."""

    reader: socket.socket
    writer: socket.socket
    signum: int

    def wake(self) -> None:
        """Wake the watcher (a byte that is no signal number it waits for)."""
        with contextlib.suppress(Exception):
            self.writer.send(b"\0")

    def sleep(self, seconds: float, stop_wait: Callable[[float], object]) -> bool:
        """Sleep up to ``seconds`` or until woken; True when the signal arrived meanwhile.
        ``stop_wait`` waits instead when the socket fails."""
        got = False
        try:
            ready, _, _ = select.select([self.reader], [], [], seconds)
            if ready:
                data = self.reader.recv(4096)
                got = self.signum in data
        except Exception:  # noqa: BLE001
            stop_wait(min(seconds, 0.1))
        return got


_CURRENT: Wakeup | None = None


def current() -> Wakeup | None:
    """The wakeup socket set up in this process, if any."""
    return _CURRENT


def setup(signum: int, log: Callable[[str], None]) -> Wakeup | None:
    """Make ``signum`` wake the watcher (once per process, from the main thread only)."""
    global _CURRENT
    if _CURRENT is not None or threading.current_thread() is not threading.main_thread():
        return _CURRENT
    try:
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        old = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        if old != -1:  # the program uses its own wakeup fd (asyncio): leave it alone
            signal.set_wakeup_fd(old)
            r.close()
            w.close()
            return None
        prev = signal.getsignal(signum)

        def handler(num: int, frame: FrameType | None) -> None:
            if callable(prev):
                prev(num, frame)

        signal.signal(signum, handler)
        _CURRENT = Wakeup(r, w, signum)
    except Exception as exc:  # noqa: BLE001
        log(f"no signal trigger: {type(exc).__name__}: {exc}")
    return _CURRENT
