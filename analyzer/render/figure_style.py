"""Shared style and text helpers of the figures (colours, escaping, labels, layout)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from analyzer.render.sentences import for_plot
from analyzer.terms import rank_runs

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

__all__ = [
    "BAR_BUDGET",
    "COLORS",
    "CULPRIT",
    "CULPRIT_BAND",
    "HIGHLIGHT",
    "HOVER_FRAMES",
    "LANE_BUDGET",
    "MAX_GRAPH_NODES",
    "STACK_HOVERS",
    "STATE_NAMES",
    "ST_DONE",
    "ST_FLIGHT",
    "ST_MISMATCH",
    "base_layout",
    "clip",
    "members_label",
    "pipeline_stage",
    "ranks_text",
    "stack_texts",
    "tick_labels",
    "top_margin",
]

#: Colours of op states (also used by the HTML legend).
COLORS = {
    "completed": "#8fb3d9",
    "history": "#d3dce6",
    "in flight": "#f39c12",
    "mismatched": "#8e44ad",
    "never joined": "#d62728",
    "no dump": "#555555",
}
CULPRIT = "#d62728"
CULPRIT_BAND = "rgba(214,39,40,0.10)"
HIGHLIGHT = "#111111"

#: Bars the timeline draws in all, and at most per lane (older completed entries are merged).
BAR_BUDGET = 8_000
LANE_BUDGET = 600
#: Newest entries of each lane whose hover carries the issuing stack (plus pending ones).
STACK_HOVERS = 48
#: Frames of an issuing stack shown in a hover.
HOVER_FRAMES = 6
#: Nodes the wait graph draws before it merges by distance only.
MAX_GRAPH_NODES = 80

ST_DONE, ST_FLIGHT, ST_MISMATCH = 0, 1, 2
STATE_NAMES = {ST_DONE: "completed", ST_FLIGHT: "in flight", ST_MISMATCH: "mismatched"}

_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Arial, sans-serif"


def clip(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def tick_labels(labels: Sequence[str], n: int = 32) -> list[str]:
    """Axis labels of at most ``n`` characters, escaped for plotly: the start of each long
    name, or its start and end where two names would read the same; the full names where
    even that is ambiguous (a figure's hover gives the full name either way)."""
    short = [clip(t, n) for t in labels]
    if len(set(short)) < len(short):
        head = (n - 1) // 2
        short = [t if len(t) <= n else f"{t[:head]}…{t[len(t) - (n - 1 - head) :]}" for t in labels]
    if len(set(short)) < len(short):
        short = list(labels)
    return [for_plot(t) for t in short]


def ranks_text(ranks: Sequence[int], limit: int = 8) -> str:
    """``0-3, 8, 12`` style text for a set of ranks (:func:`analyzer.terms.rank_runs`)."""
    return rank_runs(ranks, limit)


def members_label(ranks: Sequence[int]) -> str:
    """Short label of a set of ranks: ``rank 5`` or ``ranks 0-7, 32-39, … ×248``."""
    rs = sorted(set(int(r) for r in ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    text = ranks_text(rs, 2)
    if "…" in text:
        text = text.split(", …")[0] + ", …"
    return f"ranks {text} ×{len(rs)}"


def _note_lines(notes: list[str], width: int = 170) -> list[str]:
    import textwrap

    return [line for n in notes for line in textwrap.wrap(n, width, break_on_hyphens=False)]


def top_margin(notes: list[str], extra: int = 40) -> int:
    """Room for the title, its note lines and a row of legend/buttons under them."""
    return 54 + 16 * len(_note_lines(notes)) + extra


def base_layout(title: str, notes: list[str], height: int) -> dict[str, Any]:
    sub = "<br>".join(
        f"<span style='font-size:12px;color:#555'>{n}</span>" for n in _note_lines(notes)
    )
    return {
        "title": {
            "text": f"<b>{title}</b>" + (f"<br>{sub}" if sub else ""),
            "x": 0.01,
            "xanchor": "left",
            "yref": "container",
            "y": 1.0,
            "yanchor": "top",
            "pad": {"t": 20},
            "font": {"size": 16},
        },
        "height": height,
        "font": {"family": _FONT, "size": 12},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hoverlabel": {
            "align": "left",
            "font": {"family": "DejaVu Sans Mono, monospace", "size": 11},
        },
        "meta": {"hangscope": {"notes": notes}},
    }


# --------------------------------------------------------------------------- shared views


def stack_texts(
    analysis: Analysis, ids: Iterable[int], frames: int = HOVER_FRAMES
) -> dict[int, str]:
    """stack_id -> short escaped text (user frames first: torch internals are skipped)."""
    wanted = {int(i) for i in ids if int(i) >= 0}
    if not wanted:
        return {}
    st = analysis.tables.stacks
    sub = st[st["stack_id"].isin(list(wanted))].sort_values(["stack_id", "depth"])
    out: dict[int, str] = {}
    for sid, grp in sub.groupby("stack_id", sort=False):
        rows: list[Any] = list(grp[["name", "filename", "line"]].itertuples(index=False))
        user = [r for r in rows if "/torch/" not in str(r.filename)]
        shown = (user or rows)[:frames]
        hidden = len(rows) - len(shown)
        lines = [
            for_plot(clip(f"{_short_path(str(r.filename))}:{int(r.line)} in {r.name}", 110))
            for r in shown
        ]
        if hidden:
            lines.append(f"(+{hidden} frame{'s' if hidden > 1 else ''}: torch internals or deeper)")
        out[int(str(sid))] = "<br>".join(lines)
    return out


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


def pipeline_stage(analysis: Analysis) -> dict[int, int]:
    """rank -> pipeline stage, from groups whose desc names the pipeline (empty if none)."""
    stage: dict[int, int] = {}
    g = analysis.tables.groups
    for desc, members in g[["pg_desc", "ranks"]].itertuples(index=False):
        d = str(desc).upper()
        if "PIPELINE" in d and "EXPERT" not in d and len(members) > 1:
            for i, r in enumerate(members):
                stage.setdefault(int(r), i)
    return stage
