"""Where somebody may wait: the progress table by group, the first collective each rank may
still be blocked in, and the (group, seq) levels the waits of :mod:`analyzer.waits.edges` read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.kernels import (
    code_of,
    codes_at,
    first_of,
    group_ids,
    minimum_at,
    reduce_max,
    reduce_min,
    text_at,
)
from analyzer.match import Matching, blocked_in, is_retire_on_end, is_retired_done
from analyzer.normalize import Tables

__all__ = ["Groups", "group_view", "pending_first", "waited_groups"]


def _newest_per_rank(rank: np.ndarray, record: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Of ``rows``, the first row of each rank's highest record id (as ``idxmax`` picks it)."""
    if not len(rows):
        return rows
    r = rank[rows].astype(np.int64)
    rec = record[rows]
    newest = reduce_max(r, int(r.max()) + 1, rec)
    at = np.flatnonzero(rec == newest[r])
    first = np.full(int(r.max()) + 1, len(rows), dtype=np.int64)
    minimum_at(first, r[at], at)
    return rows[first[first < len(rows)]]


def _passed(
    tables: Tables, matching: Matching, rows: np.ndarray, retired: np.ndarray
) -> np.ndarray:
    """Which of ``rows`` (each rank's newest collective) ended and were passed: the rank's
    recorder retires an entry when its work ends (gloo) and another member of the group
    enqueued a later collective there. A collective needs every member, so one that a member
    went past completed; the rank stopped after it, not inside it. Where a retired entry
    finished (TorchComms on CPU: retired when its call returned), retired is enough: every
    member joined it, and the rank stopped after it."""
    d = matching.dialects
    e = tables.entries
    out = np.zeros(len(rows), dtype=bool)
    if not (d.retire_on_end_ranks | d.retired_done_ranks) or not len(rows):
        return out
    sub = e.iloc[rows]
    done = d.entries_where(sub, is_retired_done)
    ends = d.entries_where(sub, is_retire_on_end) | done
    prog = matching.progress
    frontier = prog[prog["enqueued"] >= 0].groupby("pg_name", observed=True)["enqueued"].max()
    names = text_at(e["pg_name"], rows)
    seqs = e["seq"].to_numpy()[rows]
    for i, (name, seq) in enumerate(zip(names, seqs.tolist(), strict=True)):
        out[i] = bool(retired[rows[i]]) and (
            bool(done[i]) or (bool(ends[i]) and int(frontier.get(name, -1)) > int(seq))
        )
    return out


def pending_first(tables: Tables, matching: Matching) -> pd.DataFrame:
    """Per (group, rank): the first collective that rank may still be blocked in.

    Read from the entries' integer columns and category codes: only the rows a rank may be
    blocked in are gathered, then one minimum per (group, rank)."""
    e = tables.entries
    is_p2p = e["is_p2p"].to_numpy(bool)
    rank = e["rank"].to_numpy()
    unobserved = matching.dialects.unobserved_ranks
    if matching.dialects.completion_unobserved or unobserved:
        record = e["record_id"].to_numpy()
        retired = e["retired"].to_numpy(bool)
        if matching.dialects.completion_unobserved:
            # No completion reports (gloo, a hook over a backend without them): a rank is
            # blocked in its newest entry, plus any op that did not retire.
            blind = np.ones(len(e), dtype=bool)
            open_coll = ~is_p2p & ~retired
        else:
            # Mixed: each rank (each buffer of a rank that holds several) by its own dialect.
            blind = matching.dialects.entries_where(e, lambda d: not d.completion_observed)
            not_done = codes_at(e["state"]) != code_of(e["state"], "completed")
            open_coll = ~is_p2p & np.where(blind, ~retired, not_done)
        last = _newest_per_rank(rank, record, np.flatnonzero(blind))
        last = last[~is_p2p[last]]
        last = last[~_passed(tables, matching, last, retired)]
        pend = np.concatenate([last, np.flatnonzero(open_coll)])
    else:
        pend = np.flatnonzero(~is_p2p & (codes_at(e["state"]) != code_of(e["state"], "completed")))
    code = codes_at(e["pg_name"], pend).astype(np.int64)
    pend = pend[code >= 0]
    if not len(pend):
        return pd.DataFrame({"pg_name": [], "rank": [], "seq": []})
    code = code[code >= 0]
    ids, n = group_ids(code, rank[pend])
    first = first_of(ids, n)
    return pd.DataFrame(
        {
            "pg_name": text_at(e["pg_name"], pend[first]),
            "rank": rank[pend[first]],
            "seq": reduce_min(ids, n, e["seq"].to_numpy()[pend]),
        }
    )


def _blocks(names: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[object]]:
    """Rows grouped by name, groups in order of first appearance and rows in their order
    (as ``groupby(sort=False)``): (row order, block bounds, names)."""
    codes, uniques = pd.factorize(names)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    return order, bounds, list(uniques)


