"""Rules for ranks stuck inside communication: every member joined a collective and none
completed it (the network or a GPU, with the member the evidence singles out), or a rank's
completions stopped before its peers' (its GPU or link)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analyzer.diagnosis.evidence import SlowEvidence, StuckEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.lookup import stack_frames
from analyzer.diagnosis.records import Finding
from analyzer.diagnosis.stuck_suspect import stuck_suspect
from analyzer.kinds import FindingKind
from analyzer.terms import group_label, plural, rank_list

__all__ = ["slow_completers", "slow_roots", "stuck_anywhere", "stuck_roots"]


def slow_completers(facts: Facts, only: list[int] | None = None) -> Finding | None:
    """Ranks that enqueued as far as their peers but whose completions stopped earlier.

    Every member joined, so no rank is missing from the program's point of view; the rank
    whose own GPU work stopped completing first (its completed counter lags the others')
    is stuck on its GPU or link.
    """
    laggers = facts.matching.stale_completers
    if only is not None:
        laggers = {r: v for r, v in laggers.items() if r in only}
    if not laggers:
        return None
    ranks = tuple(sorted(laggers))
    first: dict[str, Any] = laggers[ranks[0]]
    many = len(ranks) > 1
    return Finding(
        kind=FindingKind.STUCK_IN_COLLECTIVE.value,
        ranks=ranks,
        culprit=True,
        summary=(
            f"{plural(ranks)} {rank_list(ranks)} enqueued as far as "
            f"{'their' if many else 'its'} peers but stopped completing first (in "
            f"{group_label(first['group'], first['group_desc'])} completed {first['completed']} "
            f"while the peers completed {first['peers_completed']}): stuck on the GPU or its "
            "link, not in the program"
        ),
        group=first["group"],
        group_desc=first["group_desc"],
        seq=first["completed"] + 1,
        evidence=SlowEvidence(per_rank={str(r): v for r, v in laggers.items()}),
    )


def _candidates(facts: Facts) -> pd.DataFrame:
    """Collectives every member joined and (as far as the dumps tell) none completed."""
    c = facts.matching.collectives
    if facts.matching.dialects.completion_unobserved:
        e = facts.tables.entries
        last = e.loc[e.groupby("rank")["record_id"].idxmax()]
        pend = last[~last["retired"] & ~last["is_p2p"]]
        if pend.empty:
            return c.iloc[:0]
        key: Any = pend.groupby(["pg_name", "seq"], observed=True).size().idxmax()
        cand: pd.DataFrame = c[(c["pg_name"] == str(key[0])) & (c["seq"] == int(key[1]))]
    else:
        cand = c[(c["n_joined"] >= c["n_members"]) & (c["n_completed"] == 0)]
    return cand[cand["n_joined"] >= cand["n_members"]]


def _stuck_finding(facts: Facts, row: pd.Series) -> Finding:
    tables = facts.tables
    name, seq = str(row["pg_name"]), int(row["seq"])
    members = facts.members.get(name, ())
    e = tables.entries
    mine = e[(e["pg_name"] == row["pg_name"]) & (e["seq"] == row["seq"]) & ~e["is_p2p"]]
    started = mine[mine["time_started_ns"] > 0]
    ranks = tuple(sorted(int(m) for m in members))
    last_to_start = None
    if len(started) >= 3:  # in a pair, "last to start" says nothing
        latest = started.sort_values("time_started_ns").tail(max(1, len(started) // 8))
        last_to_start = tuple(sorted(int(r) for r in latest["rank"]))
    suspect = stuck_suspect(tables, facts.matching, name, seq, members, config=facts.config)
    head = (
        f"every member of {group_label(name, str(row['pg_desc']))} enqueued "
        f"{row['op']} seq {seq} and none completed it"
    )
    if suspect.rank is not None:
        ranks = (suspect.rank,)
        summary = (
            f"{head}; the evidence singles out rank {suspect.rank}: "
            f"{'; '.join(suspect.reasons)}. Suspect its host, GPU or link, not the program"
        )
    else:
        summary = f"{head}: suspect the network or a GPU of these ranks, not the program"
        if last_to_start:
            summary += f"; last to start it: rank(s) {rank_list(last_to_start)}"
        summary += (
            "; no member stands out: the evidence points at different members ("
            f"{'; '.join(suspect.reasons)})"
            if suspect.reasons
            else "; no member stands out (all enqueued it close together, and their entries "
            "are in the same state)"
        )
    stack_row = mine[mine["stack_id"] >= 0]
    stack = stack_frames(tables, int(stack_row["stack_id"].iloc[0])) if len(stack_row) else ()
    evidence = StuckEvidence(
        members=tuple(members),
        started=int(row["n_started"]),
        completed=int(row["n_completed"]),
        suspect=suspect.rank,
        suspect_reasons=suspect.reasons,
        signals=suspect.evidence,
        last_to_start=last_to_start,
    )
    return Finding(
        kind=FindingKind.STUCK_IN_COLLECTIVE.value,
        ranks=ranks,
        summary=summary,
        group=name,
        group_desc=str(row["pg_desc"]),
        seq=seq,
        op=str(row["op"]),
        culprit=True,
        evidence=evidence,
        stack=stack,
    )


def stuck_findings(facts: Facts, held: list[tuple[str, int]]) -> list[Finding]:
    """All members joined, none completed: the network or a GPU. ``held``: the collectives
    every member is blocked in (:func:`analyzer.waits.edges.stuck_collectives`), preferred when
    there are any."""
    if facts.matching.collectives.empty:
        return []
    cand = _candidates(facts)
    if cand.empty:
        return []
    if held:
        # Collectives of other groups that every member joined may be queued behind a blocked
        # send/recv (a pipeline backed up behind the stuck stage): the stuck one is the
        # collective every member is blocked in, its earliest unfinished op.
        keys = set(held)
        cand = cand[[(str(g), int(q)) in keys for g, q in zip(cand["pg_name"], cand["seq"])]]
    elif not facts.matching.dialects.completion_unobserved:
        slow = slow_completers(facts)
        if slow:
            return [slow]
    if cand.empty:
        return []
    return [_stuck_finding(facts, cand.sort_values(["first_created_ns"]).iloc[0])]


def stuck_roots(facts: Facts) -> list[Finding]:
    """A root blocked in a collective all its members joined and none completed holds the
    others up from inside that collective: the network or a GPU, not its program."""
    return stuck_findings(facts, facts.stuck_held) if facts.stuck_roots else []


def slow_roots(facts: Facts) -> list[Finding]:
    """A root whose GPU stopped completing what its peers completed."""
    slow = slow_completers(facts, facts.slow_roots) if facts.slow_roots else None
    return [slow] if slow is not None else []


def stuck_anywhere(facts: Facts) -> list[Finding]:
    """Nobody waits on anybody, yet a collective every member joined never completed."""
    return stuck_findings(facts, facts.held)
