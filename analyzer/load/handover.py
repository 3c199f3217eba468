"""Handing a dump's entry columns over to the entries table.

The loaded dumps and the entries table hold the same entries: at scale the two copies set
the peak memory of a run. Once a column is copied, :func:`drop_column` frees it in every
dump and :func:`analyzer.runtime.trim_heap` hands the freed pages back (each dump's column is a small block
of the C heap, which glibc keeps unless asked), so the next column of the table reuses
memory the process already had instead of growing it. A dump keeps everything else it read
(rank, path, counts, ``pg_config``, ``pg_status``, warnings, vocabularies, stacks): what
the analysis notes and the report quote.
"""

from __future__ import annotations

from collections.abc import Iterable

from analyzer.load.parsed_dump import (
    BOOL_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    STRING_FIELDS,
    ParsedDump,
)

__all__ = ["COLUMN_FIELDS", "COLUMN_KINDS", "column_bytes", "drop_column", "is_released"]

#: The attributes of a :class:`ParsedDump` that hold per-entry columns, and the fields of each.
COLUMN_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("strings", STRING_FIELDS),
    ("ints", INT_FIELDS),
    ("bools", BOOL_FIELDS),
    ("floats", FLOAT_FIELDS),
)
COLUMN_KINDS: tuple[str, ...] = tuple(kind for kind, _ in COLUMN_FIELDS)


def drop_column(dumps: Iterable[ParsedDump], kind: str, field: str) -> int:
    """Free column ``field`` of ``kind`` (one of :data:`COLUMN_KINDS`) in every dump; the
    bytes it held."""
    freed = 0
    for d in dumps:
        column = getattr(d, kind).pop(field, None)
        if column is not None:
            freed += column.nbytes
    return freed


def column_bytes(dumps: Iterable[ParsedDump]) -> int:
    """The bytes the dumps' entry columns hold."""
    return sum(
        column.nbytes
        for d in dumps
        for kind in COLUMN_KINDS
        for column in getattr(d, kind).values()
    )


def is_released(d: ParsedDump) -> bool:
    """Whether ``d`` handed its entry columns over (it still counts its entries)."""
    return d.n_entries > 0 and not (d.strings or d.ints or d.bools or d.floats)
