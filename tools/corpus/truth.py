"""What happened in a run, read from the ranks' own logs, and the truth of the case.

A run is kept only when its fault fired as designed: every injected rank logged its
``FAULT`` line, no op failed before the fault fired (a timeout caused by load, not by the
fault), every peer of a rank frozen inside a collective entered it before the first failure
(else its dumps show a stall), a hang fault made some op fail and a healthy run made none,
no rank died that was not meant to (except the receiver gloo aborts in a desync), and every
rank that should have written a file did. Otherwise :func:`judge` says why the run is discarded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.corpus.spec import HANG_FAULTS, STALLS, CaseSpec

__all__ = ["RankLog", "expected", "judge", "read_logs"]

_LINE = re.compile(r"^\[rank (\d+) ([0-9.]+)\] (.*)$")
DESYNCS = {
    "op_desync": "op_mismatch",
    "size_desync": "size_mismatch",
    "dtype_desync": "dtype_mismatch",
}


@dataclass
class RankLog:
    rank: int
    faults: list[tuple[float, str]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    dumped: list[str] = field(default_factory=list)
    awaits: bool = False  # a peer of the frozen rank (stuck_in_collective)
    joined: list[float] = field(default_factory=list)  # when it entered the frozen rank's op
    done: bool = False
    last_op: str = ""
    terminated: bool = False  # the process printed a C++ abort (gloo's transport)


def read_logs(log_dir: Path, world: int) -> dict[int, RankLog]:
    logs = {r: RankLog(r) for r in range(world)}
    for r in range(world):
        path = log_dir / f"rank_{r}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            m = _LINE.match(line)
            if not m:
                if "terminate called" in line or "Aborted" in line:
                    logs[r].terminated = True
                continue
            t, msg = float(m.group(2)), m.group(3)
            if msg.startswith("FAULT"):
                logs[r].faults.append((t, msg))
            elif msg.startswith("ERROR"):
                logs[r].errors.append((t, msg))
            elif msg.startswith("DUMPED"):
                logs[r].dumped.append(msg.split()[1])
            elif msg.startswith("AWAITS"):
                logs[r].awaits = True
            elif msg.startswith("JOINS"):
                logs[r].joined.append(t)
            elif msg == "BODY DONE":
                logs[r].done = True
            elif msg.startswith("OP "):
                logs[r].last_op = msg[3:]
    return logs


def judge(spec: CaseSpec, logs: dict[int, RankLog], died: set[int], dumped: set[int]) -> str | None:
    """Why this run is discarded, or None when its fault fired as designed."""
    f = spec.fault
    hang = f.kind in HANG_FAULTS
    errors = sorted(t for log in logs.values() for t, _ in log.errors)
    if not hang:
        if errors:
            return f"an op failed in a run without a hang ({len(errors)} errors)"
        if not all(log.done for log in logs.values()):
            return "a healthy run did not finish on every rank"
        if dumped != set(range(spec.world)):
            return f"a healthy run dumped only ranks {sorted(dumped)}"
        return None
    fired = [t for r in f.ranks for t, _ in logs[r].faults]
    if any(not logs[r].faults for r in f.ranks):
        first = min(((t, r, m) for r, log in logs.items() for t, m in log.errors), default=None)
        seen = f"; first failure: rank {first[1]} {first[2][:120]}" if first else ""
        return f"the fault did not fire on ranks {[r for r in f.ranks if not logs[r].faults]}{seen}"
    if f.kind == "stuck_in_collective" and not logs[f.ranks[0]].dumped:
        return "the frozen rank wrote no buffer"
    t_fire = min(fired)
    if not errors:
        return "no op failed: the job did not hang"
    if errors[0] < t_fire:
        return "an op failed before the fault fired (load, not the fault)"
    if f.kind == "stuck_in_collective":
        late = sorted(
            r
            for r, log in logs.items()
            if log.awaits and not any(t < errors[0] for t in log.joined)
        )
        if late:  # the dumps would show them never entering it: a stall, not the design
            return f"ranks {late} had not entered the frozen rank's op when the first op failed"
    crashed = set(f.ranks) if _crashes(spec) else set()
    unplanned = died - crashed
    if unplanned and f.kind not in DESYNCS:
        return f"ranks {sorted(unplanned)} died without being meant to"
    want = _dumpers(spec, logs, died)
    if not want <= dumped:
        return f"ranks {sorted(want - dumped)} should have dumped and did not"
    if not dumped:
        return "no rank dumped"
    return None


def _crashes(spec: CaseSpec) -> bool:
    f = spec.fault
    return f.kind in ("crash_exit", "crash_sigkill") or (
        f.kind == "two_faults" and f.variant == "crash"
    )


def _dumpers(spec: CaseSpec, logs: dict[int, RankLog], died: set[int]) -> set[int]:
    if spec.policy == "timed_out":
        return {r for r, log in logs.items() if log.errors and r not in died}
    return set(range(spec.world)) - died


def expected(spec: CaseSpec, dumped: set[int], died: set[int]) -> dict[str, Any]:
    """The truth by construction: culprits, the kinds a right answer may give, hang or not."""
    f = spec.fault
    if f.kind not in HANG_FAULTS:
        return {"hang": False, "culprits": [], "kinds": ["no_hang"]}
    culprits = sorted(f.ranks)
    if f.kind in DESYNCS:
        kinds = [DESYNCS[f.kind]]
    elif f.kind in ("group_order_deadlock", "p2p_deadlock"):
        kinds = ["deadlock"]
    elif f.kind == "stuck_in_collective":
        kinds = ["stuck_in_collective"]
    else:  # stalls, crashes, two faults: a rank without a file is a missing dump
        kinds = sorted({"not_joined" if r in dumped else "missing_dump" for r in culprits})
    if set(culprits) - dumped:  # an injected rank without a file: that is all the files say
        kinds = sorted({*kinds, "missing_dump"})
    if f.kind in STALLS or f.kind in ("crash_exit", "crash_sigkill"):
        assert len(culprits) == 1
    return {"hang": True, "culprits": culprits, "kinds": kinds}
