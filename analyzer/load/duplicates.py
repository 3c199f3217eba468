"""Several dumps of one rank, resolved in one place.

A rank may leave several files: a byte-identical copy (merged, with a note), an older dump of
the same buffer (the newer, by :func:`newest`, is kept and the other named as dropped), or
the buffers of different backends (torch 2.15 keeps one per backend: ``nccl2`` and
``nccl-lazy``, ``cpu:gloo,cuda:nccl2``), which are all kept and merged into one rank's tables
by :mod:`analyzer.normalize.backends`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analyzer.escape import clean
from analyzer.load.parsed_dump import ParsedDump

#: The label TorchComms' reading puts before a backend's name (``analyzer.load.torchcomms``).
TORCHCOMMS_LABEL = "torchcomms-"

__all__ = [
    "Duplicate",
    "backends_of",
    "newest",
    "resolve_ranks",
    "set_aside_stale",
    "stale_snapshots",
    "unordered_rounds",
]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A second dump for one rank: merged (identical bytes) or dropped (older)."""

    rank: int
    kept: str
    dropped: str
    identical: bool

    @property
    def note(self) -> str:
        if self.identical:
            return (
                f"rank {self.rank}: {clean(self.dropped)} is a byte-identical copy of "
                f"{clean(self.kept)} (merged)"
            )
        return (
            f"rank {self.rank}: two different dumps; kept {clean(self.kept)} (newer entries), "
            f"dropped {clean(self.dropped)}"
        )


def backends_of(d: ParsedDump) -> frozenset[str]:
    """The backends whose buffers a dump holds (its entries' ``profiling_name`` prefixes)."""
    if not d.n_entries:
        return frozenset()
    vocab = d.vocab["backend"]
    return frozenset(
        b for c in np.unique(np.asarray(d.strings["backend"])).tolist() if (b := vocab[int(c)])
    )


#: Entry states in the order an op passes them (a later snapshot of one buffer holds each
#: entry at this state or a later one).
_STATE_ORDER = {"scheduled": 1, "started": 2, "completed": 3}


def newest(d: ParsedDump) -> tuple[int, int, int, int]:
    """What makes one dump of a rank newer than another: its newest entry's enqueue time,
    then its number of entries, then how far its entries went (how many were retired, then
    their states summed): a later snapshot of the same buffer holds the same entries with
    ops that ended since (a file written while an op was in flight, and again after it timed
    out)."""
    if not d.n_entries:
        return (-1, 0, 0, 0)
    times = np.asarray(d.ints["time_created_ns"])
    retired = int(np.count_nonzero(np.asarray(d.bools["retired"], dtype=bool)))
    rank_of = np.array([_STATE_ORDER.get(v, 0) for v in d.vocab["state"]], dtype=np.int64)
    states = (
        int(rank_of[np.asarray(d.strings["state"], dtype=np.int64)].sum()) if len(rank_of) else 0
    )
    return (int(times.max()), d.n_entries, retired, states)


def _unlabelled(d: ParsedDump) -> frozenset[str]:
    """The backends of a dump without the label a writer's reading gives them
    (``torchcomms-nccl`` is ``nccl``)."""
    return frozenset(b.removeprefix(TORCHCOMMS_LABEL) for b in backends_of(d))


def _resolve(dumps: list[ParsedDump]) -> tuple[list[ParsedDump], list[Duplicate]]:
    """One rank's dumps: identical copies merged, same-backend dumps -> the newest. Files of
    one name whose backends differ only by a writer's label (a TorchComms round taken before
    its recorder's signs showed reads as plain ``nccl``) are one buffer too; files of one
    name of two backends (the hook's buffers in a folder per backend) are not."""
    kept: list[ParsedDump] = []
    notes: list[Duplicate] = []
    for d in sorted(dumps, key=lambda d: d.path):
        same = next((k for k in kept if d.fingerprint and k.fingerprint == d.fingerprint), None)
        if same is not None:
            notes.append(Duplicate(d.rank, same.path, d.path, True))
            continue
        mine = backends_of(d)
        name = Path(d.path).name
        rival = next(
            (
                k
                for k in kept
                if not mine
                or not backends_of(k)
                or backends_of(k) & mine
                or (Path(k.path).name == name and _unlabelled(k) == _unlabelled(d))
            ),
            None,
        )
        if rival is None:
            kept.append(d)  # another backend's buffer of the same rank: both are evidence
            continue
        newer, older = (d, rival) if newest(d) > newest(rival) else (rival, d)
        notes.append(Duplicate(d.rank, newer.path, older.path, False))
        if newer is d:
            kept[kept.index(rival)] = d
    return kept, notes


def resolve_ranks(all_dumps: Sequence[ParsedDump]) -> tuple[list[ParsedDump], list[Duplicate]]:
    """Every rank's dumps, in rank order, with several dumps of one rank resolved."""
    dumps: list[ParsedDump] = []
    duplicates: list[Duplicate] = []
    per_rank: dict[int, list[ParsedDump]] = defaultdict(list)
    for d in all_dumps:
        per_rank[d.rank].append(d)
    for rank in sorted(per_rank):
        if len(per_rank[rank]) == 1:
            dumps.extend(per_rank[rank])
            continue
        kept, notes = _resolve(per_rank[rank])
        dumps.extend(kept)
        duplicates.extend(notes)
    return dumps, duplicates


def _later_than(newer: dict[str, set[str]], folders: set[str]) -> set[str]:
    """Every folder newer than one of ``folders``, through rounds between (a round superseded
    by one that was superseded in turn)."""
    out: set[str] = set()
    todo = [g for f in folders for g in newer.get(f, ())]
    while todo:
        g = todo.pop()
        if g not in out:
            out.add(g)
            todo.extend(newer.get(g, ()))
    return out


