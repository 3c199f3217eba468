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
    Col(
        "source",
        "string",
        "pg_config, entries (gloo pg_config is empty), inferred (members the layout implies), "
        "world (only the dumped ranks bound it), declared (a member list of the whole job, or the "
        "default group's entries, give the world) or option (the world size a user gave)",
    ),
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
    Col(
        "reader",
        "string",
        "native (compiled) or python: which reader parsed the dump; empty when no dump",
    ),
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


PROGRESS: tuple[Col, ...] = (
    Col("pg_name", "str", "group name"),
    Col("pg_desc", "str", "group description"),
    Col("rank", "int32", "member global rank"),
    Col("dumped", "bool", "the member wrote a readable dump"),
    Col("window_lo", "int64", "oldest collective seq its buffer holds (-1: none)"),
    Col("window_hi", "int64", "newest collective seq its buffer holds (-1: none)"),
    Col("enqueued", "int64", "collectives enqueued, entries and counters (-1: unknown)"),
    Col("completed", "int64", "newest completed collective seq (-1: none)"),
    Col("counter_enqueued", "int64", "pg_status last enqueued (-1: none)"),
    Col("counter_completed", "int64", "pg_status last completed (-1: none)"),
    Col("op_progress", "int64", "progress in op_id units (gloo, the recorder hook)"),
    Col("source", "str", "entries, pg_status, entries+pg_status, unknown, no_dump or not_recorded"),
)

COLLECTIVES: tuple[Col, ...] = (
    Col("pg_name", "category", "group name"),
    Col("pg_desc", "category", "group description"),
    Col("seq", "int64", "collective sequence number"),
    Col("op", "category", "op of the first member that recorded it"),
    Col("input_sizes", "category", "its input shapes"),
    Col("input_dtypes", "category", "its input dtypes"),
    Col("n_members", "int32", "members of the group"),
    Col("n_recorded", "int64", "members whose buffer holds it"),
    Col("n_joined", "int32", "members whose progress reaches it"),
    Col("n_completed", "int64", "members that recorded it completed"),
    Col("n_started", "int64", "members that recorded it started or completed"),
    Col("first_created_ns", "int64", "earliest enqueue time"),
    Col("last_created_ns", "int64", "latest enqueue time"),
    Col("last_started_ns", "int64", "latest start time"),
    Col("state", "category", "fully_matched, in_flight or not_joined (MatchState)"),
)

MISMATCHES: tuple[Col, ...] = (
    Col("pg_name", "str", "group name"),
    Col("pg_desc", "str", "group description"),
    Col("seq", "int64", "collective sequence number"),
    Col("kind", "str", "op_mismatch, size_mismatch or dtype_mismatch (MatchState)"),
    Col("rank", "int64", "the member that deviates"),
    Col("op", "str", "its op"),
    Col("value", "str", "its value"),
    Col("expected", "str", "the majority value, or (no majority)"),
    Col("n_agree", "int64", "members with the expected value"),
    Col("n_recorded", "int64", "members that recorded the collective"),
    Col("basis", "str", "group majority, sibling groups or no majority"),
)

P2P: tuple[Col, ...] = (
    Col("rank", "int32", "global rank of the op"),
    Col("pg_name", "category", "group name"),
    Col("pg_desc", "category", "group description"),
    Col("op", "category", "send or recv"),
    Col("peer", "int32", "global rank of the other side"),
    Col("p2p_seq", "int64", "p2p sequence number"),
    Col("seq", "int64", "collective sequence number of the entry"),
    Col("record_id", "int64", "per-process entry counter"),
    Col("state", "category", "scheduled, started or completed"),
    Col("time_created_ns", "int64", "enqueue time"),
    Col("input_sizes", "category", "what it moves (a one-sided recv: its outputs)"),
    Col("input_dtypes", "category", "dtypes of what it moves"),
    Col("peer_state", "category", "paired, not_posted or no_dump (PeerState)"),
    Col("pair_size", "category", "the paired op's sizes (empty: none)"),
    Col("pair_dtype", "category", "the paired op's dtypes (empty: none)"),
    Col("pair_seq", "int64", "the paired op's p2p seq (-1: none)"),
)

P2P_MISMATCHES: tuple[Col, ...] = (
    Col("kind", "str", "size_mismatch or dtype_mismatch"),
    Col("pg_name", "str", "group name"),
    Col("pg_desc", "str", "group description"),
    Col("sender", "int64", "global rank of the send"),
    Col("receiver", "int64", "global rank of the recv"),
    Col("send_seq", "int64", "the send's p2p seq"),
    Col("recv_seq", "int64", "the recv's p2p seq"),
    Col("send_value", "str", "what the send posted"),
    Col("recv_value", "str", "what the recv posted"),
    Col("usual_send", "str", "what the sender usually posts on the stream"),
    Col("usual_recv", "str", "what the receiver usually posts on the stream"),
    Col("culprits", "object", "the side(s) that changed (list of ranks)"),
)

WAITS: tuple[Col, ...] = (
    Col("waiter", "int32", "the rank that waits"),
    Col("holder", "int32", "the rank it waits on"),
    Col("pg_name", "str", "group of the op"),
    Col("pg_desc", "str", "group description"),
    Col("seq", "int64", "sequence number of the op (p2p seq for send/recv)"),
    Col("op", "str", "the op waited in"),
    Col("kind", "str", "why (WaitKind)"),
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
            series = (
                pd.Series(values).astype(col.dtype)  # type: ignore[call-overload]
                if len(values)
                else pd.Series([], dtype=col.dtype)
            )
        out[col.name] = series.reset_index(drop=True)
    return pd.DataFrame(out, columns=[c.name for c in cols])


def validate(df: pd.DataFrame, cols: tuple[Col, ...], table: str) -> pd.DataFrame:
    """Return ``df`` unchanged, or raise :class:`SchemaError` if its columns drifted."""
    names = [c.name for c in cols]
    if list(df.columns) != names:
        raise SchemaError(f"{table}: columns {list(df.columns)!r}, expected {names!r}")
    for col in cols:
        if str(df[col.name].dtype) != col.dtype:
            raise SchemaError(
                f"{table}.{col.name}: dtype {df[col.name].dtype}, expected {col.dtype}"
            )
    return df


def describe(cols: tuple[Col, ...]) -> str:
    """The columns as a Markdown table (used by the docs)."""
    lines = ["| column | dtype | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in cols]
    return "\n".join(lines)


def conform(df: pd.DataFrame, cols: tuple[Col, ...], table: str) -> pd.DataFrame:
    """``df`` validated against ``cols``; an empty ``df`` becomes the typed empty frame."""
    if df.empty and list(df.columns) == [c.name for c in cols]:
        df = frame(cols)
    return validate(df, cols, table)
