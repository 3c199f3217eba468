"""How sure the evidence makes each culprit, and the one fact that decides it.

* ``certain``: the culprit's own readable dump shows it (it never enqueued the op its peers
  wait in, it issued the odd op, its entries close a cycle);
* ``likely``: the dumps point at it but cannot show it from its side (it wrote no dump, so a
  crash and a stall look alike; no file names it and the layout of the groups implies it; it
  is blocked inside a collective whose completion its backend does not report);
* ``suspect``: another reading fits the dumps as well (its own dump could not be trusted; a
  group of two, where either side may have issued the odd op; ops the buffers never saw).

When every culprit is a suspect, the verdict is ``inconclusive`` and they are listed as the
suspects (:func:`analyzer.diagnosis.engine.diagnose`).
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.diagnosis.absent import absent_doubts, beside_proven
from analyzer.diagnosis.alternatives import (
    BLIND_PAIR,
    blind_stalled,
    stuck_alike,
)
from analyzer.diagnosis.beside import (
    silent_partners,
    stuck_holder_doubt,
    unlisted_members,
    unproven_waits,
    wait_verb,
    with_silent_partners,
)
from analyzer.diagnosis.dead_partner import desync_beside_death, partners_changed
from analyzer.diagnosis.evidence import (
    CycleEvidence,
    MismatchEvidence,
    RootEvidence,
    StuckEvidence,
)
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.gone import gone_culprits
from analyzer.diagnosis.held import (
    HeldBeside,
    held_beside_absent,
    held_in_p2p,
    unpaired_holders,
)
from analyzer.diagnosis.older_round import inside_with_stale, stale_alike
from analyzer.diagnosis.records import Confidence, Culprit, Finding, place_of
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

__all__ = ["culprits_of"]


#: Why a rank of a cycle blamed by the wait that began first is a suspect, as is the rest.
_NO_MAJORITY_ORDER = (
    "the cycle's first wait falls on it, but no majority of the ranks ran the cycle's groups "
    "in one order: which of its ranks ran them out of order is not in the files"
)

_DESYNC = (FindingKind.OP_MISMATCH, FindingKind.SIZE_MISMATCH, FindingKind.DTYPE_MISMATCH)


def _no_sure_majority(facts: Facts, f: Finding) -> str:
    """Why the odd side of mismatch ``f`` is not known, or "": no value has a majority of the
    members that recorded it, or the members with no dump are enough to make the odd value
    the majority (their values would decide)."""
    ev = f.evidence
    assert isinstance(ev, MismatchEvidence)
    if ev.ambiguous:
        return (
            f"the members that recorded {place_of(f)} split with no majority: any side may "
            "have issued the odd one"
        )
    members = set(facts.members.get(f.group, ())) if f.group else set()
    silent = sorted(members - set(facts.tables.dumped_ranks))
    odd = ev.recorded_members - ev.agreeing_members
    if silent and ev.agreeing_members < odd + len(silent):
        return (
            f"{ev.agreeing_members} of the {len(members)} members agree on {place_of(f)}, and "
            f"{plural(silent)} {rank_runs(silent)} wrote no dump: their values could make the "
            "other side the majority"
        )
    return ""


def _alive_no_dump(f: Finding) -> bool:
    """A culprit with no dump that a context file or the debug server's stacks show alive."""
    return isinstance(f.evidence, RootEvidence) and bool(f.evidence.alive)


def _judge_desync(facts: Facts, f: Finding) -> tuple[Confidence, str]:
    """The confidence of the odd side of an op, size or dtype mismatch."""
    members = facts.members.get(f.group, ()) if f.group else ()
    if len(members) == 2:
        ev = f.evidence
        if isinstance(ev, MismatchEvidence) and ev.decided_by == "sibling groups":
            return Confidence.LIKELY, (
                f"a group of two disagrees on {place_of(f)}, and the other {f.group_desc} "
                f"groups issued {ev.majority} there, as its peer did"
            )
        return Confidence.SUSPECT, (
            f"a group of two disagrees on {place_of(f)}: either side may have issued the odd one"
        )
    if isinstance(f.evidence, MismatchEvidence) and (odd := _no_sure_majority(facts, f)):
        return Confidence.SUSPECT, odd
    return (
        Confidence.CERTAIN,
        f"its own entry for {place_of(f)} differs from every other member's",
    )


