"""Integer keys of the entries, computed once for every step of the matching.

Each entry gets its group's category code, its (group, rank) member id and, for collectives,
its (group, seq) id (:mod:`analyzer.kernels.group_by`); what several steps read per member (its
newest entry, the window of collective seqs it holds) is reduced once here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.kernels import (
    Pairs,
    as_int64,
    compiled,
    dense_ids,
    first_at_max,
    first_of,
    group_ids,
    maximum_at,
    minimum_at,
    pairs,
    ranged_slots,
    reduce_max,
)

__all__ = ["EntryKeys", "entry_keys"]

_BIG = np.iinfo(np.int64).max


@dataclass(frozen=True, eq=False)
class EntryKeys:
    """Integer keys of the entries, computed once for every step of the matching."""

    p2p_codes: np.ndarray
    """The group codes (a code of its own for a missing name) that have a send/recv entry,
    ascending."""
    member: Pairs
    """The (group code, rank) pairs of the entries, to look up (:meth:`Pairs.find`); each
    entry's pair id is not kept (``ids`` is empty: :attr:`c_member` has the collectives')."""
    coll: np.ndarray
    """Positions of the collectives (not send/recv) among the entries."""
    cid: np.ndarray
    """(group code, seq) id of each collective row, in sorted order."""
    n_cid: int
    first: np.ndarray
    """First collective row of each (group, seq)."""
    keep: np.ndarray
    """Collective rows that are the first of their (group, seq, rank) (coalesced: one per rank)."""
    last_row: np.ndarray
    """Per member id: the entry position of its newest entry (the first row of its highest
    record id)."""
    coll_lo: np.ndarray
    """Per member id: its oldest collective seq (-1: no collective)."""
    coll_hi: np.ndarray
    """Per member id: its newest collective seq (-1: no collective)."""
    seq_hi: np.ndarray
    """Per member id: the newest seq of its entries."""
    op_hi: np.ndarray
    """Per member id: the newest op_id of its entries."""
    c_member: np.ndarray
    """Member id of each collective row."""
    c_seq: np.ndarray
    """Sequence number of each collective row."""
    named: int
    """Number of group categories: a member whose major code is this one has no group name."""

    @property
    def all_kept(self) -> bool:
        """No rank recorded a (group, seq) twice (no coalesced entries)."""
        return bool(self.keep.all())


def _newest_rows(ids: np.ndarray, n: int, record: np.ndarray) -> np.ndarray:
    """Per id: the first row of its highest record id."""
    return first_at_max(ids, n, record)


def _first_of_each_seq(
    mid: np.ndarray, seq: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Rows that are the first of their (member, seq) pair. ``lo`` and ``hi`` are each
    member's seq range (``lo > hi``: none). Distinct pairs are the common case (no coalesced
    entries): one scatter into the members' seq ranges proves it without numbering pairs."""
    n = len(mid)
    keep = np.ones(n, dtype=bool)
    if not n:
        return keep
    # Numbering the pairs is one pass of the compiled kernels: the shortcut is numpy's.
    slots = None if compiled() else ranged_slots(mid, seq, lo, hi)
    if slots is None:
        per_pair, n_pairs = group_ids(mid, seq)
    elif int(np.count_nonzero(slots[1])) == n:
        return keep
    else:
        per_pair, n_pairs = dense_ids(*slots)
    if n_pairs == n:
        return keep
    keep[:] = False
    keep[first_of(per_pair, n_pairs)] = True
    return keep


def entry_keys(entries: pd.DataFrame) -> EntryKeys:
    """The keys, each per-entry array let go as soon as what is kept has been read from it
    (at scale they set the peak of matching: 8 bytes per entry each)."""
    named = len(entries["pg_name"].cat.categories)
    code = entries["pg_name"].cat.codes.to_numpy()  # narrow: the kernels read any width
    if len(code) and code.min() < 0:  # no group name: a code of its own, looked up by nobody
        code = np.where(code < 0, named, code.astype(np.int64))
    member = pairs(code, entries["rank"].to_numpy())
    is_p2p = entries["is_p2p"].to_numpy(bool)
    coll = np.flatnonzero(~is_p2p)
    p2p_codes = np.flatnonzero(np.bincount(code[is_p2p], minlength=named + 1))
    c_code = code[coll]
    del code, is_p2p
    # What is read per member, then each entry's member id is let go.
    c_mid = member.ids[coll]
    last_row = _newest_rows(member.ids, member.n, as_int64(entries["record_id"].to_numpy()))
    seq_hi = reduce_max(member.ids, member.n, entries["seq"].to_numpy())
    op_hi = reduce_max(member.ids, member.n, entries["op_id"].to_numpy())
    member = member.without_ids()
    c_seq = as_int64(entries["seq"].to_numpy()[coll])
    cid, n_cid = group_ids(c_code, c_seq)
    del c_code
    lo = np.full(member.n, _BIG, dtype=np.int64)
    hi = np.full(member.n, -_BIG, dtype=np.int64)
    minimum_at(lo, c_mid, c_seq)
    maximum_at(hi, c_mid, c_seq)
    keep = _first_of_each_seq(c_mid, c_seq, lo, hi)
    none = lo > hi
    return EntryKeys(
        p2p_codes=p2p_codes,
        member=member,
        coll=coll,
        cid=cid,
        n_cid=n_cid,
        first=first_of(cid, n_cid),
        keep=keep,
        last_row=last_row,
        coll_lo=np.where(none, -1, lo),
        coll_hi=np.where(none, -1, hi),
        seq_hi=seq_hi,
        op_hi=op_hi,
        c_member=c_mid,
        c_seq=c_seq,
        named=named,
    )
