"""Where each rank is now, from torch 2.15's debug server's ``stacks_<ts>.txt`` snapshots.

Each rank's threads come from the newest stacks file it answered; a rank that a newer
snapshot of any kind lists as not answering (``PARTIAL DATA``) has none, since its threads
from before are no sign of life now (it crashed after them).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.context_file import MAX_FRAMES, MAX_THREADS, NoAnswer, RankContext, ThreadStack
from analyzer.load.debug_server import Snapshot, read_text, snapshots

__all__ = ["StacksRead", "read_stacks"]

_STACK_HEAD = re.compile(
    r"^=== Rank (\d{1,7}): (?:https?://(\[[0-9a-fA-F:.]{1,64}\]|[\w.-]{1,255}))?[^\n]{0,2000} ===$",
    re.M,
)
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]{1,16})[^\n]*:$", re.M)
_FRAME = re.compile(r'^\s+File "([^"\n]{0,1000})", line (\d{1,9}) in ([^\n]{0,200})$', re.M)


def _threads(text: str) -> tuple[ThreadStack, ...]:
    """faulthandler's all-thread dump: the thread whose outermost frame is ``<module>`` is
    the main one; the request's own thread (``Current thread``, no frame) is left out."""
    heads = list(_THREAD.finditer(text))
    out: list[ThreadStack] = []
    for i, h in enumerate(heads[:MAX_THREADS]):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        frames = tuple(
            {"name": m.group(3).strip(), "filename": m.group(1), "line": int(m.group(2))}
            for m in list(_FRAME.finditer(text, h.end(), end))[:MAX_FRAMES]
        )
        if h.group(1) == "Current thread" and not frames:
            continue
        main = any(f["name"] == "<module>" for f in frames)
        out.append(ThreadStack(name=h.group(2), main=main, frames=frames))
    if out and not any(t.main for t in out):  # no script frame: the longest stack
        longest = max(range(len(out)), key=lambda i: len(out[i].frames))
        out[longest] = ThreadStack(out[longest].name, True, out[longest].frames)
    mains = [i for i, t in enumerate(out) if t.main]
    for i in mains[1:]:  # one main thread
        out[i] = ThreadStack(out[i].name, False, out[i].frames)
    return tuple(out)


@dataclass(frozen=True)
class StacksRead:
    """What the debug server's stacks snapshots say of each rank, read once."""

    where: dict[int, RankContext] = field(default_factory=dict)
    """Each rank's threads from the newest snapshot it answered, where it is now."""
    no_answer: dict[int, NoAnswer] = field(default_factory=dict)
    """Ranks that stopped answering (see :func:`read_stacks`)."""


def read_stacks(
    inputs: Sequence[str | os.PathLike[str]],
    extra_dirs: Iterable[Path] = (),
    *,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> StacksRead:
    """The ``stacks_<ts>.txt`` snapshots among ``inputs`` and ``extra_dirs`` (the folders of
    the dumps), each read once.

    ``where``: each rank's threads in the newest snapshot where it answered, as context
    records. A rank that a newer snapshot of any kind (a health check, say) says did not
    answer gets none: its threads from before do not show it alive now.

    ``no_answer``: the ranks the newest snapshot of any kind lists as not answering, though
    an older stacks snapshot holds their threads, where some rank answered it: their process
    ended, froze or holds the interpreter since (a rank that waits in a collective answers).
    """
    every = snapshots([*inputs, *extra_dirs], None)
    snaps = [s for s in every if s.kind == "stacks"]
    if not snaps:
        return StacksRead()
    out: dict[int, RankContext] = {}
    answered: dict[int, Snapshot] = {}  # the newest snapshot each rank answered
    silent: set[int] = set()
    for snap in reversed(snaps[-_MAX_SNAPSHOTS:]):
        try:
            text = read_text(snap.path, config.max_context_bytes)
        except OSError:
            continue
        reason = f"debug server {snap.path.name}" + (f": {snap.partial}" if snap.partial else "")
        for rank, host, threads in _rank_threads(text, config.max_rank):
            if not threads:
                if rank not in answered:
                    silent.add(rank)  # it did not answer: an older answer is no sign of life
                continue
            if rank in answered:
                continue
            answered[rank] = snap
            if rank not in silent:
                out[rank] = RankContext(
                    rank=rank,
                    path=str(snap.path),
                    host=host,
                    time=snap.time,
                    reason=reason,
                    threads=threads,
                )
    later = _no_answers(every, config)
    where = {
        r: c
        for r, c in out.items()
        if not any(snap.stamp > answered[r].stamp and r in ranks for snap, ranks in later)
    }
    return StacksRead(where, _stopped(every[-1], answered, later))


def _stopped(
    newest: Snapshot,
    answered: dict[int, Snapshot],
    later: list[tuple[Snapshot, dict[int, str]]],
) -> dict[int, NoAnswer]:
    """Ranks ``newest`` (a snapshot of any kind) lists as not answering, with the newest
    stacks snapshot each answered and the first after it that lists it, where some rank
    answered ``newest`` (where none did, it is the frontend's trouble, not a rank's)."""
    if not newest.responded:
        return {}
    listed = next((ranks for snap, ranks in later if snap is newest), {})
    out: dict[int, NoAnswer] = {}
    for r in sorted(set(listed) & set(answered)):
        last = answered[r]
        first = min(
            (snap for snap, ranks in later if r in ranks and snap.stamp > last.stamp),
            key=lambda snap: (snap.stamp, snap.path.name),
            default=None,
        )
        if first is not None:
            out[r] = NoAnswer(r, last.path.name, first.path.name, listed[r])
    return out


def _rank_threads(text: str, max_rank: int) -> Iterator[tuple[int, str, tuple[ThreadStack, ...]]]:
    """(rank, host, threads) of each rank section of a stacks snapshot; no threads where the
    worker did not answer (``Error: ...``)."""
    heads = list(_STACK_HEAD.finditer(text))
    for i, h in enumerate(heads[:max_rank]):
        rank = int(h.group(1))
        if rank >= max_rank:
            continue
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[h.end() : end]
        threads = () if body.lstrip().startswith("Error:") else _threads(body)
        yield rank, h.group(2) or "", threads


#: The newest snapshots of each kind read (each file is read whole, up to its cap).
_MAX_SNAPSHOTS = 64
#: ``  Rank 1: ConnectionError: ...``: a worker that did not answer, under ``PARTIAL DATA``.
_NO_ANSWER = re.compile(r"^\s+Rank (\d{1,7}): (\w{1,60})?", re.M)


def _no_answers(
    every: Sequence[Snapshot], config: AnalysisConfig
) -> list[tuple[Snapshot, dict[int, str]]]:
    """(snapshot, ranks) of each partial snapshot of ``every`` (the newest
    :data:`_MAX_SNAPSHOTS` of each kind): the ranks its ``PARTIAL DATA`` header says did not
    answer, each with the error's name."""
    by_kind: dict[str, list[Snapshot]] = defaultdict(list)
    for s in every:
        by_kind[s.kind].append(s)
    out: list[tuple[Snapshot, dict[int, str]]] = []
    for snap in (s for same in by_kind.values() for s in same[-_MAX_SNAPSHOTS:]):
        if not snap.partial:
            continue
        try:
            text = read_text(snap.path, min(config.max_context_bytes, 1 << 20))
        except OSError:
            continue
        head = text.split("\n=== ", 1)[0]
        out.append((snap, {int(m.group(1)): m.group(2) or "" for m in _NO_ANSWER.finditer(head)}))
    return out
