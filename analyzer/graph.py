"""The wait-for graph: who waits on whom, and the ranks everybody ends up waiting on.

Ranks are nodes (a rank with no dump is a node too). An edge ``A -> B`` means A is blocked
in an operation that B has not joined: a collective B has not enqueued, a send/recv B has
not posted, or any op of a group whose member B wrote no dump. Edges carry the group (name
and desc), sequence number, op and kind.

* :func:`waits` derives the edges from the matching;
* :func:`build_graph` turns them into a ``networkx.DiGraph``;
* :func:`root_ranks` finds the ranks that others transitively wait on and that wait on
  nobody (sink components of the condensation); a sink component of more than one rank is
  a deadlock;
* :func:`chain` explains a root: the longest wait path that ends in it.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import networkx as nx
import pandas as pd

from analyzer.matching import Matching
from analyzer.tables import Tables

WAIT_COLUMNS = ["waiter", "holder", "pg_name", "pg_desc", "seq", "op", "kind"]


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
    e = tables.entries
    coll = e[~e["is_p2p"]]
    if matching.gloo_like:
        # gloo never reports completion; a rank is blocked in its newest entry, plus any
        # op that did not retire.
        last = e.loc[e.groupby("rank")["record_id"].idxmax()] if len(e) else e
        last = last[~last["is_p2p"]]
        open_ = coll[~coll["retired"]]
        pend = pd.concat([last, open_])
    else:
        pend = coll[coll["state"].astype(str) != "completed"]
    if pend.empty:
        return pd.DataFrame({"pg_name": [], "rank": [], "seq": []})
    out = pend.groupby(["pg_name", "rank"], observed=True)["seq"].min().reset_index()
    out["pg_name"] = out["pg_name"].astype(str)
    return out


def waits(tables: Tables, matching: Matching) -> pd.DataFrame:
    """Every wait edge, one row each (columns ``WAIT_COLUMNS``)."""
    rows: list[tuple[int, int, str, str, int, str, str]] = []
    prog = matching.progress
    colls = matching.collectives
    ops = {(g, int(s)): str(o) for g, s, o in colls[["pg_name", "seq", "op"]].itertuples(index=False)}
    e = tables.entries
    completed = set()
    if not matching.gloo_like and len(e):
        done = e[(~e["is_p2p"]) & (e["state"].astype(str) == "completed")]
        completed = set(zip(done["pg_name"].astype(str), done["seq"].astype(int), done["rank"].astype(int)))
    pending = _pending_first(tables, matching)
    pending_by_group = {str(g): grp for g, grp in pending.groupby("pg_name")} if len(pending) else {}

    for name, grp in prog.groupby("pg_name", sort=False):
        name = str(name)
        desc = str(grp["pg_desc"].iloc[0])
        known = grp[grp["enqueued"] >= 0]
        silent = grp[(grp["enqueued"] < 0)]
        if len(known):
            frontier = int(known["enqueued"].max())
            enq = known["enqueued"].to_numpy()
            ranks = known["rank"].to_numpy()
            for lag_rank, lag_prog in zip(ranks[enq < frontier], enq[enq < frontier]):
                n = int(lag_prog) + 1
                waiters = [int(w) for w in ranks[enq >= n] if (name, n, int(w)) not in completed]
                op = ops.get((name, n))
                kind = "collective" if op is not None else "unrecorded"
                for w in waiters:
                    rows.append((w, int(lag_rank), name, desc, n, op or "unrecorded", kind))
        if len(silent):
            pend = pending_by_group.get(name)
            if pend is not None:
                lowest_known = int(known["enqueued"].min()) if len(known) else None
                for w, n in zip(pend["rank"], pend["seq"]):
                    if lowest_known is not None and lowest_known < int(n):
                        continue  # a known member that has not joined explains the wait
                    for s_rank, src in zip(silent["rank"], silent["source"]):
                        kind = "no_dump" if src == "no_dump" else "silent"
                        rows.append((int(w), int(s_rank), name, desc, int(n),
                                     ops.get((name, int(n)), "unknown"), kind))

    if matching.gloo_like:
        rows.extend(_gloo_unrecorded_waits(tables, prog))

    p2p = matching.p2p
    if len(p2p):
        blocked = p2p[p2p["peer_state"].isin(["not_posted", "no_dump"]) & (p2p["state"] != "completed")]
        # A rank whose completions stopped being observed shows finished send/recv as
        # scheduled: its p2p states are no evidence that it waits.
        blocked = blocked[~blocked["rank"].isin(list(matching.stale_completers))]
        for r, g, d, op, peer, pseq, st in blocked[
                ["rank", "pg_name", "pg_desc", "op", "peer", "p2p_seq", "peer_state"]].itertuples(index=False):
            rows.append((int(r), int(peer), str(g), str(d), int(pseq), str(op),
                         "p2p" if st == "not_posted" else "no_dump"))
    if not matching.gloo_like:
        rows.extend(_queued_waits(tables, matching, list(rows)))
    out = pd.DataFrame(rows, columns=WAIT_COLUMNS)
    if len(out):
        out = out.drop_duplicates(["waiter", "holder", "pg_name", "seq", "op", "kind"])
        out = out.sort_values(["holder", "pg_name", "seq", "waiter"], ignore_index=True)
    return out.astype({"waiter": "int32", "holder": "int32", "seq": "int64"})


def _queued_waits(tables: Tables, matching: Matching,
                  direct: list[tuple[int, int, str, str, int, str, str]],
                  max_rounds: int = 8) -> list[tuple[int, int, str, str, int, str, str]]:
    """NCCL runs each rank's ops in stream order: an op every side posted still cannot
    finish while a peer's matching op is queued behind an op that peer is blocked in.

    A rank that waits on nobody directly but has such an op in flight waits on that peer:
    one edge, to the lowest blocked counterpart that does not itself (transitively) wait on
    this rank, so these edges never close a cycle and a culprit, whose peers are blocked
    because of it, never gets one. The graph stays linear in ranks.
    """
    e = tables.entries
    pend = e[(e["state"].astype(str) != "completed") & ~e["is_p2p"]][["rank", "pg_name", "pg_desc", "seq", "op"]]
    pend = pend.drop_duplicates(["rank", "pg_name", "seq"])
    p2p = matching.p2p
    ppend = p2p[(p2p["peer_state"] == "paired") & (p2p["state"] != "completed")] if len(p2p) else p2p
    members = tables.members()
    g = nx.DiGraph()
    g.add_edges_from((w, h) for w, h, *_ in direct)
    blocked = {w for w, *_ in direct}
    rows: list[tuple[int, int, str, str, int, str, str]] = []
    for _ in range(max_rounds):
        added: dict[int, tuple[int, int, str, str, int, str, str]] = {}
        waiting_on_me: dict[int, set[int]] = {}

        def ancestors(r: int) -> set[int]:
            if r not in waiting_on_me:
                waiting_on_me[r] = nx.ancestors(g, r) if r in g else set()
            return waiting_on_me[r]

        candidates = [
            (int(r), str(gn), str(d), int(q), str(op), [m for m in members.get(str(gn), ()) if m != r])
            for r, gn, d, q, op in pend[~pend["rank"].isin(list(blocked))].itertuples(index=False)
        ]
        if len(ppend):
            candidates += [
                (int(r), str(gn), str(d), int(q), str(op), [int(peer)])
                for r, gn, d, q, op, peer in ppend[~ppend["rank"].isin(list(blocked))][
                    ["rank", "pg_name", "pg_desc", "p2p_seq", "op", "peer"]].itertuples(index=False)
            ]
        for r, gn, d, q, op, peers in candidates:
            if r in added:
                continue
            holders = [m for m in peers if m in blocked and m not in ancestors(r)]
            if holders:
                added[r] = (r, int(min(holders)), gn, d, q, op, "queued")
        if not added:
            break
        rows.extend(added.values())
        g.add_edges_from((w, h) for w, h, *_ in added.values())
        blocked |= set(added)
    return rows


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


def build_graph(tables: Tables, wait_rows: pd.DataFrame) -> nx.DiGraph:
    """The wait-for graph: every rank a node; one edge per (waiter, holder) with the label of
    its earliest wait (``pg_name``, ``pg_desc``, ``seq``, ``op``, ``kind``) and ``count``."""
    g = nx.DiGraph()
    dumped = set(tables.dumped_ranks)
    for r in range(tables.world_size):
        g.add_node(r, dumped=r in dumped)
    for r in dumped:
        g.add_node(r, dumped=True)
    if len(wait_rows):
        first = wait_rows.sort_values(["seq"]).groupby(["waiter", "holder"], sort=False)
        counts = first.size()
        for (w, h), row in first.first().iterrows():
            g.add_edge(int(w), int(h), pg_name=str(row["pg_name"]), pg_desc=str(row["pg_desc"]),
                       seq=int(row["seq"]), op=str(row["op"]), kind=str(row["kind"]),
                       count=int(counts[(w, h)]))
    return g


@dataclass(frozen=True, slots=True)
class Roots:
    """What the graph concludes."""

    roots: tuple[int, ...]
    """Ranks others wait on that wait on nobody (sinks with waiters)."""
    cycles: tuple[tuple[int, ...], ...]
    """Deadlocked rank sets: strongly connected components of more than one rank."""
    cycle_culprits: tuple[int, ...]
    """In each sink cycle, the rank(s) blocked in a different group than the majority."""


def root_ranks(g: nx.DiGraph) -> Roots:
    """Sinks of the condensation that have waiters, and deadlock cycles."""
    if g.number_of_edges() == 0:
        return Roots((), (), ())
    cond = nx.condensation(g)
    members = nx.get_node_attributes(cond, "members")
    roots: list[int] = []
    cycles: list[tuple[int, ...]] = []
    culprits: list[int] = []
    for comp in cond.nodes:
        ranks = sorted(members[comp])
        if len(ranks) > 1:
            cycles.append(tuple(ranks))
        if cond.out_degree(comp) != 0:
            continue
        if len(ranks) == 1:
            if g.in_degree(ranks[0]) > 0:
                roots.append(ranks[0])
            continue
        culprits.extend(_odd_ones(g, ranks))
    return Roots(tuple(sorted(roots)), tuple(sorted(cycles)), tuple(sorted(set(culprits))))


def _odd_ones(g: nx.DiGraph, ranks: list[int]) -> list[int]:
    """Ranks of a deadlock cycle blocked in a different group than most of the cycle."""
    inside = set(ranks)
    blocked_in: dict[int, str] = {}
    for r in ranks:
        groups = sorted({d["pg_desc"] or d["pg_name"] for _, h, d in g.out_edges(r, data=True) if h in inside})
        blocked_in[r] = "|".join(groups)
    counts = Counter(blocked_in.values())
    if len(counts) < 2:
        return ranks
    top = counts.most_common()
    if top[0][1] == top[1][1]:
        return ranks
    major = top[0][0]
    return [r for r in ranks if blocked_in[r] != major]


def chain(g: nx.DiGraph, root: int, *, limit: int = 8) -> list[dict[str, object]]:
    """The longest shortest wait path ending in ``root``, as steps from the far end.

    Each step is ``{"waiter", "holder", "pg_name", "pg_desc", "seq", "op", "kind"}``.
    """
    dist = {root: 0}
    nxt: dict[int, int] = {}
    queue = deque([root])
    while queue:
        node = queue.popleft()
        for pred in sorted(g.predecessors(node)):
            if pred not in dist:
                dist[pred] = dist[node] + 1
                nxt[pred] = node
                queue.append(pred)
    far = min(dist, key=lambda n: (-dist[n], n))
    steps: list[dict[str, object]] = []
    node = far
    while node != root and len(steps) < limit:
        holder = nxt[node]
        data = g.edges[node, holder]
        steps.append({"waiter": node, "holder": holder, **{k: data[k] for k in (
            "pg_name", "pg_desc", "seq", "op", "kind")}})
        node = holder
    return steps


def waiters_of(g: nx.DiGraph, rank: int) -> list[int]:
    """Every rank that transitively waits on ``rank``."""
    return sorted(nx.ancestors(g, rank))


__all__ = ["WaitEdge", "waits", "build_graph", "root_ranks", "chain", "waiters_of", "Roots",
           "WAIT_COLUMNS"]
