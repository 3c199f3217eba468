"""Wait edges: who waits on whom, derived from the matching.

An edge ``A -> B`` means A is blocked in an operation that B has not joined: a collective B
has not enqueued, a send/recv B has not posted, or any op of a group whose member B wrote no
dump. Edges carry the group (name and desc), sequence number, op and kind.

:func:`waits` derives the edges; a rank's reason to wait comes from its earliest unfinished
op (the one its stream is blocked in), and waits of its later ops are kept only where they
close no cycle. :func:`blocked_in` and :func:`stuck_collectives` say which op each rank is
blocked in. :mod:`analyzer.graph` turns the edges into the wait-for graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
import pandas as pd

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.matching import Matching, blocked_in, stuck_collectives
from analyzer.tables import Tables

WAIT_COLUMNS = ["waiter", "holder", "pg_name", "pg_desc", "seq", "op", "kind"]

#: Above this many waiter x holder pairs for one op (thousands of ranks behind in a group of
#: tens of thousands), the op's waits are kept as every waiter -> the lowest holder and the
#: lowest waiter -> every other holder: linear instead of quadratic. Who waits on nobody and
#: is waited on (the culprits) does not change; the waiter lists of the other holders shrink.
MAX_BLOCK_EDGES = 100_000

#: Waits in an op that sits behind the waiter's own unfinished op are evidence, not the
#: reason it is blocked; at most this many waiters of one op are kept for them.
MAX_LATER_WAITERS = 64


@dataclass(frozen=True, slots=True)
class WaitEdge:
    """One wait: ``waiter`` is blocked in an op that ``holder`` has not joined."""

    waiter: int
    holder: int
    pg_name: str
    pg_desc: str
    seq: int
    op: str
    kind: str
    """``collective``, ``p2p``, ``no_dump``, ``silent`` (holder recorded nothing),
    ``unrecorded``, or ``queued`` (every side posted the op, but a peer's matching op sits on
    its GPU stream behind an op that peer is blocked in)."""


def _pending_first(tables: Tables, matching: Matching) -> pd.DataFrame:
    """Per (group, rank): the first collective that rank may still be blocked in."""
    e = tables.entries[["pg_name", "rank", "seq", "record_id", "is_p2p", "retired", "state"]]
    coll = e[~e["is_p2p"]]
    unobserved = matching.dialects.unobserved_ranks
    if matching.dialects.completion_unobserved:
        # No completion reports (gloo, a hook over a backend without them): a rank is
        # blocked in its newest entry, plus any op that did not retire.
        last = e.loc[e.groupby("rank")["record_id"].idxmax()] if len(e) else e
        last = last[~last["is_p2p"]]
        open_ = coll[~coll["retired"]]
        pend = pd.concat([last, open_])
    elif unobserved:
        # Mixed: each rank by its own dialect.
        blind = e["rank"].isin(list(unobserved)).to_numpy()
        mine = e[blind]
        last = mine.loc[mine.groupby("rank")["record_id"].idxmax()] if len(mine) else mine
        last = last[~last["is_p2p"]]
        blind_coll = coll[coll["rank"].isin(list(unobserved))]
        pend = pd.concat([coll[~coll["rank"].isin(list(unobserved)) & (coll["state"] != "completed")],
                          last, blind_coll[~blind_coll["retired"]]])
    else:
        pend = coll[coll["state"] != "completed"]
    if pend.empty:
        return pd.DataFrame({"pg_name": [], "rank": [], "seq": []})
    out = pend.groupby(["pg_name", "rank"], observed=True)["seq"].min().reset_index()
    out["pg_name"] = out["pg_name"].astype(str)
    return out


def _blocks(names: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[object]]:
    """Rows grouped by name, groups in order of first appearance and rows in their order
    (as ``groupby(sort=False)``): (row order, block bounds, names)."""
    codes, uniques = pd.factorize(names)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    return order, bounds, list(uniques)


def _completed_ranks(tables: Tables, levels: set[tuple[str, int]]) -> dict[tuple[str, int], set[int]]:
    """For each (group, seq) of ``levels``: the ranks whose entry of it completed."""
    e = tables.entries
    if not levels:
        return {}
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    done = e.loc[~e["is_p2p"] & (e["state"] == "completed") & np.isin(e["seq"].to_numpy(), seqs),
                 ["pg_name", "seq", "rank"]]
    out: dict[tuple[str, int], set[int]] = {}
    for g, n, r in zip(done["pg_name"].astype(str), done["seq"].tolist(), done["rank"].tolist()):
        if (g, n) in levels:
            out.setdefault((g, n), set()).add(int(r))
    return out


def _ops_at(colls: pd.DataFrame, levels: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The op of each (group, seq) of ``levels`` that the matching knows."""
    if not levels or colls.empty:
        return {}
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    rows = colls.loc[np.isin(colls["seq"].to_numpy(np.int64), seqs), ["pg_name", "seq", "op"]]
    return {(g, int(n)): str(o) for g, n, o in zip(rows["pg_name"], rows["seq"], rows["op"])
            if (g, int(n)) in levels}


