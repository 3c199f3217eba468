"""Read one dump file (pickle or JSON) safely and flatten its entries into columns.

The pickle reader refuses every global, so a crafted file that names ``os.system`` (or any
other callable) is reported as unsafe and nothing in it runs. Parsing happens in worker
processes for large dump sets, so :func:`parse_dump` returns compact columns (integer codes
plus small vocabularies) instead of per-entry dicts.
"""

from __future__ import annotations

import copyreg
import gc
import io
import json
import math
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.errors import DumpFormatError, UnsafeDumpError
from analyzer.escape import MAX_TEXT, clean
from analyzer.payload import Payload, Refusal, payloads

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


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def _refuse_extension(self: Any) -> None:
    raise pickle.UnpicklingError("refused extension code (copyreg registry)")


class _PySafeUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """The pure-Python unpickler with globals and extension codes refused.

    The C unpickler looks extension codes (EXT1/2/4) up in copyreg's process-wide cache
    before it calls ``find_class``: once any code in the process has unpickled a registered
    extension, the C path would hand its object to a dump. Used only while the process has
    extensions registered (library use); slower, but it never consults the registry.
    """

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]
    for _op in (pickle.EXT1, pickle.EXT2, pickle.EXT4):
        dispatch[_op[0]] = _refuse_extension
    del _op

    def find_class(self, module: str, name: str) -> Any:
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
        if copyreg._extension_registry:  # type: ignore[attr-defined]
            return _PySafeUnpickler(io.BytesIO(data)).load()
        return _SafeUnpickler(io.BufferedReader(io.BytesIO(data))).load()
    finally:
        if was_enabled:
            gc.enable()


def decode(payload: Payload) -> dict[str, Any]:
    """The top-level dict of one dump candidate.

    Raises :class:`UnsafeDumpError` for a pickle that names code, and
    :class:`DumpFormatError` for a truncated, corrupt, too deeply nested or foreign one.
    """
    label, data = payload.label, payload.data
    if payload.fmt == "json":
        try:
            obj = json.loads(data)  # detects UTF-8 (BOM or not), UTF-16 and UTF-32
        except RecursionError:
            raise DumpFormatError(label, "JSON nested too deeply to be a dump") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise DumpFormatError(label, f"truncated or invalid JSON ({str(exc)[:160]})") from None
        except MemoryError:
            raise DumpFormatError(label, "JSON too large to read") from None
    else:
        try:
            obj = _unpickle(data)
        except pickle.UnpicklingError as exc:
            if "refused" in str(exc):
                raise UnsafeDumpError(
                    label, f"unsafe pickle: {exc} (a real dump holds only plain data; not executed)"
                ) from None
            raise DumpFormatError(label, f"truncated or corrupt pickle ({str(exc)[:160]})") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
                MemoryError, RecursionError, UnicodeDecodeError, OverflowError) as exc:
            raise DumpFormatError(
                label, f"truncated or corrupt pickle ({type(exc).__name__})"
            ) from None
    if not isinstance(obj, dict):
        raise DumpFormatError(label, f"not a flight-recorder dump (top level is {type(obj).__name__})")
    if "version" not in obj or not ({"entries", "pg_config", "pg_status"} & obj.keys()):
        keys = sorted(clean(str(k))[:40] for k in list(obj)[:64])[:8]
        raise DumpFormatError(label, f"not a flight-recorder dump (keys {keys})")
    return obj


def load_raw(path: Path) -> tuple[dict[str, Any], str]:
    """The top-level dict of a dump file and its format (``"pickle"`` or ``"json"``).

    Compressed files are read through; for an archive, its first member. Raises
    :class:`UnsafeDumpError` for a pickle that names code, and :class:`DumpFormatError` for an
    empty, truncated or foreign file.
    """
    for item in payloads(str(path), lenient=True):
        if isinstance(item, Refusal):
            reason = item.reason if not item.foreign or item.reason.startswith(
                ("not a", "empty")) else f"not a flight-recorder dump ({item.reason})"
            raise DumpFormatError(item.label, reason)
        return decode(item), item.fmt
    raise DumpFormatError(str(path), "empty archive")


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


