"""Rules for ops no buffer recorded: counters ahead of the recorded entries, op_id gaps
(gloo's send/recv), and the groups no loaded dump recorded at all. These inform; they
blame nobody."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.diagnosis.evidence import OpGapEvidence, OpIdCountersEvidence, WindowCountersEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind
from analyzer.match import barrier_op_gap
from analyzer.terms import group_label, plural, rank_list

__all__ = ["op_counters_ahead", "unrecorded_ops", "unrecorded_text"]

_UNRECORDED = FindingKind.UNRECORDED_OPS.value


def _gaps_recorded(facts: Facts) -> bool:
    """Whether op_id gaps between entries are the evidence (gloo: completion unobserved
    and send/recv unrecorded); otherwise counters ahead of the window are."""
    d = facts.matching.dialects
    return d.completion_unobserved and not facts.tables.entries.empty and d.p2p_unrecorded


def _window_counters(facts: Facts) -> list[Finding]:
    """``pg_status`` counters past the newest recorded sequence number."""
    p = facts.matching.progress
    ahead = p[
        (p["counter_enqueued"] > p["window_hi"])
        & (p["window_hi"] >= 0)
        & (p["source"] == "entries+pg_status")
    ]
    out = []
    for name, grp in ahead.groupby("pg_name", sort=True):
        desc = str(grp["pg_desc"].iloc[0])
        out.append(
            Finding(
                kind=_UNRECORDED,
                ranks=tuple(sorted(int(r) for r in grp["rank"])),
                summary=(
                    f"pg_status counters of {group_label(str(name), desc)} "
                    "run ahead of the recorded entries: ops happened that the buffer never saw"
                ),
                group=str(name),
                group_desc=desc,
                evidence=WindowCountersEvidence(
                    counters={
                        str(int(r)): int(c) for r, c in zip(grp["rank"], grp["counter_enqueued"])
                    },
                    last_recorded={
                        str(int(r)): int(h) for r, h in zip(grp["rank"], grp["window_hi"])
                    },
                ),
            )
        )
    return out


def _op_id_gaps(facts: Facts) -> list[Finding]:
    """Ops that ran between recorded entries (op_id gaps) but are in no buffer."""
    tables, matching = facts.tables, facts.matching
    ordered = tables.entries.sort_values(["rank", "pg_name", "op_id"])[
        ["rank", "pg_name", "pg_desc", "op_id", "seq"]
    ]
    by = ordered.groupby(["rank", "pg_name"], observed=True)
    gap = by["op_id"].diff().fillna(1) - 1
    # Gaps of monitored_barrier (collective_seq_id skips as much as op_id, on every member
    # alike) are collectives the recorder does not record, not send/recv.
    seq_gap = by["seq"].diff().fillna(1) - 1
    members = facts.members
    barrier_gap = np.array(
        [
            barrier_op_gap(
                int(q), int(r) == int(members.get(str(g), (-1,))[0]), len(members.get(str(g), ()))
            )
            if str(g) in matching.barrier_gaps and q > 0 and q % 2 == 0
            else -1
            for r, g, q in zip(
                ordered["rank"].tolist(), ordered["pg_name"].tolist(), seq_gap.tolist()
            )
        ]
    )
    gap = gap.where(gap != barrier_gap, 0)
    gaps = ordered[gap > 0].assign(missing=gap[gap > 0].astype(int))
    out = []
    for name, grp in gaps.groupby("pg_name", observed=True, sort=True):
        desc = str(grp["pg_desc"].iloc[0])
        per_rank = grp.groupby("rank")["missing"].sum()
        out.append(
            Finding(
                kind=_UNRECORDED,
                ranks=tuple(sorted(int(r) for r in per_rank.index)),
                summary=(
                    f"{int(per_rank.max())} op(s) of {group_label(str(name), desc)} ran between recorded "
                    "entries but are in no buffer (op_id gaps): gloo does not record send/recv, so a "
                    "hang inside such an op cannot be seen in these dumps"
                ),
                group=str(name),
                group_desc=desc,
                evidence=OpGapEvidence(
                    unrecorded_ops_per_rank={
                        str(int(r)): int(m)
                        for r, m in zip(per_rank.index.tolist(), per_rank.tolist())
                    },
                    gaps_before_seq=tuple(sorted({int(s) for s in grp["seq"]})[:20]),
                ),
            )
        )
    return out


def unrecorded_ops(facts: Facts) -> list[Finding]:
    """Ops the buffers never saw: op_id gaps between recorded entries (gloo send/recv), or
    counters ahead of the newest entry."""
    if _gaps_recorded(facts):
        return _op_id_gaps(facts)
    if not facts.matching.dialects.completion_unobserved or facts.tables.entries.empty:
        return _window_counters(facts)
    return []


def op_counters_ahead(facts: Facts) -> list[Finding]:
    """Hook-recorded dumps record every op, send/recv included, and count ``pg_status`` in
    op_id units: a counter past the newest recorded op_id of its group means ops ran that
    the buffer never saw (a gap otherwise means nothing)."""
    if _gaps_recorded(facts):
        return []
    tables, matching = facts.tables, facts.matching
    hooked = [
        r for r, d in matching.dialects.by_rank.items() if d.counter == "op_id" and d.records_p2p
    ]
    e, st = tables.entries, tables.status
    if not hooked or e.empty or st.empty:
        return []
    mine = e[e["rank"].isin(hooked)]
    newest_by = mine.groupby(["pg_name", "rank"], observed=True)["op_id"].max()
    newest = {
        (str(g), int(r)): int(v) for (g, r), v in zip(newest_by.index.tolist(), newest_by.tolist())
    }
    cnt = st[(st["pg_name"] != "") & st["rank"].isin(hooked)].drop_duplicates(
        ["pg_name", "rank"], keep="last"
    )
    rows: dict[str, dict[int, tuple[int, int]]] = {}
    for g, r, c in zip(
        cnt["pg_name"].astype(str), cnt["rank"].tolist(), cnt["last_enqueued"].tolist()
    ):
        top = newest.get((g, int(r)))
        if top is not None and int(c) > int(top):
            rows.setdefault(g, {})[int(r)] = (int(c), int(top))
    descs = facts.group_descs
    out = []
    for g, per in sorted(rows.items()):
        desc = str(descs.get(g, ""))
        out.append(
            Finding(
                kind=_UNRECORDED,
                ranks=tuple(sorted(per)),
                summary=(
                    f"pg_status counters of {group_label(g, desc)} (op_id units) run ahead of the "
                    "newest recorded op: ops happened that the buffer never saw"
                ),
                group=g,
                group_desc=desc,
                evidence=OpIdCountersEvidence(
                    counters={str(r): c for r, (c, _) in per.items()},
                    last_recorded_op_id={str(r): t for r, (_, t) in per.items()},
                ),
            )
        )
    return out


def unrecorded_text(groups: dict[str, dict[str, Any]]) -> str:
    """``groups not recorded in these dumps: ...`` (one buffer per backend: a missing
    buffer, not a stalled rank)."""
    parts = []
    for name, info in groups.items():
        who = info.get("members_without_buffer") or []
        backend = info.get("backend") or ""
        detail = (
            f" ({backend} buffer missing for {plural(who)} {rank_list(who)})"
            if who
            else f" (no dump holds it; named by {info.get('evidence', 'other evidence')})"
        )
        parts.append(f"{name}{detail}")
    return "groups not recorded in these dumps: " + "; ".join(parts)