def waits(tables: Tables, matching: Matching) -> pd.DataFrame:
    """Every wait edge, one row each (columns ``WAIT_COLUMNS``).

    Groups are walked with numpy slices of the (small) progress table; the entries are only
    consulted for the (group, seq) pairs someone waits in.
    """
    rows: list[tuple[int, int, str, str, int, str, str] | _Waits] = []
    # Waits in an op queued behind the waiter's earliest unfinished op (it is not blocked in
    # it yet): kept unless they close a cycle, see _without_new_cycles.
    later: list[tuple[int, int, str, str, int, str, str]] = []
    blocks: list[_Block] = []  # waits of one op too many to list, see MAX_BLOCK_EDGES
    prog = matching.progress
    pending = _pending_first(tables, matching)
    pend_order, pend_bounds, pend_names = _blocks(pending["pg_name"].to_numpy(dtype=object))
    pend_ranks = pending["rank"].to_numpy()[pend_order].tolist()
    pend_seqs = pending["seq"].to_numpy()[pend_order].tolist()
    pending_by_group = {
        str(name): (pend_ranks[pend_bounds[i]:pend_bounds[i + 1]], pend_seqs[pend_bounds[i]:pend_bounds[i + 1]])
        for i, name in enumerate(pend_names)
    }
    # Stream order is evidence only where completions are: not for gloo, nor for a rank
    # whose completions stopped being observed.
    unobserved = set(matching.dialects.unobserved_ranks)
    heads = ({} if matching.dialects.completion_unobserved
             else blocked_in(tables, set(matching.stale_completers) | unobserved))

    order, bounds, names = _blocks(prog["pg_name"].to_numpy(dtype=object))
    p_rank = prog["rank"].to_numpy()[order]
    p_enq = prog["enqueued"].to_numpy()[order]
    p_src = prog["source"].to_numpy(dtype=object)[order]
    p_desc = prog["pg_desc"].to_numpy(dtype=object)[order]

    # The (group, seq) pairs waited in: the op after each laggard's progress, and the ops
    # members of groups with silent members are pending in.
    levels: set[tuple[str, int]] = set()
    for i, name in enumerate(names):
        q = p_enq[bounds[i]:bounds[i + 1]]
        known = q[q >= 0]
        if len(known):
            levels.update((str(name), int(n) + 1) for n in np.unique(known[known < known.max()]))
        if len(known) < len(q) and str(name) in pending_by_group:
            levels.update((str(name), int(n)) for n in pending_by_group[str(name)][1])
    ops = _ops_at(matching.collectives, levels)
    completed = (_completed_ranks(tables, levels)
                 if not matching.dialects.completion_unobserved and len(tables.entries) else {})

    for i, name in enumerate(names):
        name = str(name)
        sl = slice(bounds[i], bounds[i + 1])
        ranks, enq, src = p_rank[sl], p_enq[sl], p_src[sl]
        desc = str(p_desc[sl.start])
        known = enq >= 0
        k_ranks, k_enq = ranks[known], enq[known]
        if len(k_enq):
            frontier = int(k_enq.max())
            lag_ranks, lag_levels = k_ranks[k_enq < frontier], k_enq[k_enq < frontier] + 1
            level_size = dict(zip(*np.unique(lag_levels, return_counts=True)))
            waiting: dict[int, list[int]] = {}  # level -> its waiters, the same for each laggard
            waiting_later: dict[int, list[int]] = {}  # level -> waiters with an earlier open op
            level_block: dict[int, _Block] = {}
            for lag_rank, n in zip(lag_ranks.tolist(), lag_levels.tolist()):
                if n not in waiting:
                    done = completed.get((name, n), ())
                    all_waiters = [w for w in k_ranks[k_enq >= n].tolist() if w not in done]
                    head = (False, name, n)
                    waiting[n] = [w for w in all_waiters if heads.get(w, head) == head]
                    waiting_later[n] = [w for w in all_waiters if heads.get(w, head) != head]
                waiters = waiting[n]
                op = ops.get((name, n))
                kind = "collective" if op is not None else "unrecorded"
                if len(waiters) * int(level_size[n]) > MAX_BLOCK_EDGES:
                    if n not in level_block:
                        level_block[n] = _Block(waiters, lag_ranks[lag_levels == n].tolist())
                        blocks.append(level_block[n])
                    rows.append(_Waits(level_block[n], holder=lag_rank, row=(
                        name, desc, n, op or "unrecorded", kind)))
                else:
                    rows.extend((w, int(lag_rank), name, desc, n, op or "unrecorded", kind)
                                for w in waiters)
                later.extend((w, int(lag_rank), name, desc, n, op or "unrecorded", kind)
                             for w in waiting_later[n][:MAX_LATER_WAITERS])
        if not known.all():
            pend = pending_by_group.get(name)
            if pend is not None:
                lowest_known = int(k_enq.min()) if len(k_enq) else None
                # A member whose dumps hold no buffer of this group's backend is unseen
                # here, not silent: nobody waits on it for that.
                silent = [(r, s) for r, s in zip(ranks[~known].tolist(), src[~known].tolist())
                          if s != "not_recorded"]
                # A known member that has not joined explains the other waits.
                waiting_on_silent = [(int(w), int(n)) for w, n in zip(*pend)
                                     if lowest_known is None or lowest_known >= int(n)]
                block = None
                if len(waiting_on_silent) * len(silent) > MAX_BLOCK_EDGES:
                    block = _Block([w for w, _ in waiting_on_silent], [r for r, _ in silent])
                    blocks.append(block)
                for w, n in waiting_on_silent:
                    op = ops.get((name, n), "unknown")
                    if block is not None:
                        rows.append(_Waits(block, waiter=w, row=(name, desc, n, op), kinds=silent))
                        continue
                    rows.extend((w, int(s_rank), name, desc, n, op,
                                 "no_dump" if s == "no_dump" else "silent") for s_rank, s in silent)

    if matching.dialects.completion_unobserved and matching.dialects.p2p_unrecorded:
        rows.extend(_gloo_unrecorded_waits(tables, prog))

    p2p = matching.p2p
    if len(p2p):
        blocked = p2p[p2p["peer_state"].isin(["not_posted", "no_dump"]) & (p2p["state"] != "completed")]
        # A rank whose completions stopped being observed shows finished send/recv as
        # scheduled: its p2p states are no evidence that it waits.
        blocked = blocked[~blocked["rank"].isin(list(matching.stale_completers))]
        for r, g, d, op, peer, pseq, st in blocked[
                ["rank", "pg_name", "pg_desc", "op", "peer", "p2p_seq", "peer_state"]].itertuples(index=False):
            row = (int(r), int(peer), str(g), str(d), int(pseq), str(op),
                   "p2p" if st == "not_posted" else "no_dump")
            (rows if heads.get(row[0], (True, row[2], row[4])) == (True, row[2], row[4]) else later).append(row)
    direct = [r for r in rows if not isinstance(r, _Waits)]
    if blocks:
        _keep_cycles(direct + later, blocks)
    if not matching.dialects.completion_unobserved:
        # Members of a collective stuck on the network or a GPU, and ranks whose GPU stopped
        # completing, are blocked too: ranks whose ops sit behind theirs wait on them.
        members = tables.members()
        stuck = {int(m) for g, _ in stuck_collectives(tables, matching, heads) for m in members.get(g, ())}
        stuck |= set(matching.stale_completers)
        rows.extend(_queued_waits(tables, matching, direct, blocks, heads, stuck))
    if later:
        rows.extend(_without_new_cycles(rows, later, blocks))
    if blocks:
        rows = [row for r in rows for row in (r.rows() if isinstance(r, _Waits) else (r,))]
    out = pd.DataFrame(rows, columns=WAIT_COLUMNS)
    if len(out):
        out = out.drop_duplicates(["waiter", "holder", "pg_name", "seq", "op", "kind"])
        out = out.sort_values(["holder", "pg_name", "seq", "waiter"], ignore_index=True)
    return out.astype({"waiter": "int32", "holder": "int32", "seq": "int64"})


