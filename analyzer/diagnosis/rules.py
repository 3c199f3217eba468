"""The rules of the diagnosis, and the order in which their findings count.

A rule is a function from the analysed tables (:class:`~analyzer.diagnosis.facts.Facts`)
to findings. Rules sit in levels, and the levels are ordered cause before consequence:

* the first level that blames a rank **leads**: its culprit findings name the culprits and
  the kind (the kind of its first culprit finding);
* each rule of a later level says what becomes of its findings then (``after_cause``):
  listed as they are, listed as consequences (not blamed, with the leader's words), or not
  looked for at all;
* a blaming level before the leader found no culprit and lists nothing;
* a level that only informs (``blames=False``) is always listed and never leads.

The verdict is the first row of :data:`VERDICTS` that applies. Adding a fault kind is one
rule (a function) and one row (in :data:`LEVELS`, and its kind in :data:`TAXONOMY`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from analyzer.diagnosis.alive import alive_roots
from analyzer.diagnosis.deadlock import deadlock
from analyzer.diagnosis.desync import collective_desync, p2p_desync
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.not_given import not_given_roots
from analyzer.diagnosis.records import Finding, Verdict
from analyzer.diagnosis.roots import plain_roots, unsure_roots
from analyzer.diagnosis.stuck import slow_roots, stuck_anywhere, stuck_roots
from analyzer.diagnosis.unrecorded import op_counters_ahead, unrecorded_ops
from analyzer.kinds import FindingKind
from analyzer.match import is_retire_on_end, is_retired_done

__all__ = ["LEVELS", "TAXONOMY", "VERDICTS", "After", "Amend", "Level", "Rule", "VerdictRow"]


class After(Enum):
    """What becomes of a rule's findings when an earlier level leads."""

    LIST = "list"
    """Listed as they are; they blame nobody."""
    CONSEQUENCE = "consequence"
    """Listed as consequences of the leader: not blamed, with its words appended."""
    SKIP = "skip"
    """Not looked for: the leader explains what this rule would."""


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    find: Callable[[Facts], list[Finding]]
    after_cause: After
    why: str


@dataclass(frozen=True, slots=True)
class Amend:
    """Rewrites the findings the rules before it in its level produced."""

    name: str
    amend: Callable[[Facts, list[Finding]], list[Finding]]
    why: str


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    rules: tuple[Rule | Amend, ...]
    why: str
    consequence: str = ""
    """Appended to the findings a later rule lists as consequences of this level."""
    blames: bool = True


#: Cause before consequence, as data: the levels in the order they are asked.
LEVELS: tuple[Level, ...] = (
    Level(
        "desync",
        (
            Rule(
                "collective desync",
                collective_desync,
                After.LIST,
                "members issued one sequence number with different ops, sizes or dtypes",
            ),
            Rule(
                "p2p desync",
                p2p_desync,
                After.LIST,
                "a send and the recv it pairs with disagree on sizes or dtypes",
            ),
        ),
        why="a desync is a cause: the ranks that wait or crash behind it are its victims",
        consequence="a consequence of the desync",
    ),
    Level(
        "waits",
        (
            Rule(
                "roots",
                plain_roots,
                After.CONSEQUENCE,
                "a rank others wait on that waits on nobody stopped first (or left no dump)",
            ),
            Rule(
                "stuck roots",
                stuck_roots,
                After.CONSEQUENCE,
                "a root blocked inside a collective all members joined holds the others from inside",
            ),
            Rule(
                "slow roots",
                slow_roots,
                After.CONSEQUENCE,
                "a root whose GPU stopped completing what its peers completed",
            ),
            Amend(
                "not given",
                not_given_roots,
                "a root whose dump file sits beside the files given was not read: never blamed",
            ),
            Amend(
                "alive roots",
                alive_roots,
                "a root without a dump whose context file shows it alive stalled; it did not crash",
            ),
            Amend(
                "unsure roots",
                unsure_roots,
                "a root whose own dump is doubtful is not blamed ahead of a root whose dump is sound",
            ),
            Rule(
                "deadlock",
                deadlock,
                After.LIST,
                "waits that form a cycle blame the rank that ran the groups in another order",
            ),
        ),
        why="among waits, only the ranks everybody ends up waiting on are culprits",
    ),
    Level(
        "stuck",
        (
            Rule(
                "stuck inside",
                stuck_anywhere,
                After.SKIP,
                "every member joined a collective and none completed it: the network or a GPU",
            ),
        ),
        why="with no wait to follow, a collective nobody completed is the last explanation",
    ),
    Level(
        "unrecorded",
        (
            Rule(
                "unrecorded ops",
                unrecorded_ops,
                After.LIST,
                "counters ahead of the entries, or op_id gaps: ops the buffers never saw",
            ),
            Rule(
                "op counters ahead",
                op_counters_ahead,
                After.LIST,
                "hook-recorded counters (op_id units) past the newest recorded op",
            ),
        ),
        why="what the dumps cannot show: informs the verdict, blames nobody",
        blames=False,
    ),
)


@dataclass(frozen=True, slots=True)
class KindRow:
    kind: FindingKind
    why: str


