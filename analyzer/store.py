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
    DIR/inputs.json            the loader's notes: skipped, ignored and duplicate files
    DIR/contexts.json          captured context files (analyzer.capture), by rank

The first six are the normalized tables, for other tools. The parsed dumps (``dumps`` and
``parsed``) are what hangscope re-opens: a store holds exactly the dumps it was given (one
node's shard, say), and several stores of one job are merged by normalizing the union of
their dumps, which gives the tables the whole job's files give (:func:`open_stores`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.context import Contexts, RankContext, ThreadStack
from analyzer.discovery import RankFile
from analyzer.errors import InputError
from analyzer.loader import Duplicate, Ignored, Loaded, Progress, Skipped, resolve_ranks
from analyzer.reader import BOOL_FIELDS, FLOAT_FIELDS, INT_FIELDS, STRING_FIELDS, ParsedDump
from analyzer.schema import Col
from analyzer.tables import Tables

MARKER = "hangscope-store.json"
STORE_VERSION = "hangscope.store/2"
#: Stores of the first format hold the normalized tables only: re-opened alone, as they are.
TABLES_ONLY_VERSION = "hangscope.store/1"
INPUTS = "inputs.json"
CONTEXTS = "contexts.json"
_TABLES = {"entries": schema.ENTRIES, "groups": schema.GROUPS, "ranks": schema.RANKS,
           "status": schema.STATUS, "stacks": schema.STACKS, "skipped": schema.SKIPPED}

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
    Col("pg_config", "string", "JSON object: group name -> [desc, member ranks or null]"),
    Col("pg_status", "string", "JSON object: pg_id -> [last enqueued, started, completed]"),
    Col("dropped_pg_ids", "string", "JSON object: pg_id -> group name of dropped entries"),
    Col("vocab", "string", "JSON object: string column -> the dump's distinct values"),
    Col("stacks", "string", "JSON list: the dump's distinct stacks, frames [name, file, line]"),
)
_PARSED_DOC = {
    "pg_id": "backend-local group id", "record_id": "the buffer's own entry counter",
    "seq": "collective_seq_id", "p2p_seq": "p2p_seq_id", "op_id": "op_id",
    "time_created_ns": "enqueue time", "time_started_ns": "start observed (0 if not)",
    "time_completed_ns": "completion observed (0 if not)", "timeout_ms": "per-op timeout",
    "stack": "index into the dump's dumps.stacks (-1: no frames)",
    "peer_local": "group-local rank of the other side of a send/recv (-1: none)",
    "self_local": "group-local rank of the recording rank in the profiling name (-1: none)",
    "is_p2p": "send/recv", "retired": "left the watchdog's list", "coalesced": "a coalesced entry",
    "duration_ms": "GPU duration with timing on (NaN if not)",
}
PARSED: tuple[Col, ...] = (
    (Col("dump", "int32", "dumps.dump of the entry"),)
    + tuple(Col(f, "int64", _PARSED_DOC[f]) for f in INT_FIELDS)
    + tuple(Col(f, "bool", _PARSED_DOC[f]) for f in BOOL_FIELDS)
    + tuple(Col(f, "float64", _PARSED_DOC[f]) for f in FLOAT_FIELDS)
    + tuple(Col(f, "int32", f"code into the dump's dumps.vocab of {f}") for f in STRING_FIELDS)
)
_PARSED_TABLES = {"dumps": DUMPS, "parsed": PARSED}


