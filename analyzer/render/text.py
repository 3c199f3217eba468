"""The readable summary: culprit first, then the evidence."""

from __future__ import annotations

import textwrap

from analyzer.analysis import Analysis
from analyzer.context import where_now
from analyzer.escape import clean
from analyzer.render.inputs import input_notes, text_lines
from analyzer.tables import Tables

_KIND_TITLES = {
    "not_joined": "a rank stalled outside communication",
    "missing_dump": "a rank crashed or was killed (no dump)",
    "op_mismatch": "desync: ranks issued different ops",
    "size_mismatch": "desync: ranks issued different sizes",
    "dtype_mismatch": "desync: ranks issued different dtypes",
    "deadlock": "deadlock: ranks wait on each other in a cycle",
    "stuck_in_collective": "stuck inside communication: network or GPU, not the program",
    "unrecorded_ops": "a rank is behind in ops the recorder did not record",
    "no_hang": "no hang",
    "inconclusive": "inconclusive",
}


def kind_title(analysis: Analysis) -> str:
    """The title of the leading kind; a missing file reads differently where the backend
    dumps only ranks whose own ops timed out (nccl2)."""
    d = analysis.diagnosis
    lead = next((f for f in d.findings if f.culprit), None)
    if d.kind == "missing_dump" and lead is not None and lead.evidence.get("no_dump") == "stalled_or_crashed":
        return "no dump: stalled outside communication or crashed"
    return _KIND_TITLES.get(d.kind, d.kind)


def dialect_text(analysis: Analysis) -> str:
    """``read as: nccl2 (ranks 0-3)``: how each rank's dump was read. Empty when every dump
    is read as its own self-recording backend's default (gloo, legacy NCCL) in one dialect:
    the JSON and the HTML report always say it."""
    dialects = analysis.matching.dialects
    plain = all(d.dump_policy == "every_rank" and not [w for w in d.evidence if not w.startswith("no entries")]
                for d in dialects.by_rank.values())
    if plain and len(dialects.summary()) <= 1:
        return ""
    return full_dialect_text(analysis)


def full_dialect_text(analysis: Analysis) -> str:
    """``read as: ...`` for every dump set."""
    parts = []
    for name, ranks in analysis.matching.dialects.summary().items():
        parts.append(f"{name} (rank{'s' if len(ranks) > 1 else ''} {_span(ranks)})")
    return "read as: " + "; ".join(parts) if parts else ""


def _span(ranks: list[int]) -> str:
    """``0-3, 5, 7-9``."""
    out: list[str] = []
    start = prev = None
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out)


def _wrap(text: str, indent: str, width: int) -> str:
    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ")


def where_now_lines(analysis: Analysis, *, max_frames: int = 8) -> list[str]:
    """For each culprit whose context was captured: its main thread's stack at that time."""
    out: list[str] = []
    for w in where_now(analysis.diagnosis.culprit_ranks, analysis.contexts):
        where = ", ".join(x for x in (f"host {w['host']}" if w["host"] else "",
                                      f"pid {w['pid']}" if w["pid"] is not None else "",
                                      f"thread {w['thread'] or 'main'}",
                                      f"captured {w['time']}" if w["time"] else "") if x)
        out.append(f"  where it is now (rank {w['rank']}, {where}):")
        frames = w["frames"]
        for fr in frames[:max_frames]:
            out.append(f"    {fr['filename']}:{fr['line']} in {fr['name']}")
        if len(frames) > max_frames:
            out.append(f"    ... {len(frames) - max_frames} outer frame(s)")
        if not frames:
            out.append("    (no Python frame of the main thread was captured)")
    return out


