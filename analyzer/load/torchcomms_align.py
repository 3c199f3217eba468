"""Where a TorchComms dump's ring buffer wrapped, the positions of its comms' collectives.

A TorchComms collective is matched by its position among its comm's own entries
(:mod:`analyzer.load.torchcomms`), counted from the first entry the dump holds. Its
``record_id`` counts every entry of the process from 0, so a dump whose first ``record_id``
is ``k > 0`` lost ``k`` entries off the front of its ring buffer (or shows only the ones in
flight): how many of them each comm lost is not written. Counted from the buffer's first
entry, its positions would stand behind the other members' and every collective would meet
another op (a ``split`` of the buffer it kept against the one before it on a rank that kept
both).

Here each such comm is lined up with the members of that comm whose dumps start earliest
(at ``record_id`` 0 where one kept every entry; else at the lowest first ``record_id`` ``j``,
every member's buffer having wrapped): the shift (0 to ``k - j``) under which its ops agree
with each of theirs at the same positions. Where several shifts fit (a run of the same op fits
many; a shift under which this dump's entries of the comm meet none of theirs fits too: they
may all be newer than the member's newest), the one the ``record_id`` s give decides, if they
give one: where a member's entries and this dump's hold the same comm at every ``record_id``
both hold (and the same op, a send and a recv alike: the two ends of one transfer), the two
processes issued the same entries (the same number before the first one kept here too), and
an entry of the comm sits where the member's entries of lower ``record_id`` s end. Else, among
the shifts under which the two meet, the one under which the comm's own entries carry the
same ``record_id`` s wherever they meet. No shift is made where no such member is there, or
where nothing decides among the shifts that fit. Up to :data:`_MAX_REFERENCES` of those
members are read per comm (each is read against every dump that lost more), and the
``record_id`` s only where several shifts fit.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from analyzer.load import entry_columns as col
from analyzer.load.parsed_dump import ParsedDump

__all__ = ["align_wrapped"]

Ops = dict[str, list[str]]
#: Members of a comm that kept its earliest entries a dump's shift is checked against, at
#: most (each check reads both dumps' entries: a comm of thousands would cost their square).
_MAX_REFERENCES = 8
#: Per comm key: its collectives' ``record_id`` s in position order.
Records = dict[str, list[int]]


def _ops_by_comm(d: ParsedDump, names: np.ndarray, ops: np.ndarray) -> tuple[Ops, Records]:
    """Per comm key: its collectives' ops and ``record_id`` s in position order (the rows
    that are not send/recv)."""
    out: Ops = {}
    records: Records = {}
    coll = ~np.asarray(d.bools["is_p2p"], dtype=bool)
    ids = np.asarray(d.ints["record_id"], dtype=np.int64)[coll].tolist()
    for name, op, rid in zip(names[coll].tolist(), ops[coll].tolist(), ids, strict=True):
        out.setdefault(str(name), []).append(str(op))
        records.setdefault(str(name), []).append(int(rid))
    return out, records


#: Ops the two ends of one transfer issue differently: one op in a stream.
_P2P = {"send": "p2p", "recv": "p2p"}


def _stream(d: ParsedDump, names: np.ndarray, ops: np.ndarray) -> dict[int, tuple[str, str]]:
    """Every entry of the dump by ``record_id``: (comm name, op, a send and a recv alike).
    The name without its member set: two ranks of one program issue their own ``cp`` comm's
    entries at the same ``record_id`` s, though their ``cp`` comms differ (``cp[0,2]``,
    ``cp[8,10]``); the two ends of a transfer issue a send and a recv."""
    ids = np.asarray(d.ints["record_id"], dtype=np.int64).tolist()
    return {
        int(r): (_name_of(str(n)), _P2P.get(str(o), str(o)))
        for r, n, o in zip(ids, names.tolist(), ops.tolist(), strict=True)
    }


def _name_of(key: str) -> str:
    """A comm key's name (:func:`analyzer.load.torchcomms.comm_key`: ``tp[0,1]`` -> ``tp``)."""
    return key[: key.rindex("[")] if key.endswith("]") and "[" in key else key


