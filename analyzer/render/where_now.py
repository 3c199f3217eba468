"""Where each rank is now: the report's section on each culprit's threads at capture time,
and the notebook's table of every captured rank."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyzer.load import where_now
from analyzer.render.sentences import for_html

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from analyzer.analysis import Analysis

__all__ = ["WHERE_COLUMNS", "where_each_rank_is_now", "where_now_section"]


def _frames(frames: list[dict[str, Any]]) -> str:
    lines = [f"{for_html(f['filename'])}:{int(f['line'])} in {for_html(f['name'])}" for f in frames]
    return (
        "<pre>" + "\n".join(lines) + "</pre>"
        if lines
        else "<p class='note'>no Python frame captured</p>"
    )


def where_now_section(analysis: Analysis, *, max_threads: int = 16) -> str:
    """HTML of the section, or "" when no culprit's context was captured."""
    parts = []
    for w in where_now(analysis.diagnosis.culprit_ranks, analysis.contexts):
        who = " · ".join(
            for_html(x)
            for x in (
                f"host {w['host']}" if w["host"] else "",
                f"pid {w['pid']}" if w["pid"] is not None else "",
                f"local rank {w['local_rank']}" if w["local_rank"] is not None else "",
                w["device"],
                f"captured {w['time']}" if w["time"] else "",
                f"trigger: {w['reason']}" if w["reason"] else "",
            )
            if x
        )
        others = "".join(
            f"<h3 class='note'>thread {for_html(t['name'])}</h3>{_frames(t['frames'])}"
            for t in w["other_threads"][:max_threads]
        )
        parts.append(
            f"<h3>rank {int(w['rank'])}: thread {for_html(w['thread'] or 'main')} (innermost frame first)</h3>"
            f"<p class='note'>{who}</p>{_frames(w['frames'])}"
            + (
                f"<details><summary>its other {len(w['other_threads'])} thread(s)</summary>{others}</details>"
                if others
                else ""
            )
        )
    if not parts:
        return ""
    return (
        "<section id='where-now'><h2>Where it is now</h2><p class='note'>What each culprit's main "
        "thread was doing when the dumps were captured (hangscope_context files), not only where it "
        "issued its last collective.</p>" + "".join(parts) + "</section>"
    )


#: Columns of :func:`where_each_rank_is_now`.
WHERE_COLUMNS = [
    "rank",
    "culprit",
    "host",
    "pid",
    "thread",
    "innermost frame",
    "frames",
    "captured",
    "trigger",
]


def where_each_rank_is_now(analysis: Analysis) -> pd.DataFrame:
    """One row per rank whose context was captured (the notebook's table): its main
    thread's innermost frame at capture time, culprits first."""
    import pandas as pd

    culprits = set(analysis.diagnosis.culprit_ranks)
    rows = []
    for rank, ctx in analysis.contexts.by_rank.items():
        w = ctx.to_dict()
        frames = w["frames"]
        top = (
            f"{frames[0]['filename']}:{frames[0]['line']} in {frames[0]['name']}" if frames else ""
        )
        rows.append(
            {
                "rank": int(rank),
                "culprit": rank in culprits,
                "host": w["host"],
                "pid": w["pid"],
                "thread": w["thread"] or "main",
                "innermost frame": top,
                "frames": len(frames),
                "captured": w["time"],
                "trigger": w["reason"],
            }
        )
    rows.sort(key=lambda r: (not r["culprit"], r["rank"]))
    return pd.DataFrame(rows, columns=WHERE_COLUMNS)
