"""Cross-rank matching: line up every rank's entries per (group, sequence number).

Outputs four frames:

* ``progress``: one row per (group, member): how far that member got in the group
  (collectives enqueued, from its entries and its ``pg_status`` counters), with the window
  its ring buffer still holds. A collective that scrolled out of a buffer is never treated
  as missing: a member has *joined* collective N when its progress is at least N.
* ``collectives``: one row per (group, seq): which members recorded, joined and completed
  it, and the majority op, sizes and dtypes.
* ``mismatches``: one row per (group, seq, rank) whose op, dtype or size differs from the
  majority of the members that recorded it (never from "the first rank").
* ``p2p``: one row per recorded send/recv with its global peer and whether the peer's
  matching recv/send was found.

Entries are grouped by integer keys (:mod:`analyzer.kernels.group_by`: the group's category code
with the sequence number or the rank), never by strings: every per-group fact is one
reduction over all rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.kernels import (
    as_int64,
    category_at,
    code_of,
    codes_at,
    first_of,
    from_codes,
    maximum_at,
    minimum_at,
    reduce_max,
)
from analyzer.kinds import MatchState
from analyzer.match.dialect import Dialects, read_dialects
from analyzer.match.expectations import monitored_barrier_gaps
from analyzer.match.keys import EntryKeys, entry_keys
from analyzer.match.member_progress import member_progress
from analyzer.match.mismatches import as_str, collective_mismatches
from analyzer.match.p2p import match_p2p, p2p_mismatches
from analyzer.normalize import Tables

__all__ = ["Matching", "match", "stale_completers"]


@dataclass(frozen=True)
class Matching:
    """The result of matching collectives and send/recv across ranks."""

    progress: pd.DataFrame
    collectives: pd.DataFrame
    mismatches: pd.DataFrame
    p2p: pd.DataFrame
    p2p_mismatches: pd.DataFrame
    """Send/recv pairs whose two sides posted different sizes or dtypes (``P2P_MISMATCH_COLUMNS``)."""
    dialects: Dialects
    """How each rank's dump is read (:mod:`analyzer.match.dialect`): what its states mean, what its
    counters count, whether its send/recv sizes are one-sided."""
    stale_completers: dict[int, dict[str, object]]
    """Ranks whose completions stopped before those of most of their group, in ops they
    enqueued too (their GPU or link stopped; their ``scheduled`` states are stale)."""
    barrier_gaps: dict[str, list[int]]
    """gloo groups whose recorded collectives skip sequence numbers the way monitored_barrier
    does (every member alike): group -> first skipped seq of each gap. Not unrecorded work."""


def _count_at_least(
    group: np.ndarray, value: np.ndarray, q_group: np.ndarray, q_value: np.ndarray
) -> np.ndarray:
    """For each query i: how many pairs (group[j], value[j]) have group q_group[i] and a value
    of at least q_value[i]. Groups are ids >= 0; a query group of -1 counts nothing.

    The pairs (one per member: few) are ranked and sorted once; each query is two binary
    searches, whatever the number of groups, and nothing of the queries' size is sorted.
    """
    value = np.asarray(value, np.int64)
    distinct = np.unique(value)
    width = len(distinct) + 1
    # value >= q exactly when value's rank among the distinct values is at least the number
    # of distinct values below q.
    keys = np.sort(np.asarray(group, np.int64) * width + np.searchsorted(distinct, value))
    q = np.asarray(q_group, np.int64)
    start = np.searchsorted(
        keys, q * width + np.searchsorted(distinct, np.asarray(q_value, np.int64)), side="left"
    )
    end = np.searchsorted(keys, (q + 1) * width, side="left")
    return np.where(q >= 0, end - start, 0)


def _per_category(values: pd.Series, mapping: Mapping[str, object] | pd.Series) -> np.ndarray:
    """``mapping`` read once per category of ``values`` (by its text): an array to index
    with the codes (NaN where the mapping has no entry)."""
    return pd.Series(values.cat.categories.astype(str)).map(mapping).to_numpy()


_COLLECTIVE_COLUMNS = [
    "pg_name",
    "pg_desc",
    "seq",
    "op",
    "input_sizes",
    "input_dtypes",
    "n_members",
    "n_recorded",
    "n_joined",
    "n_completed",
    "n_started",
    "first_created_ns",
    "last_created_ns",
    "last_started_ns",
    "state",
]

#: Values of ``state`` by code.
_STATES = pd.Index(
    [MatchState.FULLY_MATCHED.value, MatchState.IN_FLIGHT.value, MatchState.NOT_JOINED.value],
    dtype="str",
)


def _collectives(
    entries: pd.DataFrame, k: EntryKeys, progress: pd.DataFrame, tables: Tables
) -> pd.DataFrame:
    """One row per (group, seq), in group then seq order, with counts of recorded, joined and
    completed members (a member's coalesced entries of one seq count once).

    Every count is a bincount over the (group, seq) ids; the text columns are the categories
    taken at the first entry of each (group, seq), and the per-group facts (size, members
    of unknown progress, joined members) are read once per group and mapped by its code."""
    if not len(k.coll):
        return pd.DataFrame({c: [] for c in _COLLECTIVE_COLUMNS})
    all_kept = k.all_kept
    rows = k.coll if all_kept else k.coll[k.keep]
    cid, n = (k.cid, k.n_cid) if all_kept else (k.cid[k.keep], k.n_cid)
    lead = k.coll[k.first]  # the first entry of each (group, seq)
    seq = entries["seq"].to_numpy()[lead].astype(np.int64, copy=False)
    first_created, last_created, last_started, n_completed, n_started = _per_collective(
        entries, rows, cid, n
    )
    # Per group (category code): its size, members of unknown progress, and the id used to
    # count joined members; -1 / 0 where the group has no name.
    name = entries["pg_name"]
    g_code = codes_at(name, lead).astype(np.int64)
    named = g_code >= 0
    at = np.where(named, g_code, 0)
    sizes = dict(zip(tables.groups["pg_name"], tables.groups["size"], strict=True))
    unknown = progress.assign(u=progress["enqueued"] < 0).groupby("pg_name")["u"].sum()
    if named.all():
        n_members = pd.Series(_per_category(name, sizes)[at]).fillna(0).astype("int32").to_numpy()
        unknown_members = (
            pd.Series(_per_category(name, unknown)[at]).fillna(0).astype(int).to_numpy()
        )
        texts = as_str(pd.Series(name.cat.categories.astype(str)))
    else:  # a collective without a group name: read per row, as text
        names = as_str(name.iloc[lead])
        n_members = names.map(sizes).fillna(0).astype("int32").to_numpy()
        unknown_members = names.map(unknown).fillna(0).astype(int).to_numpy()
        texts = names
        at = np.arange(len(lead))
    # n_joined: members whose progress reaches seq, for every (group, seq) at once.
    known = progress[progress["enqueued"] >= 0]
    known_names = pd.Index(as_str(known["pg_name"]).unique())
    n_joined = _count_at_least(
        known_names.get_indexer(as_str(known["pg_name"])),
        known["enqueued"].to_numpy(),
        known_names.get_indexer(pd.Index(texts))[at],
        seq,
    ).astype(np.int32)
    state = np.where(n_completed >= n_members, 0, 1)
    state[n_joined + unknown_members < n_members] = 2
    out = pd.DataFrame(
        {
            "pg_name": category_at(name, lead),
            "pg_desc": category_at(entries["pg_desc"], lead),
            "seq": seq,
            "op": category_at(entries["op"], lead),
            "input_sizes": category_at(entries["input_sizes"], lead),
            "input_dtypes": category_at(entries["input_dtypes"], lead),
            "n_members": n_members,
            "n_recorded": np.bincount(cid, minlength=n),
            "n_joined": n_joined,
            "n_completed": n_completed,
            "n_started": n_started,
            "first_created_ns": first_created,
            "last_created_ns": last_created,
            "last_started_ns": last_started,
            "state": from_codes(state, _STATES, pd.RangeIndex(len(state))),
        },
        copy=False,
    )
    return out


def _per_collective(
    entries: pd.DataFrame, rows: np.ndarray, cid: np.ndarray, n: int, chunk: int = 1 << 20
) -> tuple[np.ndarray, ...]:
    """Per (group, seq) id: the earliest and latest enqueue time, the latest start time, and
    how many of its rows are completed and started (or completed), read a chunk of rows at a
    time: no column of the collectives' size is gathered whole."""
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    first, last, started = np.full(n, big), np.full(n, small), np.full(n, small)
    n_completed, n_started = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    state = entries["state"]
    state_codes = codes_at(state)
    completed, began = code_of(state, "completed"), code_of(state, "started")
    created_col = entries["time_created_ns"].to_numpy()
    started_col = entries["time_started_ns"].to_numpy()
    for at in range(0, len(rows), chunk):
        part, ids = rows[at : at + chunk], cid[at : at + chunk]
        created = as_int64(created_col[part])
        minimum_at(first, ids, created)
        maximum_at(last, ids, created)
        maximum_at(started, ids, as_int64(started_col[part]))
        s_codes = state_codes[part]
        done = s_codes == completed
        n_completed += np.bincount(ids[done], minlength=n)
        n_started += np.bincount(ids[done | (s_codes == began)], minlength=n)
    first[first == big] = -1
    last[last == small] = -1
    started[started == small] = -1
    return first, last, started, n_completed, n_started


def stale_completers(
    progress: pd.DataFrame,
    observed: frozenset[int] | None = None,
    *,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> dict[int, dict[str, object]]:
    """Members whose completed counter lags what a majority of their group completed, in
    ops they enqueued too.

    A collective completes on every member or on none, so a member that enqueued seq N and
    does not show it completed while most peers do has stopped observing its completions
    (its GPU or watchdog is stuck), whatever it enqueued later. A lag of ``completion_lag``
    ops (the watchdog's polling) is not that; a stopped GPU falls further behind.
    """
    known = progress[progress["enqueued"] >= 0]
    if observed is not None:  # only ranks whose dialect reports completion
        known = known[known["rank"].isin(list(observed))]
    if known.empty:
        return {}
    codes, names = pd.factorize(known["pg_name"].astype(str), sort=True)
    n = len(names)
    done = known["completed"].to_numpy(np.int64)
    enq = known["enqueued"].to_numpy(np.int64)
    size = np.bincount(codes, minlength=n)
    top = reduce_max(codes, n, done)
    behind = done <= np.minimum(top[codes], enq) - config.completion_lag
    n_behind = np.bincount(codes[behind], minlength=n)
    # Somebody behind, and a majority that completed further.
    flagged = (size >= 2) & (n_behind > 0) & (n_behind * 2 < size + (size == 2))
    late = np.flatnonzero(behind & flagged[codes])
    late = late[np.argsort(codes[late], kind="stable")]  # groups in name order, rows in order
    first_desc = known["pg_desc"].to_numpy(dtype=object)[first_of(codes, n)]
    rank = known["rank"].to_numpy()
    laggers: dict[int, dict[str, object]] = {}
    for i in late.tolist():
        g = codes[i]
        laggers.setdefault(
            int(rank[i]),
            {
                "group": str(names[g]),
                "group_desc": str(first_desc[g]),
                "completed": int(done[i]),
                "peers_completed": int(top[g]),
                "enqueued": int(enq[i]),
            },
        )
    return laggers


def _p2p_tables(tables: Tables, dialects: Dialects) -> tuple[pd.DataFrame, pd.DataFrame]:
    p2p = match_p2p(tables, dialects)
    return (
        schema.conform(p2p, schema.P2P, "p2p"),
        schema.conform(p2p_mismatches(p2p), schema.P2P_MISMATCHES, "p2p_mismatches"),
    )


def match(tables: Tables, *, config: AnalysisConfig = DEFAULT_CONFIG) -> Matching:
    """Match every collective and send/recv across ranks.

    The entries' integer keys (:func:`entry_keys`) serve the collectives' side and are let
    go before the send/recv table, the largest result, is built in the memory they held."""
    entries = tables.entries
    keys = entry_keys(entries)
    dialects = read_dialects(tables, keys)
    progress = member_progress(tables, keys, dialects)
    # monitored_barrier is send/recv only where the backend records none of them and counts
    # op_ids (gloo): there its sequence gaps are no unrecorded work.
    members = tables.members()
    unseen_p2p = _groups_without_p2p_records(members, dialects)
    barrier_gaps = monitored_barrier_gaps(entries, members, unseen_p2p) if unseen_p2p else {}
    if barrier_gaps:
        progress = _discount_monitored_barriers(progress, entries, members, barrier_gaps)
    progress = schema.conform(progress, schema.PROGRESS, "progress")
    collectives = schema.conform(
        _collectives(entries, keys, progress, tables), schema.COLLECTIVES, "collectives"
    )
    mismatches = schema.conform(
        collective_mismatches(entries, keys.coll, keys.cid, keys.first),
        schema.MISMATCHES,
        "mismatches",
    )
    del keys
    p2p, p2p_mm = _p2p_tables(tables, dialects)
    return Matching(
        progress=progress,
        collectives=collectives,
        mismatches=mismatches,
        p2p=p2p,
        p2p_mismatches=p2p_mm,
        dialects=dialects,
        stale_completers=(
            {}
            if dialects.completion_unobserved
            else stale_completers(progress, dialects.observed_ranks, config=config)
        ),
        barrier_gaps=barrier_gaps,
    )


def _groups_without_p2p_records(
    members: Mapping[str, tuple[int, ...]], dialects: Dialects
) -> list[str]:
    """Groups every dumped member of which reads as a dialect that records no send/recv and
    counts ``pg_status`` in op_ids (:attr:`Dialects.p2p_unrecorded_ranks`)."""
    unseen = dialects.p2p_unrecorded_ranks
    out = []
    for name, ranks in members.items():
        read = [int(r) for r in ranks if (d := dialects.of(int(r))) is not None and d.backend]
        if read and all(r in unseen for r in read):
            out.append(str(name))
    return out


def _discount_monitored_barriers(
    progress: pd.DataFrame,
    entries: pd.DataFrame,
    members: dict[str, tuple[int, ...]],
    gaps: dict[str, list[int]],
) -> pd.DataFrame:
    """gloo's monitored_barrier runs 2 x (members - 1) unrecorded send/recv on the group's
    first member and two on each other member, so the first member's ``op_id`` drifts ahead
    of its ``collective_seq_id`` by 2 x (members - 2) per barrier more than the others' do.
    Where a group shows monitored barrier gaps, the first member's op progress is counted in
    the others' units: less that extra drift (read from its newest entry against the others'
    newest), when it is a positive multiple of 2 x (members - 2). Those ops are no
    unrecorded work, whoever of the group stalled later."""
    out = progress.copy()
    names = out["pg_name"].astype(str)
    coll = entries.loc[~entries["is_p2p"], ["pg_name", "rank", "seq", "op_id", "record_id"]]
    newest = coll.loc[coll.groupby(["pg_name", "rank"], observed=True)["record_id"].idxmax()]
    drift = pd.Series(
        (newest["op_id"] - newest["seq"]).to_numpy(),
        index=pd.MultiIndex.from_arrays(
            [newest["pg_name"].astype(str), newest["rank"].astype(int)]
        ),
    )
    for name in gaps:
        ranks = members.get(name, ())
        n = len(ranks)
        if n < 3 or (name, int(ranks[0])) not in drift.index:
            continue
        first = int(ranks[0])
        others = [int(drift[(name, int(r))]) for r in ranks[1:] if (name, int(r)) in drift.index]
        at = out.index[(names == name) & (out["rank"] == first) & (out["op_progress"] >= 0)]
        if not others or not len(at):
            continue
        extra = int(drift[(name, first)]) - max(others)
        if extra > 0 and extra % (2 * (n - 2)) == 0:
            out.loc[at, "op_progress"] = out.loc[at, "op_progress"] - extra
    return out