#: Sequence numbers and counters beyond this are not counts of real operations.
MAX_COUNTER = 1 << 40
#: Member ranks at or beyond this are not ranks of a real job.
MAX_RANK = 1 << 22
_MAX_SHAPE_VALUES = 1 << 16
_MAX_FRAMES = 1024
_OP_NAME = re.compile(r"^[A-Za-z0-9_.\-]{0,64}:[A-Za-z_][A-Za-z0-9_]{0,127}(?:[ \t].{0,256})?$|"
                      r"^[A-Za-z_][A-Za-z0-9_]{0,127}(?:[ \t].{0,256})?$", re.S)


_SHAPES_TEXT = re.compile(r"^[\[\]\d, ]*$")
_DTYPES_TEXT = re.compile(r'^[\[\]\w", \']*$')


class _Reasons:
    """Counted reasons for what a parse dropped: per entry, and per field value."""

    def __init__(self) -> None:
        self.entries: Counter[str] = Counter()
        self.fields: Counter[str] = Counter()

    def lines(self) -> list[str]:
        out = [f"{n} entr{'y' if n == 1 else 'ies'} dropped: {why}" for why, n in self.entries.items()]
        out += [f"{n} value{'' if n == 1 else 's'} ignored: {why}" for why, n in self.fields.items()]
        return out


def _shape_list(value: Any) -> bool:
    """A list of shapes (lists of non-negative ints), within a bounded walk."""
    if not isinstance(value, (list, tuple)) or len(value) > _MAX_SHAPE_VALUES:
        return False
    seen = 0
    for shape in value:
        if not isinstance(shape, (list, tuple)):
            return False
        seen += len(shape) + 1
        if seen > _MAX_SHAPE_VALUES:
            return False
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return False
    return True


def _str_list(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) <= _MAX_SHAPE_VALUES
            and all(type(v) is str and len(v) <= 256 for v in value))


def _text_of(value: Any) -> str:
    """Sizes and dtypes as JSON-like text, whether they came as lists, tuples or text."""
    if isinstance(value, (list, tuple)):
        return clean(repr(value).replace("(", "[").replace(")", "]").replace("'", '"'), 1 << 20)
    return clean(_text(value))


def _pg_parts(pg: Any) -> tuple[str, str] | None:
    """(name, desc) of a ``process_group`` value, or None when it is not one."""
    if isinstance(pg, str):
        pg = (pg, "")
    if not isinstance(pg, (list, tuple)) or not 1 <= len(pg) <= 2:
        return None
    if not all(type(p) is str and len(p) <= 1024 for p in pg):
        return None
    return clean(pg[0]), clean(pg[1]) if len(pg) > 1 else ""


def _stack_key(frames: Any) -> tuple[tuple[str, str, int], ...] | None:
    """The frames as (name, filename, line) tuples; None when they are not frames."""
    if not isinstance(frames, (list, tuple)) or len(frames) > _MAX_FRAMES:
        return None
    out = []
    for f in frames:
        if type(f) is not dict:
            return None
        name, filename, line = f.get("name", ""), f.get("filename", ""), f.get("line")
        if type(name) is not str or type(filename) is not str:
            return None
        # The common case inline (printable, not too long, an int line): this runs per frame.
        if len(name) > MAX_TEXT or not name.isprintable():
            name = clean(name)
        if len(filename) > MAX_TEXT or not filename.isprintable():
            filename = clean(filename)
        if type(line) is not int or not 0 <= line < 1 << 31:
            line = _int64(line, 0) if not isinstance(line, (list, tuple, dict)) else 0
        out.append((name, filename, line))
    return tuple(out)


def _one_int(value: Any, default: int, lo: int, hi: int) -> tuple[int, bool]:
    """(value as an int, whether it was present but not an integer in [lo, hi))."""
    if value is None or value == "":
        return default, False
    if isinstance(value, int):
        n = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return default, True
        n = int(value)
    elif isinstance(value, str) and len(value) <= 32:
        try:
            n = int(value)
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                return default, True
            if not math.isfinite(f):
                return default, True
            n = int(f)
    else:
        return default, True
    return (n, False) if lo <= n < hi else (default, True)


