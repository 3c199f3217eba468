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
with each of theirs at the same positions. No shift is made where the positions already agree, where no such member is
there, or where not exactly one shift fits (a run of the same op fits many).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from analyzer.load import entry_columns as col
from analyzer.load.parsed_dump import ParsedDump

__all__ = ["align_wrapped"]

Ops = dict[str, list[str]]


def _ops_by_comm(d: ParsedDump, names: np.ndarray, ops: np.ndarray) -> Ops:
    """Per comm key: its collectives' ops in position order (the rows with ``seq`` >= 0 that
    are not send/recv)."""
    out: Ops = {}
    coll = ~np.asarray(d.bools["is_p2p"], dtype=bool)
    for name, op in zip(names[coll].tolist(), ops[coll].tolist(), strict=True):
        out.setdefault(str(name), []).append(str(op))
    return out


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


def _shift(mine: list[str], refs: list[list[str]], lost: int) -> int:
    """The one shift in 0..``lost`` under which ``mine`` agrees with every reference (and
    meets one of them at least); 0 where none or several do, or where 0 does."""

    def agrees(s: int) -> bool:
        counts = [_fits(mine, r, s) for r in refs]
        return all(c >= 0 for c in counts) and any(c > 0 for c in counts)

    if agrees(0):
        return 0
    fit = [s for s in range(1, lost + 1) if agrees(s)]
    return fit[0] if len(fit) == 1 else 0


def align_wrapped(
    dumps: Sequence[ParsedDump], column: Callable[[ParsedDump, str], np.ndarray]
) -> list[str]:
    """Shift the positions (``seq``) of the comms of each wrapped TorchComms dump among
    ``dumps`` (already read into comm keys) to line up with the members whose dumps start
    earliest (see the module); the notes to tell about it. ``column(d, name)``: an
    entry column as text."""
    first = {
        id(d): int(np.asarray(d.ints["record_id"], dtype=np.int64).min())
        for d in dumps
        if d.n_entries
    }
    read = {id(d): (column(d, "pg_name"), column(d, "op")) for d in dumps if d.n_entries}
    ops = {i: _ops_by_comm(d, *read[i]) for d in dumps if (i := id(d)) in read}
    # Per comm: the members whose buffers start earliest (at 0 where one kept everything).
    start: dict[str, int] = {}
    for d in dumps:
        for name in ops.get(id(d), {}):
            start[name] = min(start.get(name, first[id(d)]), first[id(d)])
    notes: list[str] = []
    for d in dumps:
        lost = first.get(id(d), 0)
        if lost <= 0:
            continue
        names = read[id(d)][0]
        seq = np.asarray(d.ints["seq"], dtype=np.int64).copy()
        moved: list[str] = []
        for name, mine in ops[id(d)].items():
            refs = [
                ops[id(w)][name]
                for w in dumps
                if name in ops.get(id(w), {}) and first[id(w)] == start[name] < lost
            ]
            s = _shift(mine, refs, lost - start[name]) if refs else 0
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
    return notes
