"""The parsed dumps one store holds (``dumps.parquet``, ``parsed.parquet`` and, from format 3,
``members.json``): written as the loader returned them, with its notes and the contexts found
beside them (:func:`write_parsed`), and read back, every value checked: a store is a file like
any other, it may have been damaged or made up (:func:`read_dumps`)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.config import DEFAULT_CONFIG
from analyzer.errors import InputError
from analyzer.load import (
    BOOL_FIELDS,
    COLUMN_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    STRING_FIELDS,
    Contexts,
    Loaded,
    ParsedDump,
    is_released,
)
from analyzer.store.layout import (
    CONTEXTS,
    DUMPS,
    INLINE_MEMBERS_VERSION,
    INPUTS,
    MEMBERS,
    PARSED,
    STAGING,
    STORE_VERSION,
    require_pyarrow,
)

__all__ = ["READ_BLOCK", "ROW_GROUP_ENTRIES", "read_dumps", "write_parsed"]


def write_parsed(
    loaded: Loaded, out: str | os.PathLike[str], contexts: Contexts | None = None
) -> Path:
    """The parsed dumps of ``loaded`` (with the loader's notes and ``contexts``) staged in
    ``out`` (created if needed), for ``write_store(..., staged=...)`` to complete the
    store with: call it before the dumps hand their entry columns over
    (``normalize(..., release=True)``). Returns the staging folder (remove it if the store
    is not completed)."""
    require_pyarrow()
    staging = Path(out) / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    _write_parsed(loaded, staging)
    (staging / INPUTS).write_text(json.dumps(_inputs_doc(loaded)) + "\n")
    (staging / CONTEXTS).write_text(json.dumps(_contexts_doc(contexts or Contexts())) + "\n")
    return staging


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
        "stale": [[r, why] for r, why in loaded.stale],
        "unaligned": [[r, why] for r, why in sorted(loaded.torchcomms.unaligned.items())],
        "unreadable_dirs": [list(u) for u in loaded.unreadable_dirs],
        "files": [[f.rank, os.fspath(f.path)] for f in loaded.files],
        "beside": [[f.rank, os.fspath(f.path)] for f in loaded.beside],
    }


def _contexts_doc(contexts: Contexts) -> dict[str, Any]:
    return {
        "by_rank": [asdict(c) for _, c in sorted(contexts.by_rank.items())],
        "skipped": [list(s) for s in contexts.skipped],
        "no_answer": [asdict(g) for _, g in sorted(contexts.no_answer.items())],
    }


def _ints(values: list[Any]) -> tuple[int, ...]:
    """A JSON list of member ranks as a tuple, refused unless every value is an int."""
    if not set(map(type, values)) <= {int}:
        raise ValueError("a member rank that is not an integer")
    if values and not 0 <= min(values) <= max(values) < DEFAULT_CONFIG.max_rank:
        raise ValueError(f"a member rank beyond any job's (0 to {DEFAULT_CONFIG.max_rank - 1:,})")
    return tuple(values)


def _check_codes(d: ParsedDump) -> None:
    """Every code of a re-opened dump points into its vocabularies and stacks (a store is
    a file like any other: it may have been damaged or made up)."""
    if not d.n_entries:
        return
    for f in STRING_FIELDS:
        codes = d.strings[f]
        if int(codes.min()) < 0 or int(codes.max()) >= len(d.vocab[f]):
            raise ValueError(f"{f} codes outside the dump's vocabulary")
    stack = d.ints["stack"]
    if int(stack.min()) < -1 or int(stack.max()) >= len(d.stacks):
        raise ValueError("stack indexes outside the dump's stacks")


def _member_lists(folder: Path, fmt: str) -> list[tuple[int, ...]] | None:
    """The store's distinct member lists (format 3), each checked once; None for format 2,
    whose pg_config holds its lists inline."""
    if fmt == INLINE_MEMBERS_VERSION:
        return None
    try:
        doc = json.loads((folder / MEMBERS).read_text())
        return [_ints(m) for m in doc["members"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{folder}: cannot read {MEMBERS} ({type(exc).__name__}: {exc})") from None


def _members_of(value: Any, lists: list[tuple[int, ...]] | None) -> tuple[int, ...] | None:
    """A pg_config entry's members: an index into ``lists`` (format 3), or the list (2)."""
    if value is None:
        return None
    if lists is None:
        return _ints(value)
    if type(value) is not int or not 0 <= value < len(lists):
        raise ValueError("a member list index outside members.json")
    return lists[value]


#: Dumps whose entry columns are copied out of the store together: each block owns its
#: arrays, so normalize (release=True) frees a block's memory as it copies it, as it frees
#: the parser's per-dump arrays.
READ_BLOCK = 256


def _column_blocks(name: str, values: np.ndarray, edges: list[int]) -> list[np.ndarray]:
    """``values`` cut at ``edges`` (entry offsets of the blocks of dumps), each block a copy
    in the narrowest width holding it: the store's column is then no longer needed."""
    from analyzer.load import narrow

    integers = name in INT_FIELDS or name in STRING_FIELDS
    out: list[np.ndarray] = []
    for lo, hi in pairwise(edges):
        part = values[lo:hi]
        block = narrow(part) if integers else part
        out.append(part.copy() if block is part else block)
    return out


def _parsed_column(table: Any, folder: Path, name: str) -> np.ndarray:
    """One column of parsed.parquet as numpy, refused unless of its kind (a store is a file
    like any other: it may have been damaged or made up)."""
    values = table.column(name).to_numpy()
    kind = values.dtype.kind
    ok = (
        kind == "b"
        if name in BOOL_FIELDS
        else kind == "f"
        if name in FLOAT_FIELDS
        else kind in "iu"
    )
    if not ok or (kind == "u" and values.dtype.itemsize == 8):
        raise InputError(
            f"{folder}: parsed.parquet column {name} holds {values.dtype}, not "
            f"{'bool' if name in BOOL_FIELDS else 'float' if name in FLOAT_FIELDS else 'integer'} values"
        )
    return values


def _opened(folder: Path, fmt: str) -> tuple[pd.DataFrame, Any]:
    """dumps.parquet read, parsed.parquet opened (a ``pyarrow.parquet.ParquetFile``), both
    refused unless they have the columns of ``fmt``."""
    import pyarrow.parquet as pq

    try:
        meta = pd.read_parquet(folder / "dumps.parquet")
        parsed = pq.ParquetFile(folder / "parsed.parquet")
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder}: cannot read its parsed dumps ({exc})") from None
    names = parsed.schema_arrow.names
    if list(meta.columns) != [c.name for c in DUMPS] or names != [c.name for c in PARSED]:
        raise InputError(
            f"{folder}: dumps.parquet or parsed.parquet has other columns than "
            f"{fmt} (written by another hangscope?)"
        )
    return meta, parsed


