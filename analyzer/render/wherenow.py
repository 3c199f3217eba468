"""The report's "Where it is now" section: each culprit's threads at capture time."""

from __future__ import annotations

from typing import Any

from analyzer.analysis import Analysis
from analyzer.context import where_now


def _esc(value: object) -> str:
    import html

    return html.escape(str(value), quote=True)


def _frames(frames: list[dict[str, Any]]) -> str:
    lines = [f"{_esc(f['filename'])}:{int(f['line'])} in {_esc(f['name'])}" for f in frames]
    return "<pre>" + "\n".join(lines) + "</pre>" if lines else "<p class='note'>no Python frame captured</p>"


def where_now_section(analysis: Analysis, *, max_threads: int = 16) -> str:
    """HTML of the section, or "" when no culprit's context was captured."""
    parts = []
    for w in where_now(analysis.diagnosis.culprit_ranks, analysis.contexts):
        who = " · ".join(_esc(x) for x in (
            f"host {w['host']}" if w["host"] else "", f"pid {w['pid']}" if w["pid"] is not None else "",
            f"local rank {w['local_rank']}" if w["local_rank"] is not None else "",
            w["device"], f"captured {w['time']}" if w["time"] else "",
            f"trigger: {w['reason']}" if w["reason"] else "") if x)
        others = "".join(
            f"<h3 class='note'>thread {_esc(t['name'])}</h3>{_frames(t['frames'])}"
            for t in w["other_threads"][:max_threads])
        parts.append(
            f"<h3>rank {int(w['rank'])}: thread {_esc(w['thread'] or 'main')} (innermost frame first)</h3>"
            f"<p class='note'>{who}</p>{_frames(w['frames'])}"
            + (f"<details><summary>its other {len(w['other_threads'])} thread(s)</summary>{others}</details>"
               if others else ""))
    if not parts:
        return ""
    return ("<section id='where-now'><h2>Where it is now</h2><p class='note'>What each culprit's main "
            "thread was doing when the dumps were captured (hangscope_context files), not only where it "
            "issued its last collective.</p>" + "".join(parts) + "</section>")
