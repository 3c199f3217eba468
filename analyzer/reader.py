"""Read one dump file (pickle or JSON) safely and flatten its entries into columns.

The pickle reader refuses every global, so a crafted file that names ``os.system`` (or any
other callable) is reported as unsafe and nothing in it runs. Parsing happens in worker
processes for large dump sets, so :func:`parse_dump` returns compact columns (integer codes
plus small vocabularies) instead of per-entry dicts.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def load_raw(path: Path) -> tuple[dict[str, Any], str]:
    """The top-level dict of a dump and its format (``"pickle"`` or ``"json"``).

    Raises :class:`UnsafeDumpError` for a pickle that names code, and
    :class:`DumpFormatError` for an empty, truncated or foreign file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DumpFormatError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise DumpFormatError(str(path), "empty file")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        fmt = "json"
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise DumpFormatError(str(path), f"truncated or invalid JSON ({exc})") from None
    elif data[:1] == b"\x80":
        fmt = "pickle"
        try:
            obj = _SafeUnpickler(io.BytesIO(data)).load()
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
    strings: dict[str, array]
    vocab: dict[str, list[str]]
    ints: dict[str, array]
    bools: dict[str, bytearray]
    floats: dict[str, array]
    stacks: list[tuple[tuple[str, str, int], ...]]
    pg_config: dict[str, tuple[str, tuple[int, ...] | None]]
    pg_status: dict[int, tuple[int, int, int]]
    warnings: list[str] = field(default_factory=list)


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
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


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


class _Encoder:
    __slots__ = ("codes", "index", "values")

    def __init__(self) -> None:
        self.codes = array("i")
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def add(self, value: str) -> None:
        code = self.index.get(value)
        if code is None:
            code = self.index[value] = len(self.values)
            self.values.append(value)
        self.codes.append(code)


def parse_dump(rank: int, path: Path) -> ParsedDump:
    """Read and flatten one dump. Raises :class:`DumpFormatError` on bad input."""
    raw, fmt = load_raw(path)
    warnings: list[str] = []
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise DumpFormatError(str(path), f"'entries' is a {type(entries).__name__}, not a list")

    enc = {name: _Encoder() for name in STRING_FIELDS}
    ints = {name: array("q") for name in INT_FIELDS}
    bools = {name: bytearray() for name in BOOL_FIELDS}
    floats = {name: array("d") for name in FLOAT_FIELDS}
    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    stacks: list[tuple[tuple[str, str, int], ...]] = []
    name_cache: dict[str, tuple[str, str, int, int]] = {}
    bad = 0
    for e in entries:
        if not isinstance(e, dict):
            bad += 1
            continue
        pg = e.get("process_group") or ("", "")
        if isinstance(pg, str):
            pg = (pg, "")
        pname = e.get("profiling_name") or ""
        parts = name_cache.get(pname)
        if parts is None:
            parts = name_cache[pname] = split_profiling_name(pname)
        backend, op, self_local, peer_local = parts
        enc["pg_name"].add(str(pg[0]) if len(pg) > 0 else "")
        enc["pg_desc"].add(str(pg[1]) if len(pg) > 1 else "")
        enc["op"].add(op)
        enc["backend"].add(backend)
        enc["profiling_name"].add(pname)
        for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
            value = e.get(key)
            if isinstance(value, (list, tuple)):
                # Sizes repeat a lot; cache the text by the object's repr-equivalent content.
                text = repr(value).replace("(", "[").replace(")", "]").replace("'", '"')
            else:
                text = _text(value)
            enc[key].add(text)
        enc["state"].add(str(e.get("state") or "unknown"))
        enc["thread_name"].add(str(e.get("thread_name") or ""))
        is_p2p = _bool(e.get("is_p2p")) or op in ("send", "recv")
        ints["pg_id"].append(_int(e.get("pg_id"), -1))
        ints["record_id"].append(_int(e.get("record_id"), -1))
        ints["seq"].append(_int(e.get("collective_seq_id"), -1))
        ints["p2p_seq"].append(_int(e.get("p2p_seq_id"), -1))
        ints["op_id"].append(_int(e.get("op_id"), -1))
        ints["time_created_ns"].append(_int(e.get("time_created_ns")))
        ints["time_started_ns"].append(_int(e.get("time_discovered_started_ns")))
        ints["time_completed_ns"].append(_int(e.get("time_discovered_completed_ns")))
        ints["timeout_ms"].append(_int(e.get("timeout_ms")))
        ints["self_local"].append(self_local)
        ints["peer_local"].append(peer_local)
        frames = e.get("frames")
        if frames:
            try:
                key = tuple(
                    (str(f.get("name", "")), str(f.get("filename", "")), _int(f.get("line")))
                    for f in frames
                )
            except AttributeError:
                key = ()
            sid = stack_ids.get(key)
            if sid is None:
                sid = stack_ids[key] = len(stacks)
                stacks.append(key)
            ints["stack"].append(sid)
        else:
            ints["stack"].append(-1)
        bools["is_p2p"].append(is_p2p)
        bools["retired"].append(_bool(e.get("retired")))
        bools["coalesced"].append("coalesced" in op)
        duration = e.get("duration_ms")
        try:
            floats["duration_ms"].append(float(duration) if duration not in (None, "") else math.nan)
        except (TypeError, ValueError):
            floats["duration_ms"].append(math.nan)
    if bad:
        warnings.append(f"{bad} entries are not objects and were ignored")

    pg_config: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    config = raw.get("pg_config") or {}
    if isinstance(config, dict):
        for key, value in config.items():
            if not isinstance(value, dict):
                continue
            name = str(value.get("name", key))
            pg_config[name] = (str(value.get("desc") or ""), parse_ranks(value.get("ranks")))
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
        strings={k: v.codes for k, v in enc.items()},
        vocab={k: v.values for k, v in enc.items()},
        ints=ints,
        bools=bools,
        floats=floats,
        stacks=stacks,
        pg_config=pg_config,
        pg_status=pg_status,
        warnings=warnings,
    )
