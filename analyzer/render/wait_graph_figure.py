"""The wait-for graph figure: culprits on the right, waiters by distance."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.render.figure_style import (
    CULPRIT,
    MAX_GRAPH_NODES,
    base_layout,
    clip,
    members_label,
    ranks_text,
    top_margin,
)
from analyzer.render.sentences import for_plot
from analyzer.terms import group_label, is_p2p_op

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis


def _distances(g: Any, targets: set[int]) -> dict[int, int]:
    dist = {t: 0 for t in targets}
    queue = deque(sorted(targets))
    while queue:
        n = queue.popleft()
        for p in g.predecessors(n):
            if p not in dist:
                dist[p] = dist[n] + 1
                queue.append(p)
    return dist


@dataclass
class _Nodes:
    """The ranks drawn, merged into nodes, with their distance to a culprit and position."""

    analysis: Analysis
    culprits: set[int]
    in_cycle: set[int]
    involved: set[int]
    targets: set[int]
    dist: dict[int, int]
    dumped: dict[int, bool]
    notes: list[str]
    far: int
    """The distance given to ranks no culprit is reachable from."""
    cls: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    members: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    cols: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    pos: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)


def _nodes(analysis: Analysis) -> _Nodes:
    d = analysis.diagnosis
    g = analysis.graph
    culprits = set(int(r) for r in d.culprit_ranks)
    in_cycle = {int(r) for c in d.deadlock_cycles for r in c}
    involved = {int(n) for n in g.nodes if g.degree(n) > 0} | culprits
    sinks = {int(n) for n in involved if g.out_degree(n) == 0 and g.in_degree(n) > 0}
    targets = culprits | in_cycle | sinks
    dist = _distances(g, targets) if involved else {}
    far = max(dist.values(), default=0) + 1
    for n in involved:
        dist.setdefault(n, far)
    dumped = {int(n): bool(a.get("dumped", True)) for n, a in g.nodes(data=True)}
    return _Nodes(
        analysis=analysis,
        culprits=culprits,
        in_cycle=in_cycle,
        involved=involved,
        targets=targets,
        dist=dist,
        dumped=dumped,
        notes=[],
        far=far,
    )


def _classify(nd: _Nodes, merge: bool | None, max_nodes: int) -> None:
    """Merge ranks that wait alike, from the targets outwards."""
    g, dist, far = nd.analysis.graph, nd.dist, nd.far
    cls = nd.cls
    if merge is None:
        merge = len(nd.involved) > 24
    for n in sorted(nd.involved, key=lambda r: (dist[r], r)):
        if n in nd.targets:
            cls[n] = ("t", n)
            continue
        if not merge:
            cls[n] = ("w", dist[n], n)
            continue
        outs = []
        for _, h, a in g.out_edges(n, data=True):
            hc = cls.get(int(h), ("?", int(h))) if dist.get(int(h), far) < dist[n] else ("peer",)
            outs.append((hc, a.get("pg_desc") or a.get("pg_name"), a.get("op"), a.get("kind")))
        cls[n] = ("w", dist[n], nd.dumped.get(n, True), tuple(sorted(set(outs), key=repr)))
    if len(set(cls.values())) > max_nodes:
        for n in nd.involved:
            if n not in nd.targets:
                cls[n] = ("w", dist[n], nd.dumped.get(n, True))
        nd.notes.append(
            f"more than {max_nodes} distinct waiters: waiting ranks merged by distance only"
        )
    members: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for n, c in cls.items():
        members[c].append(n)
    nd.members = members
    nd.keys = sorted(members, key=lambda c: (-dist[members[c][0]], min(members[c])))
    merged = sum(1 for c in nd.keys if len(members[c]) > 1)
    if merged:
        nd.notes.append(
            f"{len(nd.involved)} ranks drawn as {len(nd.keys)} nodes: ranks that wait alike "
            "share a node (×N)"
        )
    uninvolved = nd.analysis.tables.world_size - len(nd.involved)
    if uninvolved > 0:
        nd.notes.append(f"{uninvolved} rank(s) neither wait nor are waited on: not drawn")


def _place(nd: _Nodes) -> None:
    """Column by distance (culprits at x=0, on the right), rows spread evenly; the members
    of a deadlock cycle on a ring, so the arrows between them do not overlap."""
    members = nd.members
    cols: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for c in nd.keys:
        cols[nd.dist[members[c][0]]].append(c)
    for k, cs in cols.items():
        cs.sort(key=lambda c: min(members[c]))
        m = len(cs)
        for i, c in enumerate(cs):
            nd.pos[c] = (-float(k), (m - 1) / 2.0 - i)
    for cycle in nd.analysis.diagnosis.deadlock_cycles:
        ring = [c for c in nd.keys if set(members[c]) & set(int(r) for r in cycle)]
        if len(ring) < 2:
            continue
        cx = sum(nd.pos[c][0] for c in ring) / len(ring)
        cy = sum(nd.pos[c][1] for c in ring) / len(ring)
        ry = max(1.0, len(ring) / 3.0)
        for i, c in enumerate(sorted(ring, key=lambda c: min(members[c]))):
            ang = math.pi / 2 - 2 * math.pi * i / len(ring)
            nd.pos[c] = (cx - 0.45 + 0.4 * math.cos(ang), cy + ry * math.sin(ang))
    nd.cols = cols


def _edges(nd: _Nodes) -> dict[tuple[int, int], dict[str, Any]]:
    """Edges aggregated between nodes, with their labels and whether a chain runs along."""
    d = nd.analysis.diagnosis
    chain_edges = {
        (int(s["waiter"]), int(s["holder"])) for steps in d.chains.values() for s in steps
    }
    index = {c: i for i, c in enumerate(nd.keys)}
    agg: dict[tuple[int, int], dict[str, Any]] = {}
    for a, b, attrs in nd.analysis.graph.edges(data=True):
        ca, cb = nd.cls.get(int(a)), nd.cls.get(int(b))
        if ca is None or cb is None:
            continue
        ia, ib = index[ca], index[cb]
        if ia == ib:
            continue
        rec = agg.setdefault((ia, ib), {"n": 0, "labels": {}, "chain": False, "kinds": set()})
        rec["n"] += 1
        lab = (
            str(attrs.get("pg_name")),
            str(attrs.get("pg_desc")),
            int(attrs.get("seq", -1)),
            str(attrs.get("op")),
            str(attrs.get("kind")),
        )
        rec["labels"][lab] = rec["labels"].get(lab, 0) + 1
        rec["kinds"].add(lab[4])
        rec["chain"] |= (int(a), int(b)) in chain_edges
    return agg


def _edge_hover(ra: list[int], rb: list[int], rec: dict[str, Any]) -> str:
    labels = sorted(rec["labels"].items(), key=lambda kv: -kv[1])
    lines = [
        f"{for_plot(clip(group_label(gn, gd), 70))} {'p2p ' if is_p2p_op(op) else ''}seq {s} · "
        f"{for_plot(op)} [{for_plot(k)}]" + (f" ×{c}" if c > 1 else "")
        for (gn, gd, s, op, k), c in labels[:6]
    ]
    if len(labels) > 6:
        lines.append(f"… {len(labels) - 6} more")
    return (
        f"<b>rank{'s' if len(ra) > 1 else ''} {for_plot(ranks_text(ra, 4))} wait on "
        f"rank{'s' if len(rb) > 1 else ''} {for_plot(ranks_text(rb, 4))}</b>"
        + (" (culprit chain)" if rec["chain"] else "")
        + "<br>"
        + "<br>".join(lines)
    )


def _add_edges(fig: go.Figure, nd: _Nodes) -> list[dict[str, Any]]:
    """Lines and hover markers of the edges; returns the arrow annotations."""
    import plotly.graph_objects as go

    agg = _edges(nd)
    ex: dict[str, list[float | None]] = {"plain": [], "chain": []}
    ey: dict[str, list[float | None]] = {"plain": [], "chain": []}
    mx, my, mtext = [], [], []
    annotations = []
    for (ia, ib), rec in agg.items():
        (x0, y0), (x1, y1) = nd.pos[nd.keys[ia]], nd.pos[nd.keys[ib]]
        which = "chain" if rec["chain"] else "plain"
        ex[which] += [x0, x1, None]
        ey[which] += [y0, y1, None]
        mx.append(x0 + 0.55 * (x1 - x0))
        my.append(y0 + 0.55 * (y1 - y0))
        mtext.append(_edge_hover(nd.members[nd.keys[ia]], nd.members[nd.keys[ib]], rec))
        if len(agg) <= 300:
            annotations.append(
                {
                    "x": x1,
                    "y": y1,
                    "ax": x0,
                    "ay": y0,
                    "xref": "x",
                    "yref": "y",
                    "axref": "x",
                    "ayref": "y",
                    "showarrow": True,
                    "arrowhead": 3,
                    "arrowsize": 1.2,
                    "standoff": 14,
                    "startstandoff": 8,
                    "arrowwidth": 2.5 if rec["chain"] else 1.2,
                    "arrowcolor": CULPRIT if rec["chain"] else "#7f8c9a",
                    "text": "",
                }
            )
    for which, color, width in (("plain", "#b8c2cc", 1), ("chain", CULPRIT, 2.5)):
        if ex[which]:
            fig.add_trace(
                go.Scatter(
                    x=ex[which],
                    y=ey[which],
                    mode="lines",
                    hoverinfo="skip",
                    line={"color": color, "width": width},
                    name="culprit chain" if which == "chain" else "waits on",
                    showlegend=which == "chain",
                )
            )
    if mx:
        fig.add_trace(
            go.Scatter(
                x=mx,
                y=my,
                mode="markers",
                hovertext=mtext,
                hoverinfo="text",
                marker={"size": 9, "color": "rgba(127,140,154,0.35)", "symbol": "circle"},
                name="wait (hover for group, seq, op)",
                showlegend=False,
            )
        )
    return annotations


_ROLES: dict[str, tuple[str, str]] = {
    "culprit": (CULPRIT, "diamond"),
    "deadlock cycle": ("#e67e22", "circle"),
    "no dump": ("#333333", "x"),
    "waiting": ("#3b73b9", "circle"),
    "waited on": ("#16a085", "square"),
}


def _role(nd: _Nodes, c: tuple[Any, ...]) -> str:
    rs = nd.members[c]
    if set(rs) & nd.culprits:
        return "culprit"
    if not all(nd.dumped.get(r, True) for r in rs):
        return "no dump"
    if set(rs) & nd.in_cycle:
        return "deadlock cycle"
    return "waited on" if c[0] == "t" else "waiting"


def _node_hover(nd: _Nodes, c: tuple[Any, ...], role: str) -> str:
    g = nd.analysis.graph
    rs = nd.members[c]
    wait_on = sorted({int(h) for r in rs for h in g.successors(r)})
    waited = sorted({int(w) for r in rs for w in g.predecessors(r)})
    return (
        f"<b>rank{'s' if len(rs) > 1 else ''} {for_plot(ranks_text(rs))}</b> · {for_plot(role)}<br>"
        f"distance to culprit: {nd.dist[rs[0]]}<br>"
        f"waits on: {for_plot(ranks_text(wait_on, 6)) if wait_on else 'nobody'}<br>"
        f"waited on by: {for_plot(ranks_text(waited, 6)) if waited else 'nobody'}"
        + ("" if all(nd.dumped.get(r, True) for r in rs) else "<br>wrote no dump")
    )


def _add_nodes(fig: go.Figure, nd: _Nodes) -> None:
    """Nodes, one trace per role so the legend explains the colours."""
    import plotly.graph_objects as go

    by_role: dict[str, list[tuple[Any, ...]]] = {role: [] for role in _ROLES}
    for c in nd.keys:
        by_role[_role(nd, c)].append(c)
    for role, cs in by_role.items():
        if not cs:
            continue
        color, symbol = _ROLES[role]
        labels = [
            members_label(nd.members[c]).removeprefix("ranks ").removeprefix("rank ") for c in cs
        ]
        fig.add_trace(
            go.Scatter(
                x=[nd.pos[c][0] for c in cs],
                y=[nd.pos[c][1] for c in cs],
                mode="markers+text",
                text=[for_plot(t) for t in labels],
                textposition="bottom center" if role != "culprit" else "middle right",
                textfont={"size": 11, "color": color if role == "culprit" else "#333"},
                marker={
                    "size": [16 + 6 * math.log2(len(nd.members[c])) for c in cs],
                    "color": color,
                    "symbol": symbol,
                    "line": {"width": 1.5, "color": "white"},
                },
                hovertext=[_node_hover(nd, c, role) for c in cs],
                hoverinfo="text",
                name=role,
            )
        )


def wait_graph(
    analysis: Analysis, *, max_nodes: int = MAX_GRAPH_NODES, merge: bool | None = None
) -> go.Figure:
    """The wait-for graph: culprits on the right, waiters further left by distance.

    An arrow ``A -> B`` means A is blocked in an op that B has not joined; hover the middle
    of an arrow for its group, sequence number, op and kind. Ranks that wait the same way
    (same distance, same kind of wait on the same holders) are merged into one node
    (``merge``; default: when more than 24 ranks are involved).
    """
    import plotly.graph_objects as go

    nd = _nodes(analysis)
    _classify(nd, merge, max_nodes)
    _place(nd)
    xs_all = [x for x, _ in nd.pos.values()] or [0.0]
    ys_all = [y for _, y in nd.pos.values()] or [0.0]
    fig = go.Figure()
    annotations = _add_edges(fig, nd)
    _add_nodes(fig, nd)
    notes = nd.notes
    if not nd.involved:
        notes.append("nobody waits on anybody: the wait-for graph is empty")
    ncols = max(nd.cols, default=0) + 1
    nrows = max((len(v) for v in nd.cols.values()), default=1)
    layout = base_layout(
        "Wait-for graph: who waits on whom (arrows point at the rank waited on)",
        notes,
        max(360, min(1600, 160 + 46 * nrows)),
    )
    fig.update_layout(
        **layout,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        margin={"l": 30, "r": 30, "t": top_margin(notes, 36), "b": 30},
        annotations=annotations,
        hovermode="closest",
        xaxis={
            "visible": True,
            "showgrid": False,
            "zeroline": False,
            "range": [min(xs_all) - 0.6, max(xs_all) + 0.8],
            "tickmode": "array",
            "tickvals": [-k for k in range(ncols)],
            "ticktext": [
                "culprit" if k == 0 else f"{k} hop{'s' if k > 1 else ''} away" for k in range(ncols)
            ],
        },
        yaxis={"visible": False, "range": [min(ys_all) - 0.8, max(ys_all) + 0.5]},
    )
    return fig
