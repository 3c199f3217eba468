"""Read one dump file (pickle or JSON) safely and flatten its entries into columns.

The pickle reader refuses every global, so a crafted file that names ``os.system`` (or any
other callable) is reported as unsafe and nothing in it runs. Parsing happens in worker
processes for large dump sets, so :func:`parse_dump` returns compact columns (integer codes
plus small vocabularies) instead of per-entry dicts.
"""

from __future__ import annotations

import gc
import io
import json
import math
import pickle
import re
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.errors import DumpFormatError, UnsafeDumpError

#: Columns holding repeated strings, encoded per file as codes into a vocabulary.
STRING_FIELDS: tuple[str, ...] = (
    "pg_name", "pg_desc", "op", "backend", "profiling_name", "input_sizes", "output_sizes",
    "input_dtypes", "output_dtypes", "state", "thread_name",
)
#: Integer columns (``time_*`` are 0 when not observed, as in JSON dumps).
INT_FIELDS: tuple[str, ...] = (
    "pg_id", "record_id", "seq", "p2p_seq", "op_id", "time_created_ns", "time_started_ns",
    "time_completed_ns", "timeout_ms", "stack", "peer_local", "self_local",
)
BOOL_FIELDS: tuple[str, ...] = ("is_p2p", "retired", "coalesced")
FLOAT_FIELDS: tuple[str, ...] = ("duration_ms",)

_P2P = re.compile(r"^(send|recv)\s*(?:(\d+)\s*(->|<-)\s*(\d+))?")
_MAX_FILE_BYTES = 8 << 30


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def _unpickle(data: bytes) -> Any:
    """Unpickle with :class:`_SafeUnpickler` as fast as ``pickle.loads``.

    The C unpickler reads a bare ``BytesIO`` a few bytes per opcode; behind a
    ``BufferedReader`` it takes whole buffers (4x faster on a 2,000-entry dump). The cyclic
    garbage collector is paused meanwhile: unpickling creates hundreds of thousands of
    containers, none of them garbage, and each collection would walk them all.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _SafeUnpickler(io.BufferedReader(io.BytesIO(data))).load()
    finally:
        if was_enabled:
            gc.enable()


def load_raw(path: Path) -> tuple[dict[str, Any], str]:
    """The top-level dict of a dump and its format (``"pickle"`` or ``"json"``).

    Raises :class:`UnsafeDumpError` for a pickle that names code, and
    :class:`DumpFormatError` for an empty, truncated or foreign file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DumpFormatError(str(path), f"cannot read: {exc.strerror or exc}") from None
    # The first non-blank byte, without copying the file (dumps are megabytes).
    head = data[:64].lstrip()[:1]
    if not head:
        head = data.lstrip()[:1]
        if not head:
            raise DumpFormatError(str(path), "empty file")
    if head in (b"{", b"["):
        fmt = "json"
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise DumpFormatError(str(path), f"truncated or invalid JSON ({exc})") from None
    elif data[:1] == b"\x80":
        fmt = "pickle"
        try:
            obj = _unpickle(data)
        except pickle.UnpicklingError as exc:
            if "refused" in str(exc):
                raise UnsafeDumpError(
                    str(path), f"unsafe pickle: {exc} (a real dump holds only plain data; not executed)"
                ) from None
            raise DumpFormatError(str(path), f"truncated or corrupt pickle ({exc})") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
                MemoryError, RecursionError, UnicodeDecodeError) as exc:
            raise DumpFormatError(
                str(path), f"truncated or corrupt pickle ({type(exc).__name__})"
            ) from None
    else:
        raise DumpFormatError(str(path), "not a flight-recorder dump (neither pickle nor JSON)")
    if not isinstance(obj, dict):
        raise DumpFormatError(str(path), f"not a flight-recorder dump (top level is {type(obj).__name__})")
    if "version" not in obj or not ({"entries", "pg_config", "pg_status"} & obj.keys()):
        raise DumpFormatError(
            str(path), f"not a flight-recorder dump (keys {sorted(map(str, obj))[:8]})"
        )
    return obj, fmt


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
    #: Which reader read it: "python" (this module) or "native" (:mod:`analyzer.fastreader`).
    reader: str = "python"


