"""Rules for the roots of the wait-for graph: ranks others wait on that wait on nobody.

A root with a dump never enqueued the op (``not_joined``), or is behind in ops its buffer
did not record (``unrecorded_ops``); a root without one crashed or stalled before dumping
(``missing_dump``). Roots whose own evidence is doubtful are not blamed ahead of the others.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from analyzer.diagnosis.evidence import RootEvidence, WaitedIn
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.lookup import describe_entry, entry_at, stack_frames, stack_of
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind, WaitKind
from analyzer.terms import group_label, plural, rank_list
from analyzer.waits import waiters_of

__all__ = ["NO_DUMP_OWN_TIMEOUT", "plain_roots", "unsure_roots"]

#: How a missing file is explained where the backend dumps only ranks whose own ops timed
#: out (nccl2): a stalled rank has nothing in flight and writes no file either.
NO_DUMP_OWN_TIMEOUT = (
    "no dump: stalled outside communication or crashed (this backend dumps "
    "only ranks whose own ops timed out)"
)


def _waited_text(w: WaitedIn) -> str:
    who = f"{plural(w.waiters)} {rank_list(w.waiters)}"
    where = group_label(w.group, w.group_desc)
    if w.kind == WaitKind.P2P:
        mine = "recv" if w.op == "send" else "send"
        return f"the {mine} matching {who}'s {w.op} in {where} p2p seq {w.seq}"
    return f"{w.op} in {where} seq {w.seq} (awaited by {who})"


def _groups(df: pd.DataFrame, by: list[str]) -> list[tuple[Any, pd.DataFrame]]:
    """``df.groupby(by, sort=False)`` with its keys as plain tuples."""
    return list(df.groupby(by, sort=False))


def _waited_in(facts: Facts, root: int) -> list[WaitedIn]:
    """One line per op the root is waited on in; the smallest group is the most direct evidence."""
    incoming = facts.waits[facts.waits["holder"] == root]
    sizes = dict(zip(facts.tables.groups["pg_name"], facts.tables.groups["size"], strict=True))
    out = [
        WaitedIn(
            group=str(group),
            group_desc=str(desc),
            seq=int(seq),
            op=str(op),
            kind=str(wkind),
            waiters=tuple(sorted(int(w) for w in grp["waiter"])),
        )
        for (group, desc, seq, op, wkind), grp in _groups(
            incoming, ["pg_name", "pg_desc", "seq", "op", "kind"]
        )
    ]
    out.sort(key=lambda w: (w.kind == WaitKind.P2P, sizes.get(w.group, 0), w.seq, w.group))
    return out


def _seq_of(last: object) -> str:
    """``seq N``; ``p2p seq N`` for a send/recv of a group that ran no collective before it."""
    seq = int(last["seq"])  # type: ignore[index]
    if seq < 0 and bool(last["is_p2p"]):  # type: ignore[index]
        return f"p2p seq {int(last['p2p_seq'])}"  # type: ignore[index]
    return f"seq {seq}"


def _root_summary(facts: Facts, root: int, kind: str, where: str, total: str, last: object) -> str:
    if kind == FindingKind.MISSING_DUMP and facts.matching.dialects.dumps_only_failed:
        return f"rank {root}: {NO_DUMP_OWN_TIMEOUT}; others wait on it: {where}. {total}"
    if kind == FindingKind.MISSING_DUMP:
        return (
            f"rank {root} wrote no dump and others wait on it: {where}. {total}; it "
            "crashed, was killed, or hung before dumping"
        )
    if kind == FindingKind.UNRECORDED_OPS:
        return (
            f"rank {root} is behind: its pg_status counter stops before ops its peers "
            f"enqueued but the recorder did not record (e.g. gloo send/recv): {where}. {total}"
        )
    seen = (
        f"its last recorded op is {last['op']} in "  # type: ignore[index]
        f"{group_label(str(last['pg_name']), str(last['pg_desc']))} {_seq_of(last)}"  # type: ignore[index]
        if last is not None
        else "it recorded nothing"
    )
    if last is not None and _alone_in_flight(facts, root, last):
        return (
            f"rank {root} never enqueued {where}. {total}. {seen[0].upper()}{seen[1:]}, still "
            "in flight in a group no other dump holds nor lists: it is held there by a member "
            "no file shows, or stalled outside communication after issuing it"
        )
    return (
        f"rank {root} never enqueued {where}. {total}. It is stalled outside "
        f"communication (compute, data loading, a lock, or a host problem): {seen}"
    )


def _alone_in_flight(facts: Facts, root: int, last: object) -> bool:
    """``root``'s newest entry ``last`` is a collective still in flight in a group whose
    members no dump lists and that no other dump holds (its other members are in no file)."""
    if bool(last["retired"]) or bool(last["is_p2p"]):  # type: ignore[index]
        return False
    group = str(last["pg_name"])  # type: ignore[index]
    return group in facts.unlisted_groups and set(facts.members.get(group, ())) == {root}


def root_finding(facts: Facts, root: int) -> Finding:
    """Why ``root`` holds the others up, with the ops it is waited on in."""
    tables = facts.tables
    everyone = waiters_of(facts.graph, root)
    dumped = bool(facts.graph.nodes[root].get("dumped", False))
    waited_in = _waited_in(facts, root)
    first = waited_in[0] if waited_in else None
    waited = (
        entry_at(
            tables,
            rank=first.waiters[0],
            group=first.group,
            seq=first.seq,
            p2p=first.kind == WaitKind.P2P,
        )
        if first is not None
        else None
    )
    last = facts.last_entry(root)
    where = "; ".join(_waited_text(w) for w in waited_in[:4]) + (
        f"; and {len(waited_in) - 4} more" if len(waited_in) > 4 else ""
    )
    total = f"{len(everyone)} rank(s) wait on it in all"
    wkind = first.kind if first else ""
    kind = (
        FindingKind.MISSING_DUMP
        if not dumped
        else FindingKind.UNRECORDED_OPS
        if wkind == WaitKind.UNRECORDED
        else FindingKind.NOT_JOINED
    )
    own_timeout = facts.matching.dialects.dumps_only_failed
    evidence = RootEvidence(
        waited_in=tuple(waited_in[:32]),
        all_waiters=len(everyone),
        waited_op=describe_entry(waited),
        last_recorded_op=describe_entry(last),
        wait_kind=wkind,
        no_dump=None if dumped else "stalled_or_crashed" if own_timeout else "crashed",
        waits_text=f"{where}. {total}",
        last_recorded_stack=(
            stack_frames(tables, int(last["stack_id"]))
            if last is not None and int(last["stack_id"]) >= 0
            else None
        ),
    )
    return Finding(
        kind=kind.value,
        ranks=(root,),
        summary=_root_summary(facts, root, kind, where, total, last),
        group=first.group if first else "",
        group_desc=first.group_desc if first else "",
        seq=first.seq if first else -1,
        op=first.op if first else "",
        culprit=True,
        evidence=evidence,
        stack=stack_of(tables, waited),
    )


def plain_roots(facts: Facts) -> list[Finding]:
    """Roots that stopped outside communication, are behind in unrecorded ops, or left no dump."""
    return [root_finding(facts, r) for r in facts.plain_roots]


def unsure_roots(facts: Facts, found: list[Finding]) -> list[Finding]:
    """Roots whose own dump is unreadable or suspect are not blamed ahead of roots whose
    readable dump shows them stalled: they stay as findings, marked as not blamed. When no
    root is sure, they stay culprits, and the summary says why they are unsure. A rank whose
    only dump was an older round's has no dump of this one: it stays a culprit as a rank
    with no file would (its older file must not clear it), and the summary says why."""
    unsure = facts.unsure
    if not unsure:
        return found
    is_unsure = [bool(set(f.ranks) & unsure.keys()) for f in found]
    kept = [f.kind == FindingKind.MISSING_DUMP and set(f.ranks) <= facts.stale for f in found]
    # Sure: a root whose own readable dump shows where it stopped (not one without a dump).
    sure = [
        f
        for f, u in zip(found, is_unsure, strict=True)
        if f.culprit and not u and f.kind != FindingKind.MISSING_DUMP
    ]
    out = []
    for f, u, keep in zip(found, is_unsure, kept, strict=True):
        if not u:
            out.append(f)
            continue
        why = "; ".join(f"rank {r}: {unsure[r]}" for r in f.ranks if r in unsure)
        if sure and not keep:
            blamed = rank_list(sorted({r for s in sure for r in s.ranks}))
            out.append(
                dataclasses.replace(
                    f,
                    culprit=False,
                    summary=(
                        f"{f.summary} (not blamed: {why}; the readable dumps show rank(s) {blamed} "
                        "stopped first)"
                    ),
                )
            )
        else:
            out.append(dataclasses.replace(f, summary=f"{f.summary} (unsure: {why})"))
    return out
