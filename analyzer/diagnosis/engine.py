"""Running the rules: the levels in order, the verdict, the headline and the chains."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import networkx as nx
import pandas as pd

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.context_file import NoAnswer, RankContext
from analyzer.diagnosis.alternatives import kinds_also_possible
from analyzer.diagnosis.beside import missing_suspects, unseen_suspect
from analyzer.diagnosis.confidence import culprits_of
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.fingerprint import fingerprint_of
from analyzer.diagnosis.not_ruled_out import not_ruled_out
from analyzer.diagnosis.records import Confidence, Culprit, Diagnosis, Finding, Verdict
from analyzer.diagnosis.rules import (
    LEVELS,
    TAXONOMY,
    VERDICTS,
    After,
    Amend,
    Level,
    Rule,
    VerdictRow,
)
from analyzer.diagnosis.unrecorded import unrecorded_text
from analyzer.kinds import FindingKind
from analyzer.match import Matching
from analyzer.normalize import Tables
from analyzer.terms import group_label, plural, rank_runs
from analyzer.waits import chain, chain_length

__all__ = ["UNKNOWN_WORLD", "UNSEEN_BARRIER_HEAD", "diagnose", "run_levels"]

_NO_HANG = "every recorded op completed and the counters of every group agree"
#: Why every op retired and the counters agreeing is no no-hang where ops retire when issued.
_BLIND = (
    "every op is retired and the counters agree, but this backend reports no completion (it "
    "retires every op when issued): whether the last ops finished, or a rank is stuck inside "
    "one, is not in these dumps"
)
#: What a no-hang cannot rule out where the backend records no send/recv (gloo): its
#: monitored_barrier is send/recv too, so a rank stuck in one leaves the same dumps.
_BLIND_P2P = (
    "; this backend records no send/recv (gloo's monitored_barrier among them): a hang inside "
    "one would leave these same dumps"
)
#: Why every op ended and the counters agreeing is no no-hang where no dump lists members.
UNKNOWN_WORLD = (
    "every op these dumps recorded ended and their counters agree, but no dump lists its "
    "groups' members (gloo 2.13 writes none): ranks that wrote no file cannot be ruled out, "
    "and this backend ends an op that timed out waiting on them as it ends one that completed "
    "(a world size given, --world-size N, settles it)"
)
#: Why every op ended and the counters agreeing is no no-hang where the job runs gloo's
#: monitored_barrier: the recorder writes none, and the ranks blocked in one (or a rank that
#: never reached it) leave the dumps of a job that finished.
UNSEEN_BARRIER_HEAD = (
    "every recorded op ended and their counters agree, but this job runs gloo's monitored_barrier"
)
_UNSEEN_BARRIER = (
    UNSEEN_BARRIER_HEAD + " (the gaps it leaves in op_id and the sequence numbers of {groups}), "
    "which the recorder does not write: a rank that never reached the next one, or a hang "
    "inside it, leaves these same dumps"
)
#: Added where no dump lists members either (gloo 2.13).
_ALSO_WORLD = (
    "; no dump lists its groups' members either (gloo 2.13 writes none): ranks that wrote no "
    "file cannot be ruled out"
)
_NO_BLAME = "ops are still pending but no rank can be blamed from these dumps"


def _level_findings(facts: Facts, level: Level, led: bool) -> list[tuple[Rule, Finding]]:
    """The findings of one level's rules, each with the rule that made it (amends keep
    the count and order of the findings they rewrite)."""
    found: list[tuple[Rule, Finding]] = []
    for item in level.rules:
        if isinstance(item, Amend):
            amended = item.amend(facts, [f for _, f in found])
            found = [(r, f) for (r, _), f in zip(found, amended, strict=True)]
        elif not (led and item.after_cause is After.SKIP):
            found.extend((item, f) for f in item.find(facts))
    return found


def run_levels(
    facts: Facts, levels: Sequence[Level] = LEVELS
) -> tuple[list[Finding], set[int], str]:
    """The findings in the order the levels list them, the culprits, and the kind of the
    leading finding (``""`` when no level blames anybody)."""
    findings: list[Finding] = []
    leader: Level | None = None
    culprits: set[int] = set()
    kind = ""
    for level in levels:
        found = _level_findings(facts, level, leader is not None)
        if leader is not None:
            findings.extend(
                dataclasses.replace(f, culprit=False, summary=f"{f.summary} ({leader.consequence})")
                if rule.after_cause is After.CONSEQUENCE
                else dataclasses.replace(f, culprit=False)
                if f.culprit
                else f
                for rule, f in found
            )
        elif not level.blames:
            findings.extend(f for _, f in found)
        elif any(f.culprit for _, f in found):
            leader = level
            blamed = [f for _, f in found if f.culprit]
            culprits = {r for f in blamed for r in f.ranks}
            kind = blamed[0].kind
            findings.extend(f for _, f in found)
        # A blaming level with no culprit before any leader lists nothing.
    return findings, culprits, kind


def _settled_findings(row: VerdictRow, facts: Facts) -> list[Finding]:
    """The finding that says why nothing pending is (or is not) a no-hang."""
    matching = facts.matching
    blind_p2p = _BLIND_P2P if matching.dialects.p2p_unrecorded else ""
    inconclusive = FindingKind.INCONCLUSIVE.value
    if row.name == "barrier unseen":
        descs = facts.group_descs
        groups = ", ".join(group_label(n, descs.get(n, "")) for n in sorted(matching.barrier_gaps))
        world = _ALSO_WORLD if facts.nothing_listed else ""
        summary = _UNSEEN_BARRIER.format(groups=groups) + world
        return [Finding(kind=inconclusive, ranks=(), summary=summary)]
    if row.kind is FindingKind.NO_HANG:
        return [Finding(kind=FindingKind.NO_HANG.value, ranks=(), summary=_NO_HANG + blind_p2p)]
    if row.name == "completion unknown":
        return [Finding(kind=inconclusive, ranks=(), summary=_BLIND)]
    if row.name == "world unknown":
        return [Finding(kind=inconclusive, ranks=(), summary=UNKNOWN_WORLD + blind_p2p)]
    return []


def _headline(
    facts: Facts,
    findings: list[Finding],
    row: VerdictRow,
    unrecorded_groups: dict[str, dict[str, Any]],
) -> str:
    """The one sentence of why: the leading culprit finding's, else what keeps anyone from
    being blamed (dumps not given that others wait on, groups no dump recorded)."""
    g = facts.graph
    lead = next((f for f in findings if f.culprit), None)
    headline = lead.summary if lead else findings[-1].summary if findings else _NO_BLAME
    waited_unread = sorted(r for r in facts.not_given if r in g and g.in_degree(r) > 0)
    if lead is None and waited_unread:
        return (
            f"the dumps of {plural(waited_unread)} {rank_runs(waited_unread)}, which others wait "
            "on, were not given (their files sit beside the files given): analyze the whole "
            "folder"
        )
    if lead is None and unrecorded_groups and row.kind is not FindingKind.NO_HANG:
        return f"{headline}; {unrecorded_text(unrecorded_groups)}"
    return headline


def diagnose(
    tables: Tables,
    matching: Matching,
    wait_rows: pd.DataFrame,
    g: nx.DiGraph,
    *,
    unsure: Mapping[int, str] | None = None,
    stale: Collection[int] = (),
    alive: Mapping[int, RankContext] | None = None,
    not_given: Mapping[int, str] | None = None,
    no_answer: Mapping[int, NoAnswer] | None = None,
    config: AnalysisConfig = DEFAULT_CONFIG,
    levels: Sequence[Level] = LEVELS,
) -> Diagnosis:
    """Name the culprits and explain them. Deterministic for a given input.

    ``unsure``: ranks whose evidence cannot be trusted (an unreadable file, a dump with
    dropped entries, only an older round's dump) and why (see
    :func:`analyzer.diagnosis.roots.unsure_roots`); ``stale``: of those, the ranks whose only
    dump was an older round's (set aside, so they have none here); ``alive``:
    ranks a capture's context file shows alive (see :mod:`analyzer.diagnosis.alive`);
    ``not_given``: ranks whose dump sits beside the files given, by path (never blamed);
    ``no_answer``: ranks the debug server stopped reaching (see :mod:`analyzer.diagnosis.gone`);
    ``config``: the thresholds (late enqueues of a stuck collective); ``levels``: the rules
    (:data:`analyzer.diagnosis.rules.LEVELS`).
    """
    facts = Facts(
        tables=tables,
        matching=matching,
        waits=wait_rows,
        graph=g,
        unsure=unsure or {},
        stale=frozenset(stale),
        alive=alive or {},
        not_given=not_given or {},
        no_answer=no_answer or {},
        config=config,
    )
    findings, culprits, kind = run_levels(facts, levels)
    row = next(v for v in VERDICTS if v.applies(facts, bool(culprits), findings))
    verdict = row.verdict
    if row.kind is not None:
        kind = row.kind.value
    elif not culprits:
        kind = kind or FindingKind.INCONCLUSIVE.value
    findings.extend(_settled_findings(row, facts))
    unrecorded_groups = dict(matching.dialects.unrecorded_groups)
    chains = {r: chain(g, r) for r in sorted(culprits) if r in g and g.in_degree(r) > 0}
    chain_waits = {r: chain_length(g, r) for r, steps in chains.items() if len(steps) >= 8}
    headline = _headline(facts, findings, row, unrecorded_groups)
    judged = culprits_of(facts, findings, culprits)
    if not judged and row.name == "pending":  # nobody blamed: ranks with no dump may be held
        judged = missing_suspects(facts)
    culprits = {c.rank for c in judged}  # a desync's odd rank may join its dead partner
    verdict = _unless_all_suspects(verdict, judged, kind)
    order = {k.kind.value: i for i, k in enumerate(TAXONOMY)}
    findings.sort(key=lambda f: (not f.culprit, order.get(f.kind, 99), f.ranks, f.group, f.seq))
    return Diagnosis(
        verdict=verdict,
        culprit_ranks=tuple(sorted(culprits)),
        kind=kind,
        headline=headline,
        findings=tuple(findings),
        missing_dumps=tuple(tables.missing_ranks),
        deadlock_cycles=facts.roots.cycles,
        chains=chains,
        chain_waits=chain_waits,
        unrecorded_groups=unrecorded_groups,
        culprits=judged,
        also_possible=kinds_also_possible(facts, findings, judged)
        if verdict is not Verdict.NO_HANG and kind == FindingKind.NOT_JOINED.value
        else (),
        unseen_suspect=unseen_suspect(facts, findings, pending=row.name == "pending")
        if verdict is not Verdict.NO_HANG
        else "",
        not_ruled_out=not_ruled_out(facts, findings, judged)
        if verdict is not Verdict.NO_HANG
        else (),
        fingerprint=fingerprint_of(verdict.value, kind, findings),
    )


def _unless_all_suspects(verdict: Verdict, judged: Sequence[Culprit], kind: str) -> Verdict:
    """``inconclusive`` for a hang whose culprits are all suspects: nobody is singled out.
    Except a collective every member is stuck in: a hang for certain, whichever member holds
    it."""
    if (
        verdict is Verdict.HANG
        and all(c.confidence is Confidence.SUSPECT for c in judged)
        and kind != FindingKind.STUCK_IN_COLLECTIVE.value
    ):
        return Verdict.INCONCLUSIVE
    return verdict
