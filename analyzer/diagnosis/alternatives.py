"""Other readings of the same dumps: kinds the evidence cannot rule out for the culprits
(``Diagnosis.also_possible``), and culprits that may be stuck inside their last collective."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd

from analyzer.diagnosis.evidence import RootEvidence, WaitedIn
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit, Finding
from analyzer.kinds import FindingKind, WaitKind
from analyzer.match import Dialect, is_retire_on_end, is_retired_done
from analyzer.terms import plural, rank_runs

__all__ = [
    "BLIND_PAIR",
    "blind_stalled",
    "kinds_also_possible",
    "peerless_p2p_in_flight",
    "stuck_alike",
]


def _not_joined(findings: Sequence[Finding]) -> list[int]:
    return sorted(
        {
            r
            for f in findings
            if f.culprit and f.kind == FindingKind.NOT_JOINED.value
            for r in f.ranks
        }
    )


def stuck_alike(facts: Facts, findings: Sequence[Finding]) -> tuple[list[int], str, bool]:
    """Culprits that never joined and may instead be stuck inside their last collective:
    (the group's members, where, whether their buffers report completion) when each one's
    newest entry is the same collective of one group, every member of that group has a dump
    whose newest entry is it (members that are no culprit too: their waiter's file may be
    lost), and the buffer each entry comes from reports no completion and retires an op
    when it is issued (the hook over a backend without completion reports), or reports
    completion and shows it not completed. Every member entered it and none went past: held
    inside it or all stalled after it, the dumps look the same. Not where a culprit went
    past the send/recv it never joined (:func:`_went_past`). A rank's other buffers (gloo's,
    beside the hook's) do not decide it."""
    stalled = sorted(
        {
            r
            for f in findings
            if f.culprit and f.kind == FindingKind.NOT_JOINED.value
            for r in f.ranks
        }
    )
    if not stalled or _went_past(facts, findings):
        return [], "", False
    keys = {
        (str(x["pg_name"]), int(x["seq"]), str(x["op"]), str(x["pg_desc"]))
        for r in stalled
        if (x := facts.last_entry(r)) is not None and not bool(x["is_p2p"])
    }
    if len(keys) != 1:
        return [], "", False
    group, seq, op, desc = keys.pop()
    members = sorted(facts.members.get(group, ()))
    if len(members) < 2 or not set(stalled) <= set(members):
        return [], "", False
    read = [y for r in members if (y := _read_by(facts, r)) is not None]  # stalled among them
    if len(read) != len(members) or any(
        bool(x["is_p2p"]) or (str(x["pg_name"]), int(x["seq"])) != (group, seq) for x, _ in read
    ):
        return [], "", False
    observed = all(d.completion_observed for _, d in read)
    return members, f"{op} in {desc or f'group {group}'} seq {seq}", observed


def _went_past(facts: Facts, findings: Sequence[Finding]) -> bool:
    """Whether a culprit that never joined a send/recv issued send/recv of that group from
    the same p2p seq on: it went past the op it skipped (a pipeline stage that stopped
    sending but still posts its recvs), so being held inside its newest collective does not
    explain the op it never joined."""
    e = facts.tables.entries
    for ranks, w in _culprit_waits(findings, WaitKind.P2P):
        mine = e[e["rank"].isin(ranks) & (e["pg_name"] == w.group) & e["is_p2p"]]
        if bool((mine["p2p_seq"] >= w.seq).any()):
            return True
    return False


def _culprit_waits(
    findings: Sequence[Finding], kind: WaitKind
) -> Iterator[tuple[tuple[int, ...], WaitedIn]]:
    """Each wait of ``kind`` that culprits that never joined are awaited in, with them."""
    for f in findings:
        ev = f.evidence
        if f.culprit and f.kind == FindingKind.NOT_JOINED.value and isinstance(ev, RootEvidence):
            yield from ((f.ranks, w) for w in ev.waited_in if w.kind == kind.value)


def _read_by(facts: Facts, rank: int) -> tuple[pd.Series, Dialect] | None:
    """``rank``'s newest entry and the dialect of the buffer it comes from (its own, where
    the rank holds several), where the rank may be inside it: that buffer retires at issue
    and reports no completion, or reports completion and shows the entry not completed
    (gloo's own recorder and TorchComms' on CPU are read by rules of their own); else None."""
    last = facts.last_entry(rank)
    if last is None:
        return None
    dialects = facts.matching.dialects
    d = dialects.by_buffer.get((rank, str(last["backend"]))) or dialects.of(rank)
    if d is None or is_retire_on_end(d) or is_retired_done(d):
        return None
    if d.completion_observed and str(last["state"]) == "completed":
        return None
    return last, d


def _lone_last_ops(facts: Facts, ranks: Sequence[int]) -> list[tuple[int, str]]:
    """(rank, where) for culprits whose newest entry is a collective of a group that no other
    dump shows an entry of and whose members no dump lists (gloo 2.13): a group of one would
    have let it go on, so its other members, who wait on it elsewhere, never entered it."""
    unlisted = facts.unlisted_groups
    e = facts.tables.entries
    out = []
    for r in ranks:
        last = facts.last_entry(r)
        if last is None or bool(last["is_p2p"]) or str(last["pg_name"]) not in unlisted:
            continue
        group = str(last["pg_name"])
        if set(e.loc[e["pg_name"] == group, "rank"].tolist()) != {r}:
            continue
        desc = str(last["pg_desc"]) or f"group {group}"
        out.append((r, f"{last['op']} in {desc} seq {int(last['seq'])}"))
    return out


def kinds_also_possible(
    facts: Facts, findings: Sequence[Finding], culprits: Sequence[Culprit]
) -> tuple[tuple[str, str], ...]:
    """Other kinds the dumps cannot rule out: culprits that never joined may be stuck inside
    their last collective (:func:`stuck_alike`); two or more whose backend records no
    send/recv (gloo) may be blocked in send/recv with each other (a pipeline pair that both
    receive first); one whose last op is in a group no other dump shows may have entered the
    collectives of two groups in another order than its peers (a deadlock)."""
    held, where, observed = stuck_alike(facts, findings)
    if held:
        why = "none of them completed it" if observed else "this backend reports no completion"
        return (
            (
                FindingKind.STUCK_IN_COLLECTIVE.value,
                f"{plural(held)} {rank_runs(held)} may be stuck inside {where}, which each "
                f"entered last: {why}",
            ),
        )
    sure = {
        c.rank
        for c in culprits
        if c.confidence is not Confidence.SUSPECT or c.because.endswith(BLIND_PAIR)
    }
    stalled = [r for r in _not_joined(findings) if r in sure]
    named = {c.rank for c in culprits}
    lone = _lone_last_ops(facts, [r for r in _not_joined(findings) if r in named])
    if lone:
        r, at = lone[0]
        return (
            (
                FindingKind.DEADLOCK.value,
                f"rank {r}'s last op, {at}, is in a group no other dump shows and none lists the "
                "members of: if its peers are members, they wait on it in another group while it "
                "waits on them there (collectives of two groups in different orders)",
            ),
        )
    blind = _blind(facts, stalled)
    held = [r for r in stalled if r not in blind and _in_unpaired_recv(facts, r)]
    if len(blind) + len(held) < 2 or len(blind) + len(held) != len(stalled):
        return ()
    why = (
        "this backend records no send/recv, so that and stalls leave the same dumps"
        if not held
        else f"the newest entry of each of {plural(held)} {rank_runs(held)} is a recv it may "
        "still be blocked in, whose peer its recorder does not write (a comm of more than two "
        "members)" + (", and this backend records no send/recv of the others" if blind else "")
    )
    return (
        (
            FindingKind.DEADLOCK.value,
            f"{plural(stalled)} {rank_runs(stalled)} may be deadlocked in send/recv with each "
            f"other (each receiving first): {why}",
        ),
    )


#: The end of the reason of a culprit that may only wait on another in a send/recv.
BLIND_PAIR = (
    "this backend records no send/recv: one of them may have stopped and the rest be blocked "
    "in one with it"
)


def _blind(facts: Facts, ranks: Sequence[int]) -> list[int]:
    """Of ``ranks``, those whose backend records no send/recv (gloo)."""
    return [r for r in ranks if (d := facts.matching.dialects.of(r)) and not d.records_p2p]


def blind_stalled(facts: Facts, findings: Sequence[Finding], sure: set[int]) -> list[int]:
    """Culprits of ``sure`` that never joined, two or more, every one on a backend that
    records no send/recv (gloo): one of them may have stopped and the others be blocked in a
    send/recv no entry shows, with it or with a rank blocked behind it (a pipeline peer
    receiving from a stalled stage, a context-parallel ring); their dumps read the same as
    all of them stopped. gloo's op counters stop at the newest recorded op, so no file shows
    a send/recv run after it. Else []."""
    stalled = [r for r in _not_joined(findings) if r in sure]
    blind = _blind(facts, stalled)
    if len(blind) < 2 or len(blind) != len(stalled):
        return []
    return blind


def peerless_p2p_in_flight(facts: Facts, rank: int) -> pd.Series | None:
    """``rank``'s newest entry where it is a send/recv with no known peer that it may still
    be blocked in (not completed, and not retired by a recorder that retires an op when it
    returned or ended); else None. TorchComms writes no peer for send/recv in a comm of more
    than two members."""
    last = facts.last_entry(rank)
    if last is None or not bool(last["is_p2p"]) or int(last["peer"]) >= 0:
        return None
    d = facts.matching.dialects
    returned = rank in (d.retire_on_end_ranks | d.retired_done_ranks)
    finished = str(last["state"]) == "completed" or (bool(last["retired"]) and returned)
    return None if finished else last


def _in_unpaired_recv(facts: Facts, rank: int) -> bool:
    """Is ``rank``'s newest entry a recv with no known peer that it may still be blocked in
    (:func:`peerless_p2p_in_flight`)?"""
    last = peerless_p2p_in_flight(facts, rank)
    return last is not None and str(last["op"]) == "recv"