def _same_stream(mine: dict[int, tuple[str, str]], theirs: dict[int, tuple[str, str]]) -> bool:
    """Both dumps hold the same comm name and op at every ``record_id`` both hold, and the same
    ``record_id`` s over the span both cover (at least two entries)."""
    lo = max(min(mine), min(theirs))
    hi = min(max(mine), max(theirs))
    a = {r: v for r, v in mine.items() if lo <= r <= hi}
    b = {r: v for r, v in theirs.items() if lo <= r <= hi}
    return len(a) >= 2 and a == b


def _by_record(mine: list[int], theirs: list[int]) -> int | None:
    """The shift that puts this dump's first entry of a comm (``record_id`` ``mine[0]``)
    where the member's entries of lower ``record_id`` s end (at its entry of the same
    ``record_id``, or after its newest), or None where there is none."""
    return bisect_left(theirs, mine[0]) if mine else None


def _fits(mine: list[str], theirs: list[str], shift: int) -> int:
    """How many of ``mine`` agree with ``theirs`` shifted by ``shift``; -1 on a disagreement."""
    n = 0
    for i, op in enumerate(mine):
        j = i + shift
        if j >= len(theirs):
            break
        if theirs[j] != op:
            return -1
        n += 1
    return n


def _shift(
    mine: list[str],
    refs: list[list[str]],
    lost: int,
    hint: Callable[[list[int]], int | None],
    same_program: Callable[[], int | None] = lambda: None,
) -> tuple[int, bool]:
    """The shift in 0..``lost`` under which ``mine`` agrees with every reference: where
    several do (those under which it meets none of them too), ``same_program()`` (the one a
    member running the same program gives by its ``record_id`` s) if it is one of them; else
    the one under which it meets one of them at least, where one does; where several do,
    ``hint(fit)`` (the one of them the comm's own ``record_id`` s give). The ``record_id`` s
    are read only where several fit. With whether it was decided: where several fit and
    nothing picks one, 0, undecided."""
    # From the longest reference's length on, a shift meets nothing: those are read once
    # (a buffer that lost millions of entries is not a million shifts to try).
    top = min(lost, max((len(r) for r in refs), default=0))
    counts = {s: [_fits(mine, r, s) for r in refs] for s in range(top + 1)}
    loose = [s for s, c in counts.items() if all(x >= 0 for x in c)]
    beyond = lost - top  # shifts past ``top``, each meeting nothing
    given = same_program() if len(loose) + beyond > 1 else None
    if given is not None and (given in loose or top < given <= lost):
        return given, True
    fit = [s for s in loose if any(x > 0 for x in counts[s])]
    if len(fit) == 1:
        return fit[0], True
    if len(fit) < 2:
        return 0, True  # none fits: no line-up to make (a desync, or nothing in common)
    given = hint(fit)
    return (given, True) if given in fit else (0, False)


def _same_program(
    d: ParsedDump,
    members: list[ParsedDump],
    name: str,
    by_comm: dict[int, tuple[Ops, Records]],
    read: dict[int, tuple[np.ndarray, np.ndarray]],
    streams: dict[int, dict[int, tuple[str, str]]],
) -> int | None:
    """The shift of comm ``name`` of ``d`` that every member whose whole stream of entries
    agrees with ``d``'s gives by the ``record_id`` s (:func:`_by_record`), or None."""
    for x in (d, *members):
        if id(x) not in streams:
            streams[id(x)] = _stream(x, *read[id(x)])
    mine = by_comm[id(d)][1][name]
    shifts = {
        _by_record(mine, by_comm[id(w)][1][name])
        for w in members
        if _same_stream(streams[id(d)], streams[id(w)])
    }
    return shifts.pop() if len(shifts) == 1 else None


