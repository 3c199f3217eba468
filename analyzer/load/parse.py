"""Read one dump file (pickle or JSON) safely and flatten its entries into columns.

The pickle reader refuses every global (:mod:`analyzer.unpickler`), so a crafted file that
names ``os.system`` (or any other callable) is reported as unsafe and nothing in it runs.
Parsing happens in worker processes for large dump sets, so :func:`parse_dump` returns
compact columns (integer codes plus small vocabularies) instead of per-entry dicts.

Every value is checked column by column (:mod:`analyzer.load.entry_columns`, once per distinct object
with :mod:`analyzer.load.field_checks`), within the caps of an :class:`~analyzer.config.AnalysisConfig`.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import DumpFormatError
from analyzer.load import entry_columns as col
from analyzer.load import field_checks as val
from analyzer.load.decode import decode, first_payload
from analyzer.load.field_checks import Reasons
from analyzer.load.group_tables import (
    GroupConfig,
    GroupStatus,
    group_tables,
)
from analyzer.load.unpack import Payload
from analyzer.unpickler import unpickle

#: Columns holding repeated strings, encoded per file as codes into a vocabulary.
STRING_FIELDS: tuple[str, ...] = (
    "pg_name",
    "pg_desc",
    "op",
    "backend",
    "profiling_name",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "thread_name",
)
#: Integer columns (``time_*`` are 0 when not observed, as in JSON dumps).
INT_FIELDS: tuple[str, ...] = (
    "pg_id",
    "record_id",
    "seq",
    "p2p_seq",
    "op_id",
    "time_created_ns",
    "time_started_ns",
    "time_completed_ns",
    "timeout_ms",
    "stack",
    "peer_local",
    "self_local",
)
BOOL_FIELDS: tuple[str, ...] = ("is_p2p", "retired", "coalesced")
FLOAT_FIELDS: tuple[str, ...] = ("duration_ms",)

#: The default caps (:class:`~analyzer.config.AnalysisConfig`); the readers take a config.
MAX_COUNTER = DEFAULT_CONFIG.max_counter
MAX_RANK = DEFAULT_CONFIG.max_rank

__all__ = [
    "BOOL_FIELDS",
    "FLOAT_FIELDS",
    "INT_FIELDS",
    "MAX_COUNTER",
    "MAX_RANK",
    "STRING_FIELDS",
    "Columns",
    "ParsedDump",
    "int_columns",
    "parse_dump",
    "parse_payload",
]


@dataclass(slots=True)
class ParsedDump:
    """One rank's dump, flattened. Strings are codes into per-column vocabularies."""

    rank: int
    path: str
    fmt: str
    version: str
    comm_lib_version: str
    n_entries: int
    strings: dict[str, np.ndarray]
    vocab: dict[str, list[str]]
    ints: dict[str, np.ndarray]
    bools: dict[str, np.ndarray]
    floats: dict[str, np.ndarray]
    stacks: list[tuple[tuple[str, str, int], ...]]
    pg_config: dict[str, tuple[str, tuple[int, ...] | None]]
    pg_status: dict[int, tuple[int, int, int]]
    warnings: list[str] = field(default_factory=list)
    #: Entries were dropped or values were implausible: the dump alone does not blame its rank.
    suspect: bool = False
    #: Hash of the dump's bytes (after decompression), when asked for (duplicate files).
    fingerprint: str = ""
    #: pg_id -> group name that dropped entries showed (they still map pg_status keys).
    dropped_pg_ids: dict[int, str] = field(default_factory=dict)
    #: Which reader read it: "python" (this module) or "native" (:mod:`analyzer.load.parse_native`).
    reader: str = "python"

    # Between processes, member lists travel as the bytes of an int32 array (the default
    # group's lists every rank: 16,384 ints per dump at 16k ranks), and equal lists come
    # back as one tuple.
    # Its stacks travel as one pickled blob, and equal blobs come back as one list: ranks
    # share their stacks, so most dumps' frames are neither built again nor kept twice.
    def __getstate__(self) -> tuple[Any, ...]:
        state = [getattr(self, f.name) for f in dataclasses.fields(self)]
        state[_PG_CONFIG] = {
            name: (desc, _packed(members)) for name, (desc, members) in self.pg_config.items()
        }
        state[_STACKS] = pickle.dumps(self.stacks, protocol=pickle.HIGHEST_PROTOCOL)
        return tuple(state)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for f, value in zip(dataclasses.fields(self), state, strict=True):
            object.__setattr__(self, f.name, value)
        self.pg_config = {
            name: (desc, _unpacked(members)) for name, (desc, members) in self.pg_config.items()
        }
        self.stacks = _unpacked_stacks(self.stacks)


