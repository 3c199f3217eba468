"""The context file a capture writes beside each rank's dumps: its name, schema and record.

A context file (``hangscope_context_rank_N.json``, schema ``hangscope.context/1``) holds, for
one rank at capture time, every Python thread's stack, the host, pid, local rank, device, time
and versions. The writer (:mod:`analyzer.capture.snapshot`) and the reader
(:mod:`analyzer.load.contexts`) share this module; it uses only the standard library. It is a base module,
not part of :mod:`analyzer.capture`, because importing that package installs a capture when
``HANGSCOPE_CAPTURE_DIR`` is set, and the reader must never do that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTEXT_SCHEMA = "hangscope.context/1"
MAX_THREADS = 512
MAX_FRAMES = 128
MAX_TEXT = 1000
#: The capture's own source files, as frames name them (before and after it became a package).
_OWN_FILES = ("analyzer/capture.py", "analyzer/capture/hook.py")


def context_name(rank: int) -> str:
    return f"hangscope_context_rank_{rank}.json"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    name: str
    main: bool
    frames: tuple[dict[str, Any], ...]  # innermost first: name, filename, line


@dataclass(frozen=True, slots=True)
class RankContext:
    """What one rank's context file says."""

    rank: int
    path: str
    host: str = ""
    pid: int | None = None
    local_rank: int | None = None
    device: str = ""
    time: str = ""
    time_ns: int | None = None
    world_size: int | None = None
    reason: str = ""
    by_rank: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    dumps: tuple[str, ...] = ()  # backends of the flight-recorder files written with it
    threads: tuple[ThreadStack, ...] = ()

    @property
    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)

    def where_now(self) -> tuple[dict[str, Any], ...]:
        """The main thread's stack at capture time, innermost first, without the capture's
        own frames (present when the main thread was reporting an exception)."""
        main = self.main_thread
        if main is None:
            return ()
        frames = list(main.frames)
        own = [i for i, f in enumerate(frames) if str(f["filename"]).endswith(_OWN_FILES)]
        return tuple(frames[own[-1] + 1 :] if own else frames)

    def to_dict(self) -> dict[str, Any]:
        main = self.main_thread
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "local_rank": self.local_rank,
            "device": self.device,
            "time": self.time,
            "reason": self.reason,
            "by_rank": self.by_rank,
            "thread": main.name if main else "",
            "frames": [dict(f) for f in self.where_now()],
            "other_threads": [
                {"name": t.name, "frames": [dict(f) for f in t.frames[:16]]}
                for t in self.threads
                if not t.main
            ],
            "versions": dict(self.versions),
            "dumps": list(self.dumps),
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """A rank the debug server's newest stacks snapshot lists as not answering, though it
    answered an older one, while other ranks answered: its process is gone, frozen, or holds
    the interpreter (a rank that waits in a collective answers)."""

    rank: int
    answered: str
    """The newest snapshot it answered (a file name)."""
    since: str
    """The first snapshot after that one that lists it as not answering (a file name)."""
    error: str = ""
    """How the frontend failed to reach it (``ConnectionError``, ``ReadTimeout``...)."""


__all__ = [
    "CONTEXT_SCHEMA",
    "MAX_FRAMES",
    "MAX_TEXT",
    "MAX_THREADS",
    "NoAnswer",
    "RankContext",
    "ThreadStack",
    "context_name",
]
