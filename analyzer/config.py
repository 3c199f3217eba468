"""The thresholds and caps of one analysis, in one frozen record.

Every layer that needs one of these takes ``config: AnalysisConfig = DEFAULT_CONFIG`` as a
keyword argument; :func:`analyzer.analysis.analyze` passes the one it was given down the
pipeline. Tests pass a config instead of patching module globals.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

__all__ = ["DEFAULT_CONFIG", "AnalysisConfig"]

_MB = 1 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class AnalysisConfig:
    """What an analysis may cost and when evidence counts. Every field has a safe default."""

    # Loading: what one untrusted file may cost.
    max_dump_bytes: int = 512 * _MB
    """Largest dump (after decompression) that is read; larger ones are skipped with a reason
    (``HANGSCOPE_MAX_DUMP_MB``)."""
    max_archive_bytes: int = 16384 * _MB
    """Largest total of decompressed bytes read from one archive (``HANGSCOPE_MAX_ARCHIVE_MB``)."""
    max_archive_members: int = 1 << 20
    """Most members read from one archive."""
    native_max_bytes: int = 32 * _MB
    """Larger pickles go to the Python reader (the compiled reader's own cap)."""
    max_counter: int = 1 << 40
    """Sequence numbers and counters beyond this are not counts of real operations."""
    max_rank: int = 1 << 22
    """Member ranks at or beyond this are not ranks of a real job."""
    max_frames: int = 1024
    """An entry's stack with more frames than this is no stack (the value is ignored)."""
    max_shape_values: int = 1 << 16
    """Most shapes (and dimensions) or dtype names walked in one sizes or dtypes value; a
    longer one is no such list (its entry is dropped)."""
    max_context_bytes: int = 16 * _MB
    """Largest context file (``hangscope_context_rank_N.json``) that is read."""

    # Matching and waits.
    completion_lag: int = 2
    """A member whose completions lag the group's by more than this many ops is a stale
    completer (its GPU is behind)."""
    max_block_edges: int = 100_000
    """Above this many waiter x holder pairs for one op, its waits are kept in linear form
    (every waiter -> the lowest holder, the lowest waiter -> every holder)."""
    max_later_waiters: int = 64
    """Waiters kept per op for waits in ops behind the waiter's own unfinished op."""

    # Stuck inside a collective: who enqueued late.
    late_min_ns: int = 100_000_000
    """A late enqueue stands out when it comes at least this long after the previous member..."""
    late_ratio: int = 10
    """... and at least this many times the spread of the other members' enqueues."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"AnalysisConfig.{f.name} must be a non-negative int, not {value!r}"
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AnalysisConfig:
        """The defaults, with the caps the environment sets (``HANGSCOPE_MAX_DUMP_MB``,
        ``HANGSCOPE_MAX_ARCHIVE_MB``); a value that is not a whole number is ignored."""
        env = os.environ if environ is None else environ
        kw: dict[str, int] = {}
        for name, var in (
            ("max_dump_bytes", "HANGSCOPE_MAX_DUMP_MB"),
            ("max_archive_bytes", "HANGSCOPE_MAX_ARCHIVE_MB"),
        ):
            text = env.get(var, "").strip()
            if text.isdigit():
                kw[name] = int(text) * _MB
        return cls(**kw)


#: The configuration used when none is given: the defaults and the environment's caps.
DEFAULT_CONFIG = AnalysisConfig.from_env()