def _without_new_cycles(rows: list[tuple[int, int, str, str, int, str, str] | _Waits],
                        later: list[tuple[int, int, str, str, int, str, str]],
                        blocks: Sequence[_Block]) -> list[tuple[int, int, str, str, int, str, str]]:
    """The waits of ``later`` that do not join ranks into a cycle the other waits do not form.

    A rank waiting in an op queued behind its own unfinished op will wait on that peer
    next, so the edge is kept as evidence; but the peer may well be blocked on the rank's
    current op (a pipeline stage that stopped posting because its stream is stuck), and
    such a wait must not turn two blocked stages into a deadlock or hide who blocked them.
    """
    base = nx.DiGraph()
    for r in rows:
        if not isinstance(r, _Waits):
            base.add_edge(r[0], r[1])
    for i, block in enumerate(blocks):
        base.add_edges_from((w, ("block", i)) for w in block.waiters)
        base.add_edges_from((("block", i), h) for h in block.holders)
    full = base.copy()
    full.add_edges_from((w, h) for w, h, *_ in later)
    base_comp = {n: i for i, c in enumerate(nx.strongly_connected_components(base)) for n in c}
    full_comp = {n: i for i, c in enumerate(nx.strongly_connected_components(full)) for n in c}
    return [r for r in later
            if full_comp[r[0]] != full_comp[r[1]]
            or (r[0] in base_comp and base_comp.get(r[0]) == base_comp.get(r[1]))]


