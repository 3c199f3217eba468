"""Where somebody may wait: the progress table by group, the first collective each rank may
still be blocked in, and the (group, seq) levels the waits of :mod:`analyzer.waits` read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.matching import Matching, blocked_in
from analyzer.tables import Tables

__all__ = ["Groups", "group_view", "pending_first", "waited_groups"]


def pending_first(tables: Tables, matching: Matching) -> pd.DataFrame:
    """Per (group, rank): the first collective that rank may still be blocked in."""
    e = tables.entries[["pg_name", "rank", "seq", "record_id", "is_p2p", "retired", "state"]]
    coll = e[~e["is_p2p"]]
    unobserved = matching.dialects.unobserved_ranks
    if matching.dialects.completion_unobserved:
        # No completion reports (gloo, a hook over a backend without them): a rank is
        # blocked in its newest entry, plus any op that did not retire.
        last = e.loc[e.groupby("rank")["record_id"].idxmax()] if len(e) else e
        last = last[~last["is_p2p"]]
        open_ = coll[~coll["retired"]]
        pend = pd.concat([last, open_])
    elif unobserved:
        # Mixed: each rank by its own dialect.
        blind = e["rank"].isin(list(unobserved)).to_numpy()
        mine = e[blind]
        last = mine.loc[mine.groupby("rank")["record_id"].idxmax()] if len(mine) else mine
        last = last[~last["is_p2p"]]
        blind_coll = coll[coll["rank"].isin(list(unobserved))]
        pend = pd.concat([coll[~coll["rank"].isin(list(unobserved)) & (coll["state"] != "completed")],
                          last, blind_coll[~blind_coll["retired"]]])
    else:
        pend = coll[coll["state"] != "completed"]
    if pend.empty:
        return pd.DataFrame({"pg_name": [], "rank": [], "seq": []})
    out = pend.groupby(["pg_name", "rank"], observed=True)["seq"].min().reset_index()
    out["pg_name"] = out["pg_name"].astype(str)
    return out


def _blocks(names: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[object]]:
    """Rows grouped by name, groups in order of first appearance and rows in their order
    (as ``groupby(sort=False)``): (row order, block bounds, names)."""
    codes, uniques = pd.factorize(names)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    return order, bounds, list(uniques)


def _completed_ranks(tables: Tables, levels: set[tuple[str, int]]) -> dict[tuple[str, int], set[int]]:
    """For each (group, seq) of ``levels``: the ranks whose entry of it completed."""
    e = tables.entries
    if not levels:
        return {}
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    done = e.loc[~e["is_p2p"] & (e["state"] == "completed") & np.isin(e["seq"].to_numpy(), seqs),
                 ["pg_name", "seq", "rank"]]
    out: dict[tuple[str, int], set[int]] = {}
    for g, n, r in zip(done["pg_name"].astype(str), done["seq"].tolist(), done["rank"].tolist()):
        if (g, n) in levels:
            out.setdefault((g, n), set()).add(int(r))
    return out


def _ops_at(colls: pd.DataFrame, levels: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The op of each (group, seq) of ``levels`` that the matching knows."""
    if not levels or colls.empty:
        return {}
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    rows = colls.loc[np.isin(colls["seq"].to_numpy(np.int64), seqs), ["pg_name", "seq", "op"]]
    return {(g, int(n)): str(o) for g, n, o in zip(rows["pg_name"], rows["seq"], rows["op"])
            if (g, int(n)) in levels}


@dataclass(frozen=True, eq=False)
class Groups:
    """The progress table by group (blocks of rows), and what the waits of a group read."""

    names: list[object]
    bounds: np.ndarray
    rank: np.ndarray
    enq: np.ndarray
    src: np.ndarray
    desc: np.ndarray
    pending: dict[str, tuple[list[int], list[int]]]
    """Per group: the ranks that may still be blocked in one of its collectives, and the seq."""
    heads: dict[int, tuple[bool, str, int]]
    ops: dict[tuple[str, int], str]
    completed: dict[tuple[str, int], set[int]]


def _by_group(frame: pd.DataFrame) -> dict[str, tuple[list[int], list[int]]]:
    order, bounds, names = _blocks(frame["pg_name"].to_numpy(dtype=object))
    ranks = frame["rank"].to_numpy()[order].tolist()
    seqs = frame["seq"].to_numpy()[order].tolist()
    return {str(name): (ranks[bounds[i]:bounds[i + 1]], seqs[bounds[i]:bounds[i + 1]])
            for i, name in enumerate(names)}


def waited_groups(bounds: np.ndarray, enq: np.ndarray, names: list[object],
                   pending: Mapping[str, object]) -> list[int]:
    """The groups (block numbers) where somebody may wait: a known member behind another,
    or a member of unknown progress where some rank is pending. One reduction per column."""
    if not len(enq):
        return []
    starts = bounds[:-1]
    known = enq >= 0
    big = np.iinfo(np.int64).max
    lo = np.minimum.reduceat(np.where(known, enq, big), starts)
    hi = np.maximum.reduceat(np.where(known, enq, -1), starts)
    unknown = np.add.reduceat((~known).astype(np.int64), starts) > 0
    lagging = (hi >= 0) & (lo < hi)
    return [i for i in np.flatnonzero(lagging | unknown).tolist()
            if lagging[i] or str(names[i]) in pending]


def group_view(tables: Tables, matching: Matching) -> tuple[Groups, list[int]]:
    prog = matching.progress
    pending = _by_group(pending_first(tables, matching))
    # Stream order is evidence only where completions are: not for gloo, nor for a rank
    # whose completions stopped being observed.
    unobserved = set(matching.dialects.unobserved_ranks)
    heads = ({} if matching.dialects.completion_unobserved
             else blocked_in(tables, set(matching.stale_completers) | unobserved))
    order, bounds, names = _blocks(prog["pg_name"].to_numpy(dtype=object))
    enq = prog["enqueued"].to_numpy()[order]
    active = waited_groups(bounds, enq, names, pending)
    # The (group, seq) pairs waited in: the op after each laggard's progress, and the ops
    # members of groups with silent members are pending in.
    levels: set[tuple[str, int]] = set()
    for i in active:
        name, q = str(names[i]), enq[bounds[i]:bounds[i + 1]]
        known = q[q >= 0]
        if len(known):
            levels.update((name, int(n) + 1) for n in np.unique(known[known < known.max()]))
        if len(known) < len(q) and name in pending:
            levels.update((name, int(n)) for n in pending[name][1])
    completed = (_completed_ranks(tables, levels)
                 if not matching.dialects.completion_unobserved and len(tables.entries) else {})
    g = Groups(names=names, bounds=bounds, rank=prog["rank"].to_numpy()[order], enq=enq,
                src=prog["source"].to_numpy(dtype=object)[order],
                desc=prog["pg_desc"].to_numpy(dtype=object)[order], pending=pending, heads=heads,
                ops=_ops_at(matching.collectives, levels), completed=completed)
    return g, active
