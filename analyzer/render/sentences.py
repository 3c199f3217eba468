"""The one wording layer of every renderer (text, HTML, figures, SVG, notebook).

Sentences are built here as plain text; a renderer only escapes them for its medium:
:func:`for_terminal` (control characters), :func:`for_html` (text and attribute values),
:func:`for_plot` (plotly's pseudo-HTML labels). Nothing here is specific to one output.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from analyzer.diagnosis import UNKNOWN_WORLD, UNSEEN_BARRIER_HEAD
from analyzer.escape import clean
from analyzer.kinds import FindingKind, WaitKind
from analyzer.terms import (
    group_short,
    plural,
    rank_runs,
    rank_span,
    run_texts,
    seq_word,
)

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis
    from analyzer.diagnosis import Culprit, Diagnosis, Fingerprint
    from analyzer.load import Incident
    from analyzer.waits import Wait

__all__ = [
    "KIND_TITLES",
    "NO_DUMP_TITLE",
    "chain_sentence",
    "chain_sentences",
    "cycle_line",
    "dialect_text",
    "fingerprint_text",
    "for_html",
    "for_plot",
    "for_terminal",
    "full_dialect_text",
    "kind_title",
    "missing_text",
    "not_ruled_out_lines",
    "ranks_by_reason",
    "verdict_detail",
    "verdict_head",
    "verdict_line",
]

#: The title of each kind, as the verdict line and the report's banner show it.
KIND_TITLES: dict[str, str] = {
    FindingKind.NOT_JOINED: "a rank stalled outside communication",
    FindingKind.MISSING_DUMP: "a rank crashed or was killed (no dump)",
    FindingKind.OP_MISMATCH: "desync: ranks issued different ops",
    FindingKind.SIZE_MISMATCH: "desync: ranks issued different sizes",
    FindingKind.DTYPE_MISMATCH: "desync: ranks issued different dtypes",
    FindingKind.DEADLOCK: "deadlock: ranks wait on each other in a cycle",
    FindingKind.STUCK_IN_COLLECTIVE: "stuck inside communication: network or GPU, not the program",
    FindingKind.UNRECORDED_OPS: "a rank is behind in ops the recorder did not record",
    FindingKind.NO_HANG: "no hang",
    FindingKind.INCONCLUSIVE: "inconclusive",
}
#: A missing file where the backend dumps only ranks whose own ops timed out (nccl2).
NO_DUMP_TITLE = "no dump: stalled outside communication or crashed"

_UNKNOWN_COMPLETION_LINE = (
    "INCONCLUSIVE: every op retired, but this backend reports no completion: "
    "a hang inside the last ops would look the same"
)
_UNKNOWN_WORLD_LINE = (
    "INCONCLUSIVE: nothing is pending in these dumps, but they list no group's members: "
    "ranks that wrote no file cannot be ruled out"
)
_UNSEEN_BARRIER_LINE = (
    "INCONCLUSIVE: nothing is pending in these dumps, but the job runs monitored_barrier, which "
    "gloo does not record: a rank that never reached it would look the same"
)
_NO_HANG_LINE = "NO HANG: every recorded op completed and the counters agree"
_INCONCLUSIVE_LINE = "INCONCLUSIVE: ops are pending but no rank can be blamed from these dumps"


def for_terminal(text: str, limit: int = 1 << 20) -> str:
    """Text made safe for a terminal (:func:`analyzer.escape.clean`)."""
    return clean(text, limit)


def for_html(value: object) -> str:
    """HTML-escape anything that came from a dump (text and attribute values)."""
    return html.escape(str(value), quote=True)


def for_plot(value: object) -> str:
    """Escape text for plotly labels (its pseudo-HTML decodes &lt; &gt; &amp; but not
    &quot;, and these strings never land in an attribute)."""
    return html.escape(str(value), quote=False)


def kind_title(d: Diagnosis) -> str:
    """The title of the leading kind; a missing file reads differently where the backend
    dumps only ranks whose own ops timed out (nccl2)."""
    lead = next((f for f in d.findings if f.culprit), None)
    if (
        d.kind == FindingKind.MISSING_DUMP
        and lead is not None
        and lead.evidence.get("no_dump") == "stalled_or_crashed"
    ):
        return NO_DUMP_TITLE
    if d.kind == FindingKind.INCONCLUSIVE and d.culprits:  # only ranks with no dump suspected
        return "ops are pending; the suspects wrote no dump"
    return KIND_TITLES.get(d.kind, d.kind)


def verdict_head(d: Diagnosis) -> str:
    """``HANG: culprit ranks 1, 3``, ``NO HANG`` or ``INCONCLUSIVE``; ``HANG: culprit rank 3,
    suspect rank 1`` where some culprits are only suspects, ``HANG: suspect ranks ...`` where
    a hang is certain but every culprit is a suspect (one stuck collective)."""
    if d.verdict.value == "hang":
        suspects = [c.rank for c in d.culprits if str(c.confidence) == "suspect"]
        sure = [r for r in d.culprit_ranks if r not in suspects]
        parts = [
            f"{word} {plural(ranks)} {', '.join(str(r) for r in ranks)}"
            for word, ranks in (("culprit", sure), ("suspect", suspects))
            if ranks
        ]
        return f"HANG: {', '.join(parts)}{_UNSEEN if d.unseen_suspect else ''}"
    return "NO HANG" if d.verdict.value == "no_hang" else "INCONCLUSIVE"


#: How the first line names a rank no file gives the number of (``Diagnosis.unseen_suspect``).
_UNSEEN = ", or a rank with no dump"


def _unruled(d: Diagnosis) -> str:
    """``; ranks 1-3 not ruled out`` where the files cannot rule out a second culprit
    (``Diagnosis.not_ruled_out``): on an inconclusive verdict's first line, whose suspects
    they follow (a hang's names them among its details only)."""
    ranks = [c.rank for c in d.not_ruled_out]
    return f"; {plural(ranks)} {rank_runs(ranks)} not ruled out" if ranks else ""


#: How the first line names a kind the dumps do not rule out (``Diagnosis.also_possible``).
_ALSO_SHORT: dict[str, str] = {
    FindingKind.DEADLOCK: "deadlocked",
    FindingKind.STUCK_IN_COLLECTIVE: "stuck inside a collective",
}


def _undecided(d: Diagnosis) -> str:
    """``; or deadlocked: the dumps do not decide`` where another kind is not ruled out."""
    others = [_ALSO_SHORT.get(k, k) for k, _ in d.also_possible]
    return f"; or {' or '.join(others)}: the dumps do not decide" if others else ""


def verdict_line(d: Diagnosis) -> str:
    """The first line of every output: verdict, culprits and what kind of failure."""
    if d.verdict.value == "hang":
        return f"{verdict_head(d)} ({kind_title(d)}{_undecided(d)})"
    if d.verdict.value == "inconclusive" and d.culprits:
        ranks = [c.rank for c in d.culprits]
        return (
            f"INCONCLUSIVE: suspect {plural(ranks)} {', '.join(str(r) for r in ranks)}"
            f"{_UNSEEN if d.unseen_suspect else ''}{_unruled(d)} ({kind_title(d)}{_undecided(d)}); "
            "the dumps do not single anyone out"
        )
    blind = [f for f in d.findings if f.kind == "inconclusive"]
    if d.verdict.value == "inconclusive" and blind:
        if blind[0].summary.startswith(UNSEEN_BARRIER_HEAD):
            return _UNSEEN_BARRIER_LINE
        return (
            _UNKNOWN_WORLD_LINE
            if blind[0].summary.startswith(UNKNOWN_WORLD)
            else _UNKNOWN_COMPLETION_LINE
        )
    return _NO_HANG_LINE if d.verdict.value == "no_hang" else _INCONCLUSIVE_LINE


def confidence_lines(d: Diagnosis) -> list[str]:
    """``how sure: certain: its own dump shows ...``, one line per culprit (or suspect)
    whose confidence or reason differs from the one before, with its ranks when several."""
    groups: dict[tuple[str, str], list[int]] = {}
    for c in d.culprits:
        groups.setdefault((str(c.confidence), c.because), []).append(c.rank)
    several = len(d.culprits) > 1
    return (
        [
            f"how sure{f' of {plural(ranks)} {rank_runs(ranks)}' if several else ''}: "
            f"{confidence}: {because}"
            for (confidence, because), ranks in groups.items()
        ]
        + [f"or {KIND_TITLES.get(kind, kind)}: {why}" for kind, why in d.also_possible]
        + ([f"or a rank with no dump: {d.unseen_suspect}"] if d.unseen_suspect else [])
        + not_ruled_out_lines(d)
    )


def not_ruled_out_lines(d: Diagnosis) -> list[str]:
    """``not ruled out, ranks 1-3: <why>``, the ranks of one reason on one line
    (``Diagnosis.not_ruled_out``)."""
    return [
        f"not ruled out, {plural(ranks)} {rank_runs(ranks)}: {because}"
        for because, ranks in ranks_by_reason(d.not_ruled_out).items()
    ]


def ranks_by_reason(culprits: Sequence[Culprit]) -> dict[str, list[int]]:
    """The ranks of ``culprits`` by their reason, in first-seen order."""
    out: dict[str, list[int]] = {}
    for c in culprits:
        out.setdefault(c.because, []).append(c.rank)
    return out


def verdict_detail(d: Diagnosis) -> str:
    """What follows the verdict head: the kind title of a hang, else the explanation."""
    line = verdict_line(d)
    if d.verdict.value == "hang":
        return kind_title(d) + _undecided(d)
    return line.split(": ", 1)[1]


def _step_text(s: Wait) -> str:
    queued = f", queued behind {s.holder}'s blocked op" if s.kind == WaitKind.QUEUED else ""
    return (
        f"rank {s.waiter} waits on {s.holder} in {group_short(s.pg_name, s.pg_desc)} "
        f"{seq_word(s.op)} {s.seq} ({s.op}{queued})"
    )


def chain_sentence(
    rank: int, steps: Sequence[Wait], cycles: Iterable[tuple[int, ...]], total: int = 0
) -> str:
    """``chain to rank 3: rank 0 waits on 2 in ... seq 4 (allreduce); ...; 3 waits on nobody``
    (or ``3 is in the deadlock cycle``). Where the chain left waits out (``total`` waits in
    all), the gap says how many."""
    in_cycle = any(rank in c for c in cycles)
    end = f"{rank} is in the deadlock cycle" if in_cycle else f"{rank} waits on nobody"
    parts = []
    for before, s in zip((None, *steps), steps):
        if before is not None and before.holder != s.waiter:
            left = total - len(steps)
            parts.append(
                f"... {left} more wait{'s' if left != 1 else ''} ..." if left > 0 else "..."
            )
        parts.append(_step_text(s))
    return f"chain to rank {rank}: " + "; ".join(parts) + f"; {end}"


def chain_sentences(d: Diagnosis) -> list[str]:
    """One sentence per culprit others wait on."""
    return [
        chain_sentence(rank, steps, d.deadlock_cycles, d.chain_waits.get(rank, 0))
        for rank, steps in d.chains.items()
        if steps
    ]


def fingerprint_text(fp: Fingerprint) -> str:
    """``3fa1c2d9e0b1 (not_joined, all_reduce in default_pg, at train.py in step)``: the id
    and the parts known (the verdict is said elsewhere)."""
    where = " in ".join(x for x in (fp.op, fp.group_role) if x)
    parts = [fp.kind, where, f"at {fp.location}" if fp.location else ""]
    return f"{fp.id} ({', '.join(clean(p) for p in parts if p)})"


def cycle_line(cycle: Sequence[int]) -> str:
    return f"deadlock cycle: ranks {', '.join(str(r) for r in cycle)}"


def dialect_text(analysis: Analysis) -> str:
    """``read as: nccl2 (ranks 0-3)``: how each rank's dump was read. Empty when every dump
    is read as its own self-recording backend's default (gloo, legacy NCCL) in one dialect:
    the JSON and the HTML report always say it."""
    dialects = analysis.matching.dialects
    plain = all(
        d.dump_policy == "every_rank"
        and not [w for w in d.evidence if not w.startswith("no entries")]
        for d in dialects.by_rank.values()
    )
    if plain and len(dialects.summary()) <= 1:
        return ""
    return full_dialect_text(analysis)


def full_dialect_text(analysis: Analysis) -> str:
    """``read as: ...`` for every dump set."""
    parts = [
        f"{name} ({plural(ranks)} {rank_span(ranks)})"
        for name, ranks in analysis.matching.dialects.summary().items()
    ]
    return "read as: " + "; ".join(parts) if parts else ""


#: Items (a rank with a note, or a run of ranks) the text names before it counts the rest.
MISSING_ITEMS = 16


def missing_text(analysis: Analysis) -> str:
    """``missing dumps: ranks 2, 5 (unreadable file), 7 (alive: context captured), 9-1023``:
    ranks with a note one by one, the others as runs, :data:`MISSING_ITEMS` of them at most
    (a job whose ranks mostly wrote no file, as nccl2's, is not a page of numbers)."""
    from analyzer.render.input_notes import input_notes

    d = analysis.diagnosis
    unreadable = set(input_notes(analysis).unreadable_ranks)
    alive = set(analysis.contexts.by_rank)

    def one(r: int) -> str:
        if r in alive:
            return f"{r} (alive: context captured)"
        return f"{r} (unreadable file)" if r in unreadable else str(r)

    noted = alive | unreadable
    missing = d.missing_dumps
    items = sorted(
        [(r, one(r)) for r in missing if r in noted]
        + run_texts(r for r in missing if r not in noted)
    )
    more = f", … ({len(missing):,} ranks in all)" if len(items) > MISSING_ITEMS else ""
    beside = analysis.loaded.not_given if analysis.loaded is not None else {}
    unread = [r for r in missing if r in beside]
    note = (
        f"; not given: {plural(unread)} {rank_runs(unread, MISSING_ITEMS)} (their files sit "
        "beside the files given)"
        if unread
        else ""
    )
    return "missing dumps: ranks " + ", ".join(t for _, t in items[:MISSING_ITEMS]) + more + note


def incidents_note(incidents: Sequence[Incident]) -> str:
    """``; these folders held 2 incidents: analyzed attempt_1 (the newest), not attempt_0
    (--incident NAME)`` for the first line, or nothing when there was one."""
    if len(incidents) < 2:
        return ""
    done = next(i for i in incidents if i.analyzed)
    newest = " (the newest)" if done is incidents[0] else ""
    rest = ", ".join(clean(i.name) for i in incidents if not i.analyzed)
    why = next((i.why for i in incidents if i.why), "")
    return (
        f"; these folders held {len(incidents)} incidents"
        + (f" ({clean(why)})" if why else "")
        + f": analyzed {clean(done.name)}{newest}, not {rest} (--incident NAME)"
    )