def _int(value: Any, default: int = 0) -> int:
    """Ints from pickles, numeric strings from JSON, None/0 for 'not observed'."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def _int64(value: Any, default: int) -> int:
    """:func:`_int`, with ``default`` for what int64 cannot hold."""
    n = _int(value, default)
    return n if -(1 << 63) <= n < (1 << 63) else default


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return json.dumps(_plain(value), separators=(", ", ": "))
    return "" if value is None else str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def parse_ranks(text: Any) -> tuple[int, ...] | None:
    """Member ranks of a ``pg_config`` entry: ``"[0, 1, 2]"`` (string) or a list."""
    if isinstance(text, (list, tuple)):
        try:
            return tuple(int(r) for r in text)
        except (TypeError, ValueError):
            return None
    if not isinstance(text, str):
        return None
    body = text.strip().strip("[]()")
    if not body.strip():
        return ()
    try:
        return tuple(int(part) for part in body.split(","))
    except ValueError:
        return None


_MEMBERS_SEEN: dict[str, tuple[tuple[int, ...] | None]] = {}


def _member_ranks(text: Any) -> tuple[int, ...] | None:
    """:func:`parse_ranks`, remembering recent texts and returning the same tuple for them.

    Every dump repeats the member list of each of its groups, and the default group lists
    every rank: parsing it in each dump would cost world size squared, and shared tuples
    are pickled once per batch of dumps sent back by a parser process.
    """
    if not isinstance(text, str):
        return parse_ranks(text)
    known = _MEMBERS_SEEN.get(text)
    if known is None:
        if len(_MEMBERS_SEEN) >= 256:
            _MEMBERS_SEEN.clear()
        known = _MEMBERS_SEEN[text] = (parse_ranks(text),)
    return known[0]


class SameMembers:
    """Equal member tuples -> one object (the first seen), hashing a tuple only when it is
    not the object seen last under the same group name."""

    def __init__(self) -> None:
        self.by_value: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.last: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def __call__(self, name: str, members: tuple[int, ...]) -> tuple[int, ...]:
        last = self.last.get(name)
        if last is not None and last[0] is members:
            return last[1]
        same = self.by_value.setdefault(members, members)
        self.last[name] = (members, same)
        return same


def split_profiling_name(name: str) -> tuple[str, str, int, int]:
    """``"nccl:send 0->1"`` -> (backend, op, self_local, peer_local); -1 where unknown."""
    backend, sep, rest = name.partition(":")
    if not sep:
        backend, rest = "", name
    rest = rest.strip()
    m = _P2P.match(rest)
    if m:
        op = m.group(1)
        if m.group(2) is not None:
            a, b = int(m.group(2)), int(m.group(4))
            return backend, op, a, b
        return backend, op, -1, -1
    op = rest.split(" ", 1)[0].lower() if rest else "unknown"
    return backend, op, -1, -1


# Flattening works column by column: ``map(dict.get, entries, repeat(key))`` pulls one key out of
# every entry at C speed, numpy converts columns of plain ints at once, and object-valued columns
# (names, sizes, frames) are converted once per distinct object: the pickle memo and PyTorch's
# pickler share repeated objects, so a dump of 20,000 entries holds a few dozen of them. Values
# numpy cannot take as they are (None, JSON strings, odd types) go value by value through the
# same helpers as before (_int, _bool, _text), so the result does not depend on the path taken.


def _column(entries: list[dict[str, Any]], key: str) -> list[Any]:
    """``[e.get(key) for e in entries]`` without a Python-level loop."""
    return list(map(dict.get, entries, repeat(key)))


def _as_array(values: list[Any]) -> np.ndarray | None:
    """``values`` as a 1-d array in the dtype numpy infers, or None if it cannot."""
    try:
        arr = np.array(values)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.ndim == 1 else None


def _exact(values: list[Any], kinds: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(array, None-mask) when every value is None or of a numpy kind in ``kinds``.

    ``(None, None)`` when some value needs the per-value fallback.
    """
    arr = _as_array(values)
    if arr is None:
        return None, None
    if arr.dtype.kind in kinds:
        return arr, np.zeros(len(arr), dtype=bool)
    if arr.dtype != object:
        return None, None
    none = np.equal(arr, None)
    if none.all():
        return np.zeros(0), none
    rest = _as_array(arr[~none].tolist())
    if rest is None or rest.dtype.kind not in kinds:
        return None, None
    return rest, none


