"""The entry table as ``hangscope entries`` prints it, in blocks of rows as they are made (the
first rows reach ``| head`` at once, whatever the size): text (aligned columns), CSV, or
JSON Lines (one object per row, sizes and dtypes as real arrays).

``t_s`` is each entry's enqueue time in seconds relative to the hang: the newest time
recorded anywhere in the dumps (an enqueue or a completion), so every value is 0 or
negative."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from analyzer.escape import clean

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from analyzer.normalize import Tables

__all__ = ["ENTRY_COLUMNS", "TEXT_COLUMNS", "entry_frame", "entry_rows", "hang_time_ns"]

#: The columns of CSV and JSON Lines, in order.
ENTRY_COLUMNS = [
    "rank",
    "record_id",
    "pg_name",
    "pg_desc",
    "seq",
    "p2p_seq",
    "profiling_name",
    "peer",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "retired",
    "t_s",
    "duration_ms",
    "time_created_ns",
]
#: The columns of the text table (a terminal's width).
TEXT_COLUMNS = [
    "rank",
    "record_id",
    "pg_desc",
    "seq",
    "p2p_seq",
    "profiling_name",
    "peer",
    "input_sizes",
    "input_dtypes",
    "state",
    "t_s",
    "duration_ms",
]
#: Columns that hold JSON arrays as text in the tables (written as arrays in JSON Lines).
_ARRAYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
#: Rows per block.
BLOCK = 2000


def hang_time_ns(tables: Tables) -> int:
    """The newest enqueue or completion time in the dumps (0 when none is recorded)."""
    e = tables.entries
    if not len(e):
        return 0
    return int(max(e["time_created_ns"].max(), e["time_completed_ns"].max(), 0))


def entry_frame(tables: Tables, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows of ``tables.entries``) with ``t_s`` added."""
    ref = hang_time_ns(tables)
    created = frame["time_created_ns"]
    t_s = ((created - ref) / 1e9).round(6).where(created > 0)
    return frame.assign(t_s=t_s)


def _as_array(text: object) -> Any:
    try:
        return json.loads(str(text))
    except ValueError:
        return clean(str(text))


def _jsonl(block: pd.DataFrame) -> str:
    rows: list[dict[str, Any]] = [
        {str(k): v for k, v in r.items()} for r in block[ENTRY_COLUMNS].to_dict(orient="records")
    ]
    out = io.StringIO()
    for row in rows:
        for k in _ARRAYS:
            row[k] = _as_array(row[k])
        for k, v in row.items():
            if isinstance(v, str):
                row[k] = clean(v)
            elif isinstance(v, float) and v != v:  # NaN: no time recorded
                row[k] = None
            elif hasattr(v, "item"):  # numpy scalars
                row[k] = v.item()
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out.getvalue()


def _cells(block: pd.DataFrame) -> list[list[str]]:
    cols = []
    for c in TEXT_COLUMNS:
        values = block[c]
        if c == "t_s":
            cells = ["" if v != v else f"{v:.3f}" for v in values.tolist()]
        elif c == "duration_ms":
            cells = ["" if v != v else f"{v:g}" for v in values.tolist()]
        else:
            cells = [clean(str(v), 60) for v in values.tolist()]
        cols.append(cells)
    return [list(r) for r in zip(*cols)]


def entry_rows(tables: Tables, frame: pd.DataFrame, fmt: str) -> Iterator[str]:
    """The rows of ``frame`` (with :func:`entry_frame`'s ``t_s``) as ``fmt`` (``text``,
    ``csv``, ``jsonl``), block by block; the text's column widths are those of the header
    and the first block (a longer value later only pushes its line wider)."""
    frame = entry_frame(tables, frame)
    widths: list[int] = []
    for start in range(0, max(len(frame), 1), BLOCK):
        block = frame.iloc[start : start + BLOCK]
        if fmt == "csv":
            view = block[ENTRY_COLUMNS].astype(
                {c: str for c in ("pg_name", "pg_desc", "profiling_name")}
            )
            for c in view.columns:
                if view[c].dtype == object or str(view[c].dtype) == "category":
                    view[c] = view[c].astype(str).map(clean)
            yield view.to_csv(index=False, header=start == 0)
        elif fmt == "jsonl":
            yield _jsonl(block)
        else:
            rows = _cells(block)
            if start == 0:
                widths = [
                    max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(TEXT_COLUMNS)
                ]
                yield "  ".join(h.rjust(w) for h, w in zip(TEXT_COLUMNS, widths)).rstrip() + "\n"
            yield "".join(
                "  ".join(v.rjust(w) for v, w in zip(r, widths)).rstrip() + "\n" for r in rows
            )
