"""A batch of parse results on its way from a parser process to the loader.

A dump's entries come as some 27 columns of 2,000 values: pickled one array each, they came
back as tens of thousands of small blocks of the main process's heap (at 16,384 ranks,
442,000 of them), which normalize then frees one by one and glibc hands back only when the
heap is trimmed. A batch crosses with each column of all its dumps as one array, and each
dump's columns come back as views of it: one allocation per column and batch, freed whole
once normalize has copied every dump of the batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from analyzer.reader import ParsedDump
from analyzer.release import COLUMN_FIELDS as _KINDS

__all__ = ["ParseBatch"]


def _joinable(d: object) -> bool:
    """A dump whose columns are exactly the readers' fields, each one value per entry."""
    if not isinstance(d, ParsedDump) or d.n_entries <= 0:
        return False
    for kind, fields in _KINDS:
        columns = getattr(d, kind)
        if not isinstance(columns, dict) or tuple(columns) != fields:
            return False
        for values in columns.values():
            if not isinstance(values, np.ndarray) or values.shape != (d.n_entries,):
                return False
    return True


class ParseBatch:
    """The results of the files of one batch (a list of results per file), pickled with the
    entry columns of its dumps joined (see the module's doc)."""

    __slots__ = ("results",)

    def __init__(self, results: list[list[Any]]) -> None:
        self.results = results

    def __getstate__(self) -> tuple[Any, ...]:
        where: list[tuple[int, int]] = []
        light: list[list[Any]] = []
        joined: list[ParsedDump] = []
        for i, results in enumerate(self.results):
            out = []
            for j, r in enumerate(results):
                if _joinable(r):
                    where.append((i, j))
                    joined.append(r)
                    r = dataclasses.replace(r, strings={}, ints={}, bools={}, floats={})
                out.append(r)
            light.append(out)
        columns = {f"{kind}.{f}": np.concatenate([getattr(d, kind)[f] for d in joined])
                   for kind, fields in _KINDS for f in fields} if joined else {}
        counts = np.array([d.n_entries for d in joined], dtype=np.int64)
        return light, where, counts, columns

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        light, where, counts, columns = state
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        for k, (i, j) in enumerate(where):
            d = light[i][j]
            lo, hi = starts[k], starts[k + 1]
            for kind, fields in _KINDS:
                setattr(d, kind, {f: columns[f"{kind}.{f}"][lo:hi] for f in fields})
        self.results = light
