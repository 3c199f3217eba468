"""The report's tables: findings, culprit stacks, skipped files and the input summary.

Everything taken from dumps is HTML-escaped (:func:`analyzer.render.sentences.for_html`).
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

from analyzer.diagnosis import unrecorded_text
from analyzer.render.input_notes import input_notes
from analyzer.render.sentences import for_html, full_dialect_text
from analyzer.terms import group_label, rank_runs

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

__all__ = ["findings_table", "skipped_section", "stacks_section", "summary_section"]


def findings_table(analysis: Analysis) -> str:
    d = analysis.diagnosis
    if not d.findings:
        return "<p class='note'>no findings</p>"
    rows = []
    for f in d.findings[:200]:
        where = for_html(group_label(f.group, f.group_desc)) if f.group or f.group_desc else ""
        rows.append(
            f"<tr class='{'culprit' if f.culprit else ''}'>"
            f"<td><span class='tag{' culprit' if f.culprit else ''}'>{for_html(f.kind)}</span></td>"
            f"<td>{'culprit' if f.culprit else ''}</td>"
            f"<td>{for_html(rank_runs(f.ranks, 6))}</td><td>{where}</td>"
            f"<td>{int(f.seq) if f.seq >= 0 else ''}</td><td>{for_html(f.op)}</td>"
            f"<td class='sum'>{for_html(f.summary)}</td></tr>"
        )
    more = (
        f"<p class='note'>{len(d.findings) - 200} more findings not listed (see the JSON output)</p>"
        if len(d.findings) > 200
        else ""
    )
    return (
        "<table><thead><tr><th>kind</th><th>role</th><th>ranks</th><th>group</th><th>seq</th><th>op</th>"
        "<th>summary</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>" + more
    )


def _stack_block(frames: Any) -> str:
    lines = [
        f"{for_html(fr.get('filename', ''))}:{int(fr.get('line', 0))} in {for_html(fr.get('name', ''))}"
        for fr in frames
    ]
    return (
        "<pre>" + "\n".join(lines) + "</pre>" if lines else "<p class='note'>no frames recorded</p>"
    )


def stacks_section(analysis: Analysis) -> str:
    """Whose stack each is, as the text says it (:func:`analyzer.render.culprit_view.stack_blocks`):
    the awaited op with the ranks that issued it, the culprit's own last issued op; for a
    deadlock, each side and the op it is blocked in."""
    from analyzer.render.culprit_view import stack_blocks

    blocks, more = stack_blocks(analysis, most=4)
    parts = [
        f"<h3 class='note'>{for_html(b.head)} at: (innermost frame first)</h3>"
        + _stack_block(b.frames)
        for b in blocks
    ]
    if more:
        parts.append(f"<p class='note'>the stacks of {more} more culprits are in the JSON</p>")
    if not parts:
        return (
            "<p class='note'>no stack recorded for the culprit's ops (stacks need "
            "TORCH_NCCL_TRACE_CPP_STACK / python frames in the dump)</p>"
        )
    return "".join(parts)


def _input_notes_html(analysis: Analysis) -> str:
    """Warnings (values dropped from dumps), duplicates, unreadable folders, ignored files."""
    n = input_notes(analysis)
    out = []
    if n.warnings:
        rows = "".join(
            f"<tr><td>{int(w['rank'])}</td><td>{for_html(str(w['warning']))}</td>"  # type: ignore[call-overload]
            f"<td>{for_html(str(w['path']))}</td></tr>"
            for w in n.warnings[:500]
        )
        out.append(
            "<h3>Warnings: values dropped from dumps</h3><p class='note'>a dump with "
            "dropped values is suspect and does not by itself make its rank a culprit"
            "</p><table class='warnings'><thead><tr><th>rank</th><th>warning</th>"
            f"<th>file</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    if n.duplicates:
        out.append(
            "<h3>Duplicates</h3><ul>"
            + "".join(f"<li>{for_html(str(d['note']))}</li>" for d in n.duplicates[:500])
            + "</ul>"
        )
    if n.unreadable_folders:
        out.append(
            "<h3>Unreadable folders</h3><ul>"
            + "".join(
                f"<li>{for_html(p)}: {for_html(w)}</li>" for p, w in n.unreadable_folders[:500]
            )
            + "</ul>"
        )
    if n.ignored:
        out.append(
            f"<details><summary>ignored files ({len(n.ignored)}, not flight-recorder "
            "dumps)</summary><ul>"
            + "".join(f"<li>{for_html(p)}: {for_html(w)}</li>" for p, w in n.ignored[:500])
            + "</ul></details>"
        )
    return "".join(out)


def skipped_section(analysis: Analysis) -> str:
    sk = analysis.tables.skipped
    if not len(sk):
        return "<p class='note'>none: every file found was analyzed</p>" + _input_notes_html(
            analysis
        )
    rows = "".join(
        f"<tr><td>{for_html(p)}</td><td>{int(r) if int(r) >= 0 else ''}</td><td>{for_html(why)}</td></tr>"
        for p, r, why in sk[["path", "rank", "reason"]].head(500).itertuples(index=False)
    )
    more = f"<p class='note'>{len(sk) - 500} more not listed</p>" if len(sk) > 500 else ""
    return (
        "<table><thead><tr><th>file</th><th>rank</th><th>reason</th></tr></thead><tbody>"
        + rows
        + "</tbody></table>"
        + more
        + _input_notes_html(analysis)
    )


def summary_section(analysis: Analysis) -> str:
    t = analysis.tables
    d = analysis.diagnosis
    rk = t.ranks
    e = t.entries

    def uniq(series: Any) -> str:
        vals = sorted({str(v) for v in series if str(v)})
        return for_html(", ".join(vals)) if vals else "—"

    times = e["time_created_ns"] if len(e) else None
    span = ""
    if times is not None and len(times):
        lo, hi = int(times.min()), int(times.max())
        fmt = "%Y-%m-%d %H:%M:%S"
        span = (
            f"{_dt.datetime.fromtimestamp(lo / 1e9, _dt.UTC).strftime(fmt)} to "
            f"{_dt.datetime.fromtimestamp(hi / 1e9, _dt.UTC).strftime(fmt)} UTC "
            f"({(hi - lo) / 1e9:.3f} s, enqueue times as the ranks' clocks recorded them)"
        )
    items = [
        ("world size", str(int(t.world_size))),
        ("dumps read", f"{len(t.dumped_ranks)} rank(s)"),
        ("missing dumps", for_html(rank_runs(d.missing_dumps)) if d.missing_dumps else "none"),
        ("entries", f"{len(e):,}"),
        ("groups", f"{len(t.groups):,}"),
        ("backends", uniq(rk["backend"])),
        ("read as", for_html(full_dialect_text(analysis).removeprefix("read as: ")) or "—"),
        (
            "groups not recorded",
            for_html(unrecorded_text(d.unrecorded_groups).split(": ", 1)[1])
            if d.unrecorded_groups
            else "none",
        ),
        ("dump formats", uniq(rk["format"])),
        ("readers", uniq(rk["reader"])),
        ("format versions", uniq(rk["version"])),
        ("comm library", uniq(rk["comm_lib_version"])),
        ("recorded span", span or "—"),
        ("skipped files", str(len(t.skipped))),
    ]
    dl = "<dl class='summary'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"
    files = rk[rk["path"] != ""][["rank", "path", "format", "entries"]]
    cap = 256
    rows = "".join(
        f"<tr><td>{int(r)}</td><td>{for_html(p)}</td><td>{for_html(fm)}</td><td>{int(n):,}</td></tr>"
        for r, p, fm, n in files.head(cap).itertuples(index=False)
    )
    more = (
        f"<p class='note'>{len(files) - cap} more files not listed</p>" if len(files) > cap else ""
    )
    return (
        dl
        + f"<details><summary>input files ({len(files)})</summary><table><thead><tr><th>rank</th>"
        "<th>file</th><th>format</th><th>entries</th></tr></thead><tbody>"
        + rows
        + "</tbody></table>"
        + more
        + "</details>"
    )