def _held_text(f: Finding, held: HeldBeside) -> str:
    """Why a rank blamed for never joining ``f``'s op may be held in its last op instead
    (:func:`held_beside_absent`)."""
    if held.alone:
        return (
            f"it never enqueued {place_of(f)}, but its last op, {held.at} ({held.state}), is in "
            "a group no other dump holds and no dump lists: no other member recorded that "
            "collective, so it may be held there (or have timed out there) by a member that "
            "wrote no file"
        )
    if held.stopped:
        return (
            f"it never enqueued {place_of(f)}, but its last op, {held.at} ({held.state}), is in "
            "a group no other dump holds and no dump lists: every rank wrote a dump, so any "
            f"other member is one that never issued it, and {plural(held.stopped)} "
            f"{rank_runs(held.stopped)} stopped too: it may be held there by "
            f"{'one of them' if len(held.stopped) > 1 else 'that rank'}"
        )
    absent = list(held.absent)
    if not absent:  # a rooted op in a group no dump lists
        return (
            f"it never enqueued {place_of(f)}, but its last op, {held.at}, which its backend "
            "retired (ended or timed out alike), completes for the other members without every "
            "member, and no dump lists its group's members: a member that wrote no file may "
            "hold it there (it may have timed out there, waiting on it)"
        )
    return (
        f"it never enqueued {place_of(f)}, but its last op, {held.at}, which its backend retired "
        f"(ended or timed out alike), may never have been joined by {plural(absent)} "
        f"{rank_runs(absent)} of its group (no dump): it may have timed out there, waiting on "
        "them"
    )


#: Why a rank with no dump is likely, not certain: what its absent file leaves open. The
#: last reading is the one no other file can rule out: a waiting rank whose file is lost
#: reads the same (``make accuracy-lost-one``).
_LOOK_ALIKE = (
    "a crash and a stall look alike from the others' files, and so does a file of its that "
    "was written but not collected (if one exists, add it)"
)


def _judge(facts: Facts, rank: int, f: Finding) -> tuple[Confidence, str]:
    """The confidence of ``rank`` as the culprit of finding ``f``."""
    if rank in facts.unsure:
        return Confidence.SUSPECT, f"its own dump cannot be trusted: {facts.unsure[rank]}"
    if rank in facts.inferred:
        return Confidence.LIKELY, (
            f"no file names it: the layout of {facts.inferred[rank]} implies a member with no dump"
        )
    g = facts.graph  # direct waiters only: the count of all is in the summary
    waiters = sorted(int(w) for w in g.predecessors(rank)) if rank in g else []
    kind = FindingKind(f.kind) if f.kind in FindingKind._value2member_map_ else None
    if kind is FindingKind.MISSING_DUMP:
        return Confidence.LIKELY, (
            f"it wrote no dump and {plural(waiters)} {rank_runs(waiters)} {wait_verb(waiters)} on it: "
            f"{_LOOK_ALIKE}"
            if waiters
            else f"it wrote no dump: {_LOOK_ALIKE}"
        )
    if kind is FindingKind.NOT_JOINED and isinstance(f.evidence, RootEvidence) and f.evidence.alive:
        return Confidence.LIKELY, (
            "it wrote no dump, but its threads were captured after the others' ops failed: it "
            "did not crash; that it never joined rests on the others' files (its own is absent)"
        )
    if kind is FindingKind.NOT_JOINED and (beside := held_beside_absent(facts, rank)):
        return Confidence.SUSPECT, _held_text(f, beside)
    if kind is FindingKind.NOT_JOINED and (held := held_in_p2p(facts, rank, place_of(f))):
        return Confidence.SUSPECT, held
    if kind is FindingKind.NOT_JOINED:
        return Confidence.CERTAIN, (
            f"its own dump shows it never enqueued {place_of(f)}; "
            f"{plural(waiters)} {rank_runs(waiters)} {wait_verb(waiters)} on it"
            if waiters
            else f"its own dump shows it never enqueued {place_of(f)}"
        )
    if kind in _DESYNC:
        return _judge_desync(facts, f)
    if kind is FindingKind.DEADLOCK:
        if isinstance(f.evidence, CycleEvidence) and f.evidence.by_first_wait:
            return Confidence.SUSPECT, _NO_MAJORITY_ORDER
        return Confidence.CERTAIN, "its own entries close a cycle of waits"
    if (
        kind is FindingKind.STUCK_IN_COLLECTIVE
        and isinstance(f.evidence, StuckEvidence)
        and f.evidence.suspect is None
        and len(f.ranks) > 1
    ):
        return Confidence.SUSPECT, (
            f"every member enqueued {place_of(f)} and none completed it; no member stands out "
            "(what holds it inside, network, GPU or host, is not in the files)"
        )
    if kind is FindingKind.STUCK_IN_COLLECTIVE and (doubt := stuck_holder_doubt(facts, f.group)):
        return Confidence.SUSPECT, (
            f"it is the one whose entry of {place_of(f)} never completed or timed out, but {doubt}"
        )
    if kind is FindingKind.STUCK_IN_COLLECTIVE:
        return Confidence.LIKELY, (
            f"every member enqueued {place_of(f)} and it is the one whose entry never completed "
            "or timed out: what it waits for inside (network, GPU, host) is not in the files"
        )
    if kind is FindingKind.UNRECORDED_OPS:
        return Confidence.SUSPECT, "its counters ran ahead of its entries: the ops are in no buffer"
    return Confidence.LIKELY, f"others wait on it in {place_of(f)}"


