"""A summary to paste into a ticket (``hangscope analyze --format markdown``): the verdict,
each culprit with its confidence, the kind, the one-line why, the wait chains as arrows,
where each culprit is now (or its last recorded op) with a short stack, what was read, the
hangscope version and the input. Plain CommonMark (headings, bullets, fenced code) that
GitHub and Jira both render; text from dumps is escaped."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from analyzer.escape import clean
from analyzer.load import where_now
from analyzer.render.culprit_view import (
    chain_arrow,
    culprit_views,
    cycle_sides,
    issued_stack,
    short_stack,
)
from analyzer.render.sentences import kind_title, verdict_head, verdict_line
from analyzer.terms import group_short, plural, rank_runs, seq_word

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis
    from analyzer.waits import Wait

__all__ = ["render_markdown"]

#: Culprits listed one by one before the rest are counted.
MAX_CULPRITS = 8
#: Chains shown before the rest are counted.
MAX_CHAINS = 4

_SPECIAL = re.compile(r"([\\`*\[\]<>|#~]|(?<!\w)_|_(?!\w))")


def md(text: object) -> str:
    """Text (from a dump or a sentence) safe in Markdown prose: control characters
    escaped, markup characters backslash-escaped."""
    return _SPECIAL.sub(r"\\\1", clean(str(text)))


def _code_block(lines: list[str]) -> list[str]:
    body = [clean(x).replace("```", "'''") for x in lines]
    return ["```text", *body, "```"]


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\. ")


def _first_sentence(text: str) -> str:
    parts = _SENTENCE_END.split(text, maxsplit=1)
    return parts[0] + ("." if len(parts) > 1 else "")


def _hop_detail(s: Wait) -> str:
    return (
        f"{s.waiter}→{s.holder} {group_short(s.pg_name, s.pg_desc)} {seq_word(s.op)} {s.seq} {s.op}"
    )


def _culprit_lines(analysis: Analysis) -> list[str]:
    """``Culprit: rank 3 — likely: <the fact that decides it>``, ranks of one confidence and
    reason on one line."""
    views = culprit_views(analysis.diagnosis)
    word = "Culprit" if analysis.diagnosis.verdict.value == "hang" else "Suspect"
    groups: dict[tuple[str, str], list[int]] = {}
    for v in views:
        groups.setdefault((v.confidence, v.because), []).append(v.rank)
    out = []
    for (confidence, because), ranks in list(groups.items())[:MAX_CULPRITS]:
        how = f" — **{confidence}**" if confidence else ""
        why = f": {md(because)}" if because else ""
        label = word if len(ranks) == 1 else f"{word}s"
        out.append(f"- **{label}:** {plural(ranks)} {rank_runs(ranks, 16)}{how}{why}")
    if len(groups) > MAX_CULPRITS:
        rest = [r for _, rs in list(groups.items())[MAX_CULPRITS:] for r in rs]
        out.append(f"- **More {word.lower()}s:** ranks {rank_runs(rest, 16)}")
    return out


def _chain_lines(analysis: Analysis) -> list[str]:
    d = analysis.diagnosis
    chains = [(r, steps) for r, steps in d.chains.items() if steps]
    out = []
    for rank, steps in chains[:MAX_CHAINS]:
        arrow = chain_arrow(steps, d.chain_waits.get(rank, 0))
        detail = "; ".join(_hop_detail(s) for s in steps[:4])
        more = f"; … {len(steps) - 4} more" if len(steps) > 4 else ""
        out.append(f"- **Chain to rank {rank}:** `{clean(arrow)}` ({md(detail)}{more})")
    if len(chains) > MAX_CHAINS:
        out.append(f"- **Chains, more:** {len(chains) - MAX_CHAINS} (see `--format json`)")
    return out


def _where_blocks(analysis: Analysis) -> list[str]:
    """Per culprit (the first few): where it is now when captured, else its last recorded op,
    each with a short stack."""
    d = analysis.diagnosis
    now = {int(w["rank"]): w for w in where_now(d.culprit_ranks, analysis.contexts)}
    out: list[str] = []
    for side in cycle_sides(d):
        stack = issued_stack(analysis.tables, side.waiters, side.group, side.seq, side.op)
        out += [
            "",
            f"**{plural(side.waiters).capitalize()} {rank_runs(side.waiters)}** blocked in "
            f"{md(side.words())} (waiting on {plural(side.holders)} {rank_runs(side.holders)})"
            + (", issued at:" if stack else ""),
        ]
        if stack:
            out += ["", *_code_block(short_stack(stack))]
    for v in culprit_views(d)[:2]:
        if v.rank in now:
            w = now[v.rank]
            out += ["", f"**Where rank {v.rank} is now** (captured):", ""]
            out += _code_block(short_stack(w["frames"], 6) or ["(no Python frame captured)"])
        elif v.own_stack and v.finding is not None:
            f = v.finding
            op = f"{f.op} {group_short(f.group, f.group_desc)} {seq_word(f.op)} {f.seq}"
            out += ["", f"**Rank {v.rank} issued** {md(op)} at:", ""]
            out += _code_block(short_stack(v.finding.stack))
        elif v.last_op:
            colon = " at:" if v.last_stack else " (no stack recorded)"
            out += ["", f"**Rank {v.rank} last issued** {md(v.last_op)}{colon}"]
            if v.last_stack:
                out += ["", *_code_block(short_stack(v.last_stack))]
        elif v.rank in analysis.diagnosis.missing_dumps:
            out += ["", f"**Rank {v.rank}** wrote no dump: its last op is not known."]
        if v.awaited_stack and v.awaited_op and v.rank not in now:
            by = rank_runs(v.awaited_by, 8)
            out += [
                "",
                f"**Awaited op** ({md(v.awaited_op)}), as issued by {plural(v.awaited_by)} {by} at:",
                "",
            ]
            out += _code_block(short_stack(v.awaited_stack, 3))
    return out


def _read_line(analysis: Analysis) -> str:
    t = analysis.tables
    d = analysis.diagnosis
    backends = (
        sorted({str(b) for b in t.entries["backend"].unique()} - {""}) if len(t.entries) else []
    )
    parts = [
        f"{len(t.dumped_ranks)} of {t.world_size} ranks",
        f"{len(t.entries):,} entries" + (f" ({', '.join(backends)})" if backends else ""),
        f"missing: {plural(d.missing_dumps)} {rank_runs(d.missing_dumps, 16)}"
        if d.missing_dumps
        else "missing: none",
        f"skipped files: {len(t.skipped)}" if len(t.skipped) else "skipped files: none",
    ]
    loaded = analysis.loaded
    if loaded is not None and loaded.ignored:
        parts.append(f"ignored files: {len(loaded.ignored)}")
    return "- **Read:** " + md("; ".join(parts))


def render_markdown(analysis: Analysis, *, source: str = "", version: str = "") -> str:
    """The ticket summary of ``analysis``; ``source`` is the input as given (a folder, files),
    ``version`` hangscope's."""
    d = analysis.diagnosis
    blamed = d.verdict.value == "hang" or bool(d.culprits)
    lines = [f"### {md(verdict_line(d) if blamed else verdict_head(d))}", ""]
    if blamed:
        lines += _culprit_lines(analysis)
        lines.append(f"- **Kind:** {md(kind_title(d))} (`{d.kind}`)")
    lines.append(f"- **Why:** {md(_first_sentence(d.headline))}")
    lines += _chain_lines(analysis)
    for cycle in d.deadlock_cycles:
        lines.append(f"- **Deadlock cycle:** ranks {', '.join(str(r) for r in cycle)}")
    lines.append(_read_line(analysis))
    shown = clean(source).replace("`", "'")
    tail = " · ".join(
        x
        for x in (f"input `{shown}`" if source else "", f"hangscope {version}" if version else "")
        if x
    )
    if tail:
        lines.append(f"- **Source:** {tail}")
    lines += _where_blocks(analysis)
    return "\n".join(lines) + "\n"
