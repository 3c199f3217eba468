"""Categorical columns read by their integer codes: masks and text per category, not per row.

The entries table keeps its text columns (group names, ops, states, shapes) as categoricals.
A test over every row ("is the op a send?", "is the shape empty?") is decided once per
category and read back through the codes; text is built only for the rows of a result, by
taking the categories at those rows' codes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
import pandas as pd

__all__ = ["category_at", "code_of", "codes_at", "from_codes", "in_labels", "text_at"]


def code_of(values: pd.Series, label: str) -> int:
    """The category code of ``label`` (-2, which no row has, when it is no category)."""
    cats = values.cat.categories
    return int(cats.get_indexer(pd.Index([label], dtype=cats.dtype))[0]) if label in cats else -2


def codes_at(values: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
    """The category codes of ``values`` (at ``rows``), -1 where a value is missing."""
    codes = values.cat.codes.to_numpy()
    return codes if rows is None else codes[rows]


def in_labels(
    values: pd.Series, labels: Iterable[str], rows: np.ndarray | None = None
) -> np.ndarray:
    """``values.isin(labels)`` (at ``rows``) as a boolean array, decided once per category:
    a missing value is in no list."""
    cats = values.cat.categories
    hits = np.flatnonzero(np.asarray(cats.isin(list(labels)), dtype=bool))
    codes = codes_at(values, rows)
    if len(hits) <= 4:  # a comparison per category asked for, no gather
        out = np.zeros(len(codes), dtype=bool)
        for c in hits.tolist():
            out |= codes == c
        return out
    per_category = np.zeros(len(cats) + 1, dtype=bool)
    per_category[hits] = True
    return per_category[np.where(codes < 0, len(cats), codes)]


def text_at(values: pd.Series, rows: np.ndarray, index: pd.Index | None = None) -> pd.Series:
    """``values.iloc[rows].astype(str)`` (with ``index``, else 0..n-1): the categories taken
    at the rows' codes, so only the result's own text is built."""
    codes = codes_at(values, rows)
    index = index if index is not None else pd.RangeIndex(len(codes))
    cats = values.cat.categories
    if (codes < 0).any() or cats.dtype != "str":
        return pd.Series(values.iloc[rows].astype(str).array, index=index, name=values.name)
    return pd.Series(cats.take(codes), index=index, name=values.name)


def from_codes(
    codes: np.ndarray, categories: pd.Index, index: pd.Index, name: Hashable | None = None
) -> pd.Series:
    """A categorical Series of ``categories`` at ``codes`` (-1: missing) whose categories are
    just the values used, in lexical order: the same column whatever order the categories
    came in (a text in ``categories`` twice is one category), so sorting, grouping and
    comparing it behave as on its text."""
    codes = np.asarray(codes)
    used = np.flatnonzero(
        np.bincount(codes[codes >= 0] if (codes < 0).any() else codes, minlength=len(categories))
    )
    words, at = np.unique(np.asarray(categories.take(used), dtype=object), return_inverse=True)
    recode = np.full(len(categories) + 1, -1, dtype=np.int32)  # the last slot: code -1 stays -1
    recode[used] = at
    kept = pd.Index(words, dtype="str")
    small = recode.astype(
        np.int8 if len(kept) < 128 else np.int16 if len(kept) < 32_768 else np.int32
    )
    return pd.Series(
        pd.Categorical.from_codes(small[codes], categories=kept, validate=False),
        index=index,
        name=name,
    )


def category_at(values: pd.Series, rows: np.ndarray, index: pd.Index | None = None) -> pd.Series:
    """``values.iloc[rows]`` as text categories (with ``index``, else 0..n-1): the rows' codes
    and the categories they use (:func:`from_codes`); a missing value stays missing, as in
    :func:`text_at`."""
    index = index if index is not None else pd.RangeIndex(len(rows))
    codes = codes_at(values, rows)
    cats = values.cat.categories
    if (codes < 0).any() or cats.dtype != "str":
        text = pd.Index(values.iloc[rows].astype(str).array, dtype="str")
        codes, cats = pd.factorize(text)
    return from_codes(codes, pd.Index(cats, dtype="str"), index, values.name)