def _rounds(
    dumps: Sequence[ParsedDump], duplicates: Sequence[Duplicate]
) -> tuple[dict[str, set[str]], dict[int, set[str]], dict[str, set[str]]]:
    """(folder -> the folders where a file of it was superseded by a different, newer file
    of the same name; rank -> the folders holding a file of it; kept path -> the folders of
    its identical copies)."""
    newer: dict[str, set[str]] = defaultdict(set)
    held: dict[int, set[str]] = defaultdict(set)
    copies: dict[str, set[str]] = defaultdict(set)
    for d in dumps:
        held[d.rank].add(str(Path(d.path).parent))
    superseded: list[Duplicate] = []
    for dup in duplicates:
        kept, dropped = Path(dup.kept), Path(dup.dropped)
        held[dup.rank] |= {str(kept.parent), str(dropped.parent)}
        if dup.identical:
            copies[dup.kept].add(str(dropped.parent))
        if not dup.identical and kept.name == dropped.name and kept.parent != dropped.parent:
            superseded.append(dup)
    for dup in superseded:  # the dropped file's identical copies are superseded with it
        for folder in {str(Path(dup.dropped).parent)} | copies[dup.dropped]:
            if folder != str(Path(dup.kept).parent):
                newer[folder].add(str(Path(dup.kept).parent))
    return newer, held, copies


#: The most distinct newest rounds held against each other (pairs: its square).
_MAX_HEADS = 256


def unordered_rounds(
    dumps: Sequence[ParsedDump], duplicates: Sequence[Duplicate]
) -> dict[int, str]:
    """Ranks whose newest dump sits in a round that no file orders against the round of
    another rank's newest dump, both newer than a round they share (no rank has a file in
    both): which of the two is newer is in no file, so where the rank is now, against what
    the other's file shows, is not known: rank -> why. (A rank whose dump an ordered newer
    round supersedes is :func:`stale_snapshots`'.) Not read beyond :data:`_MAX_HEADS`
    distinct newest rounds."""
    newer, _, copies = _rounds(dumps, duplicates)
    if not newer:
        return {}
    heads: dict[frozenset[str], list[int]] = defaultdict(list)
    for d in dumps:
        heads[frozenset({str(Path(d.path).parent)} | copies[d.path])].append(d.rank)
    if not 1 < len(heads) <= _MAX_HEADS:
        return {}
    older_of: dict[str, set[str]] = defaultdict(set)  # folder -> the rounds it superseded
    for f, gs in newer.items():
        for g in gs:
            older_of[g].add(f)
    older = {h: _later_than(older_of, set(h)) for h in heads}  # every round older than h
    later = {h: _later_than(newer, set(h)) for h in heads}
    out: dict[int, str] = {}
    for mine, ranks in heads.items():
        for theirs, others in heads.items():
            shared = older[mine] & older[theirs]
            if mine & theirs or not shared:
                continue
            if later[mine] & theirs or later[theirs] & mine:
                continue
            last = min(f for f in shared if not newer.get(f, set()) & shared)
            why = (
                f"its newest dump is in {clean(min(mine))}, and rank {min(others)}'s in "
                f"{clean(min(theirs))}: both rounds are newer than {clean(last)}, and "
                f"no file orders them (where it is now, against rank {min(others)}'s file, "
                "is not in these files)"
            )
            for r in ranks:
                out.setdefault(r, why)
    return out


def stale_snapshots(dumps: Sequence[ParsedDump], duplicates: Sequence[Duplicate]) -> dict[int, str]:
    """Ranks whose only dump sits in an older round of dumps: a folder where a file of
    another rank was superseded by a different, newer file of the same name in another
    folder (its buffer moved on between the rounds), or by one superseded in turn, while this
    rank has no file in that newer folder (an identical copy counts as one, wherever it
    lies). Where it is now is not in the files: rank -> why. Rounds whose copies are
    identical say nothing moved, and flag nobody."""
    newer, held, copies = _rounds(dumps, duplicates)
    out: dict[int, str] = {}
    for d in dumps:
        folder = str(Path(d.path).parent)
        mine = copies[d.path] | {folder}
        later = sorted(_later_than(newer, mine) - held[d.rank] - {folder})
        # The newest of them to name: one no other of them is older than; and the newest of
        # the rank's identical copies (the one kept is the first by path).
        later = [g for g in later if not newer.get(g, set()) & set(later)] or later
        last = [f for f in sorted(mine) if not _later_than(newer, {f}) & mine] or [folder]
        if later:
            out[d.rank] = (
                f"its only dump is in {clean(last[0])}, an older round: other ranks' dumps "
                f"there were superseded by newer ones in {clean(later[0])}, which holds none "
                "of its own (where it is now is not in these files)"
            )
    return out


def set_aside_stale(
    dumps: Sequence[ParsedDump], duplicates: Sequence[Duplicate]
) -> tuple[list[ParsedDump], tuple[tuple[int, str], ...], list[tuple[str, str]]]:
    """``dumps`` without those of :func:`stale_snapshots` (a rank whose only dump is an older
    round's reads as a rank with no dump: its old position would make waits it may have
    left); the stale ranks with why; the set-aside files with why (to list as ignored)."""
    stale = stale_snapshots(dumps, duplicates)
    aside = [(d.path, f"rank {d.rank}: {stale[d.rank]}") for d in dumps if d.rank in stale]
    return [d for d in dumps if d.rank not in stale], tuple(sorted(stale.items())), aside
