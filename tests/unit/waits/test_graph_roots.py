"""Roots and cycles of the wait-for graph, with ranks that wait on nobody and nobody waits on."""

from __future__ import annotations

import networkx as nx

from analyzer.waits.graph import root_ranks


def _edge(g: nx.DiGraph, waiter: int, holder: int, desc: str) -> None:
    g.add_edge(waiter, holder, pg_name=desc, pg_desc=desc)


def _graph(isolated: int) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(12 + isolated))  # ranks 12.. have no wait either way (missing dumps)
    _edge(g, 0, 1, "tp")
    _edge(g, 2, 1, "tp")
    _edge(g, 1, 3, "dp")  # 3 is a root: two levels of waiters
    _edge(g, 4, 5, "pp")
    _edge(g, 5, 6, "pp")
    _edge(g, 6, 4, "dp")  # a cycle in which 6 is blocked in another group
    _edge(g, 7, 4, "pp")
    return g


def test_ranks_without_waits_change_nothing() -> None:
    want = root_ranks(_graph(0))
    assert want.roots == (3,) and want.cycles == ((4, 5, 6),) and want.cycle_culprits == (6,)
    assert root_ranks(_graph(100_000)) == want


def test_a_graph_without_waits_has_no_roots() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(5))
    assert root_ranks(g) == root_ranks(nx.DiGraph())
    assert root_ranks(g).roots == ()