def _ints(values: list[Any], default: int) -> np.ndarray:
    """``[_int(v, default) for v in values]`` as int64."""
    if values and type(values[0]) is int:  # the common case: a column of plain ints
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass  # None, odd strings or out-of-range numbers somewhere: the exact path below
    arr, none = _exact(values, "ib")  # ints (and bools: _int(True) == 1)
    if arr is None or none is None:
        return np.array([_int64(v, default) for v in values], dtype=np.int64)
    out = np.full(len(values), default, dtype=np.int64)
    out[~none] = arr
    return out


def _bools(values: list[Any]) -> np.ndarray:
    """``[_bool(v) for v in values]``."""
    arr, none = _exact(values, "bi")  # bool(None) is False, bool(int) is "not zero"
    if arr is None or none is None:
        return np.array([_bool(v) for v in values], dtype=bool)
    out = np.zeros(len(values), dtype=bool)
    out[~none] = arr != 0
    return out


def _floats(values: list[Any]) -> np.ndarray:
    """Durations: NaN for None, "" or anything ``float`` rejects."""
    arr, none = _exact(values, "bif")
    if arr is None or none is None:
        return np.array([_float(v) for v in values], dtype=np.float64)
    out = np.full(len(values), math.nan, dtype=np.float64)
    out[~none] = arr
    return out


def _float(value: Any) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except (TypeError, ValueError):
        return math.nan


def _distinct(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Each value's index among the distinct objects, and those objects in order of first use.

    Objects are told apart by identity, which is exact and needs no hashing of lists.
    """
    if not values:
        return np.empty(0, dtype=np.intp), []
    ids = np.fromiter(map(id, values), dtype=np.uint64, count=len(values))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return position[inverse.reshape(-1)], [values[i] for i in first[order]]


def _narrow(values: np.ndarray) -> np.ndarray:
    """The same integers in the narrowest signed dtype holding them: parsed dumps travel
    between processes and wait in memory until normalized, so every byte counts."""
    if not len(values):
        return values
    lo, hi = int(values.min()), int(values.max())
    for width in (np.int8, np.int16, np.int32):
        info = np.iinfo(width)
        if info.min <= lo and hi <= info.max:
            return values.astype(width)
    return values


def _vocab(texts: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes of ``texts`` into their distinct values, in order of first appearance."""
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int32,
                        count=len(texts))
    return codes, list(index)


def _text_of(value: Any) -> str:
    """Sizes and dtypes as JSON-like text, whether they came as lists, tuples or text."""
    if isinstance(value, (list, tuple)):
        return repr(value).replace("(", "[").replace(")", "]").replace("'", '"')
    return _text(value)


def _pg_parts(pg: Any) -> tuple[str, str]:
    pg = pg or ("", "")
    if isinstance(pg, str):
        pg = (pg, "")
    return (str(pg[0]) if len(pg) > 0 else "", str(pg[1]) if len(pg) > 1 else "")


def _stack_key(frames: Any) -> tuple[tuple[str, str, int], ...]:
    try:
        return tuple(
            (str(f.get("name", "")), str(f.get("filename", "")), _int(f.get("line")))
            for f in frames
        )
    except AttributeError:
        return ()


