"""The rule for deadlocks: waits that form a cycle, and which rank of the cycle started it."""

from __future__ import annotations

from collections import Counter

from analyzer.diagnosis.evidence import CycleEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind, WaitKind
from analyzer.terms import is_p2p_op, plural, rank_list
from analyzer.waits import Wait

__all__ = ["deadlock"]


def _role(name: str, desc: str) -> str:
    return desc if desc and desc != "undefined" else f"group {name}"


def order_culprits(facts: Facts, cycle: tuple[int, ...]) -> list[int]:
    """Ranks of a cycle that issued the cycle's collectives in a different order than most.

    The waited collectives are keyed by group role (the desc, so that every tensor-parallel
    pair counts as "the TP group") and sequence number. For every rank, the order in which
    it issued them (one it never issued counts as after those it did) is compared with the
    majority order; the cycle members that disagree ran the groups in the other order.
    """
    inside = set(cycle)
    ops = sorted(
        {
            (_role(d["pg_name"], d["pg_desc"]), int(d["seq"]))
            for a, b, d in facts.graph.edges(data=True)
            if a in inside and b in inside and d["kind"] in (WaitKind.COLLECTIVE, WaitKind.SILENT)
        }
    )
    if len({r for r, _ in ops}) < 2:
        return []
    e = facts.tables.entries
    rows = e[~e["is_p2p"] & e["seq"].isin([q for _, q in ops])]
    roles = [_role(str(n), str(d)) for n, d in zip(rows["pg_name"], rows["pg_desc"])]
    issued: dict[tuple[int, str, int], int] = {}
    for r, ro, q, rid in zip(rows["rank"], roles, rows["seq"], rows["record_id"]):
        if (ro, int(q)) in ops:
            issued.setdefault((int(r), ro, int(q)), int(rid))
    big = 1 << 62
    order = {
        r: tuple(sorted(ops, key=lambda op: (issued.get((r, *op), big), op)))
        for r in facts.tables.dumped_ranks
        if any((r, *op) in issued for op in ops)
    }
    counts = Counter(order.values())
    if len(counts) < 2:
        return []
    (major, n_major), (_, n_next) = counts.most_common(2)
    if n_major == n_next:
        return []
    return sorted(r for r in cycle if r in order and order[r] != major)


def first_wait_culprit(facts: Facts, cycle: tuple[int, ...]) -> list[int]:
    """In a cycle that is not two pipeline stages facing each other, the wait that began
    first started the deadlock: its holder is the culprit (it skipped an op its peer waits
    in, and the rest of the cycle formed behind that)."""
    inside = set(cycle)
    edges = [(a, b, d) for a, b, d in facts.graph.edges(data=True) if a in inside and b in inside]
    if len(cycle) == 2 and all(d["kind"] == WaitKind.P2P for _, _, d in edges):
        return []  # symmetric: both stages receive (or send) first
    e = facts.tables.entries
    starts: list[tuple[int, int]] = []
    for a, b, d in edges:
        p2p = is_p2p_op(d["op"])
        col = "p2p_seq" if p2p else "seq"
        rows = e[
            (e["rank"] == a)
            & (e["pg_name"] == d["pg_name"])
            & (e[col] == d["seq"])
            & (e["is_p2p"] == p2p)
        ]
        if rows.empty:
            return []
        starts.append((int(rows["time_created_ns"].min()), int(b)))
    return [min(starts)[1]] if starts else []


def _why(facts: Facts, cycle: tuple[int, ...]) -> tuple[list[int], str, bool]:
    """The ranks of ``cycle`` to blame, the reason, and whether the wait that began first
    decided it (no majority order did)."""
    odd = order_culprits(facts, cycle)
    if odd and len(odd) < len(cycle):
        return (
            odd,
            (
                f"{plural(odd)} {rank_list(odd)} {'run' if len(odd) > 1 else 'runs'} the groups "
                "of the cycle in a different order than the other ranks"
            ),
            False,
        )
    odd = first_wait_culprit(facts, cycle)
    if odd:
        return (
            odd,
            (
                f"the first wait of the cycle is on rank {odd[0]}: it skipped an op its "
                "peer waits in and went on, and the rest of the cycle formed behind it"
            ),
            True,
        )
    odd = [r for r in facts.roots.cycle_culprits if r in cycle]
    if len(odd) in (0, len(cycle)):
        return (
            odd,
            "the ranks wait on each other symmetrically (e.g. both pipeline stages receive first)",
            False,
        )
    return (
        odd,
        (
            f"{plural(odd)} {rank_list(odd)} {'are' if len(odd) > 1 else 'is'} blocked in a "
            "different group than the rest of the cycle"
        ),
        False,
    )


def deadlock(facts: Facts) -> list[Finding]:
    """Waits that form a cycle (groups run in a different order, or pipeline stages that
    both receive first)."""
    out: list[Finding] = []
    g = facts.graph
    for cycle in facts.roots.cycles:
        closing = [
            Wait(
                waiter=int(a),
                holder=int(b),
                pg_name=g.edges[a, b]["pg_name"],
                pg_desc=g.edges[a, b]["pg_desc"],
                seq=g.edges[a, b]["seq"],
                op=g.edges[a, b]["op"],
            )
            for a, b in g.subgraph(cycle).edges
        ]
        odd, why, first = _why(facts, cycle)
        head = closing[0] if closing else None
        out.append(
            Finding(
                kind=FindingKind.DEADLOCK.value,
                ranks=tuple(sorted(odd or cycle)),
                culprit=bool(set(cycle) & set(facts.roots.cycle_culprits)),
                summary=f"ranks {rank_list(cycle)} wait on each other in a cycle; {why}",
                group=str(head.pg_name) if head else "",
                group_desc=str(head.pg_desc) if head else "",
                seq=int(head.seq) if head else -1,
                op=str(head.op) if head else "",
                evidence=CycleEvidence(
                    cycle=tuple(cycle),
                    edges=tuple(sorted(closing, key=lambda d: (d.waiter, d.holder))),
                    by_first_wait=first,
                ),
            )
        )
    return out