#: The taxonomy in the order findings are listed (culprit findings first in any case).
TAXONOMY: tuple[KindRow, ...] = (
    KindRow(
        FindingKind.NOT_JOINED,
        "members never enqueued the op the others wait in: the "
        "culprit is stalled outside communication",
    ),
    KindRow(
        FindingKind.MISSING_DUMP,
        "no file from a rank others wait on (crashed or killed; "
        "where the backend dumps only failed ranks, also a stalled rank)",
    ),
    KindRow(FindingKind.OP_MISMATCH, "members enqueued different ops at one sequence number"),
    KindRow(FindingKind.SIZE_MISMATCH, "... the same op with different shapes"),
    KindRow(FindingKind.DTYPE_MISMATCH, "... the same op with different dtypes"),
    KindRow(FindingKind.DEADLOCK, "waits form a cycle"),
    KindRow(
        FindingKind.STUCK_IN_COLLECTIVE,
        "every member enqueued the op, none completed: network or GPU",
    ),
    KindRow(FindingKind.UNRECORDED_OPS, "counters ahead of the recorded entries"),
    KindRow(FindingKind.NO_HANG, "everything recorded completed and the counters agree"),
    KindRow(FindingKind.INCONCLUSIVE, "ops are pending but no rank can be blamed"),
)


@dataclass(frozen=True, slots=True)
class VerdictRow:
    """When ``applies``, the verdict is ``verdict`` and the kind ``kind`` (None: the
    leader's kind; ``""`` left by no leader becomes ``fallback_kind``)."""

    name: str
    applies: Callable[[Facts, bool, list[Finding]], bool]
    verdict: Verdict
    kind: FindingKind | None
    why: str


def _blamed(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    return blamed


def _unseen(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    return facts.matching.dialects.completion_unobserved and any(
        f.kind == FindingKind.UNRECORDED_OPS for f in findings
    )


def _retire_means_done(facts: Facts) -> bool:
    """Whether every dumped rank's retired entries finished: gloo retires an op when its work
    ends, TorchComms on CPU when its call returned; hook backends without completion reports
    retire every op when it is issued (done and hung look alike)."""
    d = facts.matching.dialects
    return all(
        is_retire_on_end(b) or is_retired_done(b)
        for r, x in d.by_rank.items()
        if x.backend
        for b in d.buffers_of(r)
    )


def _settled(facts: Facts) -> bool:
    """Every entry finished as far as the backend tells, the counters of every group agree,
    and every rank dumped."""
    tables, matching = facts.tables, facts.matching
    e = tables.entries
    if matching.dialects.completion_unobserved:
        finished = bool(e["retired"].all())
    else:
        finished = bool((e["state"].astype(str) == "completed").all())
    p = matching.progress
    known = p[p["enqueued"] >= 0]
    agree = (
        bool((known.groupby("pg_name")["enqueued"].nunique() <= 1).all()) if len(known) else True
    )
    return finished and agree and not tables.missing_ranks


def _members_unread(facts: Facts) -> bool:
    """No dump lists any group's members or the world (gloo 2.13's empty ``pg_config``), no
    world size was given, and every rank's
    recorder retires an op when it ends, failed or not: the ranks seen may not be the whole
    job, and their last ops may have ended by timing out, waiting on ranks that wrote no
    file. Nothing the dumps hold tells those apart from a job that finished."""
    d = facts.matching.dialects
    return (
        d.completion_unobserved
        and facts.nothing_listed
        and all(
            is_retire_on_end(b) for r, x in d.by_rank.items() if x.backend for b in d.buffers_of(r)
        )
    )


def _all_done(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    unobserved = facts.matching.dialects.completion_unobserved
    return (
        _settled(facts)
        and (not unobserved or _retire_means_done(facts))
        and not _members_unread(facts)
    )


def _barrier_unseen(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    """Settled, but the job runs gloo's monitored_barrier (the op_id and sequence gaps it
    leaves on every member), which the recorder does not write: a rank that never reached
    the next one, and the ranks blocked in it, leave the dumps of a job that finished."""
    m = facts.matching
    return m.dialects.p2p_unrecorded and bool(m.barrier_gaps) and _settled(facts)


def _unknown_world(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    return _settled(facts) and _members_unread(facts)


def _completion_unknown(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    return facts.matching.dialects.completion_unobserved and _settled(facts)


def _always(facts: Facts, blamed: bool, findings: list[Finding]) -> bool:
    return True


#: The verdict: the first row that applies.
VERDICTS: tuple[VerdictRow, ...] = (
    VerdictRow("blamed", _blamed, Verdict.HANG, None, "a level named a culprit"),
    VerdictRow(
        "unseen",
        _unseen,
        Verdict.INCONCLUSIVE,
        FindingKind.UNRECORDED_OPS,
        "the buffers miss ops and completion is not observed: a hang may hide in them",
    ),
    VerdictRow(
        "barrier unseen",
        _barrier_unseen,
        Verdict.INCONCLUSIVE,
        FindingKind.INCONCLUSIVE,
        "every op ended and the counters agree, but the job runs monitored_barrier, which the "
        "recorder does not write: a rank that never reached the next one looks the same",
    ),
    VerdictRow(
        "all done",
        _all_done,
        Verdict.NO_HANG,
        FindingKind.NO_HANG,
        "every recorded op completed, the counters agree, every rank dumped",
    ),
    VerdictRow(
        "world unknown",
        _unknown_world,
        Verdict.INCONCLUSIVE,
        FindingKind.INCONCLUSIVE,
        "every op ended and the counters agree, but no dump lists its groups' members and the "
        "backend ends a timed-out op as it ends a completed one",
    ),
    VerdictRow(
        "completion unknown",
        _completion_unknown,
        Verdict.INCONCLUSIVE,
        FindingKind.INCONCLUSIVE,
        "every op retired and the counters agree, but the backend retires ops when issued: "
        "whether the last ones finished is not in the dumps",
    ),
    VerdictRow(
        "pending", _always, Verdict.INCONCLUSIVE, None, "ops are pending but no rank can be blamed"
    ),
)