class _Block:
    """The waits of one op when its waiters x holders pairs exceed ``MAX_BLOCK_EDGES``.

    Kept edges: every waiter -> the lowest holder, the lowest waiter -> every holder, and
    every edge of a waiter that shares a strongly connected component with the block (one
    of its holders waits on it, transitively). So every waiter still waits on someone,
    every holder is still waited on, the components and the edges inside them are those of
    the full graph, and no component that had a way out loses it: the roots, deadlock
    cycles and culprits are those of the full graph.
    """

    def __init__(self, waiters: list[int], holders: list[int]) -> None:
        self.waiters = waiters
        self.holders = holders
        self.lowest_waiter = min(waiters) if waiters else -1
        self.lowest_holder = min(holders) if holders else -1
        self.in_cycle: set[int] = set()  # waiters in a component with a holder

    def keeps(self, waiter: int, holder: int) -> bool:
        return (holder == self.lowest_holder or waiter == self.lowest_waiter
                or waiter in self.in_cycle)


@dataclass(frozen=True, slots=True)
class _Waits:
    """Placeholder for the rows of a block at one holder (or one waiter), in row order."""

    block: _Block
    row: tuple[object, ...]
    holder: int | None = None
    waiter: int | None = None
    kinds: list[tuple[int, str]] | None = None  # silent holders and their sources

    def rows(self) -> list[tuple[int, int, str, str, int, str, str]]:
        keeps = self.block.keeps
        if self.holder is not None:
            name, desc, n, op, kind = self.row
            return [(w, self.holder, name, desc, n, op, kind)  # type: ignore[misc]
                    for w in self.block.waiters if keeps(w, self.holder)]
        name, desc, n, op = self.row
        assert self.waiter is not None and self.kinds is not None
        return [(self.waiter, h, name, desc, n, op, "no_dump" if s == "no_dump" else "silent")  # type: ignore[misc]
                for h, s in self.kinds if keeps(self.waiter, h)]


