"""Declared columns of every table hangscope produces (the documented schema).

Each table is a tuple of :class:`Col`; :func:`frame` builds a DataFrame in that exact
order and those dtypes, and :func:`validate` raises :class:`SchemaError` on drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import pandas as pd

from analyzer.errors import SchemaError


class Col(NamedTuple):
    name: str
    dtype: str
    doc: str


ENTRIES: tuple[Col, ...] = (
    Col("rank", "int32", "global rank that recorded the entry"),
    Col("pg_name", "category", "global process-group name ('0' is the default group)"),
    Col("pg_desc", "category", "group description (e.g. TENSOR_MODEL_PARALLEL_GROUP)"),
    Col("pg_id", "int32", "backend-local group id (the key of pg_status)"),
    Col("record_id", "int64", "per-process entry counter"),
    Col("seq", "int64", "collective_seq_id: matching key across ranks, per group"),
    Col("p2p_seq", "int64", "p2p_seq_id: per-group point-to-point counter"),
    Col("op_id", "int64", "logical op counter"),
    Col("op", "category", "operation: all_reduce, broadcast, send, recv, coalesced..."),
    Col("backend", "category", "profiling_name prefix: nccl, gloo, xccl..."),
    Col("profiling_name", "category", "raw profiling name"),
    Col("is_p2p", "bool", "send/recv"),
    Col("coalesced", "bool", "a coalesced entry"),
    Col("peer", "int32", "global rank of the other side of a send/recv, -1 if unknown"),
    Col("input_sizes", "category", "input shapes, JSON text"),
    Col("output_sizes", "category", "output shapes, JSON text"),
    Col("input_dtypes", "category", "input dtypes, JSON text"),
    Col("output_dtypes", "category", "output dtypes, JSON text"),
    Col("state", "category", "scheduled, started or completed"),
    Col("retired", "bool", "left the watchdog's list (finished or timed out)"),
    Col("time_created_ns", "int64", "enqueue time"),
    Col("time_started_ns", "int64", "start observed (0 if not)"),
    Col("time_completed_ns", "int64", "completion observed (0 if not)"),
    Col("duration_ms", "float64", "GPU duration with timing on (NaN if not)"),
    Col("timeout_ms", "int64", "per-op timeout"),
    Col("thread_name", "category", "issuing thread"),
    Col("stack_id", "int32", "key into the stacks table, -1 if no frames"),
)

GROUPS: tuple[Col, ...] = (
    Col("pg_name", "string", "global group name"),
    Col("pg_desc", "string", "group description"),
    Col("ranks", "object", "member global ranks in group-rank order (tuple)"),
    Col("size", "int32", "number of members"),
    Col("source", "string", "pg_config, entries (inferred: gloo pg_config is empty) or world"),
)

RANKS: tuple[Col, ...] = (
    Col("rank", "int32", "global rank"),
    Col("path", "string", "dump file, empty when no readable dump"),
    Col("format", "string", "pickle or json; empty when no dump"),
    Col("version", "string", "dump format version"),
    Col("backend", "string", "backend seen in the entries"),
    Col("comm_lib_version", "string", "NCCL (or other) library version"),
    Col("entries", "int32", "entries recorded"),
    Col("dumped", "bool", "a readable dump exists"),
    Col("first_record_id", "int64", "oldest record id still in the ring buffer (-1: none)"),
    Col("last_record_id", "int64", "newest record id (-1: none)"),
    Col("last_time_ns", "int64", "newest enqueue time in the buffer (0: none)"),
    Col("reader", "string", "native (compiled) or python: which reader parsed the dump; empty when no dump"),
)

STATUS: tuple[Col, ...] = (
    Col("rank", "int32", "global rank"),
    Col("pg_id", "int32", "backend-local group id"),
    Col("pg_name", "string", "global group name, empty when it cannot be told"),
    Col("last_enqueued", "int64", "pg_status.last_enqueued_collective"),
    Col("last_started", "int64", "pg_status.last_started_collective"),
    Col("last_completed", "int64", "pg_status.last_completed_collective"),
)

STACKS: tuple[Col, ...] = (
    Col("stack_id", "int32", "stack key"),
    Col("depth", "int32", "0 is the innermost frame"),
    Col("name", "string", "function"),
    Col("filename", "string", "file"),
    Col("line", "int32", "line"),
)

SKIPPED: tuple[Col, ...] = (
    Col("path", "string", "file that was not analyzed"),
    Col("rank", "int32", "rank from its name (-1: none)"),
    Col("reason", "string", "one-line reason"),
)


def frame(cols: tuple[Col, ...], data: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """A DataFrame with exactly ``cols``, from ``data`` (column -> values) or empty."""
    data = data or {}
    out = {}
    for col in cols:
        values = data.get(col.name, [])
        if col.dtype == "object":
            series = pd.Series(list(values), dtype="object")
        else:
            series = pd.Series(values).astype(col.dtype) if len(values) else pd.Series([], dtype=col.dtype)
        out[col.name] = series.reset_index(drop=True)
    return pd.DataFrame(out, columns=[c.name for c in cols])


def validate(df: pd.DataFrame, cols: tuple[Col, ...], table: str) -> pd.DataFrame:
    """Return ``df`` unchanged, or raise :class:`SchemaError` if its columns drifted."""
    names = [c.name for c in cols]
    if list(df.columns) != names:
        raise SchemaError(f"{table}: columns {list(df.columns)!r}, expected {names!r}")
    for col in cols:
        if str(df[col.name].dtype) != col.dtype:
            raise SchemaError(f"{table}.{col.name}: dtype {df[col.name].dtype}, expected {col.dtype}")
    return df


def describe(cols: tuple[Col, ...]) -> str:
    """The columns as a Markdown table (used by the docs)."""
    lines = ["| column | dtype | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in cols]
    return "\n".join(lines)
