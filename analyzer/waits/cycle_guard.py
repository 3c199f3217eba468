"""Waits that are too many to list, and waits that must not close a cycle.

:class:`Block` keeps the waits of one op in linear form when its waiters x holders pairs are
too many (``AnalysisConfig.max_block_edges``) while keeping the graph's components;
:func:`without_new_cycles` and :func:`queued_waits` add evidence waits only where they join
no ranks into a cycle the direct waits do not form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from analyzer.kernels import code_of, codes_at
from analyzer.kinds import PeerState, WaitKind
from analyzer.match import Matching
from analyzer.normalize import Tables

__all__ = [
    "Block",
    "Row",
    "Waits",
    "holder_kind",
    "hub_graph",
    "keep_cycles",
    "queued_waits",
    "without_new_cycles",
]

Row = tuple[int, int, str, str, int, str, str]


def holder_kind(source: str) -> str:
    """The wait kind on a member of unknown progress, from its progress ``source``."""
    return WaitKind.NO_DUMP.value if source == "no_dump" else WaitKind.SILENT.value


def without_new_cycles(
    rows: list[Row | Waits], later: list[Row], blocks: Sequence[Block]
) -> list[Row]:
    """The waits of ``later`` that do not join ranks into a cycle the other waits do not form.

    A rank waiting in an op queued behind its own unfinished op will wait on that peer
    next, so the edge is kept as evidence; but the peer may well be blocked on the rank's
    current op (a pipeline stage that stopped posting because its stream is stuck), and
    such a wait must not turn two blocked stages into a deadlock or hide who blocked them.
    """
    base = nx.DiGraph()
    for r in rows:
        if not isinstance(r, Waits):
            base.add_edge(r[0], r[1])
    for i, block in enumerate(blocks):
        base.add_edges_from((w, ("block", i)) for w in block.waiters)
        base.add_edges_from((("block", i), h) for h in block.holders)
    full = base.copy()
    full.add_edges_from((w, h) for w, h, *_ in later)
    base_comp = {n: i for i, c in enumerate(nx.strongly_connected_components(base)) for n in c}
    full_comp = {n: i for i, c in enumerate(nx.strongly_connected_components(full)) for n in c}
    return [
        r
        for r in later
        if full_comp[r[0]] != full_comp[r[1]]
        or (r[0] in base_comp and base_comp.get(r[0]) == base_comp.get(r[1]))
    ]


class Block:
    """The waits of one op when its waiters x holders pairs exceed ``max_block_edges``.

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
        return (
            holder == self.lowest_holder or waiter == self.lowest_waiter or waiter in self.in_cycle
        )


@dataclass(frozen=True, slots=True)
class Waits:
    """Placeholder for the rows of a block at one holder (or one waiter), in row order."""

    block: Block
    row: tuple[object, ...]
    holder: int | None = None
    waiter: int | None = None
    kinds: list[tuple[int, str]] | None = None  # silent holders and their sources

    def rows(self) -> list[Row]:
        keeps = self.block.keeps
        if self.holder is not None:
            name, desc, n, op, kind = self.row
            return [
                (w, self.holder, name, desc, n, op, kind)  # type: ignore[misc]
                for w in self.block.waiters
                if keeps(w, self.holder)
            ]
        name, desc, n, op = self.row
        assert self.waiter is not None and self.kinds is not None
        return [
            (self.waiter, h, name, desc, n, op, holder_kind(s))  # type: ignore[misc]
            for h, s in self.kinds
            if keeps(self.waiter, h)
        ]


def keep_cycles(direct: list[Row], blocks: list[Block]) -> None:
    """Mark the waiters of each block that share a strongly connected component with it,
    in the full graph (a hub node per block stands for its waiters x holders edges)."""
    g = hub_graph(direct, blocks)
    for component in nx.strongly_connected_components(g):
        for i, block in enumerate(blocks):
            if ("block", i) in component:
                block.in_cycle = {w for w in block.waiters if w in component}


_Pending = tuple[int, str, str, int, str]  # rank, group, desc, seq, op
_PendingP2P = tuple[int, str, str, int, str, int]  # ... and peer


def _pending_heads(
    tables: Tables,
    matching: Matching,
    heads: dict[int, tuple[bool, str, int]],
) -> tuple[list[_Pending], list[_PendingP2P]]:
    """Unfinished collectives and paired send/recv that are their rank's earliest open op."""
    e = tables.entries
    state = e["state"]
    open_coll = np.flatnonzero(
        (codes_at(state) != code_of(state, "completed")) & ~e["is_p2p"].to_numpy(bool)
    )
    pend = e[["rank", "pg_name", "pg_desc", "seq", "op"]].iloc[open_coll]
    pend = pend.drop_duplicates(["rank", "pg_name", "seq"])
    pend_rows = [
        (int(r), str(gn), str(d), int(q), str(op))
        for r, gn, d, q, op in zip(
            pend["rank"].tolist(),
            pend["pg_name"],
            pend["pg_desc"],
            pend["seq"].tolist(),
            pend["op"],
        )
        if heads.get(int(r), (False, str(gn), int(q))) == (False, str(gn), int(q))
    ]
    p2p = matching.p2p
    if len(p2p):
        unfinished = p2p[p2p["state"] != "completed"]  # few rows: the other test runs on those
        ppend = unfinished[unfinished["peer_state"] == PeerState.PAIRED.value]
    else:
        ppend = p2p
    ppend_rows = (
        []
        if not len(ppend)
        else [
            (int(r), str(gn), str(d), int(q), str(op), int(peer))
            for r, gn, d, q, op, peer in ppend[
                ["rank", "pg_name", "pg_desc", "p2p_seq", "op", "peer"]
            ].itertuples(index=False)
            if heads.get(int(r), (True, str(gn), int(q))) == (True, str(gn), int(q))
        ]
    )
    return pend_rows, ppend_rows