def _blocks(parsed: Any, folder: Path, edges: list[int]) -> dict[str, list[np.ndarray]]:
    """The entry columns of parsed.parquet, column by column (one whole column at a time in
    memory), each cut into blocks of dumps at ``edges``."""
    blocks: dict[str, list[np.ndarray]] = {}
    for name in (*INT_FIELDS, *BOOL_FIELDS, *FLOAT_FIELDS, *STRING_FIELDS):
        try:
            table = parsed.read(columns=[name])
        except (OSError, ValueError) as exc:
            raise InputError(
                f"{folder}: cannot read parsed.parquet column {name} ({exc})"
            ) from None
        blocks[name] = _column_blocks(name, _parsed_column(table, folder, name), edges)
        del table
    return blocks


_Columns = Callable[[int, tuple[str, ...]], dict[str, np.ndarray]]


def _dumps(
    meta: pd.DataFrame, lists: list[tuple[int, ...]] | None, cols: _Columns
) -> list[ParsedDump]:
    """The dumps of dumps.parquet's rows, ``cols(i, fields)`` the entry columns of the i-th;
    a malformed value raises ValueError, KeyError or TypeError."""
    out: list[ParsedDump] = []
    rows: list[Any] = list(meta.itertuples(index=False))
    # Dumps of one job repeat their pg_config (member lists as long as the world), stacks
    # and vocabularies: each distinct text is decoded once, its values shared.
    configs: dict[str, dict[str, tuple[str, tuple[int, ...] | None]]] = {}
    stack_lists: dict[str, list[tuple[tuple[str, str, int], ...]]] = {}
    vocabs: dict[str, dict[str, list[str]]] = {}
    for i, row in enumerate(rows):
        if row.pg_config not in configs:
            configs[row.pg_config] = {
                str(name): (str(desc), _members_of(members, lists))
                for name, (desc, members) in json.loads(row.pg_config).items()
            }
        if row.stacks not in stack_lists:
            stack_lists[row.stacks] = [
                tuple((str(n), str(fn), int(line)) for n, fn, line in key)
                for key in json.loads(row.stacks)
            ]
        if row.vocab not in vocabs:
            texts = json.loads(row.vocab)
            vocabs[row.vocab] = {f: [str(v) for v in texts[f]] for f in STRING_FIELDS}
        vocab = vocabs[row.vocab]
        d = ParsedDump(
            rank=int(row.rank),
            path=str(row.path),
            fmt=str(row.fmt),
            version=str(row.version),
            comm_lib_version=str(row.comm_lib_version),
            n_entries=int(row.n_entries),
            strings=cols(i, STRING_FIELDS),
            vocab={f: list(vocab[f]) for f in STRING_FIELDS},
            ints=cols(i, INT_FIELDS),
            bools=cols(i, BOOL_FIELDS),
            floats=cols(i, FLOAT_FIELDS),
            stacks=list(stack_lists[row.stacks]),
            pg_config=dict(configs[row.pg_config]),
            pg_status={
                int(k): (int(v[0]), int(v[1]), int(v[2]))
                for k, v in json.loads(row.pg_status).items()
            },
            warnings=[str(w) for w in json.loads(row.warnings)],
            suspect=bool(row.suspect),
            fingerprint=str(row.fingerprint),
            dropped_pg_ids={int(k): str(v) for k, v in json.loads(row.dropped_pg_ids).items()},
            reader=str(row.reader),
        )
        if not 0 <= d.rank < DEFAULT_CONFIG.max_rank:
            raise ValueError(
                f"rank {d.rank} beyond any job's (0 to {DEFAULT_CONFIG.max_rank - 1:,})"
            )
        _check_codes(d)
        out.append(d)
    return out


