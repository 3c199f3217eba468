"""Integer group keys for the matching: rows grouped by (code, value) pairs in O(rows).

Matching groups millions of entries by (group, sequence number) and (group, rank). Sorting
or hashing that many keys costs far more than counting them: here each major code (a
group's category code) gets its own range of ids, as wide as the values it holds span, and
the ids actually used are numbered densely with one boolean array and a running sum. Only
when those spans add up to much more than the rows (sparse values) is a sort used instead.
Either way the ids come out in sorted (major, minor) order, as a sorted group-by numbers
its groups.

The compiled kernels of :mod:`analyzer.kernels._groupkeys` do the ranged numbering, the per-id
minimum, maximum and first row, and the remap of per-dump category codes in one pass each,
without numpy's temporaries of the rows' size; where that module is not built, the numpy
code here (the reference: tests compare the two) runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "Pairs",
    "as_int64",
    "compiled",
    "dense_ids",
    "first_at_max",
    "first_of",
    "group_ids",
    "maximum_at",
    "minimum_at",
    "pairs",
    "ranged_slots",
    "reduce_max",
    "reduce_min",
    "remap_into",
]

try:
    from analyzer.kernels import _groupkeys as _kernels
except ImportError:  # not built (no C compiler at install): numpy's versions below
    _kernels = None  # type: ignore[assignment]

#: Ranged ids are used while the spans stay under this many times the rows (plus a margin).
_SPAN_FACTOR = 4
_LIMIT = 1 << 60
_INT64 = np.dtype(np.int64)


def compiled() -> bool:
    """Whether the compiled kernels are in use (False: numpy's group-bys)."""
    return _kernels is not None


def _flat64(values: np.ndarray) -> bool:
    return values.dtype == _INT64 and values.ndim == 1 and values.flags.c_contiguous


def _flat_signed(values: np.ndarray) -> bool:
    """A 1-d contiguous array of signed integers, which the kernels read at any width."""
    return values.dtype.kind == "i" and values.ndim == 1 and values.flags.c_contiguous


def minimum_at(out: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
    """``np.minimum.at(out, ids, values)``, in one compiled pass where all are int64."""
    if _kernels is not None and _flat64(out) and _flat64(ids) and _flat64(values):
        _kernels.reduce_at(0, ids, values, out)
    else:
        np.minimum.at(out, ids, values)


def maximum_at(out: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
    """``np.maximum.at(out, ids, values)``, in one compiled pass where all are int64."""
    if _kernels is not None and _flat64(out) and _flat64(ids) and _flat64(values):
        _kernels.reduce_at(1, ids, values, out)
    else:
        np.maximum.at(out, ids, values)


def as_int64(values: np.ndarray) -> np.ndarray:
    """``values`` as int64 in numpy's own int64 dtype, copied only when it is not. An array
    whose dtype is an equal but distinct object (one that went through pickle, as the parser
    processes' columns do) takes numpy's slow path in ``ufunc.at``, 30 times slower."""
    values = np.asarray(values)
    return values if values.dtype is _INT64 else values.astype(_INT64)


@dataclass(frozen=True, eq=False)
class Pairs:
    """The distinct (major, minor) pairs of some rows: ``ids`` numbers each row's pair (in
    sorted pair order), ``n`` is the number of pairs; :meth:`find` looks pairs up."""

    ids: np.ndarray
    n: int
    major: np.ndarray
    """Per pair id, its major value."""
    minor: np.ndarray
    """Per pair id, its minor value."""

    def without_ids(self) -> Pairs:
        """The same pairs, to look up, without each row's id (``ids`` empty)."""
        return Pairs(ids=np.zeros(0, dtype=np.int64), n=self.n, major=self.major, minor=self.minor)

    def find(self, major: np.ndarray, minor: np.ndarray) -> np.ndarray:
        """The id of each (major, minor) pair asked for, -1 where no row has it."""
        if not self.n or not len(major):
            return np.full(len(major), -1, dtype=np.int64)
        index = pd.MultiIndex.from_arrays([self.major, self.minor])
        query = pd.MultiIndex.from_arrays(
            [np.asarray(major, np.int64), np.asarray(minor, np.int64)]
        )
        return np.asarray(index.get_indexer(query), dtype=np.int64)


def pairs(major: np.ndarray, minor: np.ndarray) -> Pairs:
    """The distinct (major, minor) pairs of the rows, see :func:`group_ids`."""
    ids, n = group_ids(major, minor)
    first = first_of(ids, n)
    return Pairs(
        ids=ids,
        n=n,
        major=as_int64(np.asarray(major)[first]),
        minor=as_int64(np.asarray(minor)[first]),
    )


def group_ids(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of the rows' (major, minor) pairs, numbered in sorted pair order.

    ``major`` holds non-negative ints (category codes), ``minor`` any ints. Returns
    (id of each row, number of distinct pairs).
    """
    major, minor = np.asarray(major), np.asarray(minor)
    if _kernels is None or not (_flat_signed(major) and _flat_signed(minor)):
        major, minor = as_int64(major), as_int64(minor)  # numpy's way below, or the kernel's
    n = len(major)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    if int(major.min()) < 0:
        raise ValueError("group_ids: major codes must be non-negative")
    n_major = int(major.max()) + 1
    if _kernels is not None:
        ids = np.empty(n, dtype=np.int64)
        found = _kernels.ranged_ids(major, minor, n_major, _SPAN_FACTOR * n + 1024, ids)
        if found >= 0:
            return ids, int(found)
        return _sorted_ids(as_int64(major), as_int64(minor))
    lo = np.full(n_major, _LIMIT, dtype=np.int64)
    hi = np.full(n_major, -_LIMIT, dtype=np.int64)
    np.minimum.at(lo, major, minor)
    np.maximum.at(hi, major, minor)
    slots = ranged_slots(major, minor, lo, hi)
    if slots is not None:
        return dense_ids(*slots)
    return _sorted_ids(major, minor)


def _sorted_ids(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`group_ids` by sorting (sparse minors)."""
    n = len(major)
    order = np.lexsort((minor, major))
    a, b = major[order], minor[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(new, dtype=np.int64) - 1
    return ids, int(new.sum())


def ranged_slots(
    major: np.ndarray, minor: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's slot in the ranges of its major code (``lo``/``hi``: each major's smallest
    and largest minor; ``lo > hi``: none), and which slots are used; None when the ranges
    add up to far more than the rows (or reach beyond int64), where only a sort will do."""
    present = lo <= hi
    if (
        not present.any()
        or int(lo[present].min()) <= -_LIMIT // 2
        or int(hi[present].max()) >= _LIMIT // 2
    ):
        return None
    span = np.where(present, hi - lo + 1, 0)
    total = int(span.sum())
    if total > _SPAN_FACTOR * len(major) + 1024:
        return None
    raw = (np.cumsum(span) - span - lo)[major]  # each major's offset, less its lowest
    raw += minor
    used = np.zeros(total, dtype=bool)
    used[raw] = True
    return raw, used


def dense_ids(raw: np.ndarray, used: np.ndarray) -> tuple[np.ndarray, int]:
    """Rows' slots (:func:`ranged_slots`) numbered densely in slot order: (ids, how many)."""
    dense = np.cumsum(used, dtype=np.int64) - 1
    return dense[raw], int(dense[-1]) + 1


def first_of(ids: np.ndarray, n_groups: int) -> np.ndarray:
    """For each group, the position of its first row (in row order)."""
    first = np.full(n_groups, len(ids), dtype=np.int64)
    if _kernels is not None and _flat64(ids):
        _kernels.reduce_at(2, ids, None, first)
    else:
        np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
    return first


def remap_into(codes: list[np.ndarray], remaps: list[np.ndarray], out: np.ndarray) -> None:
    """``out`` (as long as the codes together) = each ``codes[k]`` through ``remaps[k]``
    (int32), laid end to end: per-dump category codes into the codes of one categorical."""
    if _kernels is not None:
        try:
            _kernels.remap_into(codes, remaps, out)
            return
        except TypeError:  # an array the kernel does not read: numpy's way
            pass
    lengths = np.array([len(c) for c in codes], dtype=np.int64)
    bases = np.cumsum([0] + [len(r) for r in remaps[:-1]], dtype=np.int64)
    local = np.concatenate(codes).astype(np.int64)
    local += np.repeat(bases, lengths)
    out[:] = np.concatenate(remaps)[local]


def first_at_max(ids: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """Per group, the first row holding the group's largest value (``len(ids)`` for a group
    without rows)."""
    values = as_int64(values)
    newest = reduce_max(ids, n_groups, values, empty=np.iinfo(np.int64).min)
    first = np.full(n_groups, len(ids), dtype=np.int64)
    if _kernels is not None and _flat64(ids) and _flat64(values):
        _kernels.first_at(ids, values, newest, first)
    else:
        at = np.flatnonzero(values == newest[ids])
        np.minimum.at(first, ids[at], at)
    return first


def reduce_max(ids: np.ndarray, n_groups: int, values: np.ndarray, empty: int = -1) -> np.ndarray:
    """Per group, the largest of ``values`` (``empty`` for a group without rows)."""
    out = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    maximum_at(out, ids, as_int64(values))
    out[out == np.iinfo(np.int64).min] = empty
    return out


def reduce_min(ids: np.ndarray, n_groups: int, values: np.ndarray, empty: int = -1) -> np.ndarray:
    """Per group, the smallest of ``values`` (``empty`` for a group without rows)."""
    out = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    minimum_at(out, ids, as_int64(values))
    out[out == np.iinfo(np.int64).max] = empty
    return out
