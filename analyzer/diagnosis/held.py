"""Where a rank blamed for never joining an op may be held instead, so that it is a suspect,
not certain (:mod:`analyzer.diagnosis.confidence`): its newest entry, a collective that may
not have completed for it beside members with no file (a rank no file names may be the one
that holds it: :func:`analyzer.diagnosis.beside.unseen_suspect`), or a send/recv whose peer
the recorder does not write, which a member with no dump may hold (each such member is then a
suspect too), or a send/recv retired when issued to a peer that stopped too and recorded no
side of it. docs/diagnosis.md ("How sure").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analyzer.diagnosis.absent import MAX_SILENT, unknown_member_groups
from analyzer.diagnosis.alternatives import peerless_p2p_in_flight
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit, Finding
from analyzer.kinds import FindingKind
from analyzer.match import completes_without_every_member, is_retire_on_end, is_retired_done

__all__ = [
    "HeldBeside",
    "held_beside_absent",
    "held_in_p2p",
    "held_in_unpaired_p2p",
    "in_unpaired_p2p",
    "unpaired_holders",
]


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
    stopped: tuple[int, ...] = ()
    """Where every rank of the job is seen (:attr:`Facts.every_rank_seen`) and no other dump
    holds the group: the other ranks that stopped, each of which may be a member that never
    issued the op and so holds it there."""

    @property
    def alone(self) -> bool:
        """No other dump holds the group and none lists it: the member it may wait on is one
        no file names."""
        return not self.absent and not self.rooted and not self.stopped


def held_beside_absent(facts: Facts, rank: int) -> HeldBeside | None:
    """Why ``rank``'s newest entry may hold it, where it is a collective still in flight, or
    one gloo retired (finished or timed out alike), and either

    * its group's members no dump lists and no other dump holds the group (alone: no other
      member recorded it, so a member with no file may be the one it waits on there; where
      every rank of the job is seen, another rank that stopped may be that member), or
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
        if not facts.every_rank_seen:
            return HeldBeside(at, state, ())
        # Any other member is a rank whose whole file shows it never issued the op: if one of
        # them stopped too, it may hold this rank there; else the others wait on this rank
        # (a cycle across the two groups, or a group of one that it left to stall).
        stopped = tuple(sorted(set(facts.roots.roots) - {rank}))
        return HeldBeside(at, state, (), stopped=stopped) if stopped else None
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


def in_unpaired_p2p(facts: Facts, rank: int) -> str:
    """``recv in world[0-3]`` where ``rank``'s newest entry is a send/recv whose peer the
    recorder did not write and that may still wait (:func:`peerless_p2p_in_flight`); else ""."""
    last = peerless_p2p_in_flight(facts, rank)
    return (
        "" if last is None else f"{last['op']} in {str(last['pg_desc'] or '') or last['pg_name']}"
    )


def held_in_unpaired_p2p(facts: Facts, rank: int) -> str:
    """Where ``rank`` is in such a send/recv (:func:`in_unpaired_p2p`) in a group with a
    member that wrote no dump, or with another member that stopped outside communication:
    either may be the peer that holds it. Two ranks each in one may hold each other (a
    deadlock, said by :mod:`~analyzer.diagnosis.alternatives`): not counted here."""
    held = in_unpaired_p2p(facts, rank)
    if not held:
        return ""
    last = facts.last_entry(rank)
    assert last is not None
    stopped = {r for r in facts.roots.roots if r != rank and not in_unpaired_p2p(facts, r)}
    holders = (facts.unblamed_missing - {rank}) | stopped
    return held if set(facts.members.get(str(last["pg_name"]), ())) & holders else ""


