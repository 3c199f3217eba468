"""Keeping freed memory for the next array instead of handing it back to the system.

Matching makes dozens of temporary arrays as long as the entries table. glibc gives each block that large a mapping of its own and
unmaps it when freed, so the next one is faulted in page by page again, at the system's
cost (high on virtual machines that hand freed memory back to their host; figures in
docs/performance.md). Inside
:func:`freed_memory_reused`, large blocks come from the heap instead and freed ones stay
there, so the next temporary reuses pages the process already has. At the end the settings
are put back and the heap's free pages returned. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["freed_memory_reused", "trim_heap"]

# glibc's mallopt parameters and their defaults (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_DEFAULT_TRIM_THRESHOLD = 128 * 1024
_DEFAULT_MMAP_MAX = 65536
_KEEP_ALL = 2**31 - 1  # the largest trim threshold mallopt takes (an int)


def _glibc() -> tuple[Callable[[int, int], int], Callable[[int], int]] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: freed blocks stay with the allocator
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return mallopt, trim


_GLIBC = _glibc()
_depth = 0


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; elsewhere
    nothing)."""
    if _GLIBC is not None:
        _GLIBC[1](0)


@contextmanager
def freed_memory_reused() -> Iterator[None]:
    """Inside, freed blocks of any size stay with the process for the next allocation
    (glibc: no block gets its own mapping, the heap is never trimmed); after, glibc's
    defaults are back and the free pages are returned. Nesting is harmless."""
    global _depth
    if _GLIBC is None:
        yield
        return
    mallopt, trim = _GLIBC
    if _depth == 0:
        mallopt(_M_MMAP_MAX, 0)
        mallopt(_M_TRIM_THRESHOLD, _KEEP_ALL)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
            mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
            trim(0)
