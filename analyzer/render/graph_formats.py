"""The wait-for graph as text, GraphML or DOT (``hangscope graph``)."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import TYPE_CHECKING

import networkx as nx

from analyzer.escape import clean

if TYPE_CHECKING:
    from analyzer.analysis import Analysis


def _label(d: dict[str, object]) -> str:
    seq_word = "p2p seq" if d["op"] in ("send", "recv") else "seq"
    return f"{d['pg_desc'] or d['pg_name']} {seq_word} {d['seq']} {d['op']} ({d['kind']})"


def graph_text(analysis: Analysis, *, max_lines: int = 200) -> str:
    """One line per holder: who waits on it, and in what."""
    g = analysis.graph
    culprits = set(analysis.diagnosis.culprit_ranks)
    lines = [
        f"wait-for graph: {g.number_of_nodes()} ranks, {g.number_of_edges()} waits; "
        f"culprits: {', '.join(map(str, sorted(culprits))) or 'none'}"
    ]
    by_holder: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for a, b, d in g.edges(data=True):
        by_holder[int(b)][_label(d)].append(int(a))
    for holder in sorted(by_holder, key=lambda h: (h not in culprits, h)):
        mark = " [culprit]" if holder in culprits else ""
        dumped = "" if g.nodes[holder].get("dumped", True) else " [no dump]"
        lines.append(f"rank {holder}{mark}{dumped} is waited on by:")
        for label, waiters in sorted(by_holder[holder].items()):
            ws = sorted(waiters)
            shown = ", ".join(map(str, ws[:16])) + (
                f", ... ({len(ws)} ranks)" if len(ws) > 16 else ""
            )
            lines.append(f"  {shown} in {label}")
        if len(lines) > max_lines:
            lines.append(f"... {len(by_holder)} holders in all (use --format json)")
            break
    for cycle in analysis.diagnosis.deadlock_cycles:
        lines.append(cycle_text(g, cycle))
    return "\n".join(lines) + "\n"


def cycle_text(g: nx.DiGraph, cycle: tuple[int, ...]) -> str:
    """``cycle: 0, 1, 2 -> 3; 3 -> 0, 1, 2``: the waits among the ranks of a cycle that
    exist, waiters with the same holders on one arrow (never an order the waits do not have)."""
    members = set(cycle)
    holders: dict[int, tuple[int, ...]] = {}
    for w in sorted(members):
        hs = tuple(sorted(int(h) for h in g.successors(w) if int(h) in members))
        if hs:
            holders[w] = hs
    same: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for w, hs in holders.items():
        same[hs].append(w)
    arrows = [
        f"{', '.join(map(str, ws))} -> {', '.join(map(str, hs))}"
        for hs, ws in sorted(same.items(), key=lambda x: x[1][0])
    ]
    return "cycle: " + "; ".join(arrows)


def _export_graph(analysis: Analysis) -> nx.DiGraph:
    g = nx.DiGraph()
    culprits = set(analysis.diagnosis.culprit_ranks)
    for n, d in analysis.graph.nodes(data=True):
        if analysis.graph.degree(n) or n in culprits or not d.get("dumped", True):
            g.add_node(int(n), dumped=bool(d.get("dumped", True)), culprit=int(n) in culprits)
    for a, b, d in analysis.graph.edges(data=True):
        g.add_edge(
            int(a),
            int(b),
            **{k: (v if isinstance(v, (int, str)) else str(v)) for k, v in d.items()},
        )
    return g


def graph_graphml(analysis: Analysis) -> str:
    buf = io.BytesIO()
    nx.write_graphml(_export_graph(analysis), buf)
    return buf.getvalue().decode()


def _dot_id(text: str) -> str:
    text = clean(text)  # no raw control character from a dump reaches the DOT text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_dot(analysis: Analysis) -> str:
    g = _export_graph(analysis)
    lines = ["digraph waits {", "  rankdir=LR;"]
    for n, d in sorted(g.nodes(data=True)):
        style = ' style=filled fillcolor="#d62728" fontcolor=white' if d["culprit"] else ""
        shape = " shape=box" if not d["dumped"] else ""
        lines.append(f"  {n} [label={_dot_id(f'rank {n}')}{style}{shape}];")
    for a, b, d in sorted(g.edges(data=True)):
        lines.append(f"  {a} -> {b} [label={_dot_id(_label(d))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
