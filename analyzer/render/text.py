"""The readable summary: culprit first, then the evidence."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from analyzer.diagnosis import unrecorded_text
from analyzer.escape import clean
from analyzer.load import where_now
from analyzer.normalize import Tables
from analyzer.render import sentences as wording
from analyzer.render.culprit_view import stack_lines
from analyzer.render.folding import chain_lines, fold_findings
from analyzer.render.input_notes import input_notes, text_lines
from analyzer.render.sentences import (
    cycle_line,
    dialect_text,
    fingerprint_text,
    missing_text,
)

if TYPE_CHECKING:
    from analyzer.analysis import Analysis

__all__ = ["render_text", "where_now_lines"]


def _wrap(text: str, indent: str, width: int) -> str:
    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ")


def _fill(text: str, indent: str, width: int) -> str:
    """As :func:`_wrap`, never inside a rank range (``1496-1503``) or a word."""
    return textwrap.fill(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def where_now_lines(analysis: Analysis, *, max_frames: int = 8) -> list[str]:
    """For each culprit whose context was captured: its main thread's stack at that time."""
    out: list[str] = []
    for w in where_now(analysis.diagnosis.culprit_ranks, analysis.contexts):
        where = ", ".join(
            x
            for x in (
                f"host {w['host']}" if w["host"] else "",
                f"pid {w['pid']}" if w["pid"] is not None else "",
                f"thread {w['thread'] or 'main'}",
                f"captured {w['time']}" if w["time"] else "",
            )
            if x
        )
        out.append(f"  where it is now (rank {w['rank']}, {where}):")
        frames = w["frames"]
        for fr in frames[:max_frames]:
            out.append(f"    {fr['filename']}:{fr['line']} in {fr['name']}")
        if len(frames) > max_frames:
            out.append(f"    ... {len(frames) - max_frames} outer frame(s)")
        if not frames:
            out.append("    (no Python frame of the main thread was captured)")
    return out


def render_text(
    analysis: Analysis, *, width: int = 100, max_findings: int = 12, verbose: bool = False
) -> str:
    """Plain text for a terminal or a ticket."""
    d = analysis.diagnosis
    t = analysis.tables
    lines: list[str] = []
    incidents = analysis.loaded.incidents if analysis.loaded is not None else ()
    lines.append(wording.verdict_line(d) + wording.incidents_note(incidents))
    lines.append(_wrap(d.headline, "  ", width))
    lines.extend(_wrap(line, "  ", width) for line in wording.confidence_lines(d))
    lines.extend(where_now_lines(analysis))
    for chain in chain_lines(d):  # one arrow line each, its detail below; same paths folded
        lines.append(_fill(chain.arrow, "  ", width))
        lines.append(_fill(chain.detail, "    ", width))
    lines.extend(stack_lines(analysis))  # whose stack each is: awaited op, culprit's own
    lines.append("")
    lines.append(
        f"dumps: {len(t.dumped_ranks)} of {t.world_size} ranks, {len(t.entries):,} entries"
        + (
            f", backends {', '.join(sorted(set(map(str, t.entries['backend'].unique())) - {''}))}"
            if len(t.entries)
            else ""
        )
        + _readers(t)
    )
    lines.append(_fill(f"fingerprint: {fingerprint_text(d.fingerprint)}", "", width))
    dialects = dialect_text(analysis)
    if dialects:
        lines.append(_wrap(dialects, "", width))
    comms = analysis.loaded.torchcomms.notes if analysis.loaded is not None else ()
    lines.extend(_wrap(f"torchcomms: {clean(n)}", "", width) for n in comms)
    if d.missing_dumps:
        lines.append(missing_text(analysis))
    if analysis.contexts:
        c = analysis.contexts
        hosts = sorted(set(c.hosts().values()))
        reasons = sorted({x.reason for x in c.by_rank.values() if x.reason})
        lines.append(
            f"captured context: {len(c.by_rank)} rank(s) on {len(hosts)} host(s)"
            + (f" ({'; '.join(reasons[:2])})" if reasons else "")
        )
    suspect = input_notes(analysis).suspect_ranks
    if suspect:
        lines.append(f"suspect dumps (values dropped): ranks {', '.join(str(r) for r in suspect)}")
    if d.unrecorded_groups:
        lines.append(_wrap(unrecorded_text(d.unrecorded_groups), "", width))
    if d.deadlock_cycles:
        lines.extend(cycle_line(cycle) for cycle in d.deadlock_cycles)
    others = fold_findings(f for f in d.findings if f.summary != d.headline)
    shown = others[:max_findings]
    if shown:
        lines.append("findings:")
        lines.extend(_wrap(f.text(), "  ", width) for f in shown)
        hidden = len(others) - len(shown)
        if hidden > 0:
            lines.append(f"  ... {hidden} more (use --format json)")
    if len(t.skipped):
        lines.append("skipped files:")
        for path, reason in t.skipped[["path", "reason"]].itertuples(index=False):
            lines.append(f"  {clean(str(path))}: {clean(str(reason))}")
    lines.extend(text_lines(analysis, verbose=verbose))
    # Dump text is escaped where it is read; this also covers stores written before that.
    return "\n".join(clean(line, 1 << 20) for line in "\n".join(lines).split("\n")) + "\n"


def _readers(t: Tables) -> str:
    """``, reader: native`` (or ``, readers: native 6, python 2``): which reader parsed the dumps."""
    counts = t.ranks.loc[t.ranks["reader"] != "", "reader"].value_counts().sort_index()
    if len(counts) == 1:
        return f", reader: {counts.index[0]}"
    return (", readers: " + ", ".join(f"{k} {v}" for k, v in counts.items())) if len(counts) else ""
