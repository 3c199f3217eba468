"""Several incidents under one folder, told apart before any rank is resolved.

torchelastic restarts leave one folder per attempt (``attempt_0/``, ``attempt_1/``, or dated
folders), and people point hangscope at their parent. Merging ranks across attempts mixes two
different hangs into one wrong story, so the dumps are first split by the folder that holds
them, and two folders are one incident unless the dumps say otherwise:

* a rank claimed in both by different dumps whose entry times do not overlap (a restarted
  process; a byte-identical copy, or an older snapshot of the same ring buffer, overlaps), or
* rank sets that do not meet and entry times that lie far apart (:data:`GAP_NS`: a restart,
  not two nodes of one job writing at the same time), or whose group configurations declare
  worlds of different sizes (an elastic restart with more or fewer nodes, however soon).

Each incident after the newest says what sets it apart (``Incident.why``). Two dumps of one
rank that share no entry time are two processes when their record ids start again; where the
ids run on, they may also be rounds of one process between which a small ring buffer wrapped,
and the note says so (they are still set apart: nothing in the files tells the two).

Folders are taken newest first (their newest entry) and each joins the first incident it
agrees with entirely. The newest incident is analyzed unless one is named
(``--incident NAME``); the others are listed, never merged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analyzer.errors import InputError
from analyzer.escape import clean
from analyzer.load.duplicates import TORCHCOMMS_LABEL, backends_of
from analyzer.load.parsed_dump import ParsedDump

__all__ = ["GAP_NS", "Incident", "set_aside", "split_incidents"]

#: Entry times further apart than this between folders with no rank in common: a restart.
GAP_NS = 120 * 10**9


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident: the folders whose dumps belong together, and what they hold."""

    name: str
    """The folders, relative to the folder that holds them all (``.`` for that folder)."""
    folders: tuple[str, ...]
    ranks: tuple[int, ...]
    newest_ns: int
    """The newest entry's enqueue time (ns since the epoch), -1 without entries."""
    analyzed: bool = False
    why: str = ""
    """What sets it apart from the newest incident ("" for that one)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "folders": list(self.folders),
            "ranks": list(self.ranks),
            "newest_ns": self.newest_ns,
            "analyzed": self.analyzed,
            "why": self.why,
        }


@dataclass
class _Folder:
    path: str
    dumps: list[ParsedDump]
    first: int
    last: int
    spans: dict[int, tuple[int, int]]
    """Each dump's oldest and newest entry time (by ``id``), read once."""
    world: int | None = None
    """The world size its dumps declare (:func:`_declared_world`), read once."""

    @property
    def ranks(self) -> set[int]:
        return {d.rank for d in self.dumps}


def _times(d: ParsedDump) -> tuple[int, int]:
    if not d.n_entries:
        return -1, -1
    t = np.asarray(d.ints["time_created_ns"])
    return int(t.min()), int(t.max())


def _same_dump(a: ParsedDump, b: ParsedDump) -> bool:
    return bool(a.fingerprint) and a.fingerprint == b.fingerprint


