"""The normalized store: the tables of one incident (or of a shard of it) as Parquet files.

``hangscope export PATH -o DIR`` writes it; every command accepts ``DIR`` (or several such
folders) as input and re-opens the incident without parsing the dumps again. Layout::

    DIR/hangscope-store.json   format marker, schema version, world size, ranks held
    DIR/entries.parquet        analyzer.schema.ENTRIES
    DIR/groups.parquet         analyzer.schema.GROUPS (ranks as a list column)
    DIR/ranks.parquet          analyzer.schema.RANKS
    DIR/status.parquet         analyzer.schema.STATUS
    DIR/stacks.parquet         analyzer.schema.STACKS
    DIR/skipped.parquet        analyzer.schema.SKIPPED
    DIR/dumps.parquet          DUMPS: one row per parsed dump (its own vocabularies, pg_config...)
    DIR/parsed.parquet         PARSED: the parsed dumps' columns, as the reader returned them
    DIR/members.json           the distinct member lists of the dumps' pg_config, once each
    DIR/inputs.json            the loader's notes: skipped, ignored and duplicate files
    DIR/contexts.json          captured context files (analyzer.capture), by rank

The first six are the normalized tables, for other tools. The parsed dumps (``dumps`` and
``parsed``) are what hangscope re-opens: a store holds exactly the dumps it was given (one
node's shard, say), and several stores of one job are merged by normalizing the union of
their dumps, which gives the tables the whole job's files give (:func:`open_stores`).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.errors import InputError
from analyzer.load import (
    BOOL_FIELDS,
    COLUMN_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    STORE_MARKER,
    STRING_FIELDS,
    Contexts,
    Loaded,
    ParsedDump,
    is_released,
    is_store,
)
from analyzer.normalize import Tables
from analyzer.schema import Col

MARKER = STORE_MARKER
STORE_VERSION = "hangscope.store/3"
#: Parsed dumps with each pg_config's member lists inline (one copy per dump: the default
#: group's lists the world, so a store of N ranks held N x N ranks): still read.
INLINE_MEMBERS_VERSION = "hangscope.store/2"
#: The formats that hold parsed dumps (mergeable, re-normalized when opened).
PARSED_VERSIONS = (STORE_VERSION, INLINE_MEMBERS_VERSION)
#: Stores of the first format hold the normalized tables only: re-opened alone, as they are.
TABLES_ONLY_VERSION = "hangscope.store/1"
INPUTS = "inputs.json"
CONTEXTS = "contexts.json"
#: The distinct member lists of every dump's pg_config, once each (format 3).
MEMBERS = "members.json"
_TABLES = {
    "entries": schema.ENTRIES,
    "groups": schema.GROUPS,
    "ranks": schema.RANKS,
    "status": schema.STATUS,
    "stacks": schema.STACKS,
    "skipped": schema.SKIPPED,
}

DUMPS: tuple[Col, ...] = (
    Col("dump", "int32", "index of the dump in this store (the key of parsed.dump)"),
    Col("rank", "int32", "global rank"),
    Col("path", "string", "dump file (or archive member) as the loader named it"),
    Col("fmt", "string", "pickle or json"),
    Col("version", "string", "dump format version"),
    Col("comm_lib_version", "string", "NCCL (or other) library version"),
    Col("n_entries", "int64", "entries of the dump (its rows in parsed.parquet, in order)"),
    Col("reader", "string", "native or python"),
    Col("suspect", "bool", "entries or values were dropped while parsing"),
    Col("fingerprint", "string", "hash of the dump's bytes, when the loader took one"),
    Col("warnings", "string", "JSON list: what the parse dropped"),
    Col(
        "pg_config", "string", "JSON object: group name -> [desc, index into members.json or null]"
    ),
    Col("pg_status", "string", "JSON object: pg_id -> [last enqueued, started, completed]"),
    Col("dropped_pg_ids", "string", "JSON object: pg_id -> group name of dropped entries"),
    Col("vocab", "string", "JSON object: string column -> the dump's distinct values"),
    Col("stacks", "string", "JSON list: the dump's distinct stacks, frames [name, file, line]"),
)
_PARSED_DOC = {
    "pg_id": "backend-local group id",
    "record_id": "the buffer's own entry counter",
    "seq": "collective_seq_id",
    "p2p_seq": "p2p_seq_id",
    "op_id": "op_id",
    "time_created_ns": "enqueue time",
    "time_started_ns": "start observed (0 if not)",
    "time_completed_ns": "completion observed (0 if not)",
    "timeout_ms": "per-op timeout",
    "stack": "index into the dump's dumps.stacks (-1: no frames)",
    "peer_local": "group-local rank of the other side of a send/recv (-1: none)",
    "self_local": "group-local rank of the recording rank in the profiling name (-1: none)",
    "is_p2p": "send/recv",
    "retired": "left the watchdog's list",
    "coalesced": "a coalesced entry",
    "duration_ms": "GPU duration with timing on (NaN if not)",
}
PARSED: tuple[Col, ...] = (
    (Col("dump", "int32", "dumps.dump of the entry"),)
    + tuple(Col(f, "integer", _PARSED_DOC[f]) for f in INT_FIELDS)
    + tuple(Col(f, "bool", _PARSED_DOC[f]) for f in BOOL_FIELDS)
    + tuple(Col(f, "float64", _PARSED_DOC[f]) for f in FLOAT_FIELDS)
    + tuple(Col(f, "integer", f"code into the dump's dumps.vocab of {f}") for f in STRING_FIELDS)
)
_PARSED_TABLES = {"dumps": DUMPS, "parsed": PARSED}


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise InputError("the Parquet store needs pyarrow: pip install pyarrow") from None


def write_store(
    tables: Tables,
    out: str | os.PathLike[str],
    *,
    loaded: Loaded | None = None,
    contexts: Contexts | None = None,
    world_option: int | None = None,
    staged: Path | None = None,
) -> Path:
    """Write ``tables`` as Parquet files into ``out`` (created if needed), with the parsed
    dumps of ``loaded`` (what makes stores mergeable) and the ``contexts`` found beside them.
    ``world_option``: the world size the user gave (None: worked out from the dumps).
    ``staged``: the folder :func:`write_parsed` already wrote ``loaded`` to, in ``out``. The
    format marker is written last: a folder the write stopped in is no store."""
    _require_pyarrow()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name in _TABLES:
        frame = getattr(tables, name)
        if name == "groups":
            frame = frame.assign(ranks=frame["ranks"].map(list))
        frame.to_parquet(folder / f"{name}.parquet", index=False)
    meta: dict[str, Any] = {
        "format": STORE_VERSION if loaded is not None else TABLES_ONLY_VERSION,
        "world_size": tables.world_size,
        "world_option": world_option,
        "ranks": ranges(tables.dumped_ranks),
        "tables": {name: [c.name for c in cols] for name, cols in _TABLES.items()},
    }
    if loaded is not None:
        staging = staged if staged is not None else write_parsed(loaded, folder, contexts)
        for name in _PARSED_FILES:
            (staging / name).replace(folder / name)
        staging.rmdir()
        meta["tables"].update(
            {name: [c.name for c in cols] for name, cols in _PARSED_TABLES.items()}
        )
    (folder / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    return folder


#: Where :func:`write_parsed` puts the parsed dumps inside the store's folder until
#: :func:`write_store` moves them in: a folder the export stopped in keeps what it held.
STAGING = ".parsed.partial"
_PARSED_FILES = ("dumps.parquet", "parsed.parquet", MEMBERS, INPUTS, CONTEXTS)


def write_parsed(
    loaded: Loaded, out: str | os.PathLike[str], contexts: Contexts | None = None
) -> Path:
    """The parsed dumps of ``loaded`` (with the loader's notes and ``contexts``) staged in
    ``out`` (created if needed), for ``write_store(..., staged=...)`` to complete the
    store with: call it before the dumps hand their entry columns over
    (``normalize(..., release=True)``). Returns the staging folder (remove it if the store
    is not completed)."""
    _require_pyarrow()
    staging = Path(out) / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    _write_parsed(loaded, staging)
    (staging / INPUTS).write_text(json.dumps(_inputs_doc(loaded)) + "\n")
    (staging / CONTEXTS).write_text(json.dumps(_contexts_doc(contexts or Contexts())) + "\n")
    return staging


def ranges(ranks: list[int]) -> str:
    """Sorted ranks as ranges: ``0-3,8,10-11`` (empty when none)."""
    out: list[str] = []
    start = prev = None
    for r in ranks:
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


class _MemberLists:
    """The distinct member lists of the dumps' pg_config, numbered in order of first use
    (dumps share one tuple per distinct list: looked up by identity first)."""

    def __init__(self) -> None:
        self.lists: list[tuple[int, ...]] = []
        self._by_id: dict[int, tuple[tuple[int, ...], int]] = {}
        self._by_value: dict[tuple[int, ...], int] = {}

    def index_of(self, members: tuple[int, ...]) -> int:
        known = self._by_id.get(id(members))
        if known is not None and known[0] is members:
            return known[1]
        index = self._by_value.setdefault(members, len(self.lists))
        if index == len(self.lists):
            self.lists.append(members)
        self._by_id[id(members)] = (members, index)
        return index


def _write_parsed(loaded: Loaded, folder: Path) -> None:
    dumps = loaded.dumps
    if any(is_released(d) for d in dumps):
        raise InputError(
            "these dumps handed their entries over to normalize (release=True): "
            "write their parsed dumps before, or load them again"
        )
    rows: dict[str, list[Any]] = defaultdict(list)
    lists = _MemberLists()
    for i, d in enumerate(dumps):
        rows["dump"].append(i)
        rows["rank"].append(d.rank)
        rows["path"].append(d.path)
        rows["fmt"].append(d.fmt)
        rows["version"].append(d.version)
        rows["comm_lib_version"].append(d.comm_lib_version)
        rows["n_entries"].append(d.n_entries)
        rows["reader"].append(d.reader)
        rows["suspect"].append(bool(d.suspect))
        rows["fingerprint"].append(d.fingerprint)
        rows["warnings"].append(json.dumps(list(d.warnings)))
        rows["pg_config"].append(
            json.dumps(
                {
                    name: [desc, None if members is None else lists.index_of(members)]
                    for name, (desc, members) in d.pg_config.items()
                }
            )
        )
        rows["pg_status"].append(json.dumps({str(k): list(v) for k, v in d.pg_status.items()}))
        rows["dropped_pg_ids"].append(json.dumps({str(k): v for k, v in d.dropped_pg_ids.items()}))
        rows["vocab"].append(json.dumps({f: list(d.vocab[f]) for f in STRING_FIELDS}))
        rows["stacks"].append(json.dumps([[list(frame) for frame in key] for key in d.stacks]))
    schema.frame(DUMPS, rows).to_parquet(folder / "dumps.parquet", index=False)
    (folder / MEMBERS).write_text(json.dumps({"members": [list(m) for m in lists.lists]}) + "\n")
    _write_columns(dumps, folder / "parsed.parquet")


#: Entries per row group of parsed.parquet (written a block of dumps at a time).
ROW_GROUP_ENTRIES = 1 << 20
#: The width of a column no dump has entries for, per kind.
_EMPTY_DTYPE = {"ints": np.int64, "bools": np.bool_, "floats": np.float64, "strings": np.int32}


def _write_columns(dumps: Sequence[ParsedDump], path: Path) -> None:
    """The dumps' entry columns as parsed.parquet, each column in the narrowest width that
    holds every dump's part, a block of dumps (about :data:`ROW_GROUP_ENTRIES` entries) per
    row group: the dumps' columns are never copied whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind_of = {name: kind for kind, fields in COLUMN_FIELDS for name in fields}
    kinds = {c.name: kind_of[c.name] for c in PARSED if c.name in kind_of}  # in PARSED's order
    dtypes: dict[str, np.dtype[Any]] = {"dump": np.dtype(np.int32)}
    for name, kind in kinds.items():
        seen = {getattr(d, kind)[name].dtype for d in dumps if d.n_entries}
        dtypes[name] = np.result_type(*seen) if seen else np.dtype(_EMPTY_DTYPE[kind])
    schema = pa.schema([(c.name, pa.from_numpy_dtype(dtypes[c.name])) for c in PARSED])
    with pq.ParquetWriter(path, schema) as writer:
        start = 0
        while True:
            end, size = start, 0
            while end < len(dumps) and (size < ROW_GROUP_ENTRIES or end == start):
                size += dumps[end].n_entries
                end += 1
            block = [(i, d) for i, d in enumerate(dumps[start:end], start) if d.n_entries]
            counts = np.array([d.n_entries for _, d in block], dtype=np.int64)
            columns = {"dump": np.repeat(np.array([i for i, _ in block], dtype=np.int32), counts)}
            for name, kind in kinds.items():
                parts = [getattr(d, kind)[name] for _, d in block]
                columns[name] = (
                    np.concatenate(parts).astype(dtypes[name], copy=False)
                    if parts
                    else np.empty(0, dtype=dtypes[name])
                )
            writer.write_table(pa.table(columns, schema=schema), row_group_size=max(size, 1))
            if end >= len(dumps):
                break
            start = end


def _inputs_doc(loaded: Loaded) -> dict[str, Any]:
    return {
        "skipped": [[s.path, s.rank, s.reason] for s in loaded.skipped],
        "ignored": [[i.path, i.reason] for i in loaded.ignored],
        "duplicates": [[d.rank, d.kept, d.dropped, d.identical] for d in loaded.duplicates],
        "unreadable_dirs": [list(u) for u in loaded.unreadable_dirs],
        "files": [[f.rank, os.fspath(f.path)] for f in loaded.files],
    }


def _contexts_doc(contexts: Contexts) -> dict[str, Any]:
    return {
        "by_rank": [asdict(c) for _, c in sorted(contexts.by_rank.items())],
        "skipped": [list(s) for s in contexts.skipped],
    }


def _read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder}: not a hangscope store ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") not in (
        *PARSED_VERSIONS,
        TABLES_ONLY_VERSION,
    ):
        got = meta.get("format") if isinstance(meta, dict) else None
        raise InputError(f"{folder}: store format {got!r}, expected {STORE_VERSION!r}")
    return meta


