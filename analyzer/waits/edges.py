"""Wait edges: who waits on whom, derived from the matching.

An edge ``A -> B`` means A is blocked in an operation that B has not joined: a collective B
has not enqueued, a send/recv B has not posted, or any op of a group whose member B wrote no
dump. Edges carry the group (name and desc), sequence number, op and kind.

:func:`waits` derives the edges; a rank's reason to wait comes from its earliest unfinished
op (the one its stream is blocked in), and waits of its later ops are kept only where they
close no cycle. :func:`blocked_in` and :func:`stuck_collectives` say which op each rank is
blocked in. :mod:`analyzer.waits.graph` turns the edges into the wait-for graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.kinds import PeerState, WaitKind
from analyzer.match import Matching, completes_without_every_member, stuck_collectives
from analyzer.normalize import Tables
from analyzer.waits.cycle_guard import (
    Block,
    Row,
    Waits,
    holder_kind,
    keep_cycles,
    queued_waits,
    without_new_cycles,
)
from analyzer.waits.pending import Groups, group_view
from analyzer.waits.records import WAIT_COLUMNS, Wait


@dataclass(eq=False)
class _Found:
    """The waits found so far."""

    rows: list[Row | Waits] = field(default_factory=list)
    later: list[Row] = field(default_factory=list)
    """Waits in an op queued behind the waiter's earliest unfinished op (it is not blocked in
    it yet): kept unless they close a cycle, see :func:`without_new_cycles`."""
    blocks: list[Block] = field(default_factory=list)
    """Waits of one op too many to list (``max_block_edges``)."""


def _lag_waits(g: Groups, i: int, found: _Found, config: AnalysisConfig) -> None:
    """Waits on the known members of group ``i`` that are behind its frontier."""
    name, sl = str(g.names[i]), slice(g.bounds[i], g.bounds[i + 1])
    ranks, enq, desc = g.rank[sl], g.enq[sl], str(g.desc[sl.start])
    known = enq >= 0
    k_ranks, k_enq = ranks[known], enq[known]
    if not len(k_enq):
        return
    frontier = int(k_enq.max())
    lag_ranks, lag_levels = k_ranks[k_enq < frontier], k_enq[k_enq < frontier] + 1
    level_size = dict(zip(*np.unique(lag_levels, return_counts=True), strict=True))
    waiting: dict[int, list[int]] = {}  # level -> its waiters, the same for each laggard
    waiting_later: dict[int, list[int]] = {}  # level -> waiters with an earlier open op
    level_block: dict[int, Block] = {}
    for lag_rank, n in zip(lag_ranks.tolist(), lag_levels.tolist(), strict=True):
        if n not in waiting:
            done = g.completed.get((name, n), ())
            all_waiters = [w for w in k_ranks[k_enq >= n].tolist() if w not in done]
            head = (False, name, n)
            waiting[n] = [w for w in all_waiters if g.heads.get(w, head) == head]
            waiting_later[n] = [w for w in all_waiters if g.heads.get(w, head) != head]
        waiters = waiting[n]
        op = g.ops.get((name, n))
        kind = WaitKind.COLLECTIVE.value if op is not None else WaitKind.UNRECORDED.value
        op = op or WaitKind.UNRECORDED.value
        if len(waiters) * int(level_size[n]) > config.max_block_edges:
            if n not in level_block:
                level_block[n] = Block(waiters, lag_ranks[lag_levels == n].tolist())
                found.blocks.append(level_block[n])
            found.rows.append(Waits(level_block[n], holder=lag_rank, row=(name, desc, n, op, kind)))
        else:
            found.rows.extend((w, int(lag_rank), name, desc, n, op, kind) for w in waiters)
        found.later.extend(
            (w, int(lag_rank), name, desc, n, op, kind)
            for w in waiting_later[n][: config.max_later_waiters]
        )


def _silent_waits(g: Groups, i: int, found: _Found, config: AnalysisConfig) -> None:
    """Waits on the members of group ``i`` whose progress is unknown (no dump, or silent)."""
    name, sl = str(g.names[i]), slice(g.bounds[i], g.bounds[i + 1])
    ranks, enq, src, desc = g.rank[sl], g.enq[sl], g.src[sl], str(g.desc[sl.start])
    known = enq >= 0
    pend = g.pending.get(name)
    if known.all() or pend is None:
        return
    lowest_known = int(enq[known].min()) if known.any() else None
    # A member whose dumps hold no buffer of this group's backend is unseen here, not
    # silent: nobody waits on it for that.
    silent = [
        (r, s)
        for r, s in zip(ranks[~known].tolist(), src[~known].tolist(), strict=True)
        if s != "not_recorded"
    ]
    # A known member that has not joined explains the other waits; a collective some rank
    # completed (by a recorder that reports completion) every member joined, unless it is
    # rooted (a broadcast completes upstream of a member that never joined).
    waiting_on_silent = [
        (int(w), int(n))
        for w, n in zip(*pend, strict=True)
        if (lowest_known is None or lowest_known >= int(n))
        and (
            (name, int(n)) not in g.completed
            or completes_without_every_member(g.ops.get((name, int(n)), ""))
        )
    ]
    block = None
    if len(waiting_on_silent) * len(silent) > config.max_block_edges:
        block = Block([w for w, _ in waiting_on_silent], [r for r, _ in silent])
        found.blocks.append(block)
    for w, n in waiting_on_silent:
        op = g.ops.get((name, n), "unknown")
        if block is not None:
            found.rows.append(Waits(block, waiter=w, row=(name, desc, n, op), kinds=silent))
            continue
        found.rows.extend(
            (w, int(s_rank), name, desc, n, op, holder_kind(s)) for s_rank, s in silent
        )


def _passed_unseen(tables: Tables, matching: Matching, blocked: pd.DataFrame) -> np.ndarray:
    """Of the ``blocked`` send/recv: those whose peer wrote no dump, on a rank whose backend
    reports no completion, that the rank got past: it enqueued a later send/recv with the
    same peer in the same group, or any later op of a group of two (the peer is its only
    other member). Only enqueues are evidence there, and a rank is blocked in its newest op
    of a stream, as :func:`analyzer.waits.pending.pending_first` reads collectives; the
    newest op still waits on the same peer, so no waiter loses its holder. (One buffer holds
    a group's entries, so their record ids compare.)"""
    blind = matching.dialects.unobserved_ranks - matching.dialects.retired_done_ranks
    out = np.zeros(len(blocked), dtype=bool)
    if not blind or not len(blocked):
        return out
    p2p = matching.p2p
    by_peer = (
        pd.DataFrame(
            {
                "rank": p2p["rank"].to_numpy(np.int64),
                "pg_name": p2p["pg_name"].astype(str).to_numpy(dtype=object),
                "peer": p2p["peer"].to_numpy(np.int64),
                "record_id": p2p["record_id"].to_numpy(np.int64),
            }
        )
        .groupby(["rank", "pg_name", "peer"], sort=False)["record_id"]
        .max()
        .to_dict()
    )
    pairs = {str(g) for g, m in tables.members().items() if len(m) == 2}
    e = tables.entries
    in_pair = e["pg_name"].astype(str).isin(pairs).to_numpy()
    by_group = (
        pd.DataFrame(
            {
                "rank": e["rank"].to_numpy(np.int64)[in_pair],
                "pg_name": e["pg_name"].astype(str).to_numpy(dtype=object)[in_pair],
                "record_id": e["record_id"].to_numpy(np.int64)[in_pair],
            }
        )
        .groupby(["rank", "pg_name"], sort=False)["record_id"]
        .max()
        .to_dict()
    )
    for i, (r, g, peer, rec, st) in enumerate(
        blocked[["rank", "pg_name", "peer", "record_id", "peer_state"]].itertuples(index=False)
    ):
        if st != PeerState.NO_DUMP.value or int(r) not in blind:
            continue
        later = max(
            by_peer.get((int(r), str(g), int(peer)), -1), by_group.get((int(r), str(g)), -1)
        )
        out[i] = int(rec) < later
    return out


def _p2p_waits(
    tables: Tables,
    matching: Matching,
    heads: dict[int, tuple[bool, str, int]],
    found: _Found,
) -> None:
    """Waits of send/recv whose peer has not posted its side (or wrote no dump)."""
    p2p = matching.p2p
    if not len(p2p):
        return
    unfinished = p2p[p2p["state"] != "completed"]  # few rows: the other tests run on those
    blocked = unfinished[
        unfinished["peer_state"].isin([PeerState.NOT_POSTED.value, PeerState.NO_DUMP.value])
    ]
    # A rank whose completions stopped being observed shows finished send/recv as
    # scheduled: its p2p states are no evidence that it waits.
    blocked = blocked[~blocked["rank"].isin(list(matching.stale_completers))]
    blocked = blocked[~_passed_unseen(tables, matching, blocked)]
    for r, g, d, op, peer, pseq, st in blocked[
        ["rank", "pg_name", "pg_desc", "op", "peer", "p2p_seq", "peer_state"]
    ].itertuples(index=False):
        row = (
            int(r),
            int(peer),
            str(g),
            str(d),
            int(pseq),
            str(op),
            WaitKind.P2P.value if st == PeerState.NOT_POSTED.value else WaitKind.NO_DUMP.value,
        )
        head = (True, row[2], row[4])
        (found.rows if heads.get(row[0], head) == head else found.later).append(row)


def waits(
    tables: Tables, matching: Matching, *, config: AnalysisConfig = DEFAULT_CONFIG
) -> pd.DataFrame:
    """Every wait edge, one row each (columns ``WAIT_COLUMNS``).

    Only groups where somebody can wait (a member behind another, or of unknown progress)
    are walked, with numpy slices of the (small) progress table; the entries are only
    consulted for the (group, seq) pairs someone waits in.
    """
    g, active = group_view(tables, matching)
    found = _Found()
    for i in active:
        _lag_waits(g, i, found, config)
        _silent_waits(g, i, found, config)
    if matching.dialects.completion_unobserved and matching.dialects.p2p_unrecorded:
        found.rows.extend(_gloo_unrecorded_waits(tables, matching.progress))
    _p2p_waits(tables, matching, g.heads, found)
    rows, later, blocks = found.rows, found.later, found.blocks
    direct = [r for r in rows if not isinstance(r, Waits)]
    if blocks:
        keep_cycles(direct + later, blocks)
    if not matching.dialects.completion_unobserved:
        # Members of a collective stuck on the network or a GPU, and ranks whose GPU stopped
        # completing, are blocked too: ranks whose ops sit behind theirs wait on them.
        members = tables.members()
        stuck = {
            int(m)
            for grp, _ in stuck_collectives(tables, matching, g.heads)
            for m in members.get(grp, ())
        }
        stuck |= set(matching.stale_completers)
        rows.extend(queued_waits(tables, matching, direct, blocks, g.heads, stuck))
    if later:
        rows.extend(without_new_cycles(rows, later, blocks))
    flat: list[Row] = [row for r in rows for row in (r.rows() if isinstance(r, Waits) else (r,))]
    out = pd.DataFrame(flat, columns=WAIT_COLUMNS)
    if len(out):
        out = out.drop_duplicates(["waiter", "holder", "pg_name", "seq", "op", "kind"])
        out = out.sort_values(["holder", "pg_name", "seq", "waiter"], ignore_index=True)
    out = out.astype({"waiter": "int32", "holder": "int32", "seq": "int64"})
    return schema.conform(out, schema.WAITS, "waits")


def edges(wait_table: pd.DataFrame) -> Iterator[Wait]:
    """The rows of a wait table (:func:`waits`) one at a time, as :class:`Wait` records."""
    for waiter, holder, name, desc, seq, op, kind in wait_table[list(WAIT_COLUMNS)].itertuples(
        index=False
    ):
        yield Wait(
            waiter=int(waiter),
            holder=int(holder),
            pg_name=str(name),
            pg_desc=str(desc),
            seq=int(seq),
            op=str(op),
            kind=WaitKind(str(kind)),
        )


def _skewed_groups(e: pd.DataFrame) -> set[str]:
    """Groups where members ran different numbers of unrecorded ops: one collective (same
    seq) carries different op_ids on different members (gloo's monitored_barrier: rank 0
    sends and receives with every member, the others once each). Their op counters are no
    measure of who is behind."""
    coll = e.loc[~e["is_p2p"].to_numpy(bool), ["pg_name", "seq", "op_id"]]
    if coll.empty:
        return set()
    spread = coll.groupby(["pg_name", "seq"], observed=True)["op_id"].nunique()
    return {str(name) for name, _ in spread[spread > 1].index}


def _gloo_unrecorded_waits(tables: Tables, prog: pd.DataFrame) -> list[Row]:
    """gloo: a member whose op counter (op_id units) stops before ops its peers enqueued that
    no buffer recorded (send/recv) is waited on through those unrecorded ops; not in groups
    whose members' counters drifted apart (:func:`_skewed_groups`)."""
    e = tables.entries
    recorded = set(zip(e["pg_name"].astype(str), e["op_id"].astype(int)))
    rows = []
    known = prog[(prog["op_progress"] >= 0) & prog["dumped"]]
    skewed = _skewed_groups(e)
    for name, grp in known.groupby("pg_name", sort=False):
        name = str(name)
        if name in skewed:
            continue
        frontier = int(grp["op_progress"].max())
        desc = str(grp["pg_desc"].iloc[0])
        for lag_rank, lag in zip(grp["rank"], grp["op_progress"]):
            n = int(lag) + 1
            if lag >= frontier or (name, n) in recorded:
                continue  # a recorded collective: the sequence-number matching covers it
            for w, wp in zip(grp["rank"], grp["op_progress"]):
                if int(wp) >= n:
                    rows.append(
                        (
                            int(w),
                            int(lag_rank),
                            name,
                            desc,
                            n,
                            WaitKind.UNRECORDED.value,
                            WaitKind.UNRECORDED.value,
                        )
                    )
    return rows


__all__ = ["edges", "waits"]
