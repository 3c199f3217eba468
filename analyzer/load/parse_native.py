"""The compiled pickle reader, and the choice between it and the Python reader.

:mod:`analyzer.load._fastpickle` (C, built by ``pip install``) turns a pickle dump straight into
the columns of a :class:`~analyzer.load.parse.ParsedDump`, without a Python object per entry: it
implements the opcodes a dump of plain data is made of (protocol 2 to 5, as PyTorch and
Python write them) and nothing else, so no global, extension code, persistent id or buffer
can even be expressed to it. The object fields (names, sizes, dtypes, stacks) come back as
each entry's code into the distinct values, and each distinct value as its canonical bytes;
a value not met before (in this process, under this config) is decoded and goes through the
same functions as in :func:`analyzer.load.parse.parse_dump`, and what it reads as is remembered
by those bytes. Only the small top-level dicts become Python objects on every file.

:mod:`analyzer.load.parse` stays the reference. The compiled reader handles the well-formed
dumps PyTorch writes (every field of the expected type) and *declines* anything else: an
opcode it does not implement (a refused global among them), a truncated stream, a value of
an unexpected type, a string that is not strict UTF-8, a structure too deep or too costly.
A declined file is read again by the Python reader, which decides (and words every error):
the compiled reader never reports an error of its own.

``HANGSCOPE_READER=python`` forces the Python reader; ``auto`` (the default) uses the
compiled one where it is built. :attr:`ParsedDump.reader` says which reader read a dump.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.load import field_checks as val
from analyzer.load.decode import first_payload
from analyzer.load.field_checks import Reasons
from analyzer.load.group_tables import group_tables
from analyzer.load.memo import BoundedMemo
from analyzer.load.parse import parse_payload
from analyzer.load.parsed_dump import Columns, ParsedDump, int_columns
from analyzer.load.unpack import Payload

try:  # built by pip install (setup.py); absent without a C compiler
    from analyzer.load import _fastpickle
except ImportError:  # pragma: no cover - depends on the build
    _fastpickle = None  # type: ignore[assignment]

READER_ENV = "HANGSCOPE_READER"
#: The default cap (``AnalysisConfig.native_max_bytes``): larger pickles go to the Python
#: reader (core.h's FP_MAX_BYTES is the compiled core's own); a 2,000-entry dump is ~250 KB.
NATIVE_MAX_BYTES = DEFAULT_CONFIG.native_max_bytes
NATIVE = "native"
PYTHON = "python"

# Column order of the compiled core (core.h); checked against the module at import.
_FIELDS = (
    "record_id",
    "pg_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "timeout_ms",
    "is_p2p",
    "retired",
    "duration_ms",
    "profiling_name",
    "process_group",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "thread_name",
    "frames",
)
if _fastpickle is not None and _fastpickle.field_names() != _FIELDS:  # pragma: no cover
    _fastpickle = None  # type: ignore[assignment]


def native_available() -> bool:
    """Whether the compiled reader is built and importable."""
    return _fastpickle is not None


def wanted_reader() -> str:
    """``python`` when ``HANGSCOPE_READER=python``, else ``native`` if it is built."""
    choice = os.environ.get(READER_ENV, "auto").strip().lower()
    if choice == PYTHON or _fastpickle is None:
        return PYTHON
    return NATIVE


def read_dump(rank: int, path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG) -> ParsedDump:
    """Read one dump file with the compiled reader where it can, else with the Python reader.

    Raises what :func:`analyzer.load.parse.parse_dump` raises, for the files it reads.
    """
    return read_payload(rank, first_payload(path, config=config), config=config)


def read_payload(
    rank: int, payload: Payload, *, config: AnalysisConfig = DEFAULT_CONFIG
) -> ParsedDump:
    """One dump candidate: the compiled reader for a plain pickle file, else the Python reader.

    Decompressed data, archive members and JSON (with a byte-order mark or not) always go to
    :func:`analyzer.load.parse.parse_payload`.
    """
    if payload.plain and payload.fmt == "pickle" and wanted_reader() == NATIVE:
        parsed = _native(rank, payload.label, payload.data, config)
        if isinstance(parsed, ParsedDump):
            parsed.fingerprint = payload.fingerprint
            return parsed
    return parse_payload(rank, payload, config=config)


def parse_native(
    rank: int, path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG
) -> ParsedDump | str:
    """The compiled reader's :class:`ParsedDump` of ``path``, or why it declined it."""
    if _fastpickle is None:
        return "compiled reader not built"
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            if len(head) < 2 or head[0] != 0x80:
                return "not a pickle"
            size = os.fstat(f.fileno()).st_size
            if size > config.native_max_bytes:
                return "file larger than the compiled reader takes"
            data = head + f.read()
    except OSError:
        return "cannot read"
    return _native(rank, str(path), data, config)


