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

from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit, Finding
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

__all__ = ["culprits_of"]


_DESYNC = (FindingKind.OP_MISMATCH, FindingKind.SIZE_MISMATCH, FindingKind.DTYPE_MISMATCH)


def _where(f: Finding) -> str:
    name = f.group_desc or f"group {f.group}"
    return f"{f.op or 'an op'} in {name} seq {f.seq}" if f.seq >= 0 else name


def _judge(facts: Facts, rank: int, f: Finding) -> tuple[Confidence, str]:
    """The confidence of ``rank`` as the culprit of finding ``f``."""
    if rank in facts.unsure:
        return Confidence.SUSPECT, f"its own dump cannot be trusted: {facts.unsure[rank]}"
    if rank in facts.tables.inferred:
        return Confidence.LIKELY, (
            "no file names it: the layout of "
            f"{facts.tables.inferred[rank]} implies a member with no dump"
        )
    g = facts.graph  # direct waiters only: the count of all is in the summary
    waiters = sorted(int(w) for w in g.predecessors(rank)) if rank in g else []
    kind = FindingKind(f.kind) if f.kind in FindingKind._value2member_map_ else None
    if kind is FindingKind.MISSING_DUMP:
        return Confidence.LIKELY, (
            f"it wrote no dump and {plural(waiters)} {rank_runs(waiters)} wait on it: "
            "a crash and a stall look alike from the others' files"
            if waiters
            else "it wrote no dump: a crash and a stall look alike from the others' files"
        )
    if kind is FindingKind.NOT_JOINED:
        return Confidence.CERTAIN, (
            f"its own dump shows it never enqueued {_where(f)}; "
            f"{plural(waiters)} {rank_runs(waiters)} wait on it"
            if waiters
            else f"its own dump shows it never enqueued {_where(f)}"
        )
    if kind in _DESYNC:
        size = len(facts.members.get(f.group, ())) if f.group else 0
        if size == 2:
            return Confidence.SUSPECT, (
                f"a group of two disagrees on {_where(f)}: either side may have issued the odd one"
            )
        return (
            Confidence.CERTAIN,
            f"its own entry for {_where(f)} differs from every other member's",
        )
    if kind is FindingKind.DEADLOCK:
        return Confidence.CERTAIN, "its own entries close a cycle of waits"
    if kind is FindingKind.STUCK_IN_COLLECTIVE:
        return Confidence.LIKELY, (
            f"every member enqueued {_where(f)} and it is the one whose entry never completed "
            "or timed out: what it waits for inside (network, GPU, host) is not in the files"
        )
    if kind is FindingKind.UNRECORDED_OPS:
        return Confidence.SUSPECT, "its counters ran ahead of its entries: the ops are in no buffer"
    return Confidence.LIKELY, f"others wait on it in {_where(f)}"


def culprits_of(facts: Facts, findings: Sequence[Finding], ranks: set[int]) -> tuple[Culprit, ...]:
    """Each culprit of ``ranks`` judged by the first culprit finding that names it."""
    out: list[Culprit] = []
    for r in sorted(ranks):
        f = next((f for f in findings if f.culprit and r in f.ranks), None)
        if f is None:
            out.append(Culprit(r, Confidence.SUSPECT, "named by no finding of its own"))
            continue
        confidence, because = _judge(facts, r, f)
        out.append(Culprit(r, confidence, because))
    return tuple(out)
