"""Look-ups into the normalized tables that several rules share: an entry, its stack."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analyzer.normalize import Tables

__all__ = ["describe_entry", "entry_at", "last_entry", "newest_collective", "stack_frames"]


def stack_frames(tables: Tables, stack_id: int) -> tuple[dict[str, Any], ...]:
    """The frames of stack ``stack_id``, innermost first (none for ``-1``)."""
    if stack_id < 0:
        return ()
    frames = tables.stacks[tables.stacks["stack_id"] == stack_id].sort_values("depth")
    return tuple(
        {"name": str(n), "filename": str(f), "line": int(ln)}
        for n, f, ln in frames[["name", "filename", "line"]].itertuples(index=False)
    )


def entry_at(
    tables: Tables, *, rank: int | None = None, group: str, seq: int, p2p: bool = False
) -> pd.Series | None:
    """The entry of ``group`` at ``seq`` (the p2p sequence number with ``p2p``), preferring
    one with a stack; of ``rank`` when given."""
    e = tables.entries
    col = "p2p_seq" if p2p else "seq"
    mask = (e["pg_name"] == group) & (e[col] == seq) & (e["is_p2p"] == p2p)
    if rank is not None:
        mask &= e["rank"] == rank
    rows = e[mask]
    if rows.empty:
        return None
    with_stack = rows[rows["stack_id"] >= 0]
    return (with_stack if len(with_stack) else rows).iloc[0]


def last_entry(tables: Tables, rank: int) -> pd.Series | None:
    """The newest entry ``rank`` recorded."""
    e = tables.entries
    rows = e[e["rank"] == rank]
    if rows.empty:
        return None
    return rows.iloc[int(rows["record_id"].to_numpy().argmax())]


def newest_collective(
    last: pd.Series | None, group: object, seq: object, *, retired: bool
) -> str | None:
    """The name of ``group`` to show, where ``last`` (a rank's newest entry) is its
    collective ``seq``, retired or not as ``retired`` asks; None otherwise."""
    if last is None or bool(last["is_p2p"]) or bool(last["retired"]) != retired:
        return None
    if str(last["pg_name"]) != str(group) or int(last["seq"]) != int(str(seq)):
        return None
    return str(last.get("pg_desc") or "") or str(group)


def describe_entry(row: pd.Series | None) -> dict[str, Any]:
    """An entry as JSON-safe fields (empty for none)."""
    if row is None:
        return {}
    return {
        "rank": int(row["rank"]),
        "group": str(row["pg_name"]),
        "group_desc": str(row["pg_desc"]),
        "seq": int(row["seq"]),
        "p2p_seq": int(row["p2p_seq"]),
        "op": str(row["op"]),
        "profiling_name": str(row["profiling_name"]),
        "state": str(row["state"]),
        "retired": bool(row["retired"]),
        "input_sizes": str(row["input_sizes"]),
        "input_dtypes": str(row["input_dtypes"]),
        "record_id": int(row["record_id"]),
    }


def stack_of(tables: Tables, row: pd.Series | None) -> tuple[dict[str, Any], ...]:
    """The issuing stack of entry ``row`` (none for no row)."""
    return stack_frames(tables, int(row["stack_id"])) if row is not None else ()