def _blind_pair(
    facts: Facts, findings: Sequence[Finding], out: dict[int, Culprit]
) -> dict[int, Culprit]:
    """The sure culprits of :func:`blind_stalled`, each a suspect: one of them may have
    stopped and the rest be blocked in a send/recv gloo does not record."""
    sure = {r for r, c in out.items() if c.confidence is not Confidence.SUSPECT}
    pair = blind_stalled(facts, findings, sure)
    judged = {}
    for r in pair:
        others = [x for x in pair if x != r]
        judged[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"{out[r].because}; but {plural(others)} {rank_runs(others)} never joined it either, "
            f"and {BLIND_PAIR}",
        )
    return judged


def culprits_of(facts: Facts, findings: Sequence[Finding], ranks: set[int]) -> tuple[Culprit, ...]:
    """Each culprit of ``ranks`` judged by the first culprit finding that names it. A rank
    with no dump where the only member of its group with a dump changed size or dtype in the
    op it died in (from its own history, or from what the sibling groups posted there) is a
    suspect, and so is that member (a desync whose partner died: the odd rank's own entry is
    the only witness, :mod:`analyzer.diagnosis.dead_partner`)."""
    out: dict[int, Culprit] = {}
    missing = FindingKind.MISSING_DUMP.value
    dead = {r for f in findings if f.culprit and f.kind == missing for r in f.ranks} & ranks
    alive = {r for f in findings if f.culprit and _alive_no_dump(f) for r in f.ranks} & ranks
    changed = partners_changed(facts, dead) if dead else {}
    partners = silent_partners(facts, findings, ranks)
    for r in sorted(ranks):
        f = next((f for f in findings if f.culprit and r in f.ranks), None)
        if f is None:
            out[r] = Culprit(r, Confidence.SUSPECT, "named by no finding of its own")
            continue
        confidence, because = _judge(facts, r, f)
        out[r] = Culprit(r, confidence, because)
        if r in partners:
            out[r], more = with_silent_partners(facts, out[r], partners[r], place_of(f))
            for p in more:
                out.setdefault(p.rank, p)
        if f.kind != missing:
            continue
        for peer, where, change, others in changed.get(r, ()):
            out[r], odd = desync_beside_death(r, peer, where, change, others)
            out.setdefault(peer, odd)
    for r, c in beside_proven(facts, findings, dead | alive, out).items():
        out[r] = c
    for c in absent_doubts(facts, dead | alive, out):
        out[c.rank] = c
    for f in findings:
        ev = f.evidence
        if f.culprit and isinstance(ev, CycleEvidence) and ev.by_first_wait:
            for r in ev.cycle:
                out.setdefault(r, Culprit(r, Confidence.SUSPECT, _NO_MAJORITY_ORDER))
    for p in unlisted_members(facts, findings, set(out)):
        out.setdefault(p.rank, p)
    blamed = set(out)  # the waiters unproven_waits adds are doubts of a rank, not blame
    for p in unproven_waits(facts, dead, blamed):
        out.setdefault(p.rank, p)
    for p in [*inside_with_stale(facts, dead, blamed), *stale_alike(facts, set(out))]:
        out.setdefault(p.rank, p)
    for p in unpaired_holders(facts, findings, out):
        out.setdefault(p.rank, p)
    out.update(_blind_pair(facts, findings, out))
    held, where, observed = stuck_alike(facts, findings)
    for r in held:
        out[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"every member of its group enqueued {where} as its last op and none went past it; "
            + (
                "none of them completed it: they are inside it, and which one holds it "
                "(network, GPU, one frozen member) is not in these dumps"
                if observed
                else "this backend reports no completion: they may be stuck inside it "
                "(network, GPU, one frozen member) or all stalled after it"
            ),
        )
    out = gone_culprits(facts, out)
    return tuple(out[r] for r in sorted(out))
