"""Where each rank is blocked now: its earliest unfinished op, and the collectives that every
member is blocked in with none completed (held by the network or a GPU, not the program)."""

from __future__ import annotations

import numpy as np

from analyzer.kernels import minimum_at, reduce_min
from analyzer.match.dialect import is_retire_on_end
from analyzer.match.matching import Matching
from analyzer.match.mismatches import as_str
from analyzer.normalize import Tables

__all__ = ["blocked_in", "retired_held", "stuck_collectives"]


def blocked_in(
    tables: Tables, stale: set[int] | frozenset[int] = frozenset()
) -> dict[int, tuple[bool, str, int]]:
    """Each rank's earliest unfinished op, the one it is blocked in now: ``(is_p2p, group,
    seq)`` with the p2p sequence number for send/recv. Its later ops wait behind it on the
    GPU (and on the peers' streams), so what they wait for is not what holds the rank.
    Ranks whose completions stopped being observed have none (every op looks unfinished)."""
    e = tables.entries
    state = e["state"]
    cats = list(state.cat.categories)
    codes = state.cat.codes.to_numpy()
    open_rows = (
        np.flatnonzero(codes != cats.index("completed"))
        if "completed" in cats
        else np.arange(len(e))
    )
    if not len(open_rows):
        return {}
    rank = e["rank"].to_numpy()[open_rows].astype(np.int64)
    record = e["record_id"].to_numpy()[open_rows]
    width = int(rank.max()) + 1
    oldest = reduce_min(rank, width, record)
    at_oldest = np.flatnonzero(record == oldest[rank])
    first = np.full(width, len(open_rows), dtype=np.int64)
    minimum_at(first, rank[at_oldest], at_oldest)  # the first row of the oldest record id
    ranks = np.flatnonzero(first < len(open_rows))
    rows = open_rows[first[ranks]]
    is_p2p = e["is_p2p"].to_numpy(bool)[rows]
    seq = np.where(is_p2p, e["p2p_seq"].to_numpy()[rows], e["seq"].to_numpy()[rows])
    names = as_str(e["pg_name"].iloc[rows])
    return {
        int(r): (bool(p), str(g), int(q))
        for r, p, g, q in zip(ranks.tolist(), is_p2p.tolist(), names, seq.tolist(), strict=True)
        if int(r) not in stale
    }


def stuck_collectives(
    tables: Tables, matching: Matching, heads: dict[int, tuple[bool, str, int]] | None = None
) -> list[tuple[str, int]]:
    """Collectives (group, seq) that every member enqueued, none completed, and every member
    is blocked in (its earliest unfinished op): nothing in the program holds them, so the
    network or a GPU does. Where completion is not reported, gloo's retiring tells it
    (:func:`retired_held`)."""
    c = matching.collectives
    if matching.dialects.completion_unobserved:
        return retired_held(tables, matching)
    if c.empty:
        return []
    # A group of one member never holds a collective: where one is in flight there, the group
    # has members no file shows (its members come from the entries alone).
    cand = c[(c["n_joined"] >= c["n_members"]) & (c["n_completed"] == 0) & (c["n_members"] > 1)]
    if cand.empty:
        return []
    if heads is None:
        heads = blocked_in(
            tables, set(matching.stale_completers) | set(matching.dialects.unobserved_ranks)
        )
    members = tables.members()
    # Only a collective some rank is blocked in can qualify: look at those alone.
    held = {(g, q) for p2p, g, q in heads.values() if not p2p}
    out = []
    for g, q in zip(cand["pg_name"].astype(str), cand["seq"].tolist(), strict=True):
        if (g, int(q)) in held and all(
            heads.get(int(m)) == (False, g, int(q)) for m in members.get(g, ())
        ):
            out.append((g, int(q)))
    return sorted(set(out))


#: Candidate collectives :func:`retired_held` checks (each costs a scan of its group's rows).
_MAX_HELD_CHECKS = 64


def retired_held(tables: Tables, matching: Matching) -> list[tuple[str, int]]:
    """gloo's collectives (group, seq) that every member enqueued and none finished.

    gloo retires an entry when its work ends, completed or timed out, and leaves the one a
    rank is blocked in not retired. A collective is held when some member still holds it
    not retired as its earliest unfinished collective and every other member holds it too
    (not retired) or retired it (it timed out) without ever passing it in that group: the
    members are stuck inside it, not stalled before their next op. A group of one member (the
    only one its entries show) holds none: the others are in no file."""
    gloo = set(matching.dialects.retire_on_end_ranks)
    if not gloo:
        return []
    e = tables.entries
    ends = matching.dialects.entries_where(e, is_retire_on_end)  # gloo's entries (buffers)
    coll = e[~e["is_p2p"].to_numpy(bool) & ends]
    pending = coll[~coll["retired"].to_numpy(bool)]
    if pending.empty:
        return []
    heads = pending.loc[pending.groupby("rank")["record_id"].idxmin(), ["rank", "pg_name", "seq"]]
    members = tables.members()
    dumped = set(tables.dumped_ranks)
    top = coll.groupby(["rank", "pg_name"], observed=True)["seq"].max().to_dict()
    out: list[tuple[str, int]] = []
    groups = list(heads.groupby(["pg_name", "seq"], observed=True))
    for (g, q), grp in groups[:_MAX_HELD_CHECKS]:
        m = set(members.get(str(g), ()))
        if len(m) < 2 or not m <= dumped or not m <= gloo:  # one member never holds one
            continue
        holders = {int(r) for r in grp["rank"]}
        at = coll[(coll["pg_name"] == g) & (coll["seq"] == q)]
        joined = {int(r) for r in at["rank"]}
        retired = {int(r) for r in at.loc[at["retired"].to_numpy(bool), "rank"]}
        if m <= joined and all(
            r in holders or (r in retired and top.get((r, g), q) <= q) for r in m
        ):
            out.append((str(g), int(str(q))))
    return sorted(out)
