"""Per (group, member) progress: how far each member of each group got, from its entries
and its ``pg_status`` counters, with the window its ring buffer still holds.

Entries are keyed by integers once (:class:`EntryKeys`: the group's category code with the
rank or the sequence number, :mod:`analyzer.kernels.group_by`); each per-(group, rank) fact is one
reduction over all rows, looked up for every member at once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.kernels import code_of, codes_at, reduce_max
from analyzer.match.dialect import Dialects
from analyzer.match.keys import EntryKeys
from analyzer.match.mismatches import as_str
from analyzer.normalize import Tables

__all__ = ["member_progress"]


def _lookup(
    keys: pd.MultiIndex, table: pd.Series, default: object
) -> tuple[np.ndarray, np.ndarray]:
    """``table`` (unique (group name, rank) index) read at ``keys``: (values, found)."""
    index = pd.MultiIndex.from_arrays(
        [
            as_str(pd.Series(table.index.get_level_values(0))).to_numpy(),
            table.index.get_level_values(1).to_numpy(np.int64),
        ]
    )
    pos = index.get_indexer(keys)
    found = pos >= 0
    values = table.to_numpy()
    picked: object = values[np.maximum(pos, 0)] if len(values) else default
    return np.where(found, picked, default), found  # type: ignore[call-overload]


@dataclass(frozen=True, eq=False)
class _MemberFacts:
    """What each (group, rank) pair's entries say, per pair id of :attr:`EntryKeys.member`."""

    hi: np.ndarray  # newest seq
    op_hi: np.ndarray  # newest op_id
    coll_lo: np.ndarray  # oldest and newest collective seq (-1: no collective)
    coll_hi: np.ndarray
    completed_hi: np.ndarray  # newest completed collective seq (-1: none)
    last_is_p2p: np.ndarray  # is the pair's newest entry (by record id) a send/recv


def _member_facts(entries: pd.DataFrame, k: EntryKeys) -> _MemberFacts:
    m = k.member
    completed = codes_at(entries["state"], k.coll) == code_of(entries["state"], "completed")
    return _MemberFacts(
        hi=k.seq_hi,
        op_hi=k.op_hi,
        coll_lo=k.coll_lo,
        coll_hi=k.coll_hi,
        completed_hi=reduce_max(k.c_member[completed], m.n, k.c_seq[completed]),
        last_is_p2p=entries["is_p2p"].to_numpy(bool)[k.last_row],
    )