def _keep_cycles(direct: list[tuple[int, int, str, str, int, str, str]], blocks: list[_Block]) -> None:
    """Mark the waiters of each block that share a strongly connected component with it,
    in the full graph (a hub node per block stands for its waiters x holders edges)."""
    g = nx.DiGraph()
    g.add_edges_from((w, h) for w, h, *_ in direct)
    for i, block in enumerate(blocks):
        g.add_edges_from((w, ("block", i)) for w in block.waiters)
        g.add_edges_from((("block", i), h) for h in block.holders)
    for component in nx.strongly_connected_components(g):
        for i, block in enumerate(blocks):
            if ("block", i) in component:
                block.in_cycle = {w for w in block.waiters if w in component}


def _queued_waits(tables: Tables, matching: Matching,
                  direct: list[tuple[int, int, str, str, int, str, str]],
                  blocks: Sequence[_Block] = (),
                  heads: dict[int, tuple[bool, str, int]] | None = None,
                  stuck: set[int] = frozenset(),
                  max_rounds: int = 64) -> list[tuple[int, int, str, str, int, str, str]]:
    """NCCL runs each rank's ops in stream order: an op every side posted still cannot
    finish while a peer's matching op is queued behind an op that peer is blocked in.

    A rank that waits on nobody directly but is blocked in such an op (its earliest
    unfinished one, ``heads``) waits on that peer: one edge, to the lowest blocked
    counterpart that does not itself (transitively) wait on this rank, so these edges never
    close a cycle and a culprit, whose peers are blocked because of it, never gets one.
    Rounds repeat while ranks become blocked (one pipeline stage per round at most). The
    graph stays linear in ranks.
    """
    heads = heads or {}
    e = tables.entries
    pend = e.loc[(e["state"] != "completed") & ~e["is_p2p"], ["rank", "pg_name", "pg_desc", "seq", "op"]]
    pend = pend.drop_duplicates(["rank", "pg_name", "seq"])
    pend_rows = [(int(r), str(gn), str(d), int(q), str(op)) for r, gn, d, q, op in zip(
        pend["rank"].tolist(), pend["pg_name"], pend["pg_desc"], pend["seq"].tolist(), pend["op"])
        if heads.get(int(r), (False, str(gn), int(q))) == (False, str(gn), int(q))]
    p2p = matching.p2p
    ppend = p2p[(p2p["peer_state"] == "paired") & (p2p["state"] != "completed")] if len(p2p) else p2p
    ppend_rows = [] if not len(ppend) else [
        (int(r), str(gn), str(d), int(q), str(op), int(peer)) for r, gn, d, q, op, peer in
        ppend[["rank", "pg_name", "pg_desc", "p2p_seq", "op", "peer"]].itertuples(index=False)
        if heads.get(int(r), (True, str(gn), int(q))) == (True, str(gn), int(q))]
    members = tables.members()
    g = nx.DiGraph()
    g.add_edges_from((w, h) for w, h, *_ in direct)
    for i, block in enumerate(blocks):
        # Waits too many to list: through a hub node, every waiter still reaches every holder.
        g.add_edges_from((w, ("block", i)) for w in block.waiters)
        g.add_edges_from((("block", i), h) for h in block.holders)
    blocked = {w for w, *_ in direct} | {w for block in blocks for w in block.waiters} | set(stuck)
    rows: list[tuple[int, int, str, str, int, str, str]] = []
    for _ in range(max_rounds):
        added: dict[int, tuple[int, int, str, str, int, str, str]] = {}
        waiting_on_me: dict[int, set[int]] = {}
        blocked_members: dict[str, list[int]] = {}  # per group, ascending

        def ancestors(r: int) -> set[int]:
            if r not in waiting_on_me:
                waiting_on_me[r] = nx.ancestors(g, r) if r in g else set()
            return waiting_on_me[r]

        def lowest_holder(r: int, peers: list[int]) -> int | None:
            """The lowest of ``peers`` (ascending) that is blocked and does not wait on r."""
            for m in peers:
                if m != r and m not in ancestors(r):
                    return m
            return None

        for r, gn, d, q, op in pend_rows:
            if r in blocked or r in added:
                continue
            if gn not in blocked_members:
                blocked_members[gn] = sorted({m for m in members.get(gn, ()) if m in blocked})
            holder = lowest_holder(r, blocked_members[gn])
            if holder is not None:
                added[r] = (r, int(holder), gn, d, q, op, "queued")
        for r, gn, d, q, op, peer in ppend_rows:
            if r in blocked or r in added:
                continue
            holder = lowest_holder(r, [peer] if peer in blocked else [])
            if holder is not None:
                added[r] = (r, int(holder), gn, d, q, op, "queued")
        # Two edges chosen in the same round may close a cycle together: commit them one
        # by one, each only if its holder does not already reach its waiter (a short walk:
        # a blocked rank's descendants are its chain to the ranks everybody waits on).
        committed = []
        for row in added.values():
            w, h = row[0], row[1]
            if h in g and w in g and _reaches(g, h, w):
                continue
            g.add_edge(w, h)
            committed.append(row)
        if not committed:
            break
        rows.extend(committed)
        blocked |= {row[0] for row in committed}
    return rows