_FIELD_NAMES = [f.name for f in dataclasses.fields(ParsedDump)]
_PG_CONFIG = _FIELD_NAMES.index("pg_config")
_STACKS = _FIELD_NAMES.index("stacks")
_UNPACKED: dict[bytes, tuple[int, ...]] = {}
_UNPACKED_STACKS: dict[bytes, list[tuple[tuple[str, str, int], ...]]] = {}
_STACKS_CACHE_BYTES = 16 << 20


def _unpacked_stacks(blob: Any) -> list[tuple[tuple[str, str, int], ...]]:
    """A dump's stacks from the blob :meth:`ParsedDump.__getstate__` made (a parser process
    pickled the plain tuples it read; unpickled as a dump is, refusing every global), one
    list per distinct blob."""
    if not isinstance(blob, bytes):
        return list(blob)
    known = _UNPACKED_STACKS.get(blob)
    if known is None:
        if len(_UNPACKED_STACKS) >= 256 or sum(map(len, _UNPACKED_STACKS)) > _STACKS_CACHE_BYTES:
            _UNPACKED_STACKS.clear()
        known = _UNPACKED_STACKS[blob] = unpickle(blob)  # plain data: no global is taken
    return known


_PACKED: dict[int, tuple[tuple[int, ...], bytes]] = {}


def _packed(members: tuple[int, ...] | None) -> bytes | tuple[int, ...] | None:
    if not members or len(members) < 64:
        return members
    known = _PACKED.get(id(members))  # the tuple is kept with its bytes: its id stays its own
    if known is not None and known[0] is members:
        return known[1]
    try:
        packed = np.asarray(members, dtype=np.int32).tobytes()
    except OverflowError:  # pragma: no cover - ranks are bounded by max_rank
        return members
    if len(_PACKED) >= 256:
        _PACKED.clear()
    _PACKED[id(members)] = (members, packed)
    return packed


def _unpacked(members: bytes | tuple[int, ...] | None) -> tuple[int, ...] | None:
    if not isinstance(members, bytes):
        return members
    known = _UNPACKED.get(members)
    if known is None:
        if len(_UNPACKED) >= 256:
            _UNPACKED.clear()
        known = _UNPACKED[members] = tuple(np.frombuffer(members, dtype=np.int32).tolist())
    return known


def int_columns(config: AnalysisConfig) -> dict[str, tuple[str, int, int, int, bool]]:
    """Integer columns: field -> (entry key, default, lo, hi, entry dropped when bad)."""
    top = config.max_counter
    return {
        "pg_id": ("pg_id", -1, -1, 1 << 31, False),
        "record_id": ("record_id", -1, -1, 1 << 62, False),
        "seq": ("collective_seq_id", -1, -1, top, True),
        "p2p_seq": ("p2p_seq_id", -1, -1, top, True),
        "op_id": ("op_id", -1, -1, top, False),
        "time_created_ns": ("time_created_ns", 0, 0, 1 << 63, False),
        "time_started_ns": ("time_discovered_started_ns", 0, 0, 1 << 63, False),
        "time_completed_ns": ("time_discovered_completed_ns", 0, 0, 1 << 63, False),
        "timeout_ms": ("timeout_ms", 0, 0, 1 << 62, False),
    }


