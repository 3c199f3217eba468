"""The wait-for graph: who waits on whom, and the ranks everybody ends up waiting on.

Ranks are nodes (a rank with no dump is a node too); the edges are the waits of
:mod:`analyzer.waits.edges`, one per (waiter, holder) with the label of its earliest wait.

* :func:`build_graph` turns the wait table into a ``networkx.DiGraph``;
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

from analyzer.normalize import Tables
from analyzer.waits.records import Wait


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
        heads = first.first()
        counts = first.size().reindex(heads.index)
        g.add_edges_from(
            (
                int(w),
                int(h),
                {
                    "pg_name": str(pg),
                    "pg_desc": str(d),
                    "seq": int(s),
                    "op": str(op),
                    "kind": str(k),
                    "count": int(c),
                },
            )
            for (w, h), pg, d, s, op, k, c in zip(
                heads.index,
                heads["pg_name"],
                heads["pg_desc"],
                heads["seq"].tolist(),
                heads["op"],
                heads["kind"],
                counts.tolist(),
            )
        )
    return g


@dataclass(frozen=True, slots=True)
class Roots:
    """What the graph concludes."""

    roots: tuple[int, ...]
    """Ranks others wait on that wait on nobody (sinks with waiters)."""
    cycles: tuple[tuple[int, ...], ...]
    """Deadlocked rank sets: strongly connected components of more than one rank."""
    cycle_culprits: tuple[int, ...]
    """In each sink cycle, the rank(s) blocked in a different group than the majority. A
    cycle of ranks with dumps whose only waits out of it are on ranks with none counts as a
    sink: their own entries show the cycle, which holds whatever those ranks did."""


def root_ranks(g: nx.DiGraph) -> Roots:
    """Sinks of the condensation that have waiters, and deadlock cycles."""
    if g.number_of_edges() == 0:
        return Roots((), (), ())
    # A rank with no wait either way is a component of its own without waiters: never a root
    # nor in a cycle. Left out (a large world of which few ranks dumped: docs/performance.md).
    active = [n for n, degree in g.degree() if degree]
    cond = nx.condensation(g if len(active) == len(g) else g.subgraph(active))
    members = nx.get_node_attributes(cond, "members")
    roots: list[int] = []
    cycles: list[tuple[int, ...]] = []
    culprits: list[int] = []
    for comp in cond.nodes:
        ranks = sorted(members[comp])
        if len(ranks) > 1:
            cycles.append(tuple(ranks))
        if cond.out_degree(comp) != 0 and not (len(ranks) > 1 and _held_apart(g, ranks)):
            continue
        if len(ranks) == 1:
            if g.in_degree(ranks[0]) > 0:
                roots.append(ranks[0])
            continue
        culprits.extend(_odd_ones(g, ranks))
    return Roots(tuple(sorted(roots)), tuple(sorted(cycles)), tuple(sorted(set(culprits))))


def _held_apart(g: nx.DiGraph, ranks: list[int]) -> bool:
    """Every rank of the cycle ``ranks`` has a dump, and every wait out of it is on a rank
    with none (whose own waits no file shows)."""
    if not all(g.nodes[r].get("dumped", False) for r in ranks):
        return False
    inside = set(ranks)
    out = {h for r in ranks for h in g.successors(r)} - inside
    return all(not g.nodes[h].get("dumped", False) for h in out)


def _odd_ones(g: nx.DiGraph, ranks: list[int]) -> list[int]:
    """Ranks of a deadlock cycle blocked in a different group than most of the cycle."""
    inside = set(ranks)
    blocked_in: dict[int, str] = {}
    for r in ranks:
        groups = sorted(
            {d["pg_desc"] or d["pg_name"] for _, h, d in g.out_edges(r, data=True) if h in inside}
        )
        blocked_in[r] = "|".join(groups)
    counts = Counter(blocked_in.values())
    if len(counts) < 2:
        return ranks
    top = counts.most_common()
    if top[0][1] == top[1][1]:
        return ranks
    major = top[0][0]
    return [r for r in ranks if blocked_in[r] != major]


def chain(g: nx.DiGraph, root: int, *, limit: int = 8) -> tuple[Wait, ...]:
    """The longest shortest wait path ending in ``root``, as steps from the far end. A path
    longer than ``limit`` keeps its first step and the ``limit - 1`` steps next to ``root``
    (where the culprit is); the steps between are left out, and the two kept steps around the
    gap do not meet (see :func:`chain_length`)."""
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
    steps: list[Wait] = []
    node = far
    while node != root:
        holder = nxt[node]
        data = g.edges[node, holder]
        steps.append(
            Wait(
                waiter=node,
                holder=holder,
                pg_name=data["pg_name"],
                pg_desc=data["pg_desc"],
                seq=data["seq"],
                op=data["op"],
                kind=data["kind"],
            )
        )
        node = holder
    if len(steps) > limit:
        steps = steps[:1] + steps[len(steps) - (limit - 1) :]
    return tuple(steps)


def chain_length(g: nx.DiGraph, root: int) -> int:
    """The number of waits on the path :func:`chain` shortens."""
    dist = nx.single_target_shortest_path_length(g, root)
    return max(dict(dist).values(), default=0)


def waiters_of(g: nx.DiGraph, rank: int) -> list[int]:
    """Every rank that transitively waits on ``rank``."""
    return sorted(nx.ancestors(g, rank))


__all__ = ["Roots", "build_graph", "chain", "root_ranks", "waiters_of"]