def _reaches(g: nx.DiGraph, src: object, dst: object) -> bool:
    """Is there a path from ``src`` to ``dst``?"""
    seen = {src}
    stack = [src]
    while stack:
        node = stack.pop()
        for nxt in g.successors(node):
            if nxt == dst:
                return True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _gloo_unrecorded_waits(tables: Tables, prog: pd.DataFrame) -> list[tuple[int, int, str, str, int, str, str]]:
    """gloo: a member whose op counter (op_id units) stops before ops its peers enqueued that
    no buffer recorded (send/recv) is waited on through those unrecorded ops."""
    e = tables.entries
    recorded = set(zip(e["pg_name"].astype(str), e["op_id"].astype(int)))
    rows = []
    known = prog[(prog["op_progress"] >= 0) & prog["dumped"]]
    for name, grp in known.groupby("pg_name", sort=False):
        name = str(name)
        frontier = int(grp["op_progress"].max())
        desc = str(grp["pg_desc"].iloc[0])
        for lag_rank, lag in zip(grp["rank"], grp["op_progress"]):
            n = int(lag) + 1
            if lag >= frontier or (name, n) in recorded:
                continue  # a recorded collective: the sequence-number matching covers it
            for w, wp in zip(grp["rank"], grp["op_progress"]):
                if int(wp) >= n:
                    rows.append((int(w), int(lag_rank), name, desc, n, "unrecorded", "unrecorded"))
    return rows


__all__ = ["WAIT_COLUMNS", "WaitEdge", "blocked_in", "stuck_collectives", "waits"]
