"""Ranks the dumps cannot rule out as a second culprit beside a crash, apart from the
suspects, where the backend records no send/recv (gloo; TorchComms writes no peer for one in a
comm of more than two):

- the waiters on a rank with no dump whose wait rests on their newest entry, which the backend
  retired. It ends an op that timed out as it ends one that completed, and a send/recv after
  that op leaves no entry: each may have finished the op, run a send/recv no buffer shows,
  and stopped after it;
- the ranks that wait on nobody in any recorded op and that nobody waits on there
  (:func:`analyzer.diagnosis.beside.idle_blind`): each may be blocked in a send/recv no entry
  shows, or have stopped before one.

Either way a second fault leaves a file that reads exactly like the files of the ranks it
blocks: nothing in the dumps sets it apart, nor points at it. Naming these ranks as suspects
would bury the rank the files do point at among every rank of the job; leaving them out would
hide a second culprit the files cannot exclude. They go in their own list
(``Diagnosis.not_ruled_out``), after the culprits and suspects, each with the fact that is
missing. Beside a culprit its own file proves (a rank that never joined), the list stays
empty: that culprit explains the ranks blocked behind it. docs/diagnosis.md ("Not ruled out").
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.diagnosis.beside import idle_blind, unobserved_waits_on
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.lookup import newest_collective
from analyzer.diagnosis.records import Confidence, Culprit, Finding
from analyzer.kinds import FindingKind

__all__ = ["not_ruled_out"]


def not_ruled_out(
    facts: Facts, findings: Sequence[Finding], judged: Sequence[Culprit]
) -> tuple[Culprit, ...]:
    """The dumped ranks, not among ``judged`` (the culprits and suspects), whose files cannot
    set them apart from a second culprit: each ``suspect`` with why (see the module)."""
    named = {c.rank for c in judged}
    missing = FindingKind.MISSING_DUMP.value
    dead = {r for f in findings if f.culprit and f.kind == missing for r in f.ranks} & named
    if not dead:  # a culprit its own file proves explains the ranks that wait on nobody
        return ()
    out = _retired_waits(facts, dead, named)
    for r in idle_blind(facts):
        if r not in named and r not in out:
            out[r] = Culprit(r, Confidence.SUSPECT, _IDLE)
    return tuple(out[r] for r in sorted(out))


def _retired_waits(facts: Facts, dead: set[int], named: set[int]) -> dict[int, Culprit]:
    """The ranks that wait on a rank of ``dead`` (no dump) only in their newest entry,
    retired, where some buffer of theirs records no send/recv."""
    w = unobserved_waits_on(facts, dead, named)
    out: dict[int, Culprit] = {}
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        r = int(waiter)
        if r in out or not _blind(facts, r):
            continue
        desc = newest_collective(facts.last_entry(r), group, seq, retired=True)
        if desc is None:
            continue
        out[r] = Culprit(
            r,
            Confidence.SUSPECT,
            f"it waits on rank {int(holder)} (no dump) only in its last op, {op} in {desc} "
            f"seq {int(seq)}, which its backend retires whether it completed or timed out, and "
            "that backend records no send/recv: it may have finished that op and stopped after "
            "a send/recv no entry shows, a second fault its file cannot tell from the ranks it "
            "would block",
        )
    return out


_IDLE = (
    "it waits on nobody in any recorded op and nobody waits on it there, and its backend "
    "records no send/recv (or writes no peer for one): it may be blocked in a send/recv no "
    "entry shows, or have stopped before one, a second fault its file cannot tell from the "
    "ranks it would block"
)


def _blind(facts: Facts, rank: int) -> bool:
    """Some buffer of ``rank`` records no send/recv (gloo's, a ``monitored_barrier``'s): an
    op may have run after its newest entry that no entry shows."""
    buffers = facts.matching.dialects.buffers_of(rank)
    return any(not d.records_p2p for d in buffers)