def is_store(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder written by :func:`write_store`."""
    return (Path(path) / MARKER).is_file()


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise InputError("the Parquet store needs pyarrow: pip install pyarrow") from None


def write_store(tables: Tables, out: str | os.PathLike[str], *, loaded: Loaded | None = None,
                contexts: Contexts | None = None, world_option: int | None = None) -> Path:
    """Write ``tables`` as Parquet files into ``out`` (created if needed), with the parsed
    dumps of ``loaded`` (what makes stores mergeable) and the ``contexts`` found beside them.
    ``world_option``: the world size the user gave (None: worked out from the dumps)."""
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
        "world_size": tables.world_size, "world_option": world_option,
        "ranks": ranges(tables.dumped_ranks),
        "tables": {name: [c.name for c in cols] for name, cols in _TABLES.items()}}
    if loaded is not None:
        _write_parsed(loaded, folder)
        (folder / INPUTS).write_text(json.dumps(_inputs_doc(loaded)) + "\n")
        (folder / CONTEXTS).write_text(json.dumps(_contexts_doc(contexts or Contexts())) + "\n")
        meta["tables"].update({name: [c.name for c in cols] for name, cols in _PARSED_TABLES.items()})
    (folder / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    return folder


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


def _write_parsed(loaded: Loaded, folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dumps = loaded.dumps
    rows: dict[str, list[Any]] = defaultdict(list)
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
        rows["pg_config"].append(json.dumps(
            {name: [desc, None if members is None else list(members)]
             for name, (desc, members) in d.pg_config.items()}))
        rows["pg_status"].append(json.dumps({str(k): list(v) for k, v in d.pg_status.items()}))
        rows["dropped_pg_ids"].append(json.dumps({str(k): v for k, v in d.dropped_pg_ids.items()}))
        rows["vocab"].append(json.dumps({f: list(d.vocab[f]) for f in STRING_FIELDS}))
        rows["stacks"].append(json.dumps([[list(frame) for frame in key] for key in d.stacks]))
    schema.frame(DUMPS, rows).to_parquet(folder / "dumps.parquet", index=False)
    counts = np.array([d.n_entries for d in dumps], dtype=np.int64)
    columns: dict[str, np.ndarray] = {
        "dump": np.repeat(np.arange(len(dumps), dtype=np.int32), counts)}

    def joined(kind: str, name: str, dtype: type) -> np.ndarray:
        parts: list[np.ndarray] = [np.asarray(getattr(d, kind)[name], dtype=dtype)
                                   for d in dumps if d.n_entries]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

    for f in INT_FIELDS:
        columns[f] = joined("ints", f, np.int64)
    for f in BOOL_FIELDS:
        columns[f] = joined("bools", f, np.bool_)
    for f in FLOAT_FIELDS:
        columns[f] = joined("floats", f, np.float64)
    for f in STRING_FIELDS:
        columns[f] = joined("strings", f, np.int32)
    # One row group per 16 M entries: each column re-opens as one array (no concatenation).
    pq.write_table(pa.table({c.name: columns[c.name] for c in PARSED}), folder / "parsed.parquet",
                   row_group_size=1 << 24)


def _inputs_doc(loaded: Loaded) -> dict[str, Any]:
    return {
        "skipped": [[s.path, s.rank, s.reason] for s in loaded.skipped],
        "ignored": [[i.path, i.reason] for i in loaded.ignored],
        "duplicates": [[d.rank, d.kept, d.dropped, d.identical] for d in loaded.duplicates],
        "unreadable_dirs": [list(u) for u in loaded.unreadable_dirs],
        "files": [[f.rank, os.fspath(f.path)] for f in loaded.files],
    }


def _contexts_doc(contexts: Contexts) -> dict[str, Any]:
    return {"by_rank": [asdict(c) for _, c in sorted(contexts.by_rank.items())],
            "skipped": [list(s) for s in contexts.skipped]}


def _read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder}: not a hangscope store ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") not in (STORE_VERSION, TABLES_ONLY_VERSION):
        got = meta.get("format") if isinstance(meta, dict) else None
        raise InputError(f"{folder}: store format {got!r}, expected {STORE_VERSION!r}")
    return meta


def has_parsed_dumps(path: str | os.PathLike[str]) -> bool:
    """True for a store that holds its parsed dumps (mergeable, re-normalized when opened)."""
    return _read_meta(Path(path)).get("format") == STORE_VERSION


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
        raise InputError(f"cannot mix stores and dumps ({os.fspath(store)} is a store, "
                         f"{os.fspath(other)} is not): export the dumps first "
                         "(hangscope export) or give only dumps")
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
        raise InputError(f"{folder}: --world-size {world_size} cannot be applied to a store of "
                         f"format {meta.get('format')!r} (normalized tables of world size "
                         f"{meta['world_size']}, no parsed dumps): export the dumps again")
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


@dataclass(frozen=True)
class Exported:
    """What ``hangscope export`` writes: the normalized tables and what they were built from."""

    tables: Tables
    loaded: Loaded
    contexts: Contexts
    world_option: int | None


def prepare_export(inputs: list[str | os.PathLike[str]], *, prefix: str | None = None,
                   world_size: int | None = None, jobs: int | None = None,
                   progress: Progress | None = None, scheduler: str | None = None) -> Exported:
    """Load and normalize ``inputs`` (dumps, or stores to merge) for :func:`write_store`,
    as :func:`analyzer.analysis.analyze` does, without matching or diagnosing: a shard of a
    large job is no job to diagnose, and its store is written as it was given."""
    import gc

    from analyzer.context import find_contexts
    from analyzer.loader import load_dumps
    from analyzer.tables import normalize

    kind = store_inputs(inputs)
    if kind == "tables":
        raise InputError(f"{os.fspath(inputs[0])}: a store of format {TABLES_ONLY_VERSION!r} holds "
                         "no parsed dumps to export again: export the dumps")
    enabled = gc.isenabled()
    gc.disable()  # as the analysis does: millions of long-lived containers, no cycles
    try:
        if kind:
            opened = open_stores(inputs)
            loaded, contexts = opened.loaded, opened.contexts
            option = world_size or opened.world_option
        else:
            loaded = load_dumps(inputs, prefix=prefix, jobs=jobs, progress=progress,
                                scheduler=scheduler)
            contexts = find_contexts(inputs, [Path(d.path) for d in loaded.dumps])
            option = world_size
        world = option or contexts.world_hint(d.rank for d in loaded.dumps)
        tables = normalize(loaded, world_size=world)
    finally:
        if enabled:
            gc.enable()
    return Exported(tables=tables, loaded=loaded, contexts=contexts, world_option=option)


@dataclass(frozen=True)
class Opened:
    """Several stores (or one) as the loader's result: their dumps, notes and contexts."""

    loaded: Loaded
    contexts: Contexts
    #: The world size given when the stores were exported (None: worked out from the dumps).
    world_option: int | None
    #: Per store: its folder and the ranks it holds.
    stores: tuple[tuple[str, str], ...]


def _ints(values: list[Any]) -> tuple[int, ...]:
    """A JSON list of member ranks as a tuple, refused unless every value is an int."""
    if not set(map(type, values)) <= {int}:
        raise ValueError("a member rank that is not an integer")
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


def _read_dumps(folder: Path) -> list[ParsedDump]:
    import pyarrow.parquet as pq

    try:
        meta = pd.read_parquet(folder / "dumps.parquet")
        table = pq.read_table(folder / "parsed.parquet")
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder}: cannot read its parsed dumps ({exc})") from None
    if list(meta.columns) != [c.name for c in DUMPS] or table.column_names != [c.name for c in PARSED]:
        raise InputError(f"{folder}: dumps.parquet or parsed.parquet has other columns than "
                         f"{STORE_VERSION} (written by another hangscope?)")
    cols = {name: table.column(name).to_numpy() for name in table.column_names}
    counts = meta["n_entries"].to_numpy(dtype=np.int64)
    if int(counts.sum()) != table.num_rows:
        raise InputError(f"{folder}: parsed.parquet has {table.num_rows} rows, dumps.parquet "
                         f"counts {int(counts.sum())}")
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out: list[ParsedDump] = []
    try:
        rows: list[Any] = list(meta.itertuples(index=False))
        # Dumps of one job repeat their pg_config (member lists as long as the world), stacks
        # and vocabularies: each distinct text is decoded once, its values shared.
        configs: dict[str, dict[str, tuple[str, tuple[int, ...] | None]]] = {}
        stack_lists: dict[str, list[tuple[tuple[str, str, int], ...]]] = {}
        vocabs: dict[str, dict[str, list[str]]] = {}
        for i, row in enumerate(rows):
            lo, hi = int(starts[i]), int(starts[i + 1])
            if row.pg_config not in configs:
                configs[row.pg_config] = {
                    str(name): (str(desc), None if members is None else _ints(members))
                    for name, (desc, members) in json.loads(row.pg_config).items()}
            if row.stacks not in stack_lists:
                stack_lists[row.stacks] = [tuple((str(n), str(fn), int(line)) for n, fn, line in key)
                                           for key in json.loads(row.stacks)]
            if row.vocab not in vocabs:
                texts = json.loads(row.vocab)
                vocabs[row.vocab] = {f: [str(v) for v in texts[f]] for f in STRING_FIELDS}
            vocab = vocabs[row.vocab]
            d = ParsedDump(
                rank=int(row.rank), path=str(row.path), fmt=str(row.fmt), version=str(row.version),
                comm_lib_version=str(row.comm_lib_version), n_entries=int(row.n_entries),
                strings={f: cols[f][lo:hi] for f in STRING_FIELDS},
                vocab={f: list(vocab[f]) for f in STRING_FIELDS},
                ints={f: cols[f][lo:hi] for f in INT_FIELDS},
                bools={f: cols[f][lo:hi] for f in BOOL_FIELDS},
                floats={f: cols[f][lo:hi] for f in FLOAT_FIELDS},
                stacks=list(stack_lists[row.stacks]),
                pg_config=dict(configs[row.pg_config]),
                pg_status={int(k): (int(v[0]), int(v[1]), int(v[2]))
                           for k, v in json.loads(row.pg_status).items()},
                warnings=[str(w) for w in json.loads(row.warnings)],
                suspect=bool(row.suspect),
                fingerprint=str(row.fingerprint),
                dropped_pg_ids={int(k): str(v) for k, v in json.loads(row.dropped_pg_ids).items()},
                reader=str(row.reader),
            )
            _check_codes(d)
            out.append(d)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{folder}: dumps.parquet is malformed ({type(exc).__name__}: {exc})") from None
    return out


