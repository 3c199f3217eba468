"""The per-group progress figure: how far each rank is behind its group."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analyzer.render.figure_style import (
    CULPRIT,
    base_layout,
    clip,
    ranks_text,
    tick_labels,
    top_margin,
)
from analyzer.render.sentences import for_plot
from analyzer.terms import group_label

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis


# --------------------------------------------------------------------------- progress


def _rows(analysis: Analysis) -> tuple[pd.DataFrame, list[str]]:
    """The progress rows of groups of two or more, with their role, frontier, and the
    roles in order (smallest groups first)."""
    p = analysis.matching.progress
    sizes = dict(
        zip(
            analysis.tables.groups["pg_name"].astype(str),
            analysis.tables.groups["size"].astype(int),
        )
    )
    p = p[p["pg_name"].astype(str).map(sizes).fillna(0) > 1] if len(p) else p
    if not len(p):
        return p, []
    p = p.assign(
        role=[str(dd) if str(dd) else f"group {n}" for n, dd in zip(p["pg_name"], p["pg_desc"])]
    )
    known = p[p["enqueued"] >= 0]
    frontier = known.groupby("pg_name")["enqueued"].max()
    p = p.assign(frontier=p["pg_name"].map(frontier).fillna(-1).astype(int))
    role_order = (
        p.groupby("role")["pg_name"]
        .apply(lambda s: min(sizes.get(str(x), 0) for x in s) * -1)
        .sort_values(kind="stable")
    )
    return p, [str(r) for r in role_order.index]


@dataclass
class _Grid:
    """One cell per (group role, rank): lags, the values behind them, and unknown cells."""

    z_enq: np.ndarray
    z_cmp: np.ndarray
    c_enq: np.ndarray
    c_cmp: np.ndarray
    c_front: np.ndarray
    grp: np.ndarray
    unknown: tuple[list[int], list[str], list[str]] = field(default_factory=lambda: ([], [], []))


def _grid(p: pd.DataFrame, roles: list[str], world: int) -> _Grid:
    shape = (len(roles), world)
    g = _Grid(
        z_enq=np.full(shape, np.nan),
        z_cmp=np.full(shape, np.nan),
        c_enq=np.full(shape, np.nan),
        c_cmp=np.full(shape, np.nan),
        c_front=np.full(shape, np.nan),
        grp=np.full(shape, "", dtype=object),
    )
    ridx = {r: i for i, r in enumerate(roles)}
    ux, uy, utext = g.unknown
    rows: Any = p.itertuples(index=False) if roles else ()
    for row in rows:
        i, j = ridx[row.role], int(row.rank)
        if j >= world:
            continue
        if row.enqueued < 0 or row.frontier < 0:
            ux.append(j)
            uy.append(row.role)
            utext.append(
                f"rank {j} · {for_plot(clip(group_label(str(row.pg_name), str(row.pg_desc)), 70))}<br>"
                f"progress unknown ({for_plot(row.source)})"
            )
            continue
        lag = int(row.frontier) - int(row.enqueued)
        if np.isnan(g.z_enq[i, j]) or lag > g.z_enq[i, j]:
            g.z_enq[i, j] = lag
            g.c_enq[i, j] = row.enqueued
            g.c_cmp[i, j] = row.completed
            g.c_front[i, j] = row.frontier
            g.grp[i, j] = for_plot(clip(group_label(str(row.pg_name), str(row.pg_desc)), 70))
            g.z_cmp[i, j] = (
                (int(row.frontier) - int(row.completed)) if row.completed >= 0 else np.nan
            )
    return g


def _heatmaps(fig: go.Figure, g: _Grid, roles: list[str], world: int, n_rows: int) -> None:
    import plotly.graph_objects as go

    max_lag = (
        float(np.nanmax([np.nanmax(g.z_enq, initial=0), np.nanmax(g.z_cmp, initial=0)]))
        if len(roles)
        else 0.0
    )
    ticks = [
        v for v in (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000) if v <= max(1.0, max_lag)
    ]
    colorbar = {
        "title": {"text": "seqs behind"},
        "tickvals": [math.log10(1 + v) for v in ticks],
        "ticktext": [str(v) for v in ticks],
        "len": 0.9,
    }
    scale = [
        [0.0, "#f4f6f8"],
        [1e-9, "#fde0c5"],
        [0.35, "#f59e5b"],
        [0.7, "#e0452f"],
        [1.0, "#7b0d0d"],
    ]
    zmax = max(math.log10(1 + max(1.0, max_lag)), 0.3)
    custom = np.dstack([g.c_enq, g.c_cmp, g.c_front, g.grp]) if len(roles) else None
    tmpl = (
        "rank %{x} · %{customdata[3]}<br>enqueued %{customdata[0]} · completed %{customdata[1]}"
        "<br>group frontier %{customdata[2]}<extra></extra>"
    )
    for k, z in enumerate((g.z_enq, g.z_cmp)[:n_rows]):
        fig.add_trace(
            go.Heatmap(
                z=np.log10(1 + z) if len(roles) else [[None]],
                x=list(range(world)),
                y=roles or [""],
                customdata=custom,
                hovertemplate=tmpl,
                colorscale=scale,
                zmin=0,
                zmax=zmax,
                colorbar=colorbar,
                showscale=k == 0,
                xgap=1 if world <= 128 else 0,
                ygap=1,
            ),
            row=k + 1,
            col=1,
        )
    ux, uy, utext = g.unknown
    if ux:
        for k in range(1, n_rows + 1):
            fig.add_trace(
                go.Scatter(
                    x=ux,
                    y=uy,
                    mode="markers",
                    hovertext=utext,
                    hoverinfo="text",
                    marker={
                        "symbol": "x-thin-open",
                        "size": 8,
                        "color": "#333",
                        "line": {"width": 1.5},
                    },
                    name="unknown / no dump",
                    showlegend=k == 1,
                ),
                row=k,
                col=1,
            )


def _furthest_behind(fig: go.Figure, g: _Grid, roles: list[str]) -> None:
    """At scale a cell is a pixel wide: ring the ranks furthest behind in each group role."""
    import plotly.graph_objects as go

    lx, ly, ltext = [], [], []
    for i, role in enumerate(roles):
        row = g.z_enq[i]
        top = np.nanmax(row) if not np.isnan(row).all() else 0
        if top > 0:
            for j in np.flatnonzero(row == top)[:32]:
                lx.append(int(j))
                ly.append(role)
                ltext.append(f"rank {int(j)}: {int(top)} behind in {for_plot(role)}")
    if lx:
        fig.add_trace(
            go.Scatter(
                x=lx,
                y=ly,
                mode="markers",
                hovertext=ltext,
                hoverinfo="text",
                marker={
                    "symbol": "circle-open",
                    "size": 14,
                    "color": CULPRIT,
                    "line": {"width": 2},
                },
                name="furthest behind",
            ),
            row=1,
            col=1,
        )


def _dialect_notes(analysis: Analysis) -> list[str]:
    dialects = analysis.matching.dialects
    if dialects.completion_unobserved and dialects.p2p_unrecorded:
        return [
            "gloo does not report completion: completion lag comes from pg_status counters only "
            "(gloo retires an op that timed out as well)"
        ]
    if dialects.completion_unobserved:
        return [
            "these dumps do not report completion (every op was retired when issued): "
            "only enqueue progress is evidence"
        ]
    return []


def progress(analysis: Analysis) -> go.Figure:
    """Per group role and rank: how far behind its group's frontier each rank is.

    Top: enqueue lag (the newest sequence number any member enqueued minus this rank's);
    bottom: completion lag (the group's newest enqueued minus this rank's last completed).
    Cells of ranks that are not members are empty; crosses mark members whose progress is
    unknown (no dump, or nothing recorded about the group). Colour is log-scaled.
    """
    from plotly.subplots import make_subplots

    d = analysis.diagnosis
    world = int(analysis.tables.world_size)
    notes: list[str] = []
    p, roles = _rows(analysis)
    g = _grid(p, roles, world)
    has_cmp = bool(len(roles)) and not np.isnan(g.z_cmp).all()
    n_rows = 2 if has_cmp else 1
    if not has_cmp:
        notes.append("no completion recorded for any group: only the enqueue lag is shown")
    fig = make_subplots(
        rows=n_rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=(
            "enqueued: behind the group's newest enqueued seq",
            "completed: behind the group's newest enqueued seq",
        )[:n_rows],
    )
    _heatmaps(fig, g, roles, world, n_rows)
    if len(roles) and world > 64:
        _furthest_behind(fig, g, roles)
    for c in d.culprit_ranks:
        if int(c) < world:
            fig.add_vline(x=int(c), line={"color": CULPRIT, "width": 1.5, "dash": "dot"})
    if d.culprit_ranks:
        notes.append(
            f"dotted red: culprit rank{'s' if len(d.culprit_ranks) > 1 else ''} "
            f"{for_plot(ranks_text(d.culprit_ranks))}"
        )
    notes.extend(_dialect_notes(analysis))
    layout = base_layout(
        "Progress per group: the lagging rank stands out",
        notes,
        max(300, min(1400, 200 + n_rows * (60 + 26 * max(1, len(roles))))),
    )
    fig.update_layout(**layout, margin={"l": 10, "r": 10, "t": top_margin(notes, 30), "b": 40})
    # Long group names are shortened on the axis (whole in the hover); the report shortens
    # them further at phone width.
    fig.update_yaxes(automargin=True, autorange="reversed")
    if roles:
        fig.update_yaxes(tickmode="array", tickvals=roles, ticktext=tick_labels(roles))
    fig.update_xaxes(title_text="rank", row=n_rows, col=1)
    fig.update_xaxes(showgrid=False, range=[-0.5, world - 0.5], zeroline=False)
    if world <= 64:
        fig.update_xaxes(tickmode="linear", tick0=0, dtick=1 if world <= 32 else 2)
    return fig
