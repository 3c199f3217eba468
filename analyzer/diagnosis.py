"""Diagnosis: from matching and the wait-for graph to culprits, findings and a verdict.

The taxonomy (``Finding.kind``) is stable and documented in the README:

=====================  ==================================================================
``not_joined``         members never enqueued the collective (or posted the send/recv)
                       the others wait in; the culprit is stalled outside communication
``missing_dump``       no file from a rank that others wait on (crashed or killed; where the
                       backend dumps only ranks whose own ops timed out, nccl2, also a
                       rank stalled outside communication)
``op_mismatch``        members enqueued different ops at the same sequence number
``size_mismatch``      ... the same op with different shapes
``dtype_mismatch``     ... the same op with different dtypes
``deadlock``           waits form a cycle (groups run in a different order, or pipeline
                       stages that both receive first)
``stuck_in_collective`` every member enqueued the op, none completed: network or GPU
``unrecorded_ops``     pg_status counters ahead of the recorded entries (e.g. gloo
                       send/recv, which the recorder does not record)
``no_hang``            everything recorded completed and the counters agree
=====================  ==================================================================

Cause comes before consequence: a desync outranks the waits it causes (a rank that crashed
on a desynchronised message is a victim, listed in ``missing_dumps``), and among waits only
the roots of the graph are culprits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from analyzer.expectations import barrier_op_gap
from analyzer.graph import Roots, chain, root_ranks, waiters_of
from analyzer.matching import NO_MAJORITY, Matching
from analyzer.suspect import stuck_suspect
from analyzer.tables import Tables
from analyzer.waits import stuck_collectives

SCHEMA_VERSION = "hangscope.diagnosis/1"

KINDS: tuple[str, ...] = (
    "not_joined", "missing_dump", "op_mismatch", "size_mismatch", "dtype_mismatch",
    "deadlock", "stuck_in_collective", "unrecorded_ops", "no_hang",
)


class Verdict(StrEnum):
    HANG = "hang"
    NO_HANG = "no_hang"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One piece of evidence, JSON-safe."""

    kind: str
    ranks: tuple[int, ...]
    summary: str
    group: str = ""
    group_desc: str = ""
    seq: int = -1
    op: str = ""
    culprit: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    stack: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "ranks": list(self.ranks), "culprit": self.culprit,
            "summary": self.summary, "group": self.group, "group_desc": self.group_desc,
            "seq": self.seq, "op": self.op, "evidence": self.evidence,
            "stack": list(self.stack),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """The answer: verdict, culprits, and the findings that explain them."""

    verdict: Verdict
    culprit_ranks: tuple[int, ...]
    kind: str
    """The kind of the leading finding (what stopped the job)."""
    headline: str
    findings: tuple[Finding, ...]
    missing_dumps: tuple[int, ...]
    deadlock_cycles: tuple[tuple[int, ...], ...]
    chains: dict[int, list[dict[str, Any]]]
    unrecorded_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Groups other evidence names but no loaded dump recorded (for some or all members)."""


def _stack(tables: Tables, stack_id: int) -> tuple[dict[str, Any], ...]:
    if stack_id < 0:
        return ()
    frames = tables.stacks[tables.stacks["stack_id"] == stack_id].sort_values("depth")
    return tuple({"name": str(n), "filename": str(f), "line": int(ln)}
                 for n, f, ln in frames[["name", "filename", "line"]].itertuples(index=False))


def _entry(tables: Tables, *, rank: int | None = None, group: str, seq: int,
           p2p: bool = False) -> pd.Series | None:
    e = tables.entries
    col = "p2p_seq" if p2p else "seq"
    mask = (e["pg_name"] == group) & (e[col] == seq) & (e["is_p2p"] == p2p)
    if rank is not None:
        mask &= e["rank"] == rank
    rows = e[mask]
    if rows.empty:
        return None
    with_stack = rows[rows["stack_id"] >= 0]
    return (with_stack if len(with_stack) else rows).iloc[0]


def _last_entry(tables: Tables, rank: int) -> pd.Series | None:
    e = tables.entries
    rows = e[e["rank"] == rank]
    if rows.empty:
        return None
    return rows.loc[rows["record_id"].idxmax()]


def _describe_entry(row: pd.Series | None) -> dict[str, Any]:
    if row is None:
        return {}
    return {
        "rank": int(row["rank"]), "group": str(row["pg_name"]), "group_desc": str(row["pg_desc"]),
        "seq": int(row["seq"]), "p2p_seq": int(row["p2p_seq"]), "op": str(row["op"]),
        "profiling_name": str(row["profiling_name"]), "state": str(row["state"]),
        "retired": bool(row["retired"]), "input_sizes": str(row["input_sizes"]),
        "input_dtypes": str(row["input_dtypes"]), "record_id": int(row["record_id"]),
    }


def _group_label(name: str, desc: str) -> str:
    return f"{desc} (group {name})" if desc and desc != name else f"group {name}"


def _mismatch_findings(tables: Tables, matching: Matching) -> list[Finding]:
    mm = matching.mismatches
    out: list[Finding] = []
    if mm.empty:
        return out
    for (name, seq, kind), grp in mm.groupby(["pg_name", "seq", "kind"], sort=True):
        ranks = tuple(sorted(int(r) for r in grp["rank"]))
        desc = str(grp["pg_desc"].iloc[0])
        expected = str(grp["expected"].iloc[0])
        n_agree, n_rec = int(grp["n_agree"].iloc[0]), int(grp["n_recorded"].iloc[0])
        values = {str(int(r)): str(v) for r, v in zip(grp["rank"], grp["value"])}
        what = {"op_mismatch": "op", "size_mismatch": "sizes", "dtype_mismatch": "dtypes"}[kind]
        ambiguous = expected == NO_MAJORITY
        row = _entry(tables, rank=ranks[0], group=str(name), seq=int(seq))
        if ambiguous:
            summary = (
                f"members of {_group_label(str(name), desc)} issued seq {int(seq)} with different "
                f"{what} ({'; '.join(f'rank {r}: {v}' for r, v in values.items())}) and no value has "
                "a majority: every side is listed"
            )
        else:
            basis = str(grp["basis"].iloc[0])
            others = (f"{n_agree} of {n_rec} members" if basis == "group majority" else
                      f"its peer and the other {desc} groups")
            summary = (
                f"rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)} issued "
                f"{_group_label(str(name), desc)} seq {int(seq)} with {what} "
                f"{', '.join(sorted(set(values.values())))} while {others} used {expected}"
            )
        out.append(Finding(
            kind=str(kind), ranks=ranks, summary=summary, group=str(name), group_desc=desc,
            seq=int(seq), op=str(grp["op"].iloc[0]), culprit=True,
            evidence={"values": values, "majority": expected, "agreeing_members": n_agree,
                      "recorded_members": n_rec, "ambiguous": ambiguous,
                      "decided_by": str(grp["basis"].iloc[0])},
            stack=_stack(tables, int(row["stack_id"])) if row is not None else (),
        ))
    return out


def _p2p_mismatch_findings(tables: Tables, matching: Matching) -> list[Finding]:
    """A send and the recv it pairs with disagree on sizes or dtypes: the pair never completes."""
    out: list[Finding] = []
    for m in matching.p2p_mismatches.itertuples(index=False):
        what = "sizes" if m.kind == "size_mismatch" else "dtypes"
        label = _group_label(m.pg_name, m.pg_desc)
        summary = (f"rank {m.sender} sent {m.send_value} to rank {m.receiver} in {label} "
                   f"(p2p seq {m.send_seq}), whose matching recv (its p2p seq {m.recv_seq}) "
                   f"expects {m.recv_value}: the pair can never complete")
        culprits = tuple(m.culprits)
        if culprits == (m.sender,):
            summary += f"; rank {m.sender}'s other sends to rank {m.receiver} used {m.usual_send}"
        elif culprits == (m.receiver,):
            summary += f"; rank {m.receiver}'s other recvs from rank {m.sender} used {m.usual_recv}"
        else:
            summary += "; neither side's history tells which one changed: both are listed"
        row = _entry(tables, rank=int(culprits[0]), group=m.pg_name,
                     seq=m.send_seq if culprits[0] == m.sender else m.recv_seq, p2p=True)
        out.append(Finding(
            kind=str(m.kind), ranks=culprits, summary=summary, group=m.pg_name,
            group_desc=m.pg_desc, seq=int(m.send_seq), op="send", culprit=True,
            evidence={"values": {str(m.sender): m.send_value, str(m.receiver): m.recv_value},
                      "sender": m.sender, "receiver": m.receiver, "send_seq": m.send_seq,
                      "recv_seq": m.recv_seq, f"usual_send_{what}": m.usual_send,
                      f"usual_recv_{what}": m.usual_recv},
            stack=_stack(tables, int(row["stack_id"])) if row is not None else (),
        ))
    return out


def _as_kwargs(f: Finding) -> dict[str, Any]:
    return {k: getattr(f, k) for k in Finding.__slots__}  # type: ignore[attr-defined]


def _ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    ranks = list(ranks)
    if len(ranks) <= 8:
        return ", ".join(str(r) for r in ranks)
    return ", ".join(str(r) for r in ranks[:6]) + f", ... ({len(ranks)} ranks)"


def _waited_text(w: dict[str, Any]) -> str:
    who = f"rank{'s' if len(w['waiters']) > 1 else ''} {_ranks_text(w['waiters'])}"
    where = _group_label(w["group"], w["group_desc"])
    if w["kind"] == "p2p":
        mine = "recv" if w["op"] == "send" else "send"
        return f"the {mine} matching {who}'s {w['op']} in {where} p2p seq {w['seq']}"
    return f"{w['op']} in {where} seq {w['seq']} (awaited by {who})"


#: How a missing file is explained where the backend dumps only ranks whose own ops timed
#: out (nccl2): a stalled rank has nothing in flight and writes no file either.
NO_DUMP_OWN_TIMEOUT = ("no dump: stalled outside communication or crashed (this backend dumps "
                       "only ranks whose own ops timed out)")


def _root_finding(tables: Tables, g: nx.DiGraph, root: int, waits: pd.DataFrame,
                  matching: Matching | None = None) -> Finding:
    incoming = waits[waits["holder"] == root]
    everyone = waiters_of(g, root)
    dumped = bool(g.nodes[root].get("dumped", False))
    sizes = dict(zip(tables.groups["pg_name"], tables.groups["size"], strict=True))
    # One line per op the root is waited on in; the smallest group is the most direct evidence.
    waited_in = []
    for (group, desc, seq, op, wkind), grp in incoming.groupby(
            ["pg_name", "pg_desc", "seq", "op", "kind"], sort=False):
        waited_in.append({"group": str(group), "group_desc": str(desc), "seq": int(seq),
                          "op": str(op), "kind": str(wkind),
                          "waiters": sorted(int(w) for w in grp["waiter"])})
    waited_in.sort(key=lambda w: (w["kind"] == "p2p", sizes.get(w["group"], 0), w["seq"], w["group"]))
    first = waited_in[0] if waited_in else None
    group = first["group"] if first else ""
    desc = first["group_desc"] if first else ""
    seq = first["seq"] if first else -1
    op = first["op"] if first else ""
    wkind = first["kind"] if first else ""
    waited = None
    if first is not None:
        waited = _entry(tables, rank=first["waiters"][0], group=group, seq=seq, p2p=wkind == "p2p")
    last = _last_entry(tables, root)
    where = "; ".join(_waited_text(w) for w in waited_in[:4]) + (
        f"; and {len(waited_in) - 4} more" if len(waited_in) > 4 else "")
    total = f"{len(everyone)} rank(s) wait on it in all"
    own_timeout = matching is not None and matching.dialects.dumps_only_failed
    if not dumped and own_timeout:
        kind = "missing_dump"
        summary = (f"rank {root}: {NO_DUMP_OWN_TIMEOUT}; others wait on it: {where}. {total}")
    elif not dumped:
        kind = "missing_dump"
        summary = (f"rank {root} wrote no dump and others wait on it: {where}. {total}; it "
                   "crashed, was killed, or hung before dumping")
    elif wkind == "unrecorded":
        kind = "unrecorded_ops"
        summary = (f"rank {root} is behind: its pg_status counter stops before ops its peers "
                   f"enqueued but the recorder did not record (e.g. gloo send/recv): {where}. {total}")
    else:
        kind = "not_joined"
        seen = (f"its last recorded op is {last['op']} in "
                f"{_group_label(str(last['pg_name']), str(last['pg_desc']))} seq {int(last['seq'])}"
                if last is not None else "it recorded nothing")
        summary = (f"rank {root} never enqueued {where}. {total}. It is stalled outside "
                   f"communication (compute, data loading, a lock, or a host problem): {seen}")
    evidence: dict[str, Any] = {
        "waited_in": waited_in[:32],
        "all_waiters": len(everyone),
        "waited_op": _describe_entry(waited),
        "last_recorded_op": _describe_entry(last),
        "wait_kind": wkind,
    }
    if not dumped:
        evidence["no_dump"] = "stalled_or_crashed" if own_timeout else "crashed"
    stack = _stack(tables, int(waited["stack_id"])) if waited is not None else ()
    if last is not None and int(last["stack_id"]) >= 0:
        evidence["last_recorded_stack"] = list(_stack(tables, int(last["stack_id"])))
    return Finding(kind=kind, ranks=(root,), summary=summary, group=group, group_desc=desc,
                   seq=seq, op=op, culprit=True, evidence=evidence, stack=stack)


def _order_culprits(tables: Tables, g: nx.DiGraph, cycle: tuple[int, ...]) -> list[int]:
    """Ranks of a cycle that issued the cycle's collectives in a different order than most.

    The waited collectives are keyed by group role (the desc, so that every tensor-parallel
    pair counts as "the TP group") and sequence number. For every rank, the order in which
    it issued them (one it never issued counts as after those it did) is compared with the
    majority order; the cycle members that disagree ran the groups in the other order.
    """
    inside = set(cycle)

    def role(name: str, desc: str) -> str:
        return desc if desc and desc != "undefined" else f"group {name}"

    ops = sorted({(role(d["pg_name"], d["pg_desc"]), int(d["seq"])) for a, b, d in g.edges(data=True)
                  if a in inside and b in inside and d["kind"] in ("collective", "silent")})
    if len({r for r, _ in ops}) < 2:
        return []
    e = tables.entries
    rows = e[~e["is_p2p"] & e["seq"].isin([q for _, q in ops])]
    roles = [role(str(n), str(d)) for n, d in zip(rows["pg_name"], rows["pg_desc"])]
    issued: dict[tuple[int, str, int], int] = {}
    for r, ro, q, rid in zip(rows["rank"], roles, rows["seq"], rows["record_id"]):
        if (ro, int(q)) in ops:
            issued.setdefault((int(r), ro, int(q)), int(rid))
    big = 1 << 62
    order = {
        r: tuple(sorted(ops, key=lambda op: (issued.get((r, *op), big), op)))
        for r in tables.dumped_ranks
        if any((r, *op) in issued for op in ops)
    }
    counts = Counter(order.values())
    if len(counts) < 2:
        return []
    (major, n_major), (_, n_next) = counts.most_common(2)
    if n_major == n_next:
        return []
    return sorted(r for r in cycle if r in order and order[r] != major)


def _first_wait_culprit(tables: Tables, g: nx.DiGraph, cycle: tuple[int, ...]) -> list[int]:
    """In a cycle that is not two pipeline stages facing each other, the wait that began
    first started the deadlock: its holder is the culprit (it skipped an op its peer waits
    in, and the rest of the cycle formed behind that)."""
    inside = set(cycle)
    edges = [(a, b, d) for a, b, d in g.edges(data=True) if a in inside and b in inside]
    if len(cycle) == 2 and all(d["kind"] == "p2p" for _, _, d in edges):
        return []  # symmetric: both stages receive (or send) first
    e = tables.entries
    starts: list[tuple[int, int]] = []
    for a, b, d in edges:
        p2p = d["op"] in ("send", "recv")
        col = "p2p_seq" if p2p else "seq"
        rows = e[(e["rank"] == a) & (e["pg_name"] == d["pg_name"]) & (e[col] == d["seq"])
                 & (e["is_p2p"] == p2p)]
        if rows.empty:
            return []
        starts.append((int(rows["time_created_ns"].min()), int(b)))
    return [min(starts)[1]] if starts else []


def _stuck_findings(tables: Tables, matching: Matching,
                    held: list[tuple[str, int]] | None = None) -> list[Finding]:
    """All members joined, none completed: the network or a GPU. ``held``: the collectives
    every member is blocked in (:func:`stuck_collectives`), preferred when there are any."""
    c = matching.collectives
    out: list[Finding] = []
    if c.empty:
        return out
    if matching.dialects.completion_unobserved:
        e = tables.entries
        last = e.loc[e.groupby("rank")["record_id"].idxmax()]
        pend = last[~last["retired"] & ~last["is_p2p"]]
        if pend.empty:
            return out
        key = pend.groupby(["pg_name", "seq"], observed=True).size().idxmax()
        cand = c[(c["pg_name"] == str(key[0])) & (c["seq"] == int(key[1]))]
    else:
        cand = c[(c["n_joined"] >= c["n_members"]) & (c["n_completed"] == 0)]
    cand = cand[cand["n_joined"] >= cand["n_members"]]
    if cand.empty:
        return out
    members_of = tables.members()
    if held:
        # Collectives of other groups that every member joined may be queued behind a blocked
        # send/recv (a pipeline backed up behind the stuck stage): the stuck one is the
        # collective every member is blocked in, its earliest unfinished op.
        keys = set(held)
        cand = cand[[(str(g), int(q)) in keys for g, q in zip(cand["pg_name"], cand["seq"])]]
    elif not matching.dialects.completion_unobserved:
        slow = _slow_completers(matching)
        if slow:
            return [slow]
    if cand.empty:
        return out
    row = cand.sort_values(["first_created_ns"]).iloc[0]
    members = members_of.get(str(row["pg_name"]), ())
    e = tables.entries
    mine = e[(e["pg_name"] == row["pg_name"]) & (e["seq"] == row["seq"]) & ~e["is_p2p"]]
    started = mine[mine["time_started_ns"] > 0]
    evidence: dict[str, Any] = {"members": list(members), "started": int(row["n_started"]),
                                "completed": int(row["n_completed"])}
    ranks = tuple(sorted(int(m) for m in members))
    if len(started) >= 3:  # in a pair, "last to start" says nothing
        latest = started.sort_values("time_started_ns").tail(max(1, len(started) // 8))
        evidence["last_to_start"] = sorted(int(r) for r in latest["rank"])
    suspect = stuck_suspect(tables, matching, str(row["pg_name"]), int(row["seq"]), members)
    evidence["suspect"] = suspect.rank
    evidence["suspect_reasons"] = list(suspect.reasons)
    evidence.update({k: v for k, v in suspect.evidence.items() if k not in evidence})
    head = (f"every member of {_group_label(str(row['pg_name']), str(row['pg_desc']))} enqueued "
            f"{row['op']} seq {int(row['seq'])} and none completed it")
    if suspect.rank is not None:
        ranks = (suspect.rank,)
        summary = (f"{head}; the likely holder is rank {suspect.rank}: "
                   f"{'; '.join(suspect.reasons)}. Suspect its host, GPU or link, not the program")
    else:
        summary = f"{head}: suspect the network or a GPU of these ranks, not the program"
        if evidence.get("last_to_start"):
            summary += f"; last to start it: rank(s) {_ranks_text(evidence['last_to_start'])}"
        summary += ("; no member stands out: the evidence points at different members ("
                    f"{'; '.join(suspect.reasons)})" if suspect.reasons else
                    "; no member stands out (all enqueued it close together, and their entries "
                    "are in the same state)")
    stack_row = mine[mine["stack_id"] >= 0]
    stack = _stack(tables, int(stack_row["stack_id"].iloc[0])) if len(stack_row) else ()
    out.append(Finding(kind="stuck_in_collective", ranks=ranks, summary=summary,
                       group=str(row["pg_name"]), group_desc=str(row["pg_desc"]),
                       seq=int(row["seq"]), op=str(row["op"]), culprit=True, evidence=evidence,
                       stack=stack))
    return out


def _slow_completers(matching: Matching, only: list[int] | None = None) -> Finding | None:
    """Ranks that enqueued as far as their peers but whose completions stopped earlier.

    Every member joined, so no rank is missing from the program's point of view; the rank
    whose own GPU work stopped completing first (its completed counter lags the others')
    is stuck on its GPU or link.
    """
    laggers = matching.stale_completers
    if only is not None:
        laggers = {r: v for r, v in laggers.items() if r in only}
    if not laggers:
        return None
    ranks = tuple(sorted(laggers))
    first = laggers[ranks[0]]
    return Finding(
        kind="stuck_in_collective", ranks=ranks, culprit=True,
        summary=(f"rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)} enqueued as far as "
                 f"{'their' if len(ranks) > 1 else 'its'} peers but stopped completing first (in "
                 f"{_group_label(first['group'], first['group_desc'])} completed {first['completed']} while the "
                 f"peers completed {first['peers_completed']}): stuck on the GPU or its link, not in the program"),
        group=first["group"], group_desc=first["group_desc"], seq=first["completed"] + 1,
        evidence={"per_rank": {str(r): v for r, v in laggers.items()}},
    )


def _unrecorded_info(tables: Tables, matching: Matching) -> list[Finding]:
    """Ops the buffers never saw: op_id gaps between recorded entries (gloo send/recv) and
    counters ahead of the newest entry."""
    out: list[Finding] = []
    e = tables.entries
    if not matching.dialects.completion_unobserved or e.empty:
        p = matching.progress
        ahead = p[(p["counter_enqueued"] > p["window_hi"]) & (p["window_hi"] >= 0)
                  & (p["source"] == "entries+pg_status")]
        for name, grp in ahead.groupby("pg_name", sort=True):
            out.append(Finding(
                kind="unrecorded_ops", ranks=tuple(sorted(int(r) for r in grp["rank"])),
                summary=(f"pg_status counters of {_group_label(str(name), str(grp['pg_desc'].iloc[0]))} "
                         "run ahead of the recorded entries: ops happened that the buffer never saw"),
                group=str(name), group_desc=str(grp["pg_desc"].iloc[0]),
                evidence={"counters": {str(int(r)): int(c) for r, c in zip(grp["rank"], grp["counter_enqueued"])},
                          "last_recorded": {str(int(r)): int(h) for r, h in zip(grp["rank"], grp["window_hi"])}},
            ))
        return out + _op_counters_ahead(tables, matching)
    if not matching.dialects.p2p_unrecorded:
        return out + _op_counters_ahead(tables, matching)
    ordered = e.sort_values(["rank", "pg_name", "op_id"])[["rank", "pg_name", "pg_desc", "op_id", "seq"]]
    by = ordered.groupby(["rank", "pg_name"], observed=True)
    gap = by["op_id"].diff().fillna(1) - 1
    # Gaps of monitored_barrier (collective_seq_id skips as much as op_id, on every member
    # alike) are collectives the recorder does not record, not send/recv.
    seq_gap = by["seq"].diff().fillna(1) - 1
    members = tables.members()
    barrier_gap = np.array([
        barrier_op_gap(int(q), int(r) == int(members.get(str(g), (-1,))[0]), len(members.get(str(g), ())))
        if str(g) in matching.barrier_gaps and q > 0 and q % 2 == 0 else -1
        for r, g, q in zip(ordered["rank"], ordered["pg_name"], seq_gap)])
    gap = gap.where(gap != barrier_gap, 0)
    gaps = ordered[gap > 0].assign(missing=gap[gap > 0].astype(int))
    for name, grp in gaps.groupby("pg_name", observed=True, sort=True):
        desc = str(grp["pg_desc"].iloc[0])
        per_rank = grp.groupby("rank")["missing"].sum()
        out.append(Finding(
            kind="unrecorded_ops", ranks=tuple(sorted(int(r) for r in per_rank.index)),
            summary=(f"{int(per_rank.max())} op(s) of {_group_label(str(name), desc)} ran between recorded "
                     "entries but are in no buffer (op_id gaps): gloo does not record send/recv, so a "
                     "hang inside such an op cannot be seen in these dumps"),
            group=str(name), group_desc=desc,
            evidence={"unrecorded_ops_per_rank": {str(int(r)): int(m) for r, m in per_rank.items()},
                      "gaps_before_seq": sorted({int(s) for s in grp["seq"]})[:20]},
        ))
    return out


def _op_counters_ahead(tables: Tables, matching: Matching) -> list[Finding]:
    """Hook-recorded dumps record every op, send/recv included, and count ``pg_status`` in
    op_id units: a counter past the newest recorded op_id of its group means ops ran that
    the buffer never saw (a gap otherwise means nothing)."""
    hooked = [r for r, d in matching.dialects.by_rank.items() if d.counter == "op_id" and d.records_p2p]
    e, st = tables.entries, tables.status
    if not hooked or e.empty or st.empty:
        return []
    mine = e[e["rank"].isin(hooked)]
    newest = mine.groupby(["pg_name", "rank"], observed=True)["op_id"].max()
    newest.index = newest.index.set_levels(newest.index.levels[0].astype(str), level=0)
    cnt = st[(st["pg_name"] != "") & st["rank"].isin(hooked)].drop_duplicates(["pg_name", "rank"], keep="last")
    rows: dict[str, dict[int, tuple[int, int]]] = {}
    for g, r, c in zip(cnt["pg_name"].astype(str), cnt["rank"].tolist(), cnt["last_enqueued"].tolist()):
        top = newest.get((g, int(r)))
        if top is not None and int(c) > int(top):
            rows.setdefault(g, {})[int(r)] = (int(c), int(top))
    descs = dict(zip(tables.groups["pg_name"], tables.groups["pg_desc"], strict=True))
    out = []
    for g, per in sorted(rows.items()):
        desc = str(descs.get(g, ""))
        out.append(Finding(
            kind="unrecorded_ops", ranks=tuple(sorted(per)),
            summary=(f"pg_status counters of {_group_label(g, desc)} (op_id units) run ahead of the "
                     "newest recorded op: ops happened that the buffer never saw"),
            group=g, group_desc=desc,
            evidence={"counters": {str(r): c for r, (c, _) in per.items()},
                      "last_recorded_op_id": {str(r): t for r, (_, t) in per.items()}},
        ))
    return out


def _all_done(tables: Tables, matching: Matching) -> bool:
    e = tables.entries
    if matching.dialects.completion_unobserved:
        finished = bool(e["retired"].all())
    else:
        finished = bool((e["state"].astype(str) == "completed").all())
    p = matching.progress
    known = p[p["enqueued"] >= 0]
    agree = bool((known.groupby("pg_name")["enqueued"].nunique() <= 1).all()) if len(known) else True
    return finished and agree and not tables.missing_ranks


def _unsure_roots(root_findings: list[Finding], unsure: Mapping[int, str]) -> list[Finding]:
    """Roots whose own dump is unreadable or suspect are not blamed ahead of roots whose
    readable dump shows them stalled: they stay as findings, marked as not blamed. When no
    root is sure, they stay culprits, and the summary says why they are unsure."""
    if not unsure:
        return root_findings
    is_unsure = [bool(set(f.ranks) & unsure.keys()) for f in root_findings]
    # Sure: a root whose own readable dump shows where it stopped (not one without a dump).
    sure = [f for f, u in zip(root_findings, is_unsure, strict=True)
            if f.culprit and not u and f.kind != "missing_dump"]
    out = []
    for f, u in zip(root_findings, is_unsure, strict=True):
        if not u:
            out.append(f)
            continue
        why = "; ".join(f"rank {r}: {unsure[r]}" for r in f.ranks if r in unsure)
        if sure:
            blamed = _ranks_text(sorted({r for s in sure for r in s.ranks}))
            out.append(Finding(**{**_as_kwargs(f), "culprit": False, "summary": (
                f"{f.summary} (not blamed: {why}; the readable dumps show rank(s) {blamed} "
                "stopped first)")}))
        else:
            out.append(Finding(**{**_as_kwargs(f), "summary": f"{f.summary} (unsure: {why})"}))
    return out


def diagnose(tables: Tables, matching: Matching, wait_rows: pd.DataFrame, g: nx.DiGraph, *,
             unsure: Mapping[int, str] | None = None) -> Diagnosis:
    """Name the culprits and explain them. Deterministic for a given input.

    ``unsure``: ranks whose evidence cannot be trusted (an unreadable file, a dump with
    dropped entries) and why; see :func:`_unsure_roots`.
    """
    roots: Roots = root_ranks(g)
    findings: list[Finding] = []
    mismatches = _mismatch_findings(tables, matching) + _p2p_mismatch_findings(tables, matching)
    findings.extend(mismatches)
    # A root blocked in a collective all its members joined and none completed holds the
    # others up from inside that collective: the network or a GPU, not its program.
    held = stuck_collectives(tables, matching)
    members = tables.members()
    in_stuck = {int(m) for grp, _ in held for m in members.get(grp, ())}
    stuck_roots = [r for r in roots.roots if r in in_stuck]
    stuck_held = [(grp, q) for grp, q in held if set(stuck_roots) & set(members.get(grp, ()))]
    # Likewise a root whose GPU stopped completing what its peers completed.
    slow_roots = [r for r in roots.roots if r in matching.stale_completers and r not in in_stuck]
    root_findings = [_root_finding(tables, g, r, wait_rows, matching) for r in roots.roots
                     if r not in in_stuck and r not in slow_roots]
    if stuck_roots:
        root_findings.extend(_stuck_findings(tables, matching, stuck_held))
    if slow_roots:
        slow = _slow_completers(matching, slow_roots)
        if slow is not None:
            root_findings.append(slow)
    root_findings = _unsure_roots(root_findings, unsure or {})
    deadlock: list[Finding] = []
    for cycle in roots.cycles:
        closing = [
            {"waiter": int(a), "holder": int(b), **{k: g.edges[a, b][k] for k in ("pg_name", "pg_desc", "seq", "op")}}
            for a, b in g.subgraph(cycle).edges
        ]
        odd, why = _order_culprits(tables, g, cycle), ""
        if odd and len(odd) < len(cycle):
            why = (f"rank{'s' if len(odd) > 1 else ''} {_ranks_text(odd)} "
                   f"{'run' if len(odd) > 1 else 'runs'} the groups of the cycle in a different "
                   "order than the other ranks")
        else:
            odd = _first_wait_culprit(tables, g, cycle)
            if odd:
                why = (f"the first wait of the cycle is on rank {odd[0]}: it skipped an op its "
                       "peer waits in and went on, and the rest of the cycle formed behind it")
        if not odd:
            odd = [r for r in roots.cycle_culprits if r in cycle]
            why = ("the ranks wait on each other symmetrically (e.g. both pipeline stages "
                   "receive first)" if len(odd) in (0, len(cycle)) else
                   f"rank{'s' if len(odd) > 1 else ''} {_ranks_text(odd)} "
                   f"{'are' if len(odd) > 1 else 'is'} blocked in a different group than the rest of the cycle")
        ranks = tuple(sorted(odd or cycle))
        deadlock.append(Finding(
            kind="deadlock", ranks=ranks, culprit=bool(set(cycle) & set(roots.cycle_culprits)),
            summary=f"ranks {_ranks_text(cycle)} wait on each other in a cycle; {why}",
            group=str(closing[0]["pg_name"]) if closing else "",
            group_desc=str(closing[0]["pg_desc"]) if closing else "",
            seq=int(closing[0]["seq"]) if closing else -1, op=str(closing[0]["op"]) if closing else "",
            evidence={"cycle": list(cycle), "edges": sorted(closing, key=lambda d: (d["waiter"], d["holder"]))},
        ))

    cycle_culprits = {r for f in deadlock if f.culprit for r in f.ranks}
    culprits: set[int]
    if mismatches:
        culprits = {r for f in mismatches for r in f.ranks}
        findings.extend(
            Finding(**{**_as_kwargs(f), "culprit": False,
                       "summary": f.summary + " (a consequence of the desync)"})
            for f in root_findings)
        findings.extend(deadlock)
        kind = mismatches[0].kind
    elif root_findings or any(f.culprit for f in deadlock):
        culprits = {r for f in root_findings if f.culprit for r in f.ranks} | cycle_culprits
        findings.extend(root_findings)
        findings.extend(deadlock)
        blamed = [f for f in root_findings if f.culprit] or root_findings
        kind = "deadlock" if any(f.culprit for f in deadlock) and not root_findings else blamed[0].kind if blamed else "deadlock"
    else:
        stuck = _stuck_findings(tables, matching, held)
        findings.extend(stuck)
        culprits = {r for f in stuck for r in f.ranks}
        kind = "stuck_in_collective" if stuck else ""
    findings.extend(_unrecorded_info(tables, matching))
    unrecorded_groups = dict(matching.dialects.unrecorded_groups)

    missing = tuple(tables.missing_ranks)
    unseen = any(f.kind == "unrecorded_ops" for f in findings)
    if culprits:
        verdict = Verdict.HANG
    elif unseen and matching.dialects.completion_unobserved:
        verdict, kind = Verdict.INCONCLUSIVE, "unrecorded_ops"
    elif _all_done(tables, matching):
        verdict, kind = Verdict.NO_HANG, "no_hang"
        findings.append(Finding(kind="no_hang", ranks=(), summary=(
            "every recorded op completed and the counters of every group agree")))
    else:
        verdict, kind = Verdict.INCONCLUSIVE, kind or "inconclusive"
    chains = {r: chain(g, r) for r in sorted(culprits) if r in g and g.in_degree(r) > 0}
    lead = next((f for f in findings if f.culprit), None)
    headline = (lead.summary if lead else findings[-1].summary if findings
                else "ops are still pending but no rank can be blamed from these dumps")
    if lead is None and unrecorded_groups and verdict != Verdict.NO_HANG:
        headline = f"{headline}; {unrecorded_text(unrecorded_groups)}"
    order = {k: i for i, k in enumerate(KINDS)}
    findings.sort(key=lambda f: (not f.culprit, order.get(f.kind, 99), f.ranks, f.group, f.seq))
    return Diagnosis(
        verdict=verdict, culprit_ranks=tuple(sorted(culprits)), kind=kind, headline=headline,
        findings=tuple(findings), missing_dumps=missing, deadlock_cycles=roots.cycles, chains=chains,
        unrecorded_groups=unrecorded_groups,
    )


def unrecorded_text(groups: dict[str, dict[str, Any]]) -> str:
    """``groups not recorded in these dumps: ...`` (one buffer per backend: a missing
    buffer, not a stalled rank)."""
    parts = []
    for name, info in groups.items():
        who = info.get("members_without_buffer") or []
        backend = info.get("backend") or ""
        detail = (f" ({backend} buffer missing for rank{'s' if len(who) > 1 else ''} {_ranks_text(who)})"
                  if who else f" (no dump holds it; named by {info.get('evidence', 'other evidence')})")
        parts.append(f"{name}{detail}")
    return "groups not recorded in these dumps: " + "; ".join(parts)
