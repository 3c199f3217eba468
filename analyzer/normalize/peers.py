"""Send/recv peers as global ranks: each entry's group-local peer mapped through its group's
members, in chunks of rows."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

__all__ = ["peers"]


_PEER_CHUNK = 1 << 20


def peers(
    local: np.ndarray,
    pg_names: pd.Categorical,
    members_of: dict[str, tuple[int, ...]],
) -> np.ndarray:
    """Peers of send/recv: each entry's group-local peer (``local``: the entries'
    ``peer_local``, -1 for none) as a global rank, through one flat array holding the members
    of every group in the order of the pg_name categories; -1 where the group is unnamed or
    has no such member."""
    peer = np.full(len(local), -1, dtype=np.int32)
    lists = [members_of.get(str(name), ()) for name in pg_names.categories]
    sizes = np.array([len(m) for m in lists] + [0], dtype=np.int64)  # the last: no name
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(sizes.sum()))
    first_member = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for lo in range(0, len(local), _PEER_CHUNK):  # temporaries of a chunk's size, not the entries'
        part = local[lo : lo + _PEER_CHUNK]
        rows = np.flatnonzero(part >= 0)
        codes = pg_names.codes[lo + rows].astype(np.int64)
        codes[codes < 0] = len(lists)
        at = part[rows]
        ok = at < sizes[codes]
        peer[lo + rows[ok]] = flat[first_member[codes[ok]] + at[ok]]
    return peer