def hub_graph(direct: Sequence[Row], blocks: Sequence[Block] = ()) -> nx.DiGraph:
    """The graph of ``direct``'s edges, with a hub node per block standing for its waiters x
    holders edges (every waiter still reaches every holder)."""
    g = nx.DiGraph()
    g.add_edges_from((w, h) for w, h, *_ in direct)
    for i, block in enumerate(blocks):
        g.add_edges_from((w, ("block", i)) for w in block.waiters)
        g.add_edges_from((("block", i), h) for h in block.holders)
    return g


class _Round:
    """One round of queued waits: at most one new edge per rank not yet blocked."""

    def __init__(
        self, g: nx.DiGraph, blocked: set[int], members: dict[str, tuple[int, ...]]
    ) -> None:
        self.g, self.blocked, self.members = g, blocked, members
        self.added: dict[int, Row] = {}
        self._waiting_on: dict[int, set[int]] = {}
        self._blocked_members: dict[str, list[int]] = {}  # per group, ascending

    def _ancestors(self, r: int) -> set[int]:
        if r not in self._waiting_on:
            self._waiting_on[r] = nx.ancestors(self.g, r) if r in self.g else set()
        return self._waiting_on[r]

    def _lowest_holder(self, r: int, peers: list[int]) -> int | None:
        """The lowest of ``peers`` (ascending) that is blocked and does not wait on r."""
        for m in peers:
            if m != r and m not in self._ancestors(r):
                return m
        return None

    def collect(self, pend_rows: list[_Pending], ppend_rows: list[_PendingP2P]) -> None:
        for r, gn, d, q, op in pend_rows:
            if r in self.blocked or r in self.added:
                continue
            if gn not in self._blocked_members:
                self._blocked_members[gn] = sorted(
                    {m for m in self.members.get(gn, ()) if m in self.blocked}
                )
            holder = self._lowest_holder(r, self._blocked_members[gn])
            if holder is not None:
                self.added[r] = (r, int(holder), gn, d, q, op, WaitKind.QUEUED.value)
        for r, gn, d, q, op, peer in ppend_rows:
            if r in self.blocked or r in self.added:
                continue
            holder = self._lowest_holder(r, [peer] if peer in self.blocked else [])
            if holder is not None:
                self.added[r] = (r, int(holder), gn, d, q, op, WaitKind.QUEUED.value)

    def commit(self) -> list[Row]:
        """Two edges chosen in the same round may close a cycle together: commit them one
        by one, each only if its holder does not already reach its waiter (a short walk: a
        blocked rank's descendants are its chain to the ranks everybody waits on)."""
        committed = []
        for row in self.added.values():
            w, h = row[0], row[1]
            if h in self.g and w in self.g and _reaches(self.g, h, w):
                continue
            self.g.add_edge(w, h)
            committed.append(row)
        return committed


def queued_waits(
    tables: Tables,
    matching: Matching,
    direct: list[Row],
    blocks: Sequence[Block] = (),
    heads: dict[int, tuple[bool, str, int]] | None = None,
    stuck: set[int] | frozenset[int] = frozenset(),
    max_rounds: int = 64,
) -> list[Row]:
    """NCCL runs each rank's ops in stream order: an op every side posted still cannot
    finish while a peer's matching op is queued behind an op that peer is blocked in.

    A rank that waits on nobody directly but is blocked in such an op (its earliest
    unfinished one, ``heads``) waits on that peer: one edge, to the lowest blocked
    counterpart that does not itself (transitively) wait on this rank, so these edges never
    close a cycle and a culprit, whose peers are blocked because of it, never gets one.
    Rounds repeat while ranks become blocked (one pipeline stage per round at most). The
    graph stays linear in ranks.
    """
    pend_rows, ppend_rows = _pending_heads(tables, matching, heads or {})
    members = tables.members()
    g = hub_graph(direct, blocks)
    blocked = {w for w, *_ in direct} | {w for block in blocks for w in block.waiters} | set(stuck)
    rows: list[Row] = []
    for _ in range(max_rounds):
        round_ = _Round(g, blocked, members)
        round_.collect(pend_rows, ppend_rows)
        committed = round_.commit()
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