def read_dumps(folder: Path, fmt: str = STORE_VERSION) -> list[ParsedDump]:
    """The parsed dumps of the store ``folder`` (of format ``fmt``), as the loader returned
    them; :class:`InputError` for files that cannot be read or hold what no dump holds."""
    meta, parsed = _opened(folder, fmt)
    lists = _member_lists(folder, fmt)
    counts = meta["n_entries"].to_numpy(dtype=np.int64)
    rows_total = parsed.metadata.num_rows
    if int(counts.sum()) != rows_total or (len(counts) and int(counts.min()) < 0):
        raise InputError(
            f"{folder}: parsed.parquet has {rows_total} rows, dumps.parquet "
            f"counts {int(counts.sum())}"
        )
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    first = list(range(0, len(counts), READ_BLOCK)) + [len(counts)]
    edges = [int(starts[i]) for i in first]
    blocks = _blocks(parsed, folder, edges)

    def cols(i: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        b = i // READ_BLOCK
        lo, hi = int(starts[i]) - edges[b], int(starts[i + 1]) - edges[b]
        return {f: blocks[f][b][lo:hi] for f in fields}

    try:
        return _dumps(meta, lists, cols)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{folder}: dumps.parquet is malformed ({type(exc).__name__}: {exc})"
        ) from None
