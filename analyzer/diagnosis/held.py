"""Where a rank blamed for never joining an op may be held instead: its newest entry, a
collective that may not have completed for it, beside members with no file. Then it is a
suspect, not certain (:mod:`analyzer.diagnosis.confidence`), and a rank no file names may be
the one that holds it (:func:`analyzer.diagnosis.beside.unseen_suspect`).
docs/diagnosis.md ("How sure").
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.diagnosis.absent import MAX_SILENT, unknown_member_groups
from analyzer.diagnosis.facts import Facts
from analyzer.match import completes_without_every_member

__all__ = ["HeldBeside", "held_beside_absent"]


@dataclass(frozen=True, slots=True)
class HeldBeside:
    """Where a rank blamed for never joining an op may be held instead: its newest entry, a
    collective that may not have completed, beside members with no file."""

    at: str
    """``all_reduce in TP seq 4``."""
    state: str
    """``still in flight``, or ``retired, as a timed-out op is`` (gloo)."""
    absent: tuple[int, ...]
    """The members with no dump it may wait on there; () where that member is one no file
    names (:attr:`alone`, or a rooted op in a group no dump lists)."""
    rooted: bool = False
    """The op completes for the other members without every member (a broadcast, a
    reduce, a gather, a scatter): the others going past it does not show it completed here."""

    @property
    def alone(self) -> bool:
        """No other dump holds the group and none lists it: the member it may wait on is one
        no file names."""
        return not self.absent and not self.rooted


def held_beside_absent(facts: Facts, rank: int) -> HeldBeside | None:
    """Why ``rank``'s newest entry may hold it, where it is a collective still in flight, or
    one gloo retired (finished or timed out alike), and either

    * its group's members no dump lists and no other dump holds the group (alone: no other
      member recorded it, so a member with no file may be the one it waits on there), or
    * (retired only) every member of its group with a dump recorded it and none went past,
      and members with no dump did not: it may have timed out there waiting on them (where no
      dump lists the group's members, any rank with no dump may be one; at most
      :data:`MAX_SILENT`). Where the op is rooted (:attr:`HeldBeside.rooted`), the others may
      have gone past it; where no dump lists the group's members and no rank is known to have
      no dump, the member it waits on may be one no file names (gloo 2.13: a broadcast a
      stalled rank relays, ``stall_compute_tp1cp2pp1dp4h_gloo_mb_snap_copies_t213_s04286``
      with ranks 0-3's files only).

    None otherwise."""
    last = facts.last_entry(rank)
    if last is None or bool(last["is_p2p"]):
        return None
    retired = bool(last["retired"])
    if retired and rank not in facts.matching.dialects.retire_on_end_ranks:
        return None  # retired by a backend that reports completion: it finished
    group, seq = str(last["pg_name"]), int(last["seq"])
    at = f"{last['op']} in {str(last['pg_desc'] or '') or group} seq {seq}"
    state = "retired, as a timed-out op is" if retired else "still in flight"
    members = set(facts.members.get(group, ()))
    if group in facts.unlisted_groups and members == {rank}:
        return HeldBeside(at, state, ())
    if not retired:
        return None
    dumped = set(facts.tables.dumped_ranks)
    absent = members - dumped
    if group in facts.unlisted_groups:  # members no dump lists: any rank with no dump may be one
        absent |= set(facts.unblamed_missing) - members
    rooted = completes_without_every_member(str(last["op"]))
    unseen = rooted and not absent and group in unknown_member_groups(facts)
    if not unseen and (not absent or len(absent) > MAX_SILENT):
        return None
    e = facts.tables.entries
    coll = e[(e["pg_name"] == group) & ~e["is_p2p"].to_numpy(bool)]
    if not (members & dumped) <= {int(r) for r in coll.loc[coll["seq"] == seq, "rank"]}:
        return None  # a member with a dump never issued it: another reading holds
    if not rooted and bool((coll["seq"] > seq).any()):
        return None  # a member went past it: it completed, every member joined
    return HeldBeside(at, state, tuple(sorted(absent)), rooted)