def _checked_ints(values: list[Any], default: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The values as int64 (None and ``""`` read as ``default``), and a mask of the values
    that were present but not an integer in [lo, hi) (they read as ``default`` too)."""
    if values and type(values[0]) is int:  # the common case: a column of plain ints
        try:
            arr = np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass  # None, odd strings or out-of-range numbers somewhere: value by value below
        else:
            bad = (arr < lo) | (arr >= hi)
            if bad.any():
                arr[bad] = default
            return arr, bad
    arr_, none = _exact(values, "i")  # ints and None (pickles' 'not observed'), still in C
    if none is not None and none.all():  # never observed
        return np.full(len(values), default, dtype=np.int64), np.zeros(len(values), dtype=bool)
    if arr_ is not None and none is not None and arr_.dtype.kind == "i":
        out = np.full(len(values), default, dtype=np.int64)
        out[~none] = arr_
        bad = ~none & ((out < lo) | (out >= hi))
        if bad.any():
            out[bad] = default
        return out, bad
    pairs = [_one_int(v, default, lo, hi) for v in values]
    return (np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs)),
            np.fromiter((p[1] for p in pairs), dtype=bool, count=len(pairs)))


def _members(value: Any) -> tuple[int, ...] | None:
    """Member ranks of a pg_config entry; None when they are not plausible ranks."""
    if isinstance(value, str) and len(value) > 16 * MAX_RANK:
        return None
    members = _member_ranks(value)
    if members and (min(members) < 0 or max(members) >= MAX_RANK or len(members) > MAX_RANK):
        return None
    return members


def _version(value: Any) -> str:
    return clean(str(value), 64) if isinstance(value, (str, int, float)) else ""


def _tables_of(raw: dict[str, Any], why: _Reasons) -> tuple[
        dict[str, tuple[str, tuple[int, ...] | None]], dict[int, tuple[int, int, int]]]:
    """A dump's pg_config and pg_status, each bad value counted in ``why``."""
    pg_config: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    config = raw.get("pg_config") or {}
    if isinstance(config, dict):
        for key, value in list(config.items())[: 1 << 16]:
            if not isinstance(value, dict):
                why.fields["pg_config entry is not an object"] += 1
                continue
            name, desc = value.get("name", key), value.get("desc") or ""
            if not isinstance(name, (str, int)) or not isinstance(desc, str):
                why.fields["pg_config name or desc is not a string"] += 1
                continue
            members = _members(value.get("ranks"))
            if members is None and value.get("ranks") not in (None, ""):
                why.fields["pg_config ranks are not a list of plausible ranks"] += 1
            pg_config[clean(str(name), 1024)] = (clean(desc, 1024), members)
    elif config:
        why.fields["pg_config is not an object"] += 1
    pg_status: dict[int, tuple[int, int, int]] = {}
    status = raw.get("pg_status") or {}
    if isinstance(status, dict):
        for key, value in list(status.items())[: 1 << 16]:
            pid = _int64(key, -1) if isinstance(key, (str, int)) else -1
            if not isinstance(value, dict) or not -1 <= pid < 1 << 31:
                why.fields["pg_status entry is not an object of counters"] += 1
                continue
            counters = tuple(_int64(value.get(k), -1) if isinstance(value.get(k), (str, int, float))
                             or value.get(k) is None else -2
                             for k in ("last_enqueued_collective", "last_started_collective",
                                       "last_completed_collective"))
            if any(not -1 <= c < MAX_COUNTER for c in counters):
                why.fields["pg_status counter is not an integer in range"] += 1
                counters = tuple(c if -1 <= c < MAX_COUNTER else -1 for c in counters)
            pg_status[pid] = counters  # type: ignore[assignment]
    elif status:
        why.fields["pg_status is not an object"] += 1
    return pg_config, pg_status


def first_payload(path: Path) -> Payload:
    """The first dump candidate of one file (the file itself, or an archive's first member).
    Raises :class:`DumpFormatError` when it is refused or the archive is empty."""
    for item in payloads(str(path), lenient=True):
        if isinstance(item, Refusal):
            raise DumpFormatError(item.label, item.reason)
        return item
    raise DumpFormatError(str(path), "empty archive")


def parse_dump(rank: int, path: Path) -> ParsedDump:
    """Read and flatten one dump file. Raises :class:`DumpFormatError` on bad input."""
    return parse_payload(rank, first_payload(path))


def parse_payload(rank: int, payload: Payload) -> ParsedDump:
    """Decode and flatten one dump. Raises :class:`DumpFormatError` on bad input.

    Every value is checked column by column (once per distinct object for names, sizes,
    groups and frames; with numpy for counters): an entry whose identity is broken (not an
    object, an op name or group that is not one, a sequence number out of range) is dropped,
    any other bad value reads as 'not observed'. Each drop is counted with its reason in
    ``warnings``, and the dump is then marked ``suspect``.
    """
    raw = decode(payload)
    path = payload.label
    why = _Reasons()
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise DumpFormatError(str(path), f"'entries' is a {type(entries).__name__}, not a list")
    if any(t is not dict for t in set(map(type, entries))):
        kept = [e for e in entries if isinstance(e, dict)]
        if len(entries) - len(kept):
            why.entries["not an object"] += len(entries) - len(kept)
        entries = kept
    n_all = len(entries)
    drop = np.zeros(n_all, dtype=bool)

    strings: dict[str, np.ndarray] = {}
    vocab: dict[str, list[str]] = {}

    def encode(field: str, index: np.ndarray, texts: list[str]) -> None:
        """``field`` of each entry is ``texts[index]``; store it as codes into a vocabulary."""
        codes, vocab[field] = _vocab(texts)
        strings[field] = codes[index] if len(codes) else np.empty(0, dtype=np.int32)

    def reject(index: np.ndarray, bad_distinct: list[int], reason: str, *, entry: bool) -> None:
        """Entries whose value is one of the distinct values ``bad_distinct``."""
        if not bad_distinct:
            return
        rows = np.isin(index, bad_distinct)
        count = int(rows.sum())
        if entry:
            drop[rows] = True
            why.entries[reason] += count
        else:
            why.fields[reason] += count

    # Profiling name -> backend, op and the group-local ranks of a send/recv.
    name_index, distinct = _distinct(_column(entries, "profiling_name"))
    bad = [i for i, v in enumerate(distinct) if type(v) is not str]
    reject(name_index, bad, "profiling_name is not a string", entry=True)
    odd = [i for i, v in enumerate(distinct) if type(v) is str and not _OP_NAME.match(v)]
    reject(name_index, odd, "profiling_name is not a backend:op name", entry=True)
    names = [clean(v) if type(v) is str and _OP_NAME.match(v) else "" for v in distinct]
    split = [(b, op, me if me < MAX_RANK else -1, peer if peer < MAX_RANK else -1)
             for b, op, me, peer in map(split_profiling_name, names)]
    encode("profiling_name", name_index, names)
    encode("op", name_index, [backend_op[1] for backend_op in split])
    encode("backend", name_index, [backend_op[0] for backend_op in split])
    # Group name and description.
    index, distinct = _distinct(_column(entries, "process_group"))
    pg_index = index
    parts = [_pg_parts(pg) for pg in distinct]
    reject(index, [i for i, pg in enumerate(parts) if pg is None],
           "process_group is missing or not (name, desc) strings", entry=True)
    pg_parts = [pg or ("", "") for pg in parts]
    encode("pg_name", index, [name for name, _ in pg_parts])
    encode("pg_desc", index, [desc for _, desc in pg_parts])
    # Sizes and dtypes are compared across ranks: a value that is not one would read as a
    # desync, so its entry is dropped rather than kept with a made-up value.
    for key in ("input_sizes", "output_sizes"):
        index, distinct = _distinct(_column(entries, key))
        ok = [v is None or _shape_list(v) or (type(v) is str and len(v) <= 1 << 16
                                              and _SHAPES_TEXT.match(v) is not None)
              for v in distinct]
        reject(index, [i for i, good in enumerate(ok) if not good],
               f"{key} is not a list of shapes", entry=True)
        encode(key, index, [_text_of(v) if good else "" for v, good in zip(distinct, ok)])
    for key in ("input_dtypes", "output_dtypes"):
        index, distinct = _distinct(_column(entries, key))
        ok = [v is None or _str_list(v) or (type(v) is str and len(v) <= 1 << 16
                                            and _DTYPES_TEXT.match(v) is not None)
              for v in distinct]
        reject(index, [i for i, good in enumerate(ok) if not good],
               f"{key} is not a list of dtype names", entry=True)
        encode(key, index, [_text_of(v) if good else "" for v, good in zip(distinct, ok)])
    index, distinct = _distinct(_column(entries, "state"))
    ok = [v is None or (type(v) is str and len(v) <= 64) for v in distinct]
    reject(index, [i for i, good in enumerate(ok) if not good], "state is not a short string",
           entry=False)
    encode("state", index, [clean(v) if good and v else "unknown" for v, good in zip(distinct, ok)])
    index, distinct = _distinct(_column(entries, "thread_name"))
    ok = [v is None or type(v) is str for v in distinct]
    reject(index, [i for i, good in enumerate(ok) if not good], "thread_name is not a string",
           entry=False)
    encode("thread_name", index, [clean(v, 256) if good and v else "" for v, good in zip(distinct, ok)])

    # Stacks: one key per distinct frames object, one stack id per distinct key.
    index, distinct = _distinct(_column(entries, "frames"))
    keys = [_stack_key(frames) if frames else () for frames in distinct]
    reject(index, [i for i, k in enumerate(keys) if k is None], "frames is not a list of frames",
           entry=False)
    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    per_distinct = np.array(
        [stack_ids.setdefault(key, len(stack_ids)) if key else -1 for key in keys] or [-1],
        dtype=np.int64)
    stacks = list(stack_ids)

    int_cols = {  # field: (key, default, lo, hi, entry dropped when bad)
        "pg_id": ("pg_id", -1, -1, 1 << 31, False),
        "record_id": ("record_id", -1, -1, 1 << 62, False),
        "seq": ("collective_seq_id", -1, -1, MAX_COUNTER, True),
        "p2p_seq": ("p2p_seq_id", -1, -1, MAX_COUNTER, True),
        "op_id": ("op_id", -1, -1, MAX_COUNTER, False),
        "time_created_ns": ("time_created_ns", 0, 0, 1 << 63, False),
        "time_started_ns": ("time_discovered_started_ns", 0, 0, 1 << 63, False),
        "time_completed_ns": ("time_discovered_completed_ns", 0, 0, 1 << 63, False),
        "timeout_ms": ("timeout_ms", 0, 0, 1 << 62, False),
    }
    ints: dict[str, np.ndarray] = {}
    for col, (key, default, lo, hi, is_entry) in int_cols.items():
        values, bad_rows = _checked_ints(_column(entries, key), default, lo, hi)
        if bad_rows.any():
            count = int(bad_rows.sum())
            if is_entry:
                drop |= bad_rows
                why.entries[f"{key} is not a sequence number"] += count
            else:
                why.fields[f"{key} is not an integer in range"] += count
        ints[col] = values
    ints["stack"] = per_distinct[index]
    ints["peer_local"] = np.array([p[3] for p in split] or [-1], dtype=np.int64)[name_index]
    ints["self_local"] = np.array([p[2] for p in split] or [-1], dtype=np.int64)[name_index]
    is_p2p = _bools(_column(entries, "is_p2p"))
    retired = _bools(_column(entries, "retired"))
    duration = _floats(_column(entries, "duration_ms"))

    dropped_pg_ids: dict[int, str] = {}
    if drop.any():
        # What dropped entries still prove: which backend-local pg_id is which group, so
        # that the dump's pg_status counters of that group still count.
        for row in np.flatnonzero(drop).tolist():
            pg = parts[pg_index[row]]
            pid = int(ints["pg_id"][row])
            if pg is not None and pid >= 0:
                dropped_pg_ids.setdefault(pid, pg[0])
        keep = ~drop
        strings = {k: v[keep] for k, v in strings.items()}
        ints = {k: v[keep] for k, v in ints.items()}
        is_p2p, retired, duration = is_p2p[keep], retired[keep], duration[keep]
    ints = {key: _narrow(values) for key, values in ints.items()}
    strings = {key: _narrow(codes) for key, codes in strings.items()}
    sendrecv = np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if op in ("send", "recv")])
    bools = {
        "is_p2p": is_p2p | sendrecv,
        "retired": retired,
        "coalesced": np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if "coalesced" in op]),
    }
    floats = {"duration_ms": duration}

    pg_config, pg_status = _tables_of(raw, why)
    n = len(ints["record_id"])
    if why.entries and not n and not pg_status:
        # Nothing of it can be used: a crafted or broken file, not a rank's evidence.
        raise DumpFormatError(str(path), "no usable entry (" + "; ".join(why.lines()[:3]) + ")")
    return ParsedDump(
        rank=rank,
        path=str(path),
        fmt=payload.fmt,
        version=_version(raw.get("version", "")),
        comm_lib_version=_version(raw.get("comm_lib_version") or raw.get("nccl_version") or ""),
        n_entries=n,
        strings={k: strings[k] for k in STRING_FIELDS},
        vocab={k: vocab[k] for k in STRING_FIELDS},
        ints=ints,
        bools=bools,
        floats=floats,
        stacks=stacks,
        pg_config=pg_config,
        pg_status=pg_status,
        warnings=why.lines(),
        suspect=bool(why.entries) or bool(why.fields),
        dropped_pg_ids=dropped_pg_ids,
        fingerprint=payload.fingerprint,
    )
