"""Rules for desyncs: members issued one sequence number with different ops, sizes or
dtypes, or a send and its recv disagree. The desync is the cause; the waits it leaves
behind are its consequence."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analyzer.diagnosis.evidence import MismatchEvidence, P2PMismatchEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.lookup import entry_at, stack_of
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind
from analyzer.match import NO_MAJORITY
from analyzer.terms import group_label, plural, rank_list

__all__ = ["collective_desync", "p2p_desync"]

_WHAT = {
    FindingKind.OP_MISMATCH: "op",
    FindingKind.SIZE_MISMATCH: "sizes",
    FindingKind.DTYPE_MISMATCH: "dtypes",
}


def _mismatch(facts: Facts, name: str, seq: int, kind: str, grp: pd.DataFrame) -> Finding:
    ranks = tuple(sorted(int(r) for r in grp["rank"]))
    desc = str(grp["pg_desc"].iloc[0])
    expected = str(grp["expected"].iloc[0])
    basis = str(grp["basis"].iloc[0])
    n_agree, n_rec = int(grp["n_agree"].iloc[0]), int(grp["n_recorded"].iloc[0])
    values = {str(int(r)): str(v) for r, v in zip(grp["rank"], grp["value"])}
    what = _WHAT[FindingKind(kind)]
    ambiguous = expected == NO_MAJORITY
    label = group_label(name, desc)
    if ambiguous:
        summary = (
            f"members of {label} issued seq {seq} with different {what} "
            f"({'; '.join(f'rank {r}: {v}' for r, v in values.items())}) and no value has "
            "a majority: every side is listed"
        )
    else:
        others = (
            f"{n_agree} of {n_rec} members"
            if basis == "group majority"
            else f"its peer and the other {desc} groups"
        )
        summary = (
            f"{plural(ranks)} {rank_list(ranks)} issued {label} seq {seq} with {what} "
            f"{', '.join(sorted(set(values.values())))} while {others} used {expected}"
        )
    row = entry_at(facts.tables, rank=ranks[0], group=name, seq=seq)
    return Finding(
        kind=kind,
        ranks=ranks,
        summary=summary,
        group=name,
        group_desc=desc,
        seq=seq,
        op=str(grp["op"].iloc[0]),
        culprit=True,
        stack=stack_of(facts.tables, row),
        evidence=MismatchEvidence(
            by_rank=values,
            majority=expected,
            agreeing_members=n_agree,
            recorded_members=n_rec,
            ambiguous=ambiguous,
            decided_by=basis,
        ),
    )


def collective_desync(facts: Facts) -> list[Finding]:
    """Members of a group issued one sequence number with different ops, sizes or dtypes."""
    mm = facts.matching.mismatches
    if mm.empty:
        return []
    groups: list[tuple[Any, pd.DataFrame]] = list(mm.groupby(["pg_name", "seq", "kind"], sort=True))
    return [_mismatch(facts, str(key[0]), int(key[1]), str(key[2]), grp) for key, grp in groups]


def p2p_desync(facts: Facts) -> list[Finding]:
    """A send and the recv it pairs with disagree on sizes or dtypes: the pair never completes."""
    out: list[Finding] = []
    rows: Any = facts.matching.p2p_mismatches.itertuples(index=False)
    for m in rows:
        what = "sizes" if m.kind == FindingKind.SIZE_MISMATCH else "dtypes"
        label = group_label(m.pg_name, m.pg_desc)
        summary = (
            f"rank {m.sender} sent {m.send_value} to rank {m.receiver} in {label} "
            f"(p2p seq {m.send_seq}), whose matching recv (its p2p seq {m.recv_seq}) "
            f"expects {m.recv_value}: the pair can never complete"
        )
        culprits = tuple(m.culprits)
        if culprits == (m.sender,):
            summary += f"; rank {m.sender}'s other sends to rank {m.receiver} used {m.usual_send}"
        elif culprits == (m.receiver,):
            summary += f"; rank {m.receiver}'s other recvs from rank {m.sender} used {m.usual_recv}"
        else:
            summary += "; neither side's history tells which one changed: both are listed"
        row = entry_at(
            facts.tables,
            rank=int(culprits[0]),
            group=m.pg_name,
            seq=m.send_seq if culprits[0] == m.sender else m.recv_seq,
            p2p=True,
        )
        out.append(
            Finding(
                kind=str(m.kind),
                ranks=culprits,
                summary=summary,
                group=m.pg_name,
                group_desc=m.pg_desc,
                seq=int(m.send_seq),
                op="send",
                culprit=True,
                evidence=P2PMismatchEvidence(
                    by_rank={str(m.sender): m.send_value, str(m.receiver): m.recv_value},
                    sender=m.sender,
                    receiver=m.receiver,
                    send_seq=m.send_seq,
                    recv_seq=m.recv_seq,
                    what=what,
                    usual_send=m.usual_send,
                    usual_recv=m.usual_recv,
                ),
                stack=stack_of(facts.tables, row),
            )
        )
    return out