def _read_json(folder: Path, name: str) -> dict[str, Any]:
    try:
        doc = json.loads((folder / name).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / name}: cannot read ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{folder / name}: not a JSON object")
    return doc


def _contexts_of(doc: dict[str, Any]) -> Contexts:
    by_rank: dict[int, RankContext] = {}
    for c in doc.get("by_rank", []):
        c = dict(c)
        c["versions"] = dict(c.get("versions") or {})
        c["dumps"] = tuple(c.get("dumps") or ())
        c["threads"] = tuple(ThreadStack(t["name"], bool(t["main"]), tuple(t["frames"]))
                             for t in c.get("threads") or ())
        by_rank[int(c["rank"])] = RankContext(**c)
    return Contexts(by_rank=by_rank, skipped=tuple(tuple(s) for s in doc.get("skipped", [])))


def _content_digest(d: ParsedDump) -> str:
    """A hash of what a parsed dump holds (two stores holding one rank: the same dump?)."""
    h = hashlib.blake2b(digest_size=16)
    for kind in ("ints", "bools", "floats", "strings"):
        columns = getattr(d, kind)
        for name in sorted(columns):
            h.update(name.encode())
            h.update(np.ascontiguousarray(np.asarray(columns[name], dtype=np.float64 if kind == "floats" else np.int64)).tobytes())
    h.update(json.dumps([d.vocab, [list(map(list, s)) for s in d.stacks],
                         {k: [v[0], v[1] and list(v[1])] for k, v in d.pg_config.items()},
                         sorted(d.pg_status.items()), d.version, d.fmt]).encode())
    return "content:" + h.hexdigest()