def _held_by_stopped_peer(facts: Facts, rank: int) -> tuple[str, int] | None:
    """(``send to rank 6 in default_pg p2p seq 9``, 6) where ``rank``'s newest entry is a
    send/recv with a known peer, from a buffer that retires every op when it is issued and
    reports no completion (torch 2.15's hook over a backend without completion reports: whether it
    finished is in no file), whose peer is itself a rank others wait on that waits on nobody
    (it stopped) and recorded no send/recv with ``rank`` in that group from the same position
    on (the group's collective seq the entry was issued after). The rank may be held there by
    that peer, not stopped on its own (a pipeline stage blocked in its send to a stalled
    stage). Else None."""
    last = facts.last_entry(rank)
    if last is None or not bool(last["is_p2p"]) or str(last["op"]) not in ("send", "recv"):
        return None
    peer, group, seq = int(last["peer"]), str(last["pg_name"]), int(last["seq"])
    if peer < 0 or peer == rank or peer not in facts.roots.roots:
        return None
    dialects = facts.matching.dialects
    d = dialects.by_buffer.get((rank, str(last["backend"]))) or dialects.of(rank)
    if d is None or d.completion_observed or is_retire_on_end(d) or is_retired_done(d):
        return None  # its state or its retiring tells whether it finished
    e = facts.tables.entries
    other = "recv" if str(last["op"]) == "send" else "send"
    theirs = e[(e["rank"] == peer) & (e["pg_name"] == group) & e["is_p2p"].to_numpy(bool)]
    if bool(((theirs["op"] == other) & (theirs["peer"] == rank) & (theirs["seq"] >= seq)).any()):
        return None  # the peer posted its side there: the pair may have finished
    where = str(last["pg_desc"] or "") or group
    to = "to" if str(last["op"]) == "send" else "from"
    return f"{last['op']} {to} rank {peer} in {where} p2p seq {int(last['p2p_seq'])}", peer


def held_in_p2p(facts: Facts, rank: int, place: str) -> str:
    """Why ``rank``, blamed for never joining ``place``, may be held in its newest entry, a
    send/recv, instead (:func:`held_in_unpaired_p2p`, :func:`_held_by_stopped_peer`); else
    ""."""
    if held := held_in_unpaired_p2p(facts, rank):
        return (
            f"it never enqueued {place}, but its newest entry, {held}, may still be "
            "waiting and its recorder writes no peer: it may be held there by a member that "
            "stopped or wrote no dump, not stopped on its own"
        )
    if by := _held_by_stopped_peer(facts, rank):
        at, peer = by
        return (
            f"it never enqueued {place}, but its newest entry, {at}, was retired when issued "
            f"(its backend reports no completion, so whether it finished is in no file), and "
            f"rank {peer}, which stopped too, recorded no side of it: it may be held there by "
            f"rank {peer}, not stopped on its own"
        )
    return ""


def unpaired_holders(
    facts: Facts, findings: Sequence[Finding], judged: Mapping[int, Culprit]
) -> list[Culprit]:
    """For each rank blamed for never joining and judged a suspect because its newest entry
    is a send/recv whose peer the recorder does not write (:func:`held_in_unpaired_p2p`):
    the members of that comm with no dump of this round (none, or an older round's only),
    none of them judged yet. Any may be the peer that holds it (it stopped, crashed, or waits
    in a send/recv of its own), and no file says which. Each a suspect (at most
    :data:`MAX_SILENT` a rank)."""
    out: dict[int, Culprit] = {}
    for f in findings:
        if not f.culprit or f.kind != FindingKind.NOT_JOINED.value:
            continue
        for rank in f.ranks:
            c = judged.get(rank)
            if c is None or c.confidence is not Confidence.SUSPECT:
                continue
            held = held_in_unpaired_p2p(facts, rank)  # scans the roots: only for suspects
            if not held:
                continue
            last = facts.last_entry(rank)
            assert last is not None
            members = set(facts.members.get(str(last["pg_name"]), ()))
            holders = sorted((members & facts.unblamed_missing) - {rank})
            if not holders or set(holders) & set(judged) or len(holders) > MAX_SILENT:
                continue  # a possible holder is judged already: the answer covers that reading
            for r in holders:
                out.setdefault(
                    r, Culprit(r, Confidence.SUSPECT, _holder_text(facts, r, rank, held))
                )
    return [out[r] for r in sorted(out)]


def _holder_text(facts: Facts, r: int, rank: int, held: str) -> str:
    own = "its only dump is an older round's" if r in facts.stale else "it wrote no dump"
    return (
        f"{own}, and it is a member of the comm of rank {rank}'s newest entry, {held}, which "
        "may still wait and whose peer the recorder does not write: it may be the peer that "
        f"holds rank {rank} there (stopped, crashed, or in a send/recv of its own)"
    )
