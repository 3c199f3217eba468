"""Handing a dump's entry columns over to the entries table.

The loaded dumps and the entries table hold the same entries: at scale the two copies set
the peak memory of a run. Once a column is copied, :func:`drop_column` frees it in every
dump and :func:`trim_heap` hands the freed pages back (each dump's column is a small block
of the C heap, which glibc keeps unless asked), so the next column of the table reuses
memory the process already had instead of growing it. A dump keeps everything else it read
(rank, path, counts, ``pg_config``, ``pg_status``, warnings, vocabularies, stacks): what
the analysis notes and the report quote.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from analyzer.reader import ParsedDump

__all__ = ["COLUMN_KINDS", "column_bytes", "drop_column", "freed_memory_kept", "is_released", "trim_heap"]

#: The attributes of a :class:`ParsedDump` that hold per-entry columns.
COLUMN_KINDS: tuple[str, ...] = ("strings", "ints", "bools", "floats")


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
    return sum(column.nbytes for d in dumps for kind in COLUMN_KINDS
               for column in getattr(d, kind).values())


def is_released(d: ParsedDump) -> bool:
    """Whether ``d`` handed its entry columns over (it still counts its entries)."""
    return d.n_entries > 0 and not (d.strings or d.ints or d.bools or d.floats)


def _libc_function(name: str, argtypes: list[type]) -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = getattr(libc, name)
    except (OSError, AttributeError):  # not glibc: freed blocks stay with the allocator
        return None
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


_TRIM = _libc_function("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])
# glibc's mallopt parameters and their defaults (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_KEEP_ALL = 2**31 - 1


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; elsewhere
    nothing)."""
    if _TRIM is not None:
        _TRIM(0)


@contextmanager
def freed_memory_kept() -> Iterator[None]:
    """Inside, memory the process frees stays in its heap for the next allocation instead of
    going back to the kernel (glibc: no ``mmap`` for large blocks, no trimming of the heap's
    top); on the way out, the heap's free pages are handed back once (:func:`trim_heap`).

    Matching allocates and frees temporaries of every entry's size, one after the other
    (8 bytes x 32 M entries at 16,384 ranks). Handed back, each is taken again from the
    kernel, page by page, zeroed: 2.5 M page faults at that size. Kept, the next one reuses
    the same pages: the peak is the same (what is live is the same), the faults are not.
    Elsewhere than glibc: nothing changes."""
    if _MALLOPT is None:
        yield
        return
    _MALLOPT(_M_MMAP_MAX, 0)
    _MALLOPT(_M_TRIM_THRESHOLD, _KEEP_ALL)
    try:
        yield
    finally:
        _MALLOPT(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
        _MALLOPT(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
        trim_heap()
