"""Ranks beside the culprits that the dumps cannot rule out, each a suspect with the fact
that is missing: members with no dump beside a rank that never joined (did they join?),
ranks with no dump beside a stuck collective whose members no dump lists, waiters whose wait
on a crashed rank only a retired entry shows (they may have stopped after it), ranks with no
dump where nobody else can be blamed, and a rank no file gives the number of. Those beside
ranks with only an older round's dump are in :mod:`analyzer.diagnosis.older_round`.

Each reading is in docs/diagnosis.md ("How sure"); :mod:`analyzer.diagnosis.confidence`
weighs the culprits themselves and adds these beside them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from analyzer.diagnosis.absent import (
    MAX_SILENT,
    UNSEEN,
    awaited_together,
    unknown_member_groups,
)
from analyzer.diagnosis.alternatives import peerless_p2p_in_flight
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.held import held_beside_absent
from analyzer.diagnosis.lookup import newest_collective
from analyzer.diagnosis.records import Confidence, Culprit, Finding, place_of
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "idle_blind",
    "members_unknown",
    "missing_suspects",
    "silent_partners",
    "stuck_holder_doubt",
    "unlisted_members",
    "unobserved_waits_on",
    "unproven_waits",
    "unseen_suspect",
    "wait_verb",
    "with_silent_partners",
]


def wait_verb(waiters: Sequence[int]) -> str:
    return "waits" if len(waiters) == 1 else "wait"


def members_unknown(facts: Facts, group: str) -> bool:
    """No dump lists ``group``'s members (they come from entries alone, or, for the default
    group, from the highest rank a file gives) and nothing declares the world: a member may
    exist that no file names."""
    return group in unknown_member_groups(facts)


def stuck_holder_doubt(facts: Facts, group: str | None) -> str:
    """Why the member of a collective of ``group`` that its entries single out as holding
    it (never timed out, enqueued last) may hold nobody, or "": no dump lists the group's
    members, so a member may have written no dump, and the others then all wait on it there
    (the one singled out only timed out last). Either nothing declares the world (a rank no
    file names), or ranks with no dump are known (``--world-size``):
    ``crash_exit_tp1pp1dp4_gloo_t213_s01010`` with the world given, rank 3 crashed."""
    if group is None:
        return ""
    if members_unknown(facts, group):
        return (
            "no dump lists that group's members nor the job's ranks: a member that wrote no "
            "file at all may be the one they all wait on"
        )
    missing = sorted(facts.unblamed_missing)
    if group not in facts.unlisted_groups or not missing:
        return ""
    return (
        f"no dump lists that group's members and {plural(missing)} {rank_runs(missing)} "
        f"wrote no dump: if one is a member, the others all wait on it there, and this rank's "
        "entry only outlasted theirs"
    )


def with_silent_partners(
    facts: Facts, culprit: Culprit, silent: list[int], where: str
) -> tuple[Culprit, list[Culprit]]:
    """``culprit``, which never joined ``where``, and the members of its group with no dump,
    each a suspect. Where the culprit's backend records no send/recv (gloo), it may be
    blocked in one with them: then it is a suspect too. Beyond :data:`MAX_SILENT` of them
    they are not named each (files not collected, more than a second fault), but the
    culprit stays a suspect where its backend is blind: many silent members are no less
    doubt than a few."""
    rank = culprit.rank
    them = f"{plural(silent)} {rank_runs(silent)}"
    d = facts.matching.dialects.of(rank)
    blind = d is not None and not d.records_p2p
    if blind:
        culprit = Culprit(
            rank,
            Confidence.SUSPECT,
            f"it never enqueued {where}, but {them} wrote no dump and this backend records no "
            "send/recv: it may be blocked in one with them, or stopped on its own",
        )
    if len(silent) > MAX_SILENT:
        return culprit, []
    return culprit, [
        Culprit(
            p,
            Confidence.SUSPECT,
            f"it wrote no dump, so whether it joined {where} is in no file"
            + (
                f": it may hold rank {rank} in a send/recv this backend does not record, or it "
                "crashed"
                if blind
                else f" (rank {rank} never did): it may have crashed or stopped as well"
            ),
        )
        for p in silent
    ]


def silent_partners(
    facts: Facts, findings: Sequence[Finding], ranks: set[int]
) -> dict[int, list[int]]:
    """For culprits that never joined an op: rank -> the members of that op's group that
    wrote no dump, or every rank with no dump where no dump lists that group's members
    (readable evidence of them is none, and they are not culprits). Whether
    they joined it is in no file: a second fault (a crash beside the stall) looks the same
    as members that joined and died later. On a backend that records no send/recv, a rank
    with no dump that is a culprit itself stays one of them: the culprit may be blocked in a
    send/recv with it (a pipeline peer that crashed), not stopped on its own."""
    if not facts.unblamed_missing:
        return {}
    out: dict[int, list[int]] = {}
    for f in findings:
        if not f.culprit or f.kind != FindingKind.NOT_JOINED.value or not f.group:
            continue
        known = set(facts.members.get(f.group, ()))
        for r in f.ranks:
            d = facts.matching.dialects.of(r)
            # Blind to send/recv, it may wait in one on a rank with no dump that is a
            # culprit itself (crashed): that crash does not clear it.
            missing = facts.unblamed_missing - (
                {r} if d is not None and not d.records_p2p else ranks
            )
            # Where no dump lists the group's members, a rank with no dump may be one of them.
            silent = sorted(missing if f.group in facts.unlisted_groups else missing & known)
            if silent:
                out.setdefault(r, silent)
    return out


def unlisted_members(facts: Facts, findings: Sequence[Finding], named: set[int]) -> list[Culprit]:
    """Ranks with no dump that may be members of a collective its known members are all stuck
    in, where no dump lists that group's members (gloo 2.13): the 'stuck' collective may be
    one such a member never joined. Each a suspect (at most :data:`MAX_SILENT`)."""
    missing = facts.unblamed_missing - named
    if not missing:
        return []
    out: list[Culprit] = []
    for f in findings:
        if f.culprit and f.kind == FindingKind.STUCK_IN_COLLECTIVE.value and f.group:
            if f.group not in facts.unlisted_groups or len(missing) > MAX_SILENT:
                continue
            where = place_of(f)
            out.extend(
                Culprit(
                    r,
                    Confidence.SUSPECT,
                    f"it wrote no dump, and no dump lists the members of the group of {where}: "
                    "if it is one, the others wait on it there (it crashed or stalled), not "
                    "inside the network",
                )
                for r in sorted(missing)
            )
    return out


def unproven_waits(facts: Facts, dead: set[int], named: set[int]) -> list[Culprit]:
    """Ranks whose own wait on a culprit with no dump (``dead``) rests on their newest entry,
    retired by a backend that retires an op that timed out as one that completed (gloo), or
    every op when issued (no completion reports): each may have finished that op and stopped
    after it, a second fault beside the crash. A suspect where others wait on it, or where
    every culprit named (``named``) is doubted in its own dump (its only dump an older
    round's, say) and it waits on one of them: no file then sets such waiters apart from a
    rank that stopped (at most :data:`MAX_SILENT` of them), or where dumped ranks wait on
    nobody in any recorded op that names its peer (they may be blocked in a send/recv it
    holds: :func:`idle_blind`). Not where two or more wait alike and none can
    have run an unrecorded op after it (:func:`_one_cause`)."""
    w = unobserved_waits_on(facts, dead, named)
    if w.empty:
        return []
    g = facts.graph
    doubted = set(facts.unsure) if named and named <= set(facts.unsure) else set()
    beside_doubted = {int(r) for r in w.loc[w["holder"].isin(sorted(doubted)), "waiter"]}
    if len(beside_doubted) > MAX_SILENT:
        beside_doubted = set()
    out: dict[int, Culprit] = {}
    alike: dict[tuple[int, str, int], list[int]] = defaultdict(list)  # (holder, group, seq)
    idle_ranks: list[int] | None = None  # read once, where a waiter first needs them
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        r = int(waiter)
        if r in out or r not in g:
            continue
        waiters = sorted(int(p) for p in g.predecessors(r) if int(p) != int(holder))
        idle: list[int] = []
        if not waiters:
            idle_ranks = idle_blind(facts) if idle_ranks is None else idle_ranks
            idle = [x for x in idle_ranks if x != r]
        if not waiters and not idle and not (r in beside_doubted and int(holder) in doubted):
            continue
        desc = newest_collective(facts.last_entry(r), group, seq, retired=True)
        if desc is None:
            continue
        at = f"{op} in {desc} seq {int(seq)}"
        out[r] = Culprit(r, Confidence.SUSPECT, _retired_wait(facts, r, int(holder), at, idle))
        alike[(int(holder), str(group), int(seq))].append(r)
    dropped = {r for key, ranks in alike.items() if _one_cause(facts, key, ranks) for r in ranks}
    return [out[r] for r in sorted(out) if r not in dropped]


def unobserved_waits_on(facts: Facts, dead: set[int], skip: set[int]) -> pd.DataFrame:
    """The waits on a rank of ``dead`` (no dump) of the ranks, not in ``skip``, whose backend
    retires an op that timed out as one that completed (gloo) or every op when issued: rows
    of ``facts.waits``, empty where there are none. A wait that rests on such a rank's newest
    entry, retired, does not show it is still in that op."""
    dialects = facts.matching.dialects
    unobserved = dialects.unobserved_ranks - dialects.retired_done_ranks - skip
    w = facts.waits
    if not dead or not unobserved:
        return w.iloc[0:0]
    return w[w["holder"].isin(sorted(dead)) & w["waiter"].isin(sorted(unobserved))]


def _retired_wait(facts: Facts, rank: int, holder: int, at: str, idle: list[int]) -> str:
    """Why ``rank``, which waits on ``holder`` (no dump) only in its newest entry ``at``,
    retired, may have finished it and stopped after it; ``idle``: the ranks that may be
    blocked in a send/recv it holds (:func:`idle_blind`)."""
    waiters = sorted(int(p) for p in facts.graph.predecessors(rank))
    held = (
        f"{plural(waiters)} {rank_runs(waiters)} {wait_verb(waiters)} on it, and it waits"
        if waiters
        else "it waits"
    )
    them = (
        f"rank {holder} (no dump)"
        if holder not in facts.unsure
        else f"rank {holder} (no dump of this round, so a suspect itself)"
    )
    own = facts.matching.dialects.dumps_on_own_timeout(rank)
    return (
        f"{held} on {them} only in its last op, {at}, which its backend retired: it retires "
        "an op that timed out as one that completed (or every op when issued), so it may have "
        "finished that op and stopped after it, a second fault beside the first"
        + (
            " (its own file shows a timeout only if it was written on its own timeout, not on "
            "a request to every rank)"
            if own
            else ""
        )
        + (
            f"; {plural(idle)} {rank_runs(idle)} {wait_verb(idle)} on nobody in any recorded "
            "op that names its peer: what holds them may be a send/recv (gloo records none, "
            "a monitored_barrier's among them; TorchComms writes no peer in a comm of more "
            "than two) that this rank holds"
            if idle
            else ""
        )
    )


def idle_blind(facts: Facts) -> list[int]:
    """The dumped ranks that wait on nobody and that nobody waits on in any recorded op,
    where their backend records no send/recv (gloo: every op they recorded ended, so what
    holds them, a send/recv, a ``monitored_barrier``'s, is in no entry) or their newest entry
    is a send/recv in flight with no peer written (TorchComms in a comm of more than two): a
    rank whose wait rests on a retired entry may be the one a send/recv of theirs waits on."""
    g, dialects = facts.graph, facts.matching.dialects
    dumped = {int(r) for r in facts.tables.entries["rank"].unique()}
    return sorted(
        r
        for r in dumped
        if (d := dialects.of(r)) is not None
        and (r not in g or g.degree(r) == 0)
        and (not d.records_p2p or peerless_p2p_in_flight(facts, r) is not None)
    )


def _one_cause(facts: Facts, key: tuple[int, str, int], ranks: list[int]) -> bool:
    """Whether the doubt of ``ranks`` is dropped (:func:`unproven_waits`): two or more of them
    wait, in the same retired op as their newest entry (``key``: holder, group, seq), on the
    same rank with no dump (not doubted, as an older round's only dump is), and none can have
    run an op its buffers did not record after it (every buffer records send/recv). For that
    op to have finished, the rank they wait on joined it: it and each of them then stopped
    right after it, every one on its own; one rank that never joined explains them all."""
    if len(ranks) < 2 or key[0] in facts.unsure:
        return False
    return all(_nothing_unrecorded(facts, r) for r in ranks)


def _nothing_unrecorded(facts: Facts, rank: int) -> bool:
    """Every buffer of ``rank`` records send/recv: no op can have run after its newest entry
    that no entry shows. (gloo's ``pg_status`` counters stop at the newest recorded op: the
    send/recv it ran after it, a ``monitored_barrier``'s, leave them as they were.)"""
    buffers = facts.matching.dialects.buffers_of(rank)
    return bool(buffers) and all(d.records_p2p for d in buffers)


def missing_suspects(facts: Facts) -> tuple[Culprit, ...]:
    """Where ops are pending but nobody is blamed and no dump lists any group's members, or
    (the world listed or given) the group of some rank's newest op: the ranks with no dump
    (at most :data:`MAX_SILENT`), each a suspect. They may be members of the groups the
    others stopped in, and what those wait on."""
    missing = sorted(facts.unblamed_missing)
    if not missing or len(missing) > MAX_SILENT:
        return ()
    if not facts.nothing_listed:  # the world listed: a group of a rank's newest op is not
        newest = (facts.last_entry(r) for r in facts.tables.dumped_ranks)
        if not {str(e["pg_name"]) for e in newest if e is not None} & facts.unlisted_groups:
            return ()
    return tuple(
        Culprit(
            r,
            Confidence.SUSPECT,
            "it wrote no dump, and ops are pending on the ranks that did: no dump lists the "
            "groups' members, so it may be one of the groups they stopped in and what they "
            "wait on there (it crashed or stalled)",
        )
        for r in missing
    )


def unseen_suspect(facts: Facts, findings: Sequence[Finding], *, pending: bool = False) -> str:
    """Why a rank that wrote no file and that no dump names may be the culprit, or "": no
    dump lists the members of the group the culprit is held in, nor the job's ranks (gloo
    2.13), and either ops are ``pending`` with nobody blamed (the ranks with no dump that
    the numbering shows are suspects, :func:`missing_suspects`, and one beyond the highest
    dumped rank may be another), or the ranks with no dump blamed there are told apart by no wait
    (:func:`awaited_together`: such a member is one more of them), or a rank blamed for not
    joining has its last op in such a group that no other dump holds
    (:func:`held_beside_absent`: such a member may have held it there), or no rank is known to
    be missing and the culprit is held inside a collective (such a member would be the one
    they all wait on). Nothing in the files gives its number."""
    if pending and facts.nothing_listed and not any(f.culprit for f in findings):
        return (
            "ops are pending with nobody blamed, and no dump lists the groups' members nor the "
            "job's ranks: a rank that no file names may be what they wait on"
        )
    missing = FindingKind.MISSING_DUMP.value
    dead = {r for f in findings if f.culprit and f.kind == missing for r in f.ranks}
    together = awaited_together(facts, dead)
    for f in findings:
        if f.culprit and f.kind == missing and any(UNSEEN in together.get(r, ()) for r in f.ranks):
            return (
                f"no dump lists the members of the group of {place_of(f)} nor the job's "
                "ranks: a rank that no file names may be one the others wait on there"
            )
    # With the world known, the ranks with no dump that may be that member are named each
    # (silent partners) unless they are too many to: then they are this rank with no dump.
    if facts.nothing_listed or len(facts.unblamed_missing) > MAX_SILENT:
        for f in findings:
            for r in f.ranks if f.culprit and f.kind == FindingKind.NOT_JOINED.value else ():
                if (held := held_beside_absent(facts, r)) and not (held.absent or held.stopped):
                    return (
                        f"rank {r}'s last op, {held.at} ({held.state}), is in a group no dump "
                        "lists the members of: a member that wrote no file may have held it there"
                    )
    if facts.unblamed_missing:
        return ""
    for f in findings:
        stuck = f.culprit and f.kind == FindingKind.STUCK_IN_COLLECTIVE.value and f.group
        if stuck and members_unknown(facts, f.group):
            return (
                f"a member of the group of {place_of(f)} that wrote no file would be the one the "
                "others wait on (it crashed or stalled); no file gives its number"
            )
    return ""