def _one_process(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two dumps of one rank, with entry times spanning ``a`` and ``b``, can come
    from one process: times that overlap (an older snapshot of the same ring buffer)."""
    (a0, a1), (b0, b1) = a, b
    return min(a0, b0) < 0 or (a0 <= b1 and b0 <= a1)


def _ids(d: ParsedDump) -> tuple[int, int]:
    ids = np.asarray(d.ints["record_id"]) if d.n_entries else np.zeros(0)
    return (int(ids.min()), int(ids.max())) if len(ids) else (-1, -1)


def _two_processes(rank: int, older: ParsedDump, newer: ParsedDump) -> str:
    """Why two dumps of ``rank`` whose entry times do not overlap are read as two processes;
    their record ids tell a restart (they start again) from a ring buffer that may have
    wrapped between two rounds of one process (they run on)."""
    if _ids(newer)[0] > _ids(older)[1] >= 0:
        return (
            f"rank {rank}'s dumps share no entry time, though their record ids run on: a "
            "restart, or rounds between which its ring buffer wrapped"
        )
    return f"rank {rank}'s dumps share no entry time and their record ids start again: a restart"


def _apart(a: _Folder, b: _Folder) -> str:
    """What sets the dumps of two folders apart as two incidents, or "" (one incident)."""
    mine = {d.rank: d for d in a.dumps}
    common = [d for d in b.dumps if d.rank in mine]
    for d in common:  # one rank, two processes: two attempts
        o = mine[d.rank]
        if not _same_dump(d, o) and not _one_process(b.spans[id(d)], a.spans[id(o)]):
            older, newer = (d, o) if b.spans[id(d)][1] < a.spans[id(o)][0] else (o, d)
            return _two_processes(d.rank, older, newer)
    if not common:
        worlds = {w for w in (a.world, b.world) if w is not None}
        if len(worlds) > 1:  # one job declares one world: an elastic restart
            sizes = " and ".join(str(w) for w in sorted(worlds))
            return f"no rank in both, and they declare worlds of {sizes} ranks: a restart"
    if not common and min(a.first, b.first) >= 0:
        gap = max(a.first, b.first) - min(a.last, b.last)
        if gap > GAP_NS:
            return f"no rank in both, and their entries lie {gap // 10**9} s apart: a restart"
    return _beyond_timeout(a, b) if not common else ""


#: Dumps of a folder read for the times a collective began (the first, by path).
_SAMPLED = 8


def _began(f: _Folder) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(group, seq) -> (when it began, its timeout, the rank) for the collectives of the
    first :data:`_SAMPLED` dumps of ``f`` (the earliest where several hold one)."""
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for d in f.dumps[:_SAMPLED]:
        if not d.n_entries or not d.pg_status or _torchcomms(d):
            continue  # TorchComms numbers every op of the process with one counter
        names = d.vocab["pg_name"]
        codes, seqs = d.strings["pg_name"], d.ints["seq"]
        times, outs, p2p = d.ints["time_created_ns"], d.ints["timeout_ms"], d.bools["is_p2p"]
        for i in range(d.n_entries):
            if p2p[i] or seqs[i] < 0 or times[i] <= 0 or outs[i] <= 0:
                continue
            key = (names[int(codes[i])], int(seqs[i]))
            if key not in out or int(times[i]) < out[key][0]:
                out[key] = (int(times[i]), int(outs[i]), d.rank)
    return out


def _torchcomms(d: ParsedDump) -> bool:
    return any(b.startswith(TORCHCOMMS_LABEL) for b in backends_of(d))


def _beyond_timeout(a: _Folder, b: _Folder) -> str:
    """Why two folders with no rank in common hold two runs, or "": a collective both hold
    (one group name, one sequence number) began on their ranks further apart than its
    timeout, which one collective of one job cannot (its members time out first)."""
    mine, theirs = _began(a), _began(b)
    for key in sorted(mine.keys() & theirs.keys()):
        (ta, oa, ra), (tb, ob, rb) = mine[key], theirs[key]
        if abs(ta - tb) > max(oa, ob) * 10**6:
            return (
                f"no rank in both, and seq {key[1]} of group {clean(key[0])} began "
                f"{abs(ta - tb) / 1e9:.1f} s apart on ranks {min(ra, rb)} and {max(ra, rb)}, "
                f"beyond its timeout of {max(oa, ob) / 1e3:g} s: a restart"
            )
    return ""


def _declared_world(f: _Folder) -> int | None:
    """The world size a folder's dumps declare: the members their group configurations list
    for the default group (``default_pg``); None where none does or they disagree. gloo's
    nameless list is the last group each process created, not the world: ranks of one job
    write different sizes there."""
    sizes = {
        len(members)
        for d in f.dumps
        for name, (desc, members) in d.pg_config.items()
        if members and desc == "default_pg"
    }
    return sizes.pop() if len(sizes) == 1 else None


def _name(folders: Sequence[str], root: str) -> str:
    rel = [os.path.relpath(f, root) if root else f for f in sorted(folders)]
    return ", ".join(rel)


def split_incidents(
    dumps: Sequence[ParsedDump], choice: str | None = None
) -> tuple[list[ParsedDump], tuple[Incident, ...], set[str]]:
    """The dumps of the incident to analyze (the newest, or the one ``choice`` names), every
    incident found (newest first; empty when there is only one), and the folders of the
    incidents not analyzed. Raises :class:`InputError` when ``choice`` names none."""
    if choice is None and len({str(Path(d.path).parent) for d in dumps}) < 2:
        return list(dumps), (), set()  # one folder: one incident, nothing to read
    by_folder: dict[str, _Folder] = {}
    for d in dumps:
        key = str(Path(d.path).parent)
        first, last = _times(d)
        f = by_folder.get(key)
        if f is None:
            by_folder[key] = _Folder(key, [d], first, last, {id(d): (first, last)})
            continue
        f.dumps.append(d)
        f.spans[id(d)] = (first, last)
        if first >= 0:
            f.first = first if f.first < 0 else min(f.first, first)
            f.last = max(f.last, last)
    if len(by_folder) < 2 and choice is None:
        return list(dumps), (), set()
    for f in by_folder.values():
        f.world = _declared_world(f)
    groups: list[list[_Folder]] = []
    whys: list[str] = []  # per group: what sets it apart from the newest
    for f in sorted(by_folder.values(), key=lambda f: (-f.last, f.path)):
        home = next((g for g in groups if not any(_apart(f, o) for o in g)), None)
        if home is None:
            whys.append(next((w for o in groups[0] if (w := _apart(f, o))), "") if groups else "")
            groups.append([f])
        else:
            home.append(f)
    root = os.path.commonpath(list(by_folder)) if by_folder else ""
    if len(groups) == 1:
        root = os.path.dirname(root) if len(by_folder) == 1 else root
    incidents = [
        (
            _name([f.path for f in g], root),
            g,
        )
        for g in groups
    ]
    names = [n for n, _ in incidents]
    if choice is not None and choice not in names:
        listed = "; ".join(clean(n) for n in names)
        raise InputError(f"--incident {clean(choice)}: no such incident (found: {listed})")
    if len(groups) == 1:
        return list(dumps), (), set()
    pick = names.index(choice) if choice is not None else 0
    chosen = [d for f in incidents[pick][1] for d in f.dumps]
    found = tuple(
        Incident(
            name=n,
            folders=tuple(sorted(f.path for f in g)),
            ranks=tuple(sorted({r for f in g for r in f.ranks})),
            newest_ns=max(f.last for f in g),
            analyzed=i == pick,
            why=whys[i],
        )
        for i, (n, g) in enumerate(incidents)
    )
    others = {f.path for i, (_, g) in enumerate(incidents) if i != pick for f in g}
    return chosen, found, others


def set_aside(
    paths: Sequence[str], incidents: Sequence[Incident], others: set[str]
) -> list[tuple[str, str]]:
    """(path, why) for each of ``paths`` in a folder of an incident not analyzed."""
    name = {f: i.name for i in incidents for f in i.folders}
    return [
        (p, f"another incident ({name[str(Path(p).parent)]}; --incident to analyze it)")
        for p in paths
        if str(Path(p).parent) in others
    ]