def _config_majority(dumps: list[ParsedDump]) -> dict[str, tuple[int, ...]]:
    """Per group name, the member list most of these dumps' pg_config give."""
    votes: dict[str, dict[tuple[int, ...], int]] = defaultdict(lambda: defaultdict(int))
    for d in dumps:
        for name, (_, members) in d.pg_config.items():
            if name and members:
                votes[name][members] += 1
    return {name: max(v.items(), key=lambda kv: kv[1])[0] for name, v in votes.items()}


#: Stores whose newest entries are further apart than this many timeouts (and than
#: HANG_SLACK_NS) are of different jobs: when a job hangs, the first op to time out makes
#: every rank dump, so no rank enqueues anything more than about one timeout after another.
HANG_TIMEOUTS = 2
HANG_SLACK_NS = 10 * 10**9


def _same_hang(folders: list[Path], per_store: list[list[ParsedDump]]) -> None:
    """Refuse stores whose dumps cannot be of one hang (:data:`HANG_TIMEOUTS`)."""
    newest: list[tuple[int, Path]] = []
    timeout_ns = 0
    for folder, dumps in zip(folders, per_store):
        times = [int(np.max(d.ints["time_created_ns"])) for d in dumps if d.n_entries]
        if times:
            newest.append((max(times), folder))
        for d in dumps:
            if d.n_entries:
                timeout_ns = max(timeout_ns, int(np.max(d.ints["timeout_ms"])) * 10**6)
    if len(newest) < 2:
        return
    bound = max(HANG_TIMEOUTS * timeout_ns, HANG_SLACK_NS)
    (early, first), (late, last) = min(newest), max(newest)
    if late - early > bound:
        raise InputError(f"stores of different jobs: the newest entries of {first} and {last} are "
                         f"{(late - early) / 1e9:,.0f} s apart (one hang leaves them within "
                         f"{bound / 1e9:,.0f} s: {HANG_TIMEOUTS} op timeouts)")


