"""The timeline figure's layout: its two views (the hang window and the whole buffer), the
culprit lanes' bands, the axes, the title and the buttons that switch views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyzer.render.figure_style import CULPRIT_BAND, base_layout, top_margin
from analyzer.render.timeline_lanes import Frame, Lane

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.diagnosis import Diagnosis

__all__ = ["lay_out", "view_ranges"]


def view_ranges(
    fr: Frame, window_s: float | None, ghost_x: list[float], x_min_all: float
) -> tuple[list[float], list[float], float, float]:
    """Default view (the last moments before the hang) and the whole buffer, and their spans."""
    if window_s is not None and window_s > 0:
        x_lo = -float(window_s)
    else:
        cand = fr.starts + ghost_x
        x_lo = min(cand) if cand else -1.0
    x_lo = max(x_lo, x_min_all) if x_min_all < 0 else x_lo
    span = max(-x_lo, 1e-6)
    win = [x_lo - 0.04 * span, max(0.06 * span, 1.5 * fr.pad)]
    whole_span = max(-x_min_all, span)
    whole = [x_min_all - 0.04 * whole_span, max(0.06 * whole_span, 1.5 * fr.pad)]
    return win, whole, span, whole_span


def _shapes(lanes: list[Lane]) -> list[dict[str, Any]]:
    """A band behind each culprit lane, and a dotted line at x = 0 (the end of the record)."""
    shapes: list[dict[str, Any]] = [
        {
            "type": "rect",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": ln.y - 0.5,
            "y1": ln.y + 0.5,
            "fillcolor": CULPRIT_BAND,
            "line": {"width": 0},
            "layer": "below",
        }
        for ln in lanes
        if ln.culprit
    ]
    shapes.append(
        {
            "type": "line",
            "xref": "x",
            "x0": 0,
            "x1": 0,
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"color": "#999", "width": 1, "dash": "dot"},
        }
    )
    return shapes


def _title(d: Diagnosis) -> str:
    """``Timeline: culprit rank 3`` (``Timeline`` alone when there is no culprit)."""
    culprit_txt = ", ".join(str(r) for r in d.culprit_ranks)
    return "Timeline" + (
        f": culprit rank{'s' if len(d.culprit_ranks) > 1 else ''} {culprit_txt}"
        if culprit_txt
        else ""
    )


def _x_axis(clock: str, win: list[float]) -> dict[str, Any]:
    return {
        "title": {
            "text": "seconds before the end of the record"
            if clock == "job"
            else "seconds before the rank's newest entry"
        },
        "range": win,
        "zeroline": False,
        "showgrid": True,
        "gridcolor": "#eee",
    }


def _y_axis(lanes: list[Lane], n_lanes: int) -> dict[str, Any]:
    return {
        "tickmode": "array",
        "tickvals": [ln.y for ln in lanes],
        "ticktext": [ln.label() for ln in lanes],
        "range": [n_lanes - 0.5, -0.5],
        "showgrid": False,
        "automargin": True,
        "fixedrange": True,
    }


def _view_buttons(meta: dict[str, Any], span: float, whole_span: float) -> dict[str, Any]:
    """The buttons above the plot: the hang window (active first) or the whole buffer."""
    return {
        "type": "buttons",
        "direction": "left",
        "x": 0.0,
        "xanchor": "left",
        "y": 1.0,
        "yanchor": "bottom",
        "pad": {"b": 4},
        "showactive": True,
        "active": 0,
        "buttons": [
            {
                "label": f"Hang window ({span:.3g} s)",
                "method": "relayout",
                "args": [{"xaxis.range": meta["window"]}],
            },
            {
                "label": f"Whole buffer ({whole_span:.3g} s)",
                "method": "relayout",
                "args": [{"xaxis.range": meta["whole"]}],
            },
        ],
    }


def lay_out(
    fig: go.Figure,
    fr: Frame,
    notes: list[str],
    meta: dict[str, Any],
    span: float,
    whole_span: float,
) -> None:
    """The layout of the timeline figure ``fig`` of ``fr``: ``notes`` under the title,
    ``meta`` (``window`` and ``whole``, the x ranges of the two views, and what else the
    figure's ``meta["hangscope"]`` records), ``span`` and ``whole_span`` the seconds each
    view spans."""
    lanes, n_lanes = fr.lanes, max(1, len(fr.lanes))
    height = max(320, min(2400, 170 + 24 * n_lanes + 16 * len(notes)))
    layout = base_layout(_title(fr.analysis.diagnosis), notes, height)
    layout["meta"]["hangscope"].update({"lanes": len(lanes), **meta})
    fig.update_layout(
        **layout,
        barmode="overlay",
        bargap=0.2,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        margin={"l": 10, "r": 10, "t": top_margin(notes, 44), "b": 50},
        shapes=_shapes(lanes),
        hovermode="closest",
        xaxis=_x_axis(fr.clock, meta["window"]),
        yaxis=_y_axis(lanes, n_lanes),
        # The two views only where they differ (a small job's window is its whole buffer).
        updatemenus=(
            [_view_buttons(meta, span, whole_span)] if f"{span:.3g}" != f"{whole_span:.3g}" else []
        ),
    )