def render_text(analysis: Analysis, *, width: int = 100, max_findings: int = 12,
                verbose: bool = False) -> str:
    """Plain text for a terminal or a ticket."""
    d = analysis.diagnosis
    t = analysis.tables
    lines: list[str] = []
    if d.verdict.value == "hang":
        ranks = ", ".join(str(r) for r in d.culprit_ranks)
        lines.append(f"HANG: culprit rank{'s' if len(d.culprit_ranks) > 1 else ''} {ranks}"
                     f" ({kind_title(analysis)})")
    elif d.verdict.value == "no_hang":
        lines.append("NO HANG: every recorded op completed and the counters agree")
    else:
        lines.append("INCONCLUSIVE: ops are pending but no rank can be blamed from these dumps")
    lines.append(_wrap(d.headline, "  ", width))
    lines.extend(where_now_lines(analysis))
    for rank, steps in d.chains.items():
        if not steps:
            continue
        parts = [
            f"rank {s['waiter']} waits on {s['holder']} in {s['pg_desc'] or s['pg_name']} "
            f"{'p2p seq' if s['op'] in ('send', 'recv') else 'seq'} {s['seq']} ({s['op']}"
            + (f", queued behind {s['holder']}'s blocked op)" if s["kind"] == "queued" else ")")
            for s in steps
        ]
        in_cycle = any(rank in c for c in d.deadlock_cycles)
        end = f"{rank} is in the deadlock cycle" if in_cycle else f"{rank} waits on nobody"
        lines.append(_wrap(f"chain to rank {rank}: " + "; ".join(parts) + f"; {end}", "  ", width))
    lead = next((f for f in d.findings if f.culprit and f.stack), None)
    if lead is not None:
        frames = list(lead.stack)
        # Start at the caller: skip torch.distributed's own frames at the top.
        while len(frames) > 1 and "/torch/distributed/" in str(frames[0]["filename"]):
            frames.pop(0)
        lines.append("  issued at:")
        for fr in frames[:8]:
            lines.append(f"    {fr['filename']}:{fr['line']} in {fr['name']}")
    lines.append("")
    lines.append(f"dumps: {len(t.dumped_ranks)} of {t.world_size} ranks, {len(t.entries):,} entries"
                 + (f", backends {', '.join(sorted(set(map(str, t.entries['backend'].unique())) - {''}))}"
                    if len(t.entries) else "") + _readers(t))
    dialects = dialect_text(analysis)
    if dialects:
        lines.append(_wrap(dialects, "", width))
    if d.missing_dumps:
        unreadable = set(input_notes(analysis).unreadable_ranks)
        alive = set(analysis.contexts.by_rank)

        def _missing(r: int) -> str:
            if r in alive:
                return f"{r} (alive: context captured)"
            return f"{r} (unreadable file)" if r in unreadable else str(r)

        lines.append("missing dumps: ranks " + ", ".join(_missing(r) for r in d.missing_dumps))
    if analysis.contexts:
        c = analysis.contexts
        hosts = sorted(set(c.hosts().values()))
        reasons = sorted({x.reason for x in c.by_rank.values() if x.reason})
        lines.append(f"captured context: {len(c.by_rank)} rank(s) on {len(hosts)} host(s)"
                     + (f" ({'; '.join(reasons[:2])})" if reasons else ""))
    suspect = input_notes(analysis).suspect_ranks
    if suspect:
        lines.append(f"suspect dumps (values dropped): ranks {', '.join(str(r) for r in suspect)}")
    if d.unrecorded_groups:
        from analyzer.diagnosis import unrecorded_text

        lines.append(_wrap(unrecorded_text(d.unrecorded_groups), "", width))
    if d.deadlock_cycles:
        for cycle in d.deadlock_cycles:
            lines.append(f"deadlock cycle: ranks {', '.join(str(r) for r in cycle)}")
    shown = [f for f in d.findings if f.summary != d.headline][:max_findings]
    if shown:
        lines.append("findings:")
        for f in shown:
            mark = "*" if f.culprit else "-"
            lines.append(_wrap(f"{mark} [{f.kind}] {f.summary}", "  ", width))
        hidden = len(d.findings) - 1 - len(shown)
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
