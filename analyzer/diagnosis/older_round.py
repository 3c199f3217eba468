"""Ranks whose only dump is an older round's, where every rank blamed is one: the waiters
that may be inside the collective with them, and the other ranks with no dump of this round
that they may wait on in turn. Each a suspect, with the fact that is missing: where those
ranks went after their older dumps is in no file. Read in docs/diagnosis.md ("How sure")."""

from __future__ import annotations

from analyzer.diagnosis.absent import MAX_SILENT
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.lookup import newest_collective
from analyzer.diagnosis.records import Confidence, Culprit
from analyzer.terms import plural, rank_runs

__all__ = ["inside_with_stale", "stale_alike"]


def inside_with_stale(facts: Facts, dead: set[int], named: set[int]) -> list[Culprit]:
    """Where every culprit named (``named``: those the findings blame, not the waiters whose
    own retired wait is in doubt, :func:`analyzer.diagnosis.beside.unproven_waits`) is a rank
    whose only dump was an older round's:
    the ranks whose wait on one of them (``dead``) is their newest entry, a collective still
    in flight (not retired). That rank may have joined it since its older dump: every member
    would then be inside, held by one of them, and which one is in no file. Each a suspect
    (at most :data:`MAX_SILENT`)."""
    stale = dead & set(facts.stale)
    if not stale or not named or not named <= set(facts.stale):
        return []
    w = facts.waits
    w = w[w["holder"].isin(sorted(stale)) & ~w["waiter"].isin(sorted(named))]
    out: dict[int, Culprit] = {}
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        r = int(waiter)
        desc = (
            None if r in out else newest_collective(facts.last_entry(r), group, seq, retired=False)
        )
        if desc is None:
            continue
        out[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"it waits on rank {int(holder)} (only an older round's dump) in its last op, {op} "
            f"in {desc} seq {int(seq)}, still in flight: if rank {int(holder)} joined it "
            "after that dump, every member is inside it and this rank may be the one holding "
            "it (network, GPU, host)",
        )
    return [out[r] for r in sorted(out)] if len(out) <= MAX_SILENT else []


def stale_alike(facts: Facts, named: set[int]) -> list[Culprit]:
    """Where every culprit named (``named``: those the findings blame, not the waiters whose
    own retired wait is in doubt, :func:`analyzer.diagnosis.beside.unproven_waits`) is a rank
    whose only dump was an older round's:
    the other ranks with no dump of this round (an older round's only, or none). The chain
    ends at a named rank only because no newer file shows where it went after its older
    dump; it may wait there on any of these, which may have stopped first (a desync, a
    crash, a stall). Each a suspect (at most :data:`MAX_SILENT`)."""
    stale = set(facts.stale)
    if not named or not named <= stale:
        return []
    others = sorted(facts.unblamed_missing - named)
    if not others or len(others) > MAX_SILENT:
        return []
    at = f"{plural(sorted(named))} {rank_runs(sorted(named))}"
    return [
        Culprit(
            r,
            Confidence.SUSPECT,
            ("its only dump is an older round's too" if r in stale else "it wrote no dump")
            + f": where it is now is in no file, as with {at}, where the others' waits end; "
            "that rank may wait on this one, which may have stopped first",
        )
        for r in others
    ]