def parse_dump(rank: int, path: Path) -> ParsedDump:
    """Read and flatten one dump. Raises :class:`DumpFormatError` on bad input."""
    raw, fmt = load_raw(path)
    warnings: list[str] = []
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise DumpFormatError(str(path), f"'entries' is a {type(entries).__name__}, not a list")
    bad = 0
    if any(t is not dict for t in set(map(type, entries))):
        kept = [e for e in entries if isinstance(e, dict)]
        bad, entries = len(entries) - len(kept), kept
    if bad:
        warnings.append(f"{bad} entries are not objects and were ignored")

    strings: dict[str, np.ndarray] = {}
    vocab: dict[str, list[str]] = {}

    def encode(field: str, index: np.ndarray, texts: list[str]) -> None:
        """``field`` of each entry is ``texts[index]``; store it as codes into a vocabulary."""
        codes, vocab[field] = _vocab(texts)
        strings[field] = codes[index] if len(codes) else np.empty(0, dtype=np.int32)

    # Profiling name -> backend, op and the group-local ranks of a send/recv.
    name_index, distinct = _distinct(_column(entries, "profiling_name"))
    names = [pname or "" for pname in distinct]
    split = [split_profiling_name(pname) for pname in names]
    encode("profiling_name", name_index, names)
    encode("op", name_index, [backend_op[1] for backend_op in split])
    encode("backend", name_index, [backend_op[0] for backend_op in split])
    # Group name and description.
    index, distinct = _distinct(_column(entries, "process_group"))
    pg_parts = [_pg_parts(pg) for pg in distinct]
    encode("pg_name", index, [name for name, _ in pg_parts])
    encode("pg_desc", index, [desc for _, desc in pg_parts])
    for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
        index, distinct = _distinct(_column(entries, key))
        encode(key, index, [_text_of(v) for v in distinct])
    index, distinct = _distinct(_column(entries, "state"))
    encode("state", index, [str(v or "unknown") for v in distinct])
    index, distinct = _distinct(_column(entries, "thread_name"))
    encode("thread_name", index, [str(v or "") for v in distinct])

    # Stacks: one key per distinct frames object, one stack id per distinct key.
    index, distinct = _distinct(_column(entries, "frames"))
    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    per_distinct = np.array(
        [stack_ids.setdefault(_stack_key(frames), len(stack_ids)) if frames else -1
         for frames in distinct] or [-1], dtype=np.int64)
    stacks = list(stack_ids)

    ints = {
        "pg_id": _ints(_column(entries, "pg_id"), -1),
        "record_id": _ints(_column(entries, "record_id"), -1),
        "seq": _ints(_column(entries, "collective_seq_id"), -1),
        "p2p_seq": _ints(_column(entries, "p2p_seq_id"), -1),
        "op_id": _ints(_column(entries, "op_id"), -1),
        "time_created_ns": _ints(_column(entries, "time_created_ns"), 0),
        "time_started_ns": _ints(_column(entries, "time_discovered_started_ns"), 0),
        "time_completed_ns": _ints(_column(entries, "time_discovered_completed_ns"), 0),
        "timeout_ms": _ints(_column(entries, "timeout_ms"), 0),
        "stack": per_distinct[index],
        "peer_local": np.array([p[3] for p in split] or [-1], dtype=np.int64)[name_index],
        "self_local": np.array([p[2] for p in split] or [-1], dtype=np.int64)[name_index],
    }
    ints = {key: _narrow(values) for key, values in ints.items()}
    strings = {key: _narrow(codes) for key, codes in strings.items()}
    sendrecv = np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if op in ("send", "recv")])
    bools = {
        "is_p2p": _bools(_column(entries, "is_p2p")) | sendrecv,
        "retired": _bools(_column(entries, "retired")),
        "coalesced": np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if "coalesced" in op]),
    }
    floats = {"duration_ms": _floats(_column(entries, "duration_ms"))}

    pg_config: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    config = raw.get("pg_config") or {}
    if isinstance(config, dict):
        for key, value in config.items():
            if not isinstance(value, dict):
                continue
            name = str(value.get("name", key))
            pg_config[name] = (str(value.get("desc") or ""), _member_ranks(value.get("ranks")))
    pg_status: dict[int, tuple[int, int, int]] = {}
    status = raw.get("pg_status") or {}
    if isinstance(status, dict):
        for key, value in status.items():
            if not isinstance(value, dict):
                continue
            pg_status[_int(key, -1)] = (
                _int(value.get("last_enqueued_collective"), -1),
                _int(value.get("last_started_collective"), -1),
                _int(value.get("last_completed_collective"), -1),
            )
    n = len(ints["record_id"])
    return ParsedDump(
        rank=rank,
        path=str(path),
        fmt=fmt,
        version=str(raw.get("version", "")),
        comm_lib_version=str(raw.get("comm_lib_version") or raw.get("nccl_version") or ""),
        n_entries=n,
        strings={k: strings[k] for k in STRING_FIELDS},
        vocab={k: vocab[k] for k in STRING_FIELDS},
        ints=ints,
        bools=bools,
        floats=floats,
        stacks=stacks,
        pg_config=pg_config,
        pg_status=pg_status,
        warnings=warnings,
    )
