"""Whether a process catches a signal, read from ``/proc/PID/status`` (``SigCgt``).

``hangscope capture --signal`` sends SIGUSR1, whose default action ends a process: a PID
without analyzer.capture.hook (the torchrun agent, a rank started without it) would die.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["catches"]


def catches(pid: int, signum: int, proc: Path = Path("/proc")) -> bool | None:
    """True when process ``pid`` has a handler for ``signum``, False when it has none, None
    when this cannot be told (no such process readable, or no ``/proc``)."""
    try:
        status = (proc / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            try:
                mask = int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
            return bool(mask >> (signum - 1) & 1)
    return None
