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
from analyzer.render.culprit_view import culprit_views, short_stack, stack_blocks
from analyzer.render.folding import chain_lines
from analyzer.render.sentences import (
    fingerprint_text,
    incidents_note,
    kind_title,
    ranks_by_reason,
    verdict_head,
    verdict_line,
)
from analyzer.terms import plural, rank_runs

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

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
    for because, ranks in ranks_by_reason(analysis.diagnosis.not_ruled_out).items():
        out.append(f"- **Not ruled out:** {plural(ranks)} {rank_runs(ranks, 16)}: {md(because)}")
    return out


def _chain_lines(analysis: Analysis) -> list[str]:
    """Each chain (those of the same path folded) as arrows, its detail after a dash."""
    chains = chain_lines(analysis.diagnosis)
    out = []
    for c in chains[:MAX_CHAINS]:
        label, _, arrow = c.arrow.partition(": ")
        out.append(f"- **{md(label.capitalize())}:** `{clean(arrow)}` — {md(c.detail)}")
    if len(chains) > MAX_CHAINS:
        out.append(f"- **Chains, more:** {len(chains) - MAX_CHAINS} (see `--format json`)")
    return out


def _where_blocks(analysis: Analysis) -> list[str]:
    """Where each culprit is now when captured; then whose stack is which (the awaited op,
    the culprit's own last op, a deadlock's sides), each a short stack."""
    d = analysis.diagnosis
    out: list[str] = []
    now = where_now(d.culprit_ranks, analysis.contexts)
    for w in now[:2]:
        out += ["", f"**Where rank {w['rank']} is now** (captured):", ""]
        out += _code_block(short_stack(w["frames"], 6) or ["(no Python frame captured)"])
    blocks, more = stack_blocks(analysis, most=2)
    for b in blocks:
        head = b.head[0].upper() + b.head[1:]
        if not b.frames:
            out += ["", f"**{md(head)}** (no stack recorded)."]
            continue
        out += ["", f"**{md(head)}** at:", ""]
        out += _code_block(short_stack(b.frames, 3 if b.short else 5))
    if more:
        out += ["", f"(the stacks of {more} more: `--format json`)"]
    missing = [r for r in d.culprit_ranks if r in d.missing_dumps]
    if missing:
        out += [
            "",
            f"{plural(missing).capitalize()} {rank_runs(missing, 8)} wrote no dump: "
            "the last op is not known.",
        ]
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
    incidents = analysis.loaded.incidents if analysis.loaded is not None else ()
    if incidents:
        lines.append(f"- **Incidents:** {md(incidents_note(incidents).removeprefix('; '))}")
    shown = clean(source).replace("`", "'")
    tail = " · ".join(
        x
        for x in (f"input `{shown}`" if source else "", f"hangscope {version}" if version else "")
        if x
    )
    if tail:
        lines.append(f"- **Source:** {tail}")
    lines.append(
        f"- **Fingerprint:** {md(fingerprint_text(d.fingerprint))} (the same id: the same hang)"
    )
    lines += _where_blocks(analysis)
    return "\n".join(lines) + "\n"
