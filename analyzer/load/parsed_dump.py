"""The parsed dump: one rank's dump flattened into columns, and the columns both readers build.

Strings are codes into per-column vocabularies; integers are narrowed to the smallest type
their values fit. A parsed dump crosses processes (parser processes, Dask workers): long
member lists travel packed (:mod:`analyzer.load.members`) and stacks as one pickled blob.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.config import AnalysisConfig
from analyzer.load import entry_columns as col
from analyzer.load import field_checks as val
from analyzer.load.group_tables import GroupConfig, GroupStatus
from analyzer.load.members import packed, unpacked
from analyzer.load.memo import BoundedMemo
from analyzer.unpickler import unpickle

__all__ = [
    "BOOL_FIELDS",
    "FLOAT_FIELDS",
    "INT_FIELDS",
    "STRING_FIELDS",
    "Columns",
    "ParsedDump",
    "int_columns",
]

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
            name: (desc, packed(members)) for name, (desc, members) in self.pg_config.items()
        }
        state[_STACKS] = pickle.dumps(self.stacks, protocol=pickle.HIGHEST_PROTOCOL)
        return tuple(state)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for f, value in zip(dataclasses.fields(self), state, strict=True):
            object.__setattr__(self, f.name, value)
        self.pg_config = {
            name: (desc, unpacked(members)) for name, (desc, members) in self.pg_config.items()
        }
        self.stacks = _unpacked_stacks(self.stacks)


_FIELD_NAMES = [f.name for f in dataclasses.fields(ParsedDump)]
_PG_CONFIG = _FIELD_NAMES.index("pg_config")
_STACKS = _FIELD_NAMES.index("stacks")
_UNPACKED_STACKS: BoundedMemo[bytes, list[tuple[tuple[str, str, int], ...]]] = BoundedMemo(
    "stacks unpickled from a parser's blob", 256, 16 << 20
)


def _unpacked_stacks(blob: Any) -> list[tuple[tuple[str, str, int], ...]]:
    """A dump's stacks from the blob :meth:`ParsedDump.__getstate__` made (a parser process
    pickled the plain tuples it read; unpickled as a dump is, refusing every global), one
    list per distinct blob."""
    if not isinstance(blob, bytes):
        return list(blob)
    known = _UNPACKED_STACKS.get(blob)
    if known is None:  # plain data: no global is taken
        known = _UNPACKED_STACKS.put(blob, unpickle(blob), len(blob))
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