def _completed_ranks(
    tables: Tables, matching: Matching, levels: set[tuple[str, int]]
) -> dict[tuple[str, int], set[int]]:
    """For each (group, seq) of ``levels``: the ranks whose entry of it completed, by a
    recorder that reports completion (a rank may hold such a buffer beside gloo's)."""
    e = tables.entries
    if not levels:
        return {}
    observed = matching.dialects.entries_where(e, lambda d: d.completion_observed)
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    state = e["state"]
    seq = e["seq"].to_numpy()
    if len(seqs) <= 8:  # a comparison per seq asked for
        at_seq = np.zeros(len(seq), dtype=bool)
        for n in seqs.tolist():
            at_seq |= seq == n
    else:
        at_seq = np.isin(seq, seqs)
    rows = np.flatnonzero(at_seq)
    rows = rows[
        (codes_at(state, rows) == code_of(state, "completed"))
        & ~e["is_p2p"].to_numpy(bool)[rows]
        & observed[rows]
    ]
    seq = seq[rows]
    # Only the rows of a (group, seq) asked for, by group code: text for those alone.
    cats = e["pg_name"].cat.categories
    names = sorted({g for g, _ in levels})
    code_by_name = dict(
        zip(names, cats.get_indexer(pd.Index(names, dtype=object)).tolist(), strict=True)
    )
    wanted = {(code_by_name[g], n) for g, n in levels if code_by_name[g] >= 0}
    g_code = codes_at(e["pg_name"], rows)
    out: dict[tuple[str, int], set[int]] = {}
    hit = np.isin(g_code, np.array(sorted({c for c, _ in wanted}), dtype=np.int64))
    rank = e["rank"].to_numpy()[rows]
    for c, n, r in zip(g_code[hit].tolist(), seq[hit].tolist(), rank[hit].tolist(), strict=True):
        if (c, n) in wanted:
            out.setdefault((str(cats[c]), n), set()).add(int(r))
    return out


def _ops_at(colls: pd.DataFrame, levels: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The op of each (group, seq) of ``levels`` that the matching knows."""
    if not levels or colls.empty:
        return {}
    seqs = np.array(sorted({n for _, n in levels}), dtype=np.int64)
    rows = colls.loc[np.isin(colls["seq"].to_numpy(np.int64), seqs), ["pg_name", "seq", "op"]]
    return {
        (g, int(n)): str(o)
        for g, n, o in zip(rows["pg_name"], rows["seq"], rows["op"])
        if (g, int(n)) in levels
    }


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
    return {
        str(name): (ranks[bounds[i] : bounds[i + 1]], seqs[bounds[i] : bounds[i + 1]])
        for i, name in enumerate(names)
    }


def waited_groups(
    bounds: np.ndarray, enq: np.ndarray, names: list[object], pending: Mapping[str, object]
) -> list[int]:
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
    return [
        i
        for i in np.flatnonzero(lagging | unknown).tolist()
        if lagging[i] or str(names[i]) in pending
    ]


def group_view(tables: Tables, matching: Matching) -> tuple[Groups, list[int]]:
    prog = matching.progress
    pending = _by_group(pending_first(tables, matching))
    # Stream order is evidence only where completions are: not for gloo, nor for a rank
    # whose completions stopped being observed.
    unobserved = set(matching.dialects.unobserved_ranks)
    heads = (
        {}
        if matching.dialects.completion_unobserved
        else blocked_in(tables, set(matching.stale_completers) | unobserved)
    )
    order, bounds, names = _blocks(prog["pg_name"].to_numpy(dtype=object))
    enq = prog["enqueued"].to_numpy()[order]
    active = waited_groups(bounds, enq, names, pending)
    # The (group, seq) pairs waited in: the op after each laggard's progress, and the ops
    # members of groups with silent members are pending in.
    levels: set[tuple[str, int]] = set()
    for i in active:
        name, q = str(names[i]), enq[bounds[i] : bounds[i + 1]]
        known = q[q >= 0]
        if len(known):
            levels.update((name, int(n) + 1) for n in np.unique(known[known < known.max()]))
        if len(known) < len(q) and name in pending:
            levels.update((name, int(n)) for n in pending[name][1])
    completed = _completed_ranks(tables, matching, levels) if len(tables.entries) else {}
    g = Groups(
        names=names,
        bounds=bounds,
        rank=prog["rank"].to_numpy()[order],
        enq=enq,
        src=prog["source"].to_numpy(dtype=object)[order],
        desc=prog["pg_desc"].to_numpy(dtype=object)[order],
        pending=pending,
        heads=heads,
        ops=_ops_at(matching.collectives, levels),
        completed=completed,
    )
    return g, active
