"""One key of every entry as a column: integers checked against their range, flags, durations,
distinct objects and vocabularies.

Flattening works column by column: ``map(dict.get, entries, repeat(key))`` pulls one key out of
every entry at C speed, numpy converts columns of plain ints at once, and object-valued columns
(names, sizes, frames) are converted once per distinct object: the pickle memo and PyTorch's
pickler share repeated objects, so a dump of 20,000 entries holds a few dozen of them. Values
numpy cannot take as they are (None, JSON strings, odd types) go value by value through the
same helpers (:func:`to_int`, :func:`to_bool`), so the result does not depend on the path taken.
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import Any

import numpy as np

__all__ = [
    "bools",
    "checked_ints",
    "column",
    "distinct",
    "floats",
    "int64",
    "narrow",
    "to_bool",
    "to_int",
    "vocab",
]


def to_int(value: Any, default: int = 0) -> int:
    """Ints from pickles, numeric strings from JSON, None/0 for 'not observed'."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def int64(value: Any, default: int) -> int:
    """:func:`to_int`, with ``default`` for what int64 cannot hold."""
    n = to_int(value, default)
    return n if -(1 << 63) <= n < (1 << 63) else default


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def column(entries: list[dict[str, Any]], key: str) -> list[Any]:
    """``[e.get(key) for e in entries]`` without a Python-level loop."""
    return list(map(dict.get, entries, repeat(key)))


def _as_array(values: list[Any]) -> np.ndarray | None:
    """``values`` as a 1-d array in the dtype numpy infers, or None if it cannot."""
    try:
        arr = np.array(values)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.ndim == 1 else None


def _exact(values: list[Any], kinds: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(array, None-mask) when every value is None or of a numpy kind in ``kinds``.

    ``(None, None)`` when some value needs the per-value fallback.
    """
    arr = _as_array(values)
    if arr is None:
        return None, None
    if arr.dtype.kind in kinds:
        return arr, np.zeros(len(arr), dtype=bool)
    if arr.dtype != object:
        return None, None
    none = np.equal(arr, None)  # type: ignore[call-overload]  # elementwise "is None"
    if none.all():
        return np.zeros(0), none
    rest = _as_array(arr[~none].tolist())
    if rest is None or rest.dtype.kind not in kinds:
        return None, None
    return rest, none


def bools(values: list[Any]) -> np.ndarray:
    """``[to_bool(v) for v in values]``."""
    arr, none = _exact(values, "bi")  # bool(None) is False, bool(int) is "not zero"
    if arr is None or none is None:
        return np.array([to_bool(v) for v in values], dtype=bool)
    out = np.zeros(len(values), dtype=bool)
    out[~none] = arr != 0
    return out


def floats(values: list[Any]) -> np.ndarray:
    """Durations: NaN for None, "" or anything ``float`` rejects."""
    arr, none = _exact(values, "bif")
    if arr is None or none is None:
        return np.array([_float(v) for v in values], dtype=np.float64)
    out = np.full(len(values), math.nan, dtype=np.float64)
    out[~none] = arr
    return out


def _float(value: Any) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except (TypeError, ValueError):
        return math.nan


def distinct(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Each value's index among the distinct objects, and those objects in order of first use.

    Objects are told apart by identity, which is exact and needs no hashing of lists.
    """
    if not values:
        return np.empty(0, dtype=np.intp), []
    ids = np.fromiter(map(id, values), dtype=np.uint64, count=len(values))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return position[inverse.reshape(-1)], [values[i] for i in first[order]]


_WIDTHS = tuple(
    (np.dtype(w), int(np.iinfo(w).min), int(np.iinfo(w).max)) for w in (np.int8, np.int16, np.int32)
)


def narrow(values: np.ndarray, bounds: tuple[int, int] | None = None) -> np.ndarray:
    """The same integers in the narrowest signed dtype holding them: parsed dumps travel
    between processes and wait in memory until normalized, so every byte counts.
    ``bounds``: the smallest and largest value, when the caller knows them."""
    if not len(values):
        return values
    lo, hi = bounds if bounds is not None else (int(values.min()), int(values.max()))
    for width, low, high in _WIDTHS:
        if low <= lo and hi <= high:
            return values if values.dtype == width else values.astype(width)
    return values


def vocab(texts: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes of ``texts`` into their distinct values, in order of first appearance."""
    index: dict[Any, int] = {}
    codes = np.fromiter(
        (index.setdefault(t, len(index)) for t in texts), dtype=np.int32, count=len(texts)
    )
    return codes, list(index)


def _one_int(value: Any, default: int, lo: int, hi: int) -> tuple[int, bool]:
    """(value as an int, whether it was present but not an integer in [lo, hi))."""
    if value is None or value == "":
        return default, False
    if isinstance(value, int):
        n = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return default, True
        n = int(value)
    elif isinstance(value, str) and len(value) <= 32:
        try:
            n = int(value)
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                return default, True
            if not math.isfinite(f):
                return default, True
            n = int(f)
    else:
        return default, True
    return (n, False) if lo <= n < hi else (default, True)


def checked_ints(
    values: list[Any], default: int, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """The values as int64 (None and ``""`` read as ``default``), and a mask of the values
    that were present but not an integer in [lo, hi) (they read as ``default`` too)."""
    if values and type(values[0]) is int:  # the common case: a column of plain ints
        try:
            arr = np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass  # None, odd strings or out-of-range numbers somewhere: value by value below
        else:
            bad = (arr < lo) | (arr >= hi)
            if bad.any():
                arr[bad] = default
            return arr, bad
    arr_, none = _exact(values, "i")  # ints and None (pickles' 'not observed'), still in C
    if none is not None and none.all():  # never observed
        return np.full(len(values), default, dtype=np.int64), np.zeros(len(values), dtype=bool)
    if arr_ is not None and none is not None and arr_.dtype.kind == "i":
        out = np.full(len(values), default, dtype=np.int64)
        out[~none] = arr_
        bad = ~none & ((out < lo) | (out >= hi))
        if bad.any():
            out[bad] = default
        return out, bad
    pairs = [_one_int(v, default, lo, hi) for v in values]
    return (
        np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs)),
        np.fromiter((p[1] for p in pairs), dtype=bool, count=len(pairs)),
    )
