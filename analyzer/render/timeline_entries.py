"""The entry columns the timeline draws, as arrays sorted by rank and enqueue time: each
entry's state, signature (what lanes of alike ranks are merged by) and bar end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analyzer.render.figure_style import ST_DONE, ST_FLIGHT, ST_MISMATCH
from analyzer.terms import is_p2p_op

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

__all__ = ["Entries", "entry_arrays", "rank_ref"]


@dataclass
class Entries:
    """The entry columns the timeline needs, sorted by (rank, enqueue time), as arrays."""

    rank: np.ndarray
    created: np.ndarray
    end: np.ndarray
    completed_known: np.ndarray
    state: np.ndarray
    key: np.ndarray  # per-entry signature code
    idx: np.ndarray  # row positions in analysis.tables.entries
    starts: dict[int, tuple[int, int]] = field(default_factory=dict)

    def of(self, rank: int) -> slice:
        lo, hi = self.starts.get(rank, (0, 0))
        return slice(lo, hi)


def _states(analysis: Analysis, rank: np.ndarray) -> np.ndarray:
    """Each entry's state code, in the rows' order: completed (retired, for gloo, whose
    recorder sees no completion) or in flight; mismatched where matching found a desync."""
    e = analysis.tables.entries
    gloo = analysis.matching.dialects.completion_unobserved
    state_s = e["state"].astype(str).to_numpy() if len(e) else np.array([], dtype=object)
    done = e["retired"].to_numpy(bool) if gloo else (state_s == "completed")
    if gloo:
        done = done | (state_s == "completed")
    state = np.where(done, ST_DONE, ST_FLIGHT).astype(np.int8)
    mm = analysis.matching.mismatches
    if len(mm) and len(e):
        bad = set(zip(mm["pg_name"].astype(str), mm["seq"].astype(int), mm["rank"].astype(int)))
        names = e["pg_name"].astype(str).to_numpy()
        seqs = e["seq"].to_numpy(np.int64)
        p2p = e["is_p2p"].to_numpy(bool)
        cand = np.flatnonzero(~p2p & np.isin(rank, [r for _, _, r in bad]))
        for i in cand:
            if (names[i], int(seqs[i]), int(rank[i])) in bad:
                state[i] = ST_MISMATCH
    _mark_blocked(analysis, rank, state)
    return state


def _mark_blocked(analysis: Analysis, rank: np.ndarray, state: np.ndarray) -> None:
    """Ops the wait analysis says a rank is blocked in are in flight (``state`` is set so),
    even where the recorder retired them (gloo retires an op that timed out)."""
    e = analysis.tables.entries
    w = analysis.waits
    if len(w) and len(e):
        blocked = {
            (int(r), str(g), int(q), is_p2p_op(o))
            for r, g, q, o in w[["waiter", "pg_name", "seq", "op"]].itertuples(index=False)
        }
        names = e["pg_name"].astype(str).to_numpy()
        p2p = e["is_p2p"].to_numpy(bool)
        seqs = np.where(p2p, e["p2p_seq"].to_numpy(np.int64), e["seq"].to_numpy(np.int64))
        cand = np.flatnonzero(np.isin(rank, list({b[0] for b in blocked})) & (state == ST_DONE))
        cand = cand[np.isin(seqs[cand], list({b[2] for b in blocked}))]
        for i in cand:
            if (int(rank[i]), names[i], int(seqs[i]), bool(p2p[i])) in blocked:
                state[i] = ST_FLIGHT


def _signatures(analysis: Analysis, order: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Signature per entry (in ``order``; ``state`` already in it): group role (desc, else
    name), seq (p2p seq for send/recv), op, state."""
    e = analysis.tables.entries
    desc_codes = (
        e["pg_desc"].cat.codes.to_numpy(np.int64)[order] if len(e) else np.empty(0, np.int64)
    )
    op_codes = e["op"].cat.codes.to_numpy(np.int64)[order] if len(e) else np.empty(0, np.int64)
    is_p2p = e["is_p2p"].to_numpy(bool)[order] if len(e) else np.empty(0, bool)
    seq = (
        np.where(is_p2p, e["p2p_seq"].to_numpy(np.int64)[order], e["seq"].to_numpy(np.int64)[order])
        if len(e)
        else np.empty(0, np.int64)
    )
    key: np.ndarray = (((desc_codes * 4096 + op_codes) * 4 + state) << 32) ^ (seq & 0xFFFFFFFF)
    return key


def _bar_ends(
    rank: np.ndarray, created: np.ndarray, comp: np.ndarray, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Bar ends (-1: never done) and whether each completion is known: completion when
    known; the next enqueue of the rank when the op is done but its completion time was
    not recorded (gloo); the end of the record when never done."""
    nxt = np.empty_like(created)
    if len(created):
        nxt[:-1] = created[1:]
        nxt[-1] = created[-1]
        last_of_rank = np.ones(len(rank), bool)
        last_of_rank[:-1] = rank[1:] != rank[:-1]
        nxt[last_of_rank] = created[last_of_rank]
    known = comp > 0
    end = np.where(known, comp, np.where(state == ST_FLIGHT, -1, np.maximum(nxt, created)))
    return end, known


def _rank_slices(rank: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per rank of the sorted ``rank``: the first and past-the-last position of its rows."""
    if not len(rank):
        return {}
    cut = np.flatnonzero(np.diff(rank)) + 1
    lo = np.concatenate([[0], cut])
    hi = np.concatenate([cut, [len(rank)]])
    return {int(rank[a]): (int(a), int(b)) for a, b in zip(lo, hi)}


def entry_arrays(analysis: Analysis) -> Entries:
    """The entry columns the timeline draws, sorted by (rank, enqueue time, record id)."""
    e = analysis.tables.entries
    rank = e["rank"].to_numpy(np.int64)
    created = e["time_created_ns"].to_numpy(np.int64)
    comp = e["time_completed_ns"].to_numpy(np.int64)
    state = _states(analysis, rank)
    order = (
        np.lexsort((e["record_id"].to_numpy(np.int64), created, rank))
        if len(e)
        else np.empty(0, np.int64)
    )
    rank, created, comp, state = rank[order], created[order], comp[order], state[order]
    end, known = _bar_ends(rank, created, comp, state)
    return Entries(
        rank=rank,
        created=created,
        end=end,
        completed_known=known,
        state=state,
        key=_signatures(analysis, order, state),
        idx=order,
        starts=_rank_slices(rank),
    )


def rank_ref(ea: Entries, rank: int) -> int:
    """The newest time (enqueue or bar end) among the entries of ``rank`` (0: it has none)."""
    sl = ea.of(rank)
    if sl.stop <= sl.start:
        return 0
    return int(max(ea.created[sl].max(), ea.end[sl].max()))
