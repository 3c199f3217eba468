"""What a store folder holds: its files, the formats it is written in, the columns of its
tables, and its marker read back. Layout::

    DIR/hangscope-store.json   format marker, schema version, world size, ranks held, and
                               a digest of every other file (:func:`digest_of`)
    DIR/entries.parquet        analyzer.schema.ENTRIES
    DIR/groups.parquet         analyzer.schema.GROUPS (ranks as a list column)
    DIR/ranks.parquet          analyzer.schema.RANKS
    DIR/status.parquet         analyzer.schema.STATUS
    DIR/stacks.parquet         analyzer.schema.STACKS
    DIR/skipped.parquet        analyzer.schema.SKIPPED
    DIR/dumps.parquet          DUMPS: one row per parsed dump (its own vocabularies, pg_config...)
    DIR/parsed.parquet         PARSED: the parsed dumps' columns, as the reader returned them
    DIR/members.json           the distinct member lists of the dumps' pg_config, once each
    DIR/inputs.json            the loader's notes: skipped, ignored and duplicate files,
                               ranks whose only dump was an older round's
    DIR/contexts.json          captured context files (analyzer.capture), by rank

The first six are the normalized tables, for other tools (:mod:`~analyzer.store.parquet`). The
parsed dumps (``dumps`` and ``parsed``, :mod:`~analyzer.store.parsed_dumps`) are what hangscope
re-opens: a store holds exactly the dumps it was given (one node's shard, say), and several
stores of one job are merged by normalizing the union of their dumps, which gives the tables
the whole job's files give (:func:`analyzer.store.merge.open_stores`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from analyzer import schema
from analyzer.config import DEFAULT_CONFIG
from analyzer.errors import InputError
from analyzer.load import BOOL_FIELDS, FLOAT_FIELDS, INT_FIELDS, STORE_MARKER, STRING_FIELDS
from analyzer.schema import Col

__all__ = [
    "CONTEXTS",
    "DUMPS",
    "INLINE_MEMBERS_VERSION",
    "INPUTS",
    "MARKER",
    "MEMBERS",
    "PARSED",
    "PARSED_FILES",
    "PARSED_TABLES",
    "PARSED_VERSIONS",
    "STAGING",
    "STORE_VERSION",
    "TABLES",
    "TABLES_ONLY_VERSION",
    "StoreNote",
    "check_parts",
    "digest_of",
    "read_meta",
    "require_pyarrow",
    "store_rank",
    "stray_dumps",
]

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
#: The normalized tables, by file name (``NAME.parquet``).
TABLES = {
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
#: The parsed dumps' tables, by file name (``NAME.parquet``).
PARSED_TABLES = {"dumps": DUMPS, "parsed": PARSED}

#: Where :func:`~analyzer.store.parsed_dumps.write_parsed` puts the parsed dumps inside the
#: store's folder until :func:`~analyzer.store.parquet.write_store` moves them in: a folder
#: the export stopped in keeps what it held.
STAGING = ".parsed.partial"
#: The files of the parsed dumps (and the loader's notes, and the contexts).
PARSED_FILES = ("dumps.parquet", "parsed.parquet", MEMBERS, INPUTS, CONTEXTS)
_STORE_FILES = frozenset({MARKER, *PARSED_FILES, *(f"{n}.parquet" for n in TABLES)})


def require_pyarrow() -> None:
    """Refuse (:class:`InputError`) when pyarrow, which reads and writes the Parquet files, is
    missing."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise InputError("the Parquet store needs pyarrow: pip install pyarrow") from None


def read_meta(folder: Path) -> dict[str, Any]:
    """The store's marker (:data:`MARKER`), refused (:class:`InputError`) unless it names a
    format this version reads, its fields are what a job can have (a world of at most
    4,194,304 ranks, as for dumps: a store is a file like any other), and every file it
    lists a digest for is the one written with it (:func:`check_parts`)."""
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
    _check_world(folder, meta, "world_size", required=True)
    _check_world(folder, meta, "world_option", required=False)
    check_parts(folder, meta)
    return meta


def _check_world(folder: Path, meta: dict[str, Any], key: str, *, required: bool) -> None:
    value = meta.get(key)
    if value is None and not required:
        return
    top = DEFAULT_CONFIG.max_rank
    if type(value) is not int or not 1 <= value <= top:
        raise InputError(
            f"{folder}: {MARKER} gives {key} {str(value)[:40]}: no job has that many ranks "
            f"(1 to {top:,})"
        )


def digest_of(path: Path) -> str:
    """What ties a file to the store it was written for: its size, its first 4 KB and its
    last 64 KB (a Parquet file's footer: its schema, row groups and their offsets) hashed.
    Cheap at any size; a file copied from another store, or cut short, has another."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(size.to_bytes(8, "little"))
        h.update(f.read(4096))
        f.seek(max(4096, size - 65536))
        h.update(f.read())
    return h.hexdigest()


def check_parts(folder: Path, meta: dict[str, Any]) -> None:
    """Every file the marker gives a digest for (stores written since digests were) is
    the one written with it: not copied from another store, cut short or rewritten."""
    digests = meta.get("digests")
    if digests is None:  # written before digests were: nothing to check against
        return
    if not isinstance(digests, dict):
        raise InputError(f"{folder}: {MARKER} has malformed digests")
    for name, want in digests.items():
        if not isinstance(name, str) or os.path.basename(name) != name or name == MARKER:
            raise InputError(f"{folder}: {MARKER} has a digest for {str(name)[:60]!r}")
        try:
            got = digest_of(folder / name)
        except OSError as exc:
            raise InputError(f"{folder / name}: cannot read ({exc.strerror or exc})") from None
        if got != want:
            raise InputError(
                f"{folder / name}: not the file written with this store (its digest differs "
                f"from {MARKER}'s): copied from another store, cut short or changed? "
                "Export the dumps again"
            )


def store_rank(value: Any, lowest: int = 0) -> int:
    """A rank of a store's notes, checked as a dump's name's would be (ValueError)."""
    if type(value) is not int or not lowest <= value < DEFAULT_CONFIG.max_rank:
        raise ValueError(f"rank {str(value)[:30]} beyond any job's")
    return value


class StoreNote(UserWarning):
    """A store folder holds what its analysis does not read (files named like dumps)."""


def stray_dumps(folder: Path) -> None:
    """Warn (:class:`StoreNote`) when the store ``folder`` also holds files named like
    dumps: the store is what is analyzed, those files are not read."""
    import warnings

    from analyzer.load import is_dump_name

    try:
        names = [n for n in os.listdir(folder) if is_dump_name(n) and n not in _STORE_FILES]
    except OSError:
        return
    if names:
        names.sort()
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        warnings.warn(
            StoreNote(
                f"{folder} is a store and also holds files named like dumps ({names[0]}{more}): "
                "the store is analyzed, those files are not read (give them by name, or "
                "export them to another folder)"
            ),
            stacklevel=3,
        )
