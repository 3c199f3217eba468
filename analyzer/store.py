"""The normalized store: the tables of one incident as Parquet files in a folder.

``hangscope export PATH -o DIR`` writes it; every command accepts ``DIR`` as input and
re-opens the incident without parsing the dumps again. Layout::

    DIR/hangscope-store.json   format marker, schema version, world size
    DIR/entries.parquet        analyzer.schema.ENTRIES
    DIR/groups.parquet         analyzer.schema.GROUPS (ranks as a list column)
    DIR/ranks.parquet          analyzer.schema.RANKS
    DIR/status.parquet         analyzer.schema.STATUS
    DIR/stacks.parquet         analyzer.schema.STACKS
    DIR/skipped.parquet        analyzer.schema.SKIPPED
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from analyzer import schema
from analyzer.errors import InputError
from analyzer.tables import Tables

MARKER = "hangscope-store.json"
STORE_VERSION = "hangscope.store/1"
_TABLES = {"entries": schema.ENTRIES, "groups": schema.GROUPS, "ranks": schema.RANKS,
           "status": schema.STATUS, "stacks": schema.STACKS, "skipped": schema.SKIPPED}


def is_store(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder written by :func:`write_store`."""
    return (Path(path) / MARKER).is_file()


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise InputError("the Parquet store needs pyarrow: pip install pyarrow") from None


def write_store(tables: Tables, out: str | os.PathLike[str]) -> Path:
    """Write ``tables`` as Parquet files into ``out`` (created if needed)."""
    _require_pyarrow()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name in _TABLES:
        frame = getattr(tables, name)
        if name == "groups":
            frame = frame.assign(ranks=frame["ranks"].map(list))
        frame.to_parquet(folder / f"{name}.parquet", index=False)
    meta = {"format": STORE_VERSION, "world_size": tables.world_size,
            "tables": {name: [c.name for c in cols] for name, cols in _TABLES.items()}}
    (folder / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    return folder


def read_store(path: str | os.PathLike[str]) -> Tables:
    """Re-open a store written by :func:`write_store`."""
    _require_pyarrow()
    folder = Path(path)
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder}: not a hangscope store ({exc})") from None
    if meta.get("format") != STORE_VERSION:
        raise InputError(f"{folder}: store format {meta.get('format')!r}, expected {STORE_VERSION!r}")
    frames: dict[str, pd.DataFrame] = {}
    for name, cols in _TABLES.items():
        try:
            frame = pd.read_parquet(folder / f"{name}.parquet")
        except (OSError, ValueError) as exc:
            raise InputError(f"{folder / (name + '.parquet')}: cannot read ({exc})") from None
        if name == "ranks" and "reader" not in frame:
            frame["reader"] = ""  # stores written before the column existed
        if name == "groups":
            frame["ranks"] = frame["ranks"].map(lambda v: tuple(int(x) for x in v))
        frame = frame.astype({c.name: c.dtype for c in cols if c.dtype not in ("object",)})
        frames[name] = schema.validate(frame[[c.name for c in cols]], cols, name)
    return Tables(world_size=int(meta["world_size"]), **frames)