def _native(rank: int, label: str, data: bytes, config: AnalysisConfig) -> ParsedDump | str:
    if _fastpickle is None:
        return "compiled reader not built"
    if len(data) < 2 or data[0] != 0x80:
        return "not a pickle"
    if len(data) > config.native_max_bytes:
        return "file larger than the compiled reader takes"
    result = _fastpickle.parse(data)
    if isinstance(result, str):
        return result
    try:
        return _assemble(rank, label, result, config)
    except Exception as exc:  # noqa: BLE001 - any value the reader's functions do not expect: the Python reader decides
        return f"value not handled ({type(exc).__name__})"


_DROPS = "a value the Python reader drops or counts"


class _Declined(Exception):
    """A value the Python reader would drop, count in ``warnings`` or bound (caps)."""


_Derive = Callable[[Any, AnalysisConfig], Any]
_DECLINE = object()


def _name(v: Any, config: AnalysisConfig) -> Any:
    names, split, not_str, odd = val.check_names([v], config.max_rank)
    return _DECLINE if not_str or odd else (names[0], split[0])


def _group(v: Any, config: AnalysisConfig) -> Any:
    parts = val.group_parts(v)
    return _DECLINE if parts is None else parts


def _list_text(key: str) -> _Derive:
    def derive(v: Any, config: AnalysisConfig) -> Any:
        texts, ok = val.check_lists([v], key, config)
        return texts[0] if ok[0] else _DECLINE

    return derive


def _checked(check: Callable[[list[Any]], tuple[list[str], list[bool]]]) -> _Derive:
    def derive(v: Any, config: AnalysisConfig) -> Any:
        texts, ok = check([v])
        return texts[0] if ok[0] else _DECLINE

    return derive


def _stack(v: Any, config: AnalysisConfig) -> Any:
    key = val.stack_keys([v], config)[0]
    return _DECLINE if key is None else key


#: What the Python reader makes of one distinct value of each object field (``_DECLINE``:
#: a value it would drop, count in ``warnings`` or bound).
_DERIVE: dict[str, _Derive] = {
    "profiling_name": _name,
    "process_group": _group,
    **{
        key: _list_text(key)
        for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
    },
    "state": _checked(val.check_state),
    "thread_name": _checked(val.check_thread),
    "frames": _stack,
}
#: Per config and field: canonical bytes of a distinct value -> what ``_DERIVE`` made of it
#: (:mod:`analyzer.load.memo`).
#: Ranks share most values (names, sizes, dtypes, stacks), so most files meet none that is
#: new. The cache holds results of pure functions of the exact bytes: it saves time, it
#: cannot change what any file says. Bounded: a field's table is emptied when it is full.
_SEEN: BoundedMemo[tuple[AnalysisConfig, str], BoundedMemo[bytes, Any]] = BoundedMemo(
    "native reader: distinct values per config and field", 64
)


def _seen(config: AnalysisConfig, key: str) -> BoundedMemo[bytes, Any]:
    """Field ``key``'s memo under ``config``: at most 32k values or 32 MB of keys."""
    memo = _SEEN.get((config, key))
    if memo is None:
        memo = _SEEN.put((config, key), BoundedMemo(key, 1 << 15, 32 << 20, register=False))
    return memo