def _hint(
    d: ParsedDump, members: list[ParsedDump], by_comm: dict[int, tuple[Ops, Records]], name: str,
    fit: list[int],
) -> int | None:  # fmt: skip
    """The shift of comm ``name`` of ``d`` among ``fit`` under which the comm's own entries
    carry the same ``record_id`` s on both sides wherever they meet, for every member (the
    two processes issued as many entries before each of them), where one does; else None."""
    mine = by_comm[id(d)][1][name]
    theirs = [by_comm[id(w)][1][name] for w in members]
    same = [s for s in fit if all(_same_records(mine, t, s) for t in theirs)]
    return same[0] if len(same) == 1 else None


def _same_records(mine: list[int], theirs: list[int], shift: int) -> bool:
    """Under ``shift``, this dump's entries of a comm carry the ``record_id`` s of the
    member's entries they meet (where they meet none, nothing says otherwise)."""
    return all(r == theirs[i + shift] for i, r in enumerate(mine) if i + shift < len(theirs))


def align_wrapped(
    dumps: Sequence[ParsedDump], column: Callable[[ParsedDump, str], np.ndarray]
) -> tuple[list[str], dict[int, str]]:
    """Shift the positions (``seq``) of the comms of each wrapped TorchComms dump among
    ``dumps`` (already read into comm keys) to line up with the members whose dumps start
    earliest (see the module); the notes to tell about it, and the ranks where nothing
    decided among the positions that fit, each with why (their evidence is doubtful: an
    entry may stand a step off). ``column(d, name)``: an entry column as text."""
    first = {
        id(d): int(np.asarray(d.ints["record_id"], dtype=np.int64).min())
        for d in dumps
        if d.n_entries
    }
    read = {id(d): (column(d, "pg_name"), column(d, "op")) for d in dumps if d.n_entries}
    by_comm = {i: _ops_by_comm(d, *read[i]) for d in dumps if (i := id(d)) in read}
    ops = {i: o for i, (o, _) in by_comm.items()}
    streams: dict[int, dict[int, tuple[str, str]]] = {}
    # Per comm: the members whose buffers start earliest (at 0 where one kept everything).
    start: dict[str, int] = {}
    for d in dumps:
        for name in ops.get(id(d), {}):
            start[name] = min(start.get(name, first[id(d)]), first[id(d)])
    earliest: dict[str, list[ParsedDump]] = {}
    for d in dumps:
        for name in ops.get(id(d), {}):
            if first[id(d)] == start[name]:
                earliest.setdefault(name, []).append(d)
    notes: list[str] = []
    unaligned: dict[int, str] = {}
    for d in dumps:
        lost = first.get(id(d), 0)
        if lost <= 0:
            continue
        names = read[id(d)][0]
        seq = np.asarray(d.ints["seq"], dtype=np.int64).copy()
        moved: list[str] = []
        undecided: list[str] = []
        for name, mine in ops[id(d)].items():
            members = earliest[name][:_MAX_REFERENCES] if start[name] < lost else []
            refs = [ops[id(w)][name] for w in members]
            s, decided = (
                _shift(
                    mine,
                    refs,
                    lost - start[name],
                    partial(_hint, d, members, by_comm, name),
                    partial(_same_program, d, members, name, by_comm, read, streams),
                )
                if refs
                else (0, True)
            )
            if not decided:
                undecided.append(name)
            if s:
                at = names == name
                seq[at] = np.where(seq[at] >= 0, seq[at] + s, s - 1)
                moved.append(f"{name} +{s}")
        if moved:
            d.ints["seq"] = col.narrow(seq)
            notes.append(
                f"rank {d.rank}: its buffer starts at record {lost} (earlier entries dropped): "
                "positions lined up with the members whose buffers start earliest "
                f"({', '.join(moved)})"
            )
        if undecided:
            unaligned[d.rank] = (
                f"its buffer wrapped (it starts at record {lost}), and where its entries of "
                f"{', '.join(undecided)} stand among the other members' is not decided: "
                "several positions fit, a training step apart"
            )
    return notes, unaligned