def _active_members(
    tables: Tables,
    k: EntryKeys,
    status: pd.DataFrame,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every member of every group some rank recorded or counted, in group order then member
    order: per group its size and category code; per member its group name, desc and rank."""
    categories = tables.entries["pg_name"].cat.categories
    in_entries = {
        str(categories[c]) for c in np.unique(k.member.major).tolist() if c < len(categories)
    }
    active_groups = in_entries | {str(g) for g in status.index.get_level_values(0).unique()}
    groups = tables.groups
    chosen = groups[groups["pg_name"].isin(active_groups)]
    sizes = chosen["ranks"].map(len).to_numpy()
    names = np.repeat(chosen["pg_name"].to_numpy(dtype=object), sizes)
    descs = np.repeat(chosen["pg_desc"].to_numpy(dtype=object), sizes)
    ranks = np.fromiter(
        itertools.chain.from_iterable(chosen["ranks"]), dtype=np.int64, count=int(sizes.sum())
    )
    chosen_codes = categories.get_indexer(pd.Index(chosen["pg_name"].to_numpy(dtype=object)))
    return sizes, names, descs, ranks, chosen_codes


#: The types of the progress table's columns that are not objects.
_DTYPES = {
    "rank": "int32",
    "window_lo": "int64",
    "window_hi": "int64",
    "enqueued": "int64",
    "completed": "int64",
    "counter_enqueued": "int64",
    "counter_completed": "int64",
    "op_progress": "int64",
    "dumped": "bool",
}


def _fact(values: np.ndarray, has_entries: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A per-(group, member) fact of the entries for each member row; -1 without entries."""
    if not len(values):
        return np.full(len(at), -1, dtype=np.int64)
    return np.where(has_entries, values[at], -1)


def _without_buffer(dialects: Dialects, names: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Member rows whose rank's dumps hold no buffer of the group's backend."""
    unseen = {
        (g, int(m))
        for g, info in dialects.unrecorded_groups.items()
        for m in info["members_without_buffer"]
    }
    if not unseen:
        return np.zeros(len(ranks), dtype=bool)
    return np.array(
        [(str(g), int(r)) in unseen for g, r in zip(names, ranks, strict=True)], dtype=bool
    )


def member_progress(tables: Tables, k: EntryKeys, dialects: Dialects) -> pd.DataFrame:
    """Per (group, member): recorded window and enqueue/complete progress in collectives.

    Legacy NCCL's ``pg_status`` counters count sequence numbers (of collectives, or of
    send/recv when the group's last op was one). gloo's and the recorder hook's count the
    per-group ``op_id`` (the dialect of the rank says which): those are compared in op_id
    units (``op_progress``), never with collective sequence numbers. A member whose dumps
    hold no buffer of the group's backend is ``not_recorded``: unseen, not behind.

    One row per member of every group some rank recorded or counted, in group order, built
    column-wise: each per-(group, rank) fact is looked up for all members at once.
    """
    entries = tables.entries
    facts = _member_facts(entries, k)
    status = tables.status[tables.status["pg_name"] != ""]
    status = status.drop_duplicates(["pg_name", "rank"], keep="last")  # as a dict would keep
    status = status.set_index(["pg_name", "rank"])
    sizes, names, descs, ranks, chosen_codes = _active_members(tables, k, status)
    keys = pd.MultiIndex.from_arrays([names, ranks])
    q_code = np.repeat(chosen_codes, sizes)
    pos = np.where(q_code >= 0, k.member.find(np.maximum(q_code, 0), ranks), -1)
    has_entries = pos >= 0
    at = np.maximum(pos, 0)

    enq, op_progress = _fact(facts.hi, has_entries, at), _fact(facts.op_hi, has_entries, at)
    lo, hi = _fact(facts.coll_lo, has_entries, at), _fact(facts.coll_hi, has_entries, at)
    comp = _fact(facts.completed_hi, has_entries, at)
    last_p2p = (
        np.where(has_entries, facts.last_is_p2p[at], False)
        if k.member.n
        else np.zeros(len(pos), dtype=bool)
    )
    c_enq, counted = _lookup(keys, status["last_enqueued"], -1)
    c_comp, _ = _lookup(keys, status["last_completed"], -1)
    enq, op_progress, comp = (
        enq.astype(np.int64),
        op_progress.astype(np.int64),
        comp.astype(np.int64),
    )
    c_enq, c_comp = c_enq.astype(np.int64), c_comp.astype(np.int64)
    dumped = np.isin(ranks, np.array(tables.dumped_ranks, dtype=np.int64))

    source = np.where(has_entries, "entries", "none").astype(object)
    op_units = np.isin(ranks, np.array(sorted(dialects.op_id_counter_ranks), dtype=np.int64))
    # op_id counters (gloo, the hook): compared with the entries' op_id.
    op_progress = np.where(counted & op_units, np.maximum(op_progress, c_enq), op_progress)
    source[counted & op_units & ~has_entries] = "unknown"
    # Sequence-number counters (legacy NCCL). With entries, the counter counts what the last
    # entry was; without, only a group with no send/recv is sure to count collectives (with
    # both it is ambiguous).
    p2p_codes = k.p2p_codes
    in_p2p = np.repeat(np.isin(chosen_codes, p2p_codes) & (chosen_codes >= 0), sizes)
    counts_coll = np.where(has_entries, ~last_p2p.astype(bool), ~in_p2p)
    use = counted & counts_coll & ~op_units
    ahead = use & (c_enq > enq)
    source[ahead] = np.where(has_entries[ahead], "entries+pg_status", "pg_status")
    enq = np.where(use, np.maximum(enq, c_enq), enq)
    comp = np.where(use, np.maximum(comp, c_comp), comp)
    source[counted & ~counts_coll & ~has_entries & ~op_units] = "unknown"
    source[~dumped] = "no_dump"
    source[dumped & ~has_entries & ~counted] = "unknown"
    source[_without_buffer(dialects, names, ranks) & ~has_entries] = "not_recorded"
    out = pd.DataFrame(
        {
            "pg_name": names,
            "pg_desc": descs,
            "rank": ranks,
            "dumped": dumped,
            "window_lo": lo,
            "window_hi": hi,
            "enqueued": np.where(np.isin(source, ["no_dump", "unknown", "not_recorded"]), -1, enq),
            "completed": comp,
            "counter_enqueued": c_enq,
            "counter_completed": c_comp,
            "op_progress": op_progress,
            "source": source,
        }
    )
    return out.astype(_DTYPES)