def _derived(key: str, keys: list[bytes], config: AnalysisConfig) -> list[Any]:
    """What each distinct value (by its canonical bytes) of field ``key`` reads as."""
    seen = _seen(config, key)
    derive = _DERIVE[key]
    out = []
    for k in keys:
        got = seen.get(k)
        if got is None:
            got = seen.put(k, derive(_fastpickle.decode(k), config), len(k))
        if got is _DECLINE:
            raise _Declined
        out.append(got)
    return out


def _objects(objects: list[Any], config: AnalysisConfig) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """The object fields as (each entry's index into the distinct values, what they read as)."""
    return {
        key: (np.frombuffer(codes, dtype=np.int32).astype(np.intp), _derived(key, keys, config))
        for key, (codes, keys) in zip(_FIELDS[12:], objects)
    }


def _strings(obj: dict[str, tuple[np.ndarray, list[Any]]], cols: Columns) -> None:
    """Names, groups, sizes, dtypes, state and thread name, each encoded in ``cols``."""
    index, named = obj["profiling_name"]
    cols.encode_names(index, [n for n, _split in named], [split for _n, split in named])
    index, parts = obj["process_group"]
    cols.encode("pg_name", index, [pg[0] for pg in parts])
    cols.encode("pg_desc", index, [pg[1] for pg in parts])
    for key in (
        "input_sizes",
        "output_sizes",
        "input_dtypes",
        "output_dtypes",
        "state",
        "thread_name",
    ):
        index, texts = obj[key]
        cols.encode(key, index, texts)


def _ints(
    int_cols: list[bytes], bounds: list[tuple[int, int]], cols: Columns, config: AnalysisConfig
) -> None:
    """The integer columns, every value within its range (the core gives each column's
    smallest and largest value)."""
    by_key = dict(zip(_FIELDS[:9], zip(int_cols, bounds)))
    for name, (key, _default, lo, hi, _entry) in int_columns(config).items():
        data, (smallest, largest) = by_key[key]
        values = np.frombuffer(data, dtype=np.int64)
        if len(values) and (smallest < lo or largest >= hi):
            raise _Declined
        cols.ints[name] = values
        if len(values):
            cols.bounds[name] = (smallest, largest)


def _assemble(
    rank: int, path: str, result: tuple[Any, ...], config: AnalysisConfig
) -> ParsedDump | str:
    """The same steps as :func:`analyzer.load.parse.parse_payload`, over distinct values.

    Only a dump the Python reader reads without dropping or counting anything is assembled
    here; any value it would drop, count in ``warnings`` or bound (caps) declines the dump.
    """
    top, n, int_cols, bool_cols, float_col, objects, bounds = result
    if "version" not in top or not ({"entries", "pg_config", "pg_status"} & top.keys()):
        return "not a flight-recorder dump"
    cols = Columns()
    try:
        obj = _objects(objects, config)
        _strings(obj, cols)
        index, keys = obj["frames"]
        per_distinct, stacks = val.stack_ids(keys)
        _ints(int_cols, bounds, cols, config)
    except _Declined:
        return _DROPS
    cols.ints["stack"] = per_distinct[index]
    why = Reasons()
    tables = group_tables(top, why, config)
    if why.entries or why.fields:
        return _DROPS
    flags = (
        np.frombuffer(bool_cols[0], dtype=np.bool_),
        np.frombuffer(bool_cols[1], dtype=np.bool_).copy(),
        np.frombuffer(float_col, dtype=np.float64),
    )
    parsed = cols.finish(
        rank=rank, path=str(path), fmt="pickle", top=top, n=int(n), flags=flags, tables=tables
    )
    parsed.stacks = stacks
    parsed.reader = NATIVE
    return parsed


__all__ = [
    "NATIVE",
    "NATIVE_MAX_BYTES",
    "PYTHON",
    "READER_ENV",
    "native_available",
    "parse_native",
    "read_dump",
    "read_payload",
    "wanted_reader",
]