@dataclass(slots=True)
class Columns:
    """The columns of one dump as they are built, by either reader."""

    strings: dict[str, np.ndarray] = field(default_factory=dict)
    vocab: dict[str, list[str]] = field(default_factory=dict)
    ints: dict[str, np.ndarray] = field(default_factory=dict)
    #: The smallest and largest value of integer columns, where known (saves two passes).
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    def encode(self, name: str, index: np.ndarray, texts: list[str]) -> None:
        """``name`` of each entry is ``texts[index]``; store it as codes into a vocabulary."""
        codes, self.vocab[name] = col.vocab(texts)
        self.strings[name] = codes[index] if len(codes) else np.empty(0, dtype=np.int32)

    def encode_names(self, index: np.ndarray, names: list[str], split: list[val.NameSplit]) -> None:
        """Profiling names, and the backend, op and group-local ranks they give."""
        self.encode("profiling_name", index, names)
        self.encode("op", index, [backend_op[1] for backend_op in split])
        self.encode("backend", index, [backend_op[0] for backend_op in split])
        self.ints["peer_local"] = np.array([p[3] for p in split] or [-1], dtype=np.int64)[index]
        self.ints["self_local"] = np.array([p[2] for p in split] or [-1], dtype=np.int64)[index]

    def finish(
        self,
        *,
        rank: int,
        path: str,
        fmt: str,
        top: dict[str, Any],
        n: int,
        flags: tuple[np.ndarray, np.ndarray, np.ndarray],
        tables: tuple[GroupConfig, GroupStatus],
    ) -> ParsedDump:
        """The parsed dump: integers narrowed, the flags derived from the op names.
        ``flags`` is (is_p2p, retired, duration_ms) as the entries give them."""
        is_p2p, retired, duration = flags
        ints = {key: col.narrow(self.ints[key], self.bounds.get(key)) for key in INT_FIELDS}
        # Codes index their vocabulary: they lie in [0, its length).
        strings = {
            key: col.narrow(codes, (0, max(len(self.vocab[key]) - 1, 0)))
            for key, codes in self.strings.items()
        }
        ops = self.vocab["op"]
        op_codes = strings["op"]
        sendrecv = np.array([op in ("send", "recv") for op in ops] or [False], dtype=bool)[op_codes]
        coalesced = np.array(["coalesced" in op for op in ops] or [False], dtype=bool)[op_codes]
        return ParsedDump(
            rank=rank,
            path=path,
            fmt=fmt,
            version=val.version_text(top.get("version", "")),
            comm_lib_version=val.version_text(
                top.get("comm_lib_version") or top.get("nccl_version") or ""
            ),
            n_entries=n,
            strings={k: strings[k] for k in STRING_FIELDS},
            vocab={k: self.vocab[k] for k in STRING_FIELDS},
            ints=ints,
            bools={"is_p2p": is_p2p | sendrecv, "retired": retired, "coalesced": coalesced},
            floats={"duration_ms": duration},
            stacks=[],
            pg_config=tables[0],
            pg_status=tables[1],
        )


class _Parse:
    """One Python-reader parse: the columns, the entries dropped and the reasons counted."""

    def __init__(self, entries: list[dict[str, Any]], why: Reasons, config: AnalysisConfig) -> None:
        self.entries, self.why, self.config = entries, why, config
        self.cols = Columns()
        self.drop = np.zeros(len(entries), dtype=bool)

    def reject(
        self, index: np.ndarray, bad_distinct: list[int], reason: str, *, entry: bool
    ) -> None:
        """Entries whose value is one of the distinct values ``bad_distinct``."""
        if not bad_distinct:
            return
        rows = np.isin(index, bad_distinct)
        count = int(rows.sum())
        if entry:
            self.drop[rows] = True
            self.why.entries[reason] += count
        else:
            self.why.fields[reason] += count

    def distinct(self, key: str) -> tuple[np.ndarray, list[Any]]:
        return col.distinct(col.column(self.entries, key))

    def names(self) -> None:
        """Profiling name -> backend, op and the group-local ranks of a send/recv."""
        index, values = self.distinct("profiling_name")
        names, split, not_str, odd = val.check_names(values, self.config.max_rank)
        self.reject(index, not_str, "profiling_name is not a string", entry=True)
        self.reject(index, odd, "profiling_name is not a backend:op name", entry=True)
        self.cols.encode_names(index, names, split)

    def groups(self) -> tuple[np.ndarray, list[tuple[str, str] | None]]:
        """Group name and description; (each entry's index, the distinct groups)."""
        index, values = self.distinct("process_group")
        parts = [val.group_parts(pg) for pg in values]
        self.reject(
            index,
            [i for i, pg in enumerate(parts) if pg is None],
            "process_group is missing or not (name, desc) strings",
            entry=True,
        )
        pg_parts = [pg or ("", "") for pg in parts]
        self.cols.encode("pg_name", index, [name for name, _ in pg_parts])
        self.cols.encode("pg_desc", index, [desc for _, desc in pg_parts])
        return index, parts

    def lists(self) -> None:
        """Sizes and dtypes are compared across ranks: a value that is not one would read as
        a desync, so its entry is dropped rather than kept with a made-up value."""
        for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
            index, values = self.distinct(key)
            texts, ok = val.check_lists(values, key, self.config)
            what = "a list of shapes" if key.endswith("_sizes") else "a list of dtype names"
            self.reject(
                index,
                [i for i, good in enumerate(ok) if not good],
                f"{key} is not {what}",
                entry=True,
            )
            self.cols.encode(key, index, texts)

    def texts(self) -> None:
        """State and thread name: a bad one reads as not observed."""
        for key, check, reason in (
            ("state", val.check_state, "state is not a short string"),
            ("thread_name", val.check_thread, "thread_name is not a string"),
        ):
            index, values = self.distinct(key)
            texts, ok = check(values)
            self.reject(index, [i for i, good in enumerate(ok) if not good], reason, entry=False)
            self.cols.encode(key, index, texts)

    def stacks(self) -> list[tuple[val.Frame, ...]]:
        """Stacks: one key per distinct frames object, one stack id per distinct key."""
        index, values = self.distinct("frames")
        keys = val.stack_keys(values, self.config)
        self.reject(
            index,
            [i for i, k in enumerate(keys) if k is None],
            "frames is not a list of frames",
            entry=False,
        )
        per_distinct, stacks = val.stack_ids(keys)
        self.cols.ints["stack"] = per_distinct[index]
        return stacks

    def ints(self) -> None:
        """Counters, ids and times, each checked against its range."""
        for name, (key, default, lo, hi, is_entry) in int_columns(self.config).items():
            values, bad_rows = col.checked_ints(col.column(self.entries, key), default, lo, hi)
            if bad_rows.any():
                count = int(bad_rows.sum())
                if is_entry:
                    self.drop |= bad_rows
                    self.why.entries[f"{key} is not a sequence number"] += count
                else:
                    self.why.fields[f"{key} is not an integer in range"] += count
            self.cols.ints[name] = values

    def keep(
        self, pg_index: np.ndarray, parts: list[tuple[str, str] | None], flags: list[np.ndarray]
    ) -> dict[int, str]:
        """Drop the rejected entries; what they still prove: which backend-local pg_id is
        which group, so that the dump's pg_status counters of that group still count."""
        dropped_pg_ids: dict[int, str] = {}
        if not self.drop.any():
            return dropped_pg_ids
        pg_ids = self.cols.ints["pg_id"]
        for row in np.flatnonzero(self.drop).tolist():
            pg = parts[pg_index[row]]
            pid = int(pg_ids[row])
            if pg is not None and pid >= 0:
                dropped_pg_ids.setdefault(pid, pg[0])
        keep = ~self.drop
        self.cols.strings = {k: v[keep] for k, v in self.cols.strings.items()}
        self.cols.ints = {k: v[keep] for k, v in self.cols.ints.items()}
        flags[:] = [f[keep] for f in flags]
        return dropped_pg_ids