def open_stores(paths: list[str | os.PathLike[str]]) -> Opened:
    """The union of the dumps of several stores (shards of one job), as the loader would
    have read the union of their files.

    A rank held by two stores: the same dump is merged (noted as a copy), two different
    dumps are resolved as the loader resolves two files of one rank (the newer kept, the
    other reported as dropped; ``--strict`` refuses). Raises :class:`InputError` for a
    store without its parsed dumps (format 1) among several, and for stores of different
    jobs: exported with different ``--world-size``, or whose group configurations give one
    group different members, or whose newest entries are too far apart in time for one
    hang (:data:`HANG_TIMEOUTS`).
    """
    _require_pyarrow()
    folders = [Path(p) for p in paths]
    metas = [_read_meta(f) for f in folders]
    for folder, meta in zip(folders, metas):
        if meta.get("format") != STORE_VERSION:
            raise InputError(f"{folder}: a store of format {meta.get('format')!r} holds no parsed "
                             "dumps and cannot be merged with others: export it again")
    options = {int(m["world_option"]) for m in metas if m.get("world_option") is not None}
    if len(options) > 1:
        given = ", ".join(f"{f} --world-size {m['world_option']}" for f, m in zip(folders, metas)
                          if m.get("world_option") is not None)
        raise InputError(f"stores of different jobs: exported with different world sizes ({given})")
    per_store = [_read_dumps(f) for f in folders]
    majority: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for folder, dumps in zip(folders, per_store):
        for name, members in _config_majority(dumps).items():
            seen = majority.setdefault(name, (folder, members))
            if seen[1] != members:
                raise InputError(f"stores of different jobs: group {name!r} has {len(seen[1])} "
                                 f"members in {seen[0]} and {len(members)} in {folder} "
                                 "(other member lists)")
    _same_hang(folders, per_store)
    holders: dict[int, set[int]] = defaultdict(set)
    for n, dumps in enumerate(per_store):
        for d in dumps:
            holders[d.rank].add(n)
    shared = {r for r, h in holders.items() if len(h) > 1}
    all_dumps = [d for dumps in per_store for d in dumps]
    for d in all_dumps:
        if d.rank in shared:
            d.fingerprint = _content_digest(d)
    dumps, new_duplicates = resolve_ranks(all_dumps)
    skipped: list[Skipped] = []
    ignored: list[Ignored] = []
    duplicates: list[Duplicate] = []
    unreadable: list[tuple[str, str]] = []
    files: list[RankFile] = []
    by_rank: dict[int, RankContext] = {}
    ctx_skipped: list[tuple[str, str]] = []
    for folder in folders:
        doc = _read_json(folder, INPUTS)
        try:
            skipped += [Skipped(str(p), int(r), str(w)) for p, r, w in doc.get("skipped", [])]
            ignored += [Ignored(str(p), str(w)) for p, w in doc.get("ignored", [])]
            duplicates += [Duplicate(int(r), str(k), str(dr), bool(i)) for r, k, dr, i in doc.get("duplicates", [])]
            unreadable += [(str(p), str(w)) for p, w in doc.get("unreadable_dirs", [])]
            files += [RankFile(int(r), Path(p)) for r, p in doc.get("files", [])]
            contexts = _contexts_of(_read_json(folder, CONTEXTS))
        except (ValueError, TypeError, KeyError) as exc:
            raise InputError(f"{folder}: {INPUTS} or {CONTEXTS} is malformed ({type(exc).__name__})") from None
        for rank, c in contexts.by_rank.items():
            old = by_rank.get(rank)
            if old is None or (c.time_ns or 0) > (old.time_ns or 0):
                by_rank[rank] = c
        ctx_skipped += contexts.skipped
    if len(folders) > 1:  # the orders the loader gives one set of files
        skipped.sort(key=lambda s: s.path)
        ignored.sort(key=lambda i: i.path)
        files.sort(key=lambda f: str(f.path))
        duplicates = sorted(duplicates + new_duplicates, key=lambda d: d.rank)
    if not dumps:
        raise InputError(f"{', '.join(map(str, folders))}: the store(s) hold no readable dump")
    loaded = Loaded(dumps=tuple(dumps), skipped=tuple(skipped), files=tuple(files),
                    ignored=tuple(ignored), duplicates=tuple(duplicates),
                    unreadable_dirs=tuple(unreadable))
    return Opened(loaded=loaded, contexts=Contexts(by_rank=dict(sorted(by_rank.items())),
                                                   skipped=tuple(ctx_skipped)),
                  world_option=next(iter(options), None),
                  stores=tuple((str(f), str(m.get("ranks", ""))) for f, m in zip(folders, metas)))


__all__ = [
    "DUMPS",
    "MARKER",
    "PARSED",
    "STORE_VERSION",
    "TABLES_ONLY_VERSION",
    "Exported",
    "Opened",
    "has_parsed_dumps",
    "is_store",
    "open_stores",
    "prepare_export",
    "ranges",
    "read_store",
    "store_inputs",
    "write_store",
]
