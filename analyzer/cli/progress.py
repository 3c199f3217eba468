"""Progress on stderr where the time goes: reading the dumps (files, entries, rate), then the
phases after it (analyzing the entries, building the report, writing), each with its counts
and the time so far.

On a terminal only, never with ``--quiet``; nothing for a run that ends within a second; one
line rewritten in place (cleared to its end, so no tail of a longer line is left) and erased
before the command prints anything, so that the verdict is the first line on the screen."""

from __future__ import annotations

import os
import sys
import threading
import time

__all__ = ["ProgressPrinter", "erase_progress", "progress_phase"]


def _quiet_for() -> float:
    """Seconds before anything is shown (``$HANGSCOPE_PROGRESS_AFTER``, default 1)."""
    try:
        return max(0.0, float(os.environ.get("HANGSCOPE_PROGRESS_AFTER", "1")))
    except ValueError:
        return 1.0


#: Seconds between two refreshes of a phase that reports nothing itself.
TICK = 0.5

_CLEAR = "\r\x1b[K"


class ProgressPrinter:
    """The progress line of one run: ``printer(done, total, entries)`` as files are read,
    :meth:`phase` for what follows, :meth:`erase` before output."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and _terminal()
        self.quiet_for = _quiet_for()
        self.start = time.monotonic()
        self.last = 0.0
        self.text = ""
        self.shown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled:
            _CURRENT[0] = self

    def __call__(self, done: int, total: int, entries: int) -> None:
        """Files read so far."""
        if not self.enabled:
            return
        now = time.monotonic()
        if done != total and now - self.last < 0.25:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        self.text = (
            f"reading dumps: {done}/{total} files, {entries:,} entries, "
            f"{entries / elapsed:,.0f} entries/s"
        )
        self._show(timed=False)
        if done == total:
            self.phase(f"analyzing {entries:,} entries of {total:,} files")

    def phase(self, text: str) -> None:
        """A phase that reports nothing while it runs: shown with the time so far, refreshed."""
        if not self.enabled:
            return
        self.text = text
        self._show(timed=True)
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            self._show(timed=True)

    def _show(self, *, timed: bool) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            elapsed = time.monotonic() - self.start
            if elapsed < self.quiet_for:
                return
            line = f"{self.text}… {elapsed:.0f} s" if timed and self.text else self.text
            try:
                sys.stderr.write(_CLEAR + line)
                sys.stderr.flush()
                self.shown = True
            except (OSError, ValueError):  # stderr gone: progress is not worth an error
                self._stop.set()

    def erase(self) -> None:
        """Stop and erase the line (nothing when none was shown)."""
        with self._lock:
            self._stop.set()
            if self.shown:
                try:
                    sys.stderr.write(_CLEAR)
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                self.shown = False
        if _CURRENT[0] is self:
            _CURRENT[0] = None


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


#: The progress line of the run in progress (None: none shown).
_CURRENT: list[ProgressPrinter | None] = [None]


def progress_phase(text: str) -> None:
    """The run's progress line, if any, now shows ``text`` (``building the report``)."""
    current = _CURRENT[0]
    if current is not None:
        current.phase(text)


def erase_progress() -> None:
    """Erase the run's progress line, if any: output follows."""
    current = _CURRENT[0]
    if current is not None:
        current.erase()