def _entries_of(raw: dict[str, Any], path: str, why: Reasons) -> list[dict[str, Any]]:
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise DumpFormatError(path, f"'entries' is a {type(entries).__name__}, not a list")
    if any(t is not dict for t in set(map(type, entries))):
        kept = [e for e in entries if isinstance(e, dict)]
        if len(entries) - len(kept):
            why.entries["not an object"] += len(entries) - len(kept)
        entries = kept
    return entries


def parse_dump(rank: int, path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG) -> ParsedDump:
    """Read and flatten one dump file. Raises :class:`DumpFormatError` on bad input."""
    return parse_payload(rank, first_payload(path, config=config), config=config)


def parse_payload(
    rank: int, payload: Payload, *, config: AnalysisConfig = DEFAULT_CONFIG
) -> ParsedDump:
    """Decode and flatten one dump. Raises :class:`DumpFormatError` on bad input.

    Every value is checked column by column (once per distinct object for names, sizes,
    groups and frames; with numpy for counters): an entry whose identity is broken (not an
    object, an op name or group that is not one, a sequence number out of range) is dropped,
    any other bad value reads as 'not observed'. Each drop is counted with its reason in
    ``warnings``, and the dump is then marked ``suspect``.
    """
    raw = decode(payload)
    path = payload.label
    why = Reasons()
    entries = _entries_of(raw, str(path), why)
    p = _Parse(entries, why, config)
    p.names()
    pg_index, parts = p.groups()
    p.lists()
    p.texts()
    stacks = p.stacks()
    p.ints()
    flags = [
        col.bools(col.column(entries, "is_p2p")),
        col.bools(col.column(entries, "retired")),
        col.floats(col.column(entries, "duration_ms")),
    ]
    dropped_pg_ids = p.keep(pg_index, parts, flags)
    tables = group_tables(raw, why, config)
    n = len(p.cols.ints["record_id"])
    if why.entries and not n and not tables[1]:
        # Nothing of it can be used: a crafted or broken file, not a rank's evidence.
        raise DumpFormatError(str(path), "no usable entry (" + "; ".join(why.lines()[:3]) + ")")
    parsed = p.cols.finish(
        rank=rank,
        path=str(path),
        fmt=payload.fmt,
        top=raw,
        n=n,
        flags=(flags[0], flags[1], flags[2]),
        tables=tables,
    )
    parsed.stacks = stacks
    parsed.warnings = why.lines()
    parsed.suspect = bool(why.entries) or bool(why.fields)
    parsed.dropped_pg_ids = dropped_pg_ids
    parsed.fingerprint = payload.fingerprint
    return parsed