def has_parsed_dumps(path: str | os.PathLike[str]) -> bool:
    """True for a store that holds its parsed dumps (mergeable, re-normalized when opened)."""
    return _read_meta(Path(path)).get("format") in PARSED_VERSIONS


def store_inputs(inputs: list[str | os.PathLike[str]]) -> str:
    """``""`` when no input is a store; ``"dumps"`` when all are stores holding their parsed
    dumps; ``"tables"`` for one store of the first format (normalized tables only). Raises
    :class:`InputError` for stores mixed with dump files, or a first-format store among several."""
    flags = [is_store(p) for p in inputs]
    if not any(flags):
        return ""
    if not all(flags):
        store = next(p for p, f in zip(inputs, flags) if f)
        other = next(p for p, f in zip(inputs, flags) if not f)
        raise InputError(
            f"cannot mix stores and dumps ({os.fspath(store)} is a store, "
            f"{os.fspath(other)} is not): export the dumps first "
            "(hangscope export) or give only dumps"
        )
    if len(inputs) == 1 and not has_parsed_dumps(inputs[0]):
        return "tables"
    return "dumps"


def read_store(path: str | os.PathLike[str], *, world_size: int | None = None) -> Tables:
    """The normalized tables of a store written by :func:`write_store`, as they were written.

    ``world_size`` cannot be applied to the tables alone: unless it is the store's own, it is
    refused (:class:`InputError`)."""
    _require_pyarrow()
    folder = Path(path)
    meta = _read_meta(folder)
    if world_size is not None and world_size != int(meta["world_size"]):
        raise InputError(
            f"{folder}: --world-size {world_size} cannot be applied to a store of "
            f"format {meta.get('format')!r} (normalized tables of world size "
            f"{meta['world_size']}, no parsed dumps): export the dumps again"
        )
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


__all__ = [
    "DUMPS",
    "INLINE_MEMBERS_VERSION",
    "MARKER",
    "MEMBERS",
    "PARSED",
    "PARSED_VERSIONS",
    "STORE_VERSION",
    "TABLES_ONLY_VERSION",
    "has_parsed_dumps",
    "ranges",
    "read_store",
    "store_inputs",
    "write_parsed",
    "write_store",
]
