"""Several dumps of one rank: one buffer per backend, merged into one rank's tables.

torch 2.15's recorder keeps one buffer per backend name in a process and a file holds one
buffer, so a process with ``nccl2`` and ``nccl-lazy`` groups (or ``cpu:gloo,cuda:nccl2``)
leaves one file per backend. Normalization keeps every dump of a rank that holds another
backend's buffer and orders the rank's entries as one process: each buffer numbers its
``record_id`` from its own start, so the merged entries are renumbered in enqueue-time order.
Two dumps of one rank holding the same backend's buffer are not merged: the newer (by
:func:`analyzer.load.newest`, as the loader judges it) is kept and the other is reported as
dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from analyzer.load import ParsedDump, Skipped, backends_of, newest


def per_rank(dumps: Sequence[ParsedDump]) -> tuple[list[ParsedDump], list[Skipped]]:
    """The dumps to normalize, in rank order (a rank's dumps adjacent), and those dropped
    because another dump of the same rank holds the same backend's buffer."""
    by_key: dict[tuple[int, frozenset[str]], ParsedDump] = {}
    dropped: list[Skipped] = []
    several = {r for r, n in Counter(d.rank for d in dumps).items() if n > 1}
    for d in dumps:
        # A rank's only dump is kept whatever it holds: its backends are not looked at.
        key = (d.rank, backends_of(d) if d.rank in several else frozenset())
        old = by_key.get(key)
        if old is None:
            by_key[key] = d
            continue
        keep, drop = (d, old) if newest(d) > newest(old) else (old, d)
        by_key[key] = keep
        what = "+".join(sorted(key[1])) or "no entries"
        dropped.append(
            Skipped(
                drop.path,
                drop.rank,
                f"another dump of rank {drop.rank} holds the same buffer ({what}); "
                f"the newer one is kept: {keep.path}",
            )
        )
    kept = set(map(id, by_key.values()))
    ordered = sorted((d for d in dumps if id(d) in kept), key=lambda d: d.rank)
    return ordered, dropped


def process_order(
    ranks: np.ndarray, record_ids: np.ndarray, created: np.ndarray, multi: set[int]
) -> np.ndarray:
    """``record_ids`` with the entries of every rank in ``multi`` (several buffers) renumbered
    0.. in one process order: enqueue time, then each buffer's own order."""
    out = record_ids.copy()
    if not multi:
        return out
    for r in sorted(multi):
        rows = np.flatnonzero(ranks == r)
        if not len(rows):
            continue
        order = np.lexsort((rows, record_ids[rows], created[rows]))
        out[rows[order]] = np.arange(len(rows), dtype=out.dtype)
    return out


__all__ = ["per_rank", "process_order"]
