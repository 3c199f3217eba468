"""The timeline figure: one lane per rank, a bar per recorded op (its lanes:
:mod:`~analyzer.render.timeline_lanes`; its layout: :mod:`~analyzer.render.timeline_layout`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from analyzer.kinds import WaitKind
from analyzer.render.figure_style import (
    BAR_BUDGET,
    COLORS,
    CULPRIT,
    HIGHLIGHT,
    LANE_BUDGET,
    ST_DONE,
    STACK_HOVERS,
    STATE_NAMES,
    clip,
    ranks_text,
    stack_texts,
)
from analyzer.render.sentences import for_plot
from analyzer.render.timeline_entries import entry_arrays, rank_ref
from analyzer.render.timeline_lanes import (
    Frame,
    Key,
    Lane,
    entry_hover,
    focus_of,
    frame_of,
    lanes_of,
)
from analyzer.render.timeline_layout import lay_out, view_ranges
from analyzer.terms import group_label, is_p2p_op

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis

__all__ = ["timeline"]

_Traces = dict[str, dict[str, list[Any]]]
_Drawn = tuple[Lane, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _merge_history(
    fr: Frame,
    ln: Lane,
    x0: np.ndarray,
    x1: np.ndarray,
    st: np.ndarray,
    merge_idx: np.ndarray,
    run_budget: int,
    t: dict[str, list[Any]],
) -> int:
    """Older completed entries of a lane as grey summary bars; returns how many were merged."""
    merged = 0
    chunk = max(1, math.ceil(len(merge_idx) / run_budget))
    # runs of consecutive merged entries, cut every `chunk` entries
    breaks = np.flatnonzero(np.diff(merge_idx) != 1) + 1
    for run in np.split(merge_idx, breaks):
        for k in range(0, len(run), chunk):
            part = run[k : k + chunk]
            a, b = float(x0[part].min()), float(x1[part].max())
            t["base"].append(a)
            t["x"].append(max(b - a, 0.0))
            t["y"].append(ln.y)
            t["text"].append(
                f"<b>{for_plot('rank ' + str(ln.rep))}</b>: {len(part)} older op(s) merged<br>"
                f"from {a:+.3f} s to {b:+.3f} s · "
                f"{int((st[part] == ST_DONE).sum())} completed"
            )
            t["lw"].append(0)
            t["lc"].append("rgba(0,0,0,0)")
            merged += len(part)
    return merged


def _lane_bars(
    fr: Frame, ln: Lane, focus: set[Key], per_lane: int, traces: _Traces
) -> tuple[_Drawn | None, int, float]:
    """One lane: which entries are drawn one by one (returned), which merged (into
    ``traces``); also the count merged and the lane's earliest x."""
    ea = fr.ea
    sl = ea.of(ln.rep)
    n = sl.stop - sl.start
    if n <= 0:
        return None, 0, 0.0
    keep_last = max(20, per_lane * 3 // 4)
    ref = fr.ref_of[ln.rep]
    x0 = (ea.created[sl] - ref) / 1e9
    x1 = np.where(ea.end[sl] < 0, fr.pad, (ea.end[sl] - ref) / 1e9)
    st = ea.state[sl]
    x1 = np.where(st != ST_DONE, np.maximum(x1, x0 + fr.pad), x1)  # keep pending ops visible
    x1 = np.maximum(x1, x0 + 0.3 * fr.pad)  # and ops whose end is unknown (a rank's last, gloo)
    rows = ea.idx[sl]
    important = st != ST_DONE
    if focus:
        fk = np.array([fr.key(r) in focus for r in rows[max(0, n - 4 * per_lane) :]], dtype=bool)
        important[max(0, n - 4 * per_lane) :] |= fk
    single = important.copy()
    single[max(0, n - keep_last) :] = True
    if single.sum() > per_lane:  # too many pending ops: keep the newest ones individually
        keep = np.flatnonzero(single)[-per_lane:]
        single[:] = False
        single[keep] = True
    merge_idx = np.flatnonzero(~single)
    merged = 0
    if len(merge_idx):
        merged = _merge_history(
            fr, ln, x0, x1, st, merge_idx, max(4, per_lane - keep_last), traces["history"]
        )
    pick = np.flatnonzero(single)
    with_stack = important[pick] | (pick >= n - STACK_HOVERS)
    drawn = (ln, rows[pick], st[pick], x0[pick], x1[pick], ea.completed_known[sl][pick], with_stack)
    return drawn, merged, float(x0.min())


def _entry_traces(fr: Frame, bar_budget: int) -> tuple[_Traces, int, float]:
    """Bars of every lane by state, the count of merged entries and the earliest x."""
    focus = focus_of(fr.analysis)
    per_lane = min(LANE_BUDGET, max(40, bar_budget // max(1, len(fr.lanes))))
    traces: _Traces = {
        k: {"base": [], "x": [], "y": [], "text": [], "lw": [], "lc": []}
        for k in ("history", "completed", "in flight", "mismatched")
    }
    drawn: list[_Drawn] = []
    stack_ids: set[int] = set()
    merged_total, x_min_all = 0, 0.0
    for ln in fr.lanes:
        one, merged, x_min = _lane_bars(fr, ln, focus, per_lane, traces)
        if one is None:
            continue
        merged_total += merged
        x_min_all = min(x_min_all, x_min)
        drawn.append(one)
        stack_ids.update(int(s) for s in fr.sid[one[1][one[6]]])
    stacks = stack_texts(fr.analysis, stack_ids)
    for ln, rows, st, x0, x1, known, with_stack in drawn:
        texts = entry_hover(fr.analysis, rows, ln, st, x0, x1, known, stacks, with_stack)
        for i, r in enumerate(rows):
            t = traces[STATE_NAMES[int(st[i])]]
            t["base"].append(float(x0[i]))
            t["x"].append(max(float(x1[i] - x0[i]), 0.0))
            t["y"].append(ln.y)
            t["text"].append(texts[i])
            hot = fr.key(r) in focus and (ln.culprit or st[i] != ST_DONE)
            t["lw"].append(2 if hot else 0.5)
            t["lc"].append(HIGHLIGHT if hot else "white")
    return traces, merged_total, x_min_all


_LEGEND = {
    "history": "completed (merged history)",
    "completed": "completed",
    "in flight": "in flight (never completed)",
    "mismatched": "mismatched (desync)",
}
_NEVER: dict[str, str] = {
    WaitKind.P2P: "never posted the {mine} matching",
    WaitKind.NO_DUMP: "wrote no dump; peers wait in",
    WaitKind.QUEUED: "posted, but has queued behind an op it is blocked in,",
}


def _awaited_x(fr: Frame, g: str, s: int, op: str, waiters: list[int], ref: int) -> float:
    """When the waiters enqueued the op the culprit never joined (0 when unrecorded)."""
    e = fr.analysis.tables.entries
    p2p = is_p2p_op(op)
    col = fr.pseq if p2p else fr.seq
    m = (
        (fr.names == str(g))
        & (col == int(s))
        & (fr.p2p == p2p)
        & np.isin(e["rank"].to_numpy(), waiters)
    )
    if not m.any():
        return 0.0
    if fr.clock == "rank":
        rr = e["rank"].to_numpy()[m]
        tt = e["time_created_ns"].to_numpy()[m]
        xs = [
            (int(t) - fr.ref_of.get(int(r), rank_ref(fr.ea, int(r)))) / 1e9 for r, t in zip(rr, tt)
        ]
        return float(np.median(xs))
    return (int(e["time_created_ns"].to_numpy()[m].min()) - ref) / 1e9


def _never_joined(fr: Frame) -> tuple[dict[str, list[Any]], dict[str, list[Any]], list[float]]:
    """The ops peers wait in that a culprit never enqueued (or has no dump): one hatched bar
    per culprit lane and a marker per op; also their x positions."""
    bars: dict[str, list[Any]] = {"base": [], "x": [], "y": [], "text": []}
    marks: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    ghost_x: list[float] = []
    w = fr.analysis.waits
    lane_of = {r: ln for ln in fr.lanes for r in ln.ranks}
    for c in sorted(fr.analysis.diagnosis.culprit_ranks):
        ln = lane_of.get(int(c))
        if ln is None or not len(w):
            continue
        mine = w[w["holder"] == c]
        if mine.empty:
            continue
        ref = fr.ref_of.get(ln.rep, fr.t_stop)
        items = []
        groups: list[tuple[Any, Any]] = list(
            mine.groupby(["pg_name", "pg_desc", "seq", "op", "kind"], sort=False)
        )
        for (g, desc, s, op, kind), grp in groups:
            waiters = sorted(int(x) for x in grp["waiter"])
            x = _awaited_x(fr, str(g), int(s), str(op), waiters, ref)
            items.append((x, str(g), str(desc), int(s), str(op), str(kind), waiters))
        items.sort()
        for x, g, desc, s, op, kind, waiters in items[:16]:
            what = _NEVER.get(kind, "never enqueued").format(
                mine="recv" if op == "send" else "send"
            )
            marks["x"].append(x)
            marks["y"].append(ln.y)
            marks["text"].append(
                f"<b>never joined</b>: rank {int(c)} {for_plot(what)} {for_plot(op)} in "
                f"{for_plot(clip(group_label(g, desc), 80))} {'p2p ' if is_p2p_op(op) else ''}seq {s}<br>"
                f"awaited by ranks {for_plot(ranks_text(waiters))}<br>peers enqueued it at {x:+.6f} s"
            )
            ghost_x.append(x)
        x_first = items[0][0]
        bars["base"].append(x_first)
        bars["x"].append(max(0.0 - x_first, 0.0) + fr.pad)
        bars["y"].append(ln.y)
        bars["text"].append(
            f"<b>rank {int(c)}: never joined</b> {len(items)} op(s) its peers wait in; first: "
            f"{for_plot(items[0][4])} in {for_plot(clip(group_label(items[0][1], items[0][2]), 80))} "
            f"seq {items[0][3]}"
        )
    return bars, marks, ghost_x


def _outline_legend(fig: go.Figure, traces: _Traces) -> None:
    """A legend entry (no bar) for the black outline of the op the finding is about."""
    import plotly.graph_objects as go

    if any(w for t in traces.values() for w in t["lw"] if w and w >= 2):
        fig.add_trace(
            go.Bar(
                orientation="h",
                x=[None],
                y=[None],
                name="outlined: the op the finding is about",
                marker={"color": "rgba(0,0,0,0)", "line": {"width": 2, "color": "#111"}},
                hoverinfo="skip",
                showlegend=True,
            )
        )


def _add_traces(fig: go.Figure, fr: Frame, traces: _Traces) -> list[float]:
    """Every trace of the figure; returns the x of the never-joined ops."""
    import plotly.graph_objects as go

    for name, t in traces.items():
        if not t["x"]:
            continue
        fig.add_trace(
            go.Bar(
                orientation="h",
                base=np.array(t["base"]),
                x=np.array(t["x"]),
                y=np.array(t["y"]),
                name=_LEGEND[name],
                marker={"color": COLORS[name], "line": {"width": t["lw"], "color": t["lc"]}},
                hovertext=t["text"],
                hoverinfo="text",
                width=0.72,
                cliponaxis=True,
            )
        )
    _outline_legend(fig, traces)
    bars, marks, ghost_x = _never_joined(fr)
    if bars["x"]:
        fig.add_trace(
            go.Bar(
                orientation="h",
                base=bars["base"],
                x=bars["x"],
                y=bars["y"],
                name="never joined (peers wait in it)",
                marker={
                    "color": "rgba(214,39,40,0.18)",
                    "line": {"width": 1.5, "color": CULPRIT},
                    "pattern": {"shape": "/", "fgcolor": CULPRIT, "size": 6},
                },
                hovertext=bars["text"],
                hoverinfo="text",
                width=0.9,
                showlegend=True,
            )
        )
        # Underneath the recorded ops of the lane (a culprit may have recorded ops after it).
        fig.data = (fig.data[-1],) + tuple(fig.data[:-1])
        fig.add_trace(
            go.Scatter(
                x=marks["x"],
                y=marks["y"],
                mode="markers",
                name="awaited op (never enqueued)",
                marker={
                    "symbol": "x-thin-open",
                    "size": 12,
                    "color": CULPRIT,
                    "line": {"width": 2.5, "color": CULPRIT},
                },
                hovertext=marks["text"],
                hoverinfo="text",
                showlegend=True,
            )
        )
    # Lanes of ranks without a dump: a flat marker so they are visible even when empty.
    nd = [ln for ln in fr.lanes if not ln.dumped]
    if nd:
        fig.add_trace(
            go.Scatter(
                x=[0.0] * len(nd),
                y=[ln.y for ln in nd],
                mode="markers",
                name="no dump",
                marker={"symbol": "square-x-open", "size": 12, "color": COLORS["no dump"]},
                hovertext=[
                    f"rank{'s' if len(ln.ranks) > 1 else ''} {for_plot(ranks_text(ln.ranks))}: no dump"
                    for ln in nd
                ],
                hoverinfo="text",
            )
        )
    return ghost_x


def timeline(
    analysis: Analysis,
    *,
    max_lanes: int = 64,
    window_s: float | None = None,
    clock: str = "job",
    collapse: bool | None = None,
    bar_budget: int = BAR_BUDGET,
) -> go.Figure:
    """One lane per rank (or per set of ranks that behave alike), one bar per recorded op.

    ``clock="job"`` plots every time relative to the newest timestamp of the whole dump set
    (x = seconds before the end of the record); ``clock="rank"`` relative to each rank's own
    newest timestamp, which removes the clock offset between hosts (NCCL dumps of different
    nodes can be offset) at the price of hiding which rank stopped first. ``window_s`` sets
    the default visible range (the last seconds before the hang); the buttons above the plot
    switch to the whole buffer. ``collapse`` merges ranks that behave identically into one
    lane (default: only when there are more ranks than fit, i.e. more than
    ``min(max_lanes, 32)``).
    """
    import plotly.graph_objects as go

    if clock not in ("job", "rank"):
        raise ValueError("clock must be 'job' or 'rank'")
    ea = entry_arrays(analysis)
    lanes, notes = lanes_of(analysis, ea, max(1, int(max_lanes)), collapse)
    fr = frame_of(analysis, ea, lanes, clock, window_s)
    traces, merged_total, x_min_all = _entry_traces(fr, bar_budget)
    if merged_total:
        notes.append(
            f"{merged_total:,} older completed entries merged into grey history bars "
            f"(bar budget {bar_budget:,}); pending, mismatched and culprit-related ops are "
            "always drawn one by one"
        )
    fig = go.Figure()
    ghost_x = _add_traces(fig, fr, traces)
    win, whole, span, whole_span = view_ranges(fr, window_s, ghost_x, x_min_all)
    if clock == "rank":
        notes.append(
            "clock: each lane relative to its own rank's newest timestamp (removes host clock "
            "offsets; hides which rank stopped first)"
        )
    else:
        notes.append(
            "clock: seconds before the newest timestamp of the dump set; clocks of different "
            "hosts are not synchronized (use clock='rank' to align each rank on itself)"
        )
    lay_out(
        fig,
        fr,
        notes,
        {"window": win, "whole": whole, "merged_entries": merged_total},
        span,
        whole_span,
    )
    return fig
