"""The compiled pickle reader, and the choice between it and the Python reader.

:mod:`analyzer._fastpickle` (C, built by ``pip install``) turns a pickle dump straight into
the columns of a :class:`~analyzer.reader.ParsedDump`, without a Python object per entry: it
implements the opcodes a dump of plain data is made of (protocol 2 to 5, as PyTorch and
Python write them) and nothing else, so no global, extension code, persistent id or buffer
can even be expressed to it. Only the few distinct values of the object fields (names,
sizes, dtypes, stacks) and the small top-level dicts become Python objects, and they go
through the same functions as in :func:`analyzer.reader.parse_dump`.

:mod:`analyzer.reader` stays the reference. The compiled reader handles the well-formed
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
from pathlib import Path
from typing import Any

import numpy as np

from analyzer import reader as ref
from analyzer.payload import Payload
from analyzer.reader import ParsedDump, first_payload

try:  # built by pip install (setup.py); absent without a C compiler
    from analyzer import _fastpickle
except ImportError:  # pragma: no cover - depends on the build
    _fastpickle = None

READER_ENV = "HANGSCOPE_READER"
#: Larger pickles go to the Python reader (core.h's FP_MAX_BYTES); a 2,000-entry dump is ~250 KB.
NATIVE_MAX_BYTES = 32 << 20
NATIVE = "native"
PYTHON = "python"

# Column order of the compiled core (core.h); checked against the module at import.
_FIELDS = (
    "record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
    "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms",
    "is_p2p", "retired", "duration_ms",
    "profiling_name", "process_group", "input_sizes", "output_sizes", "input_dtypes",
    "output_dtypes", "state", "thread_name", "frames",
)
_INT_COLUMNS = ("record_id", "pg_id", "seq", "p2p_seq", "op_id", "time_created_ns",
                "time_started_ns", "time_completed_ns", "timeout_ms")
if _fastpickle is not None and _fastpickle.field_names() != _FIELDS:  # pragma: no cover
    _fastpickle = None


def native_available() -> bool:
    """Whether the compiled reader is built and importable."""
    return _fastpickle is not None


def wanted_reader() -> str:
    """``python`` when ``HANGSCOPE_READER=python``, else ``native`` if it is built."""
    choice = os.environ.get(READER_ENV, "auto").strip().lower()
    if choice == PYTHON or _fastpickle is None:
        return PYTHON
    return NATIVE


def read_dump(rank: int, path: Path) -> ParsedDump:
    """Read one dump file with the compiled reader where it can, else with the Python reader.

    Raises what :func:`analyzer.reader.parse_dump` raises, for the files it reads.
    """
    return read_payload(rank, first_payload(path))


def read_payload(rank: int, payload: Payload) -> ParsedDump:
    """One dump candidate: the compiled reader for a plain pickle file, else the Python reader.

    Decompressed data, archive members and JSON (with a byte-order mark or not) always go to
    :func:`analyzer.reader.parse_payload`.
    """
    if payload.plain and payload.fmt == "pickle" and wanted_reader() == NATIVE:
        parsed = _native(rank, payload.label, payload.data)
        if isinstance(parsed, ParsedDump):
            parsed.fingerprint = payload.fingerprint
            return parsed
    return ref.parse_payload(rank, payload)


def parse_native(rank: int, path: Path) -> ParsedDump | str:
    """The compiled reader's :class:`ParsedDump` of ``path``, or why it declined it."""
    if _fastpickle is None:
        return "compiled reader not built"
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            if len(head) < 2 or head[0] != 0x80:
                return "not a pickle"
            size = os.fstat(f.fileno()).st_size
            if size > NATIVE_MAX_BYTES:
                return "file larger than the compiled reader takes"
            data = head + f.read()
    except OSError:
        return "cannot read"
    return _native(rank, str(path), data)


def _native(rank: int, label: str, data: bytes) -> ParsedDump | str:
    if _fastpickle is None:
        return "compiled reader not built"
    if len(data) < 2 or data[0] != 0x80:
        return "not a pickle"
    if len(data) > NATIVE_MAX_BYTES:
        return "file larger than the compiled reader takes"
    result = _fastpickle.parse(data)
    if isinstance(result, str):
        return result
    try:
        return _assemble(rank, label, result)
    except Exception as exc:  # any value the reader's functions do not expect: the Python reader decides
        return f"value not handled ({type(exc).__name__})"


_DROPS = "a value the Python reader drops or counts"


def _assemble(rank: int, path: str, result: tuple[Any, ...]) -> ParsedDump | str:
    """The same steps as :func:`analyzer.reader.parse_payload`, over distinct values.

    Only a dump the Python reader reads without dropping or counting anything is assembled
    here; any value it would drop, count in ``warnings`` or bound (caps) declines the dump.
    """
    top, n, int_cols, bool_cols, float_col, objects = result
    if "version" not in top or not ({"entries", "pg_config", "pg_status"} & top.keys()):
        return "not a flight-recorder dump"
    obj = dict(zip(_FIELDS[12:], objects))

    strings: dict[str, np.ndarray] = {}
    vocab: dict[str, list[str]] = {}

    def encode(field: str, index: np.ndarray, texts: list[str]) -> None:
        codes, vocab[field] = ref._vocab(texts)
        strings[field] = codes[index] if len(codes) else np.empty(0, dtype=np.int32)

    def distinct(key: str) -> tuple[np.ndarray, list[Any]]:
        codes, values = obj[key]
        return np.frombuffer(codes, dtype=np.int32).astype(np.intp), values

    name_index, names_raw = distinct("profiling_name")
    if any(type(v) is not str or not ref._OP_NAME.match(v) for v in names_raw):
        return _DROPS
    names = [ref.clean(v) for v in names_raw]
    split = [(b, op, me if me < ref.MAX_RANK else -1, peer if peer < ref.MAX_RANK else -1)
             for b, op, me, peer in map(ref.split_profiling_name, names)]
    encode("profiling_name", name_index, names)
    encode("op", name_index, [backend_op[1] for backend_op in split])
    encode("backend", name_index, [backend_op[0] for backend_op in split])
    index, values = distinct("process_group")
    parts = [ref._pg_parts(pg) for pg in values]
    if any(pg is None for pg in parts):
        return _DROPS
    encode("pg_name", index, [name for name, _ in parts])  # type: ignore[misc]
    encode("pg_desc", index, [desc for _, desc in parts])  # type: ignore[misc]
    for key, check, pattern in (("input_sizes", ref._shape_list, ref._SHAPES_TEXT),
                                ("output_sizes", ref._shape_list, ref._SHAPES_TEXT),
                                ("input_dtypes", ref._str_list, ref._DTYPES_TEXT),
                                ("output_dtypes", ref._str_list, ref._DTYPES_TEXT)):
        index, values = distinct(key)
        if not all(v is None or check(v) or (type(v) is str and len(v) <= 1 << 16
                                             and pattern.match(v) is not None) for v in values):
            return _DROPS
        encode(key, index, [ref._text_of(v) for v in values])
    index, values = distinct("state")
    if not all(v is None or (type(v) is str and len(v) <= 64) for v in values):
        return _DROPS
    encode("state", index, [ref.clean(v) if v else "unknown" for v in values])
    index, values = distinct("thread_name")
    if not all(v is None or type(v) is str for v in values):
        return _DROPS
    encode("thread_name", index, [ref.clean(v, 256) if v else "" for v in values])

    index, values = distinct("frames")
    keys = [ref._stack_key(frames) if frames else () for frames in values]
    if any(k is None for k in keys):
        return _DROPS
    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    per_distinct = np.array(
        [stack_ids.setdefault(key, len(stack_ids)) if key else -1 for key in keys] or [-1],
        dtype=np.int64)
    stacks = list(stack_ids)

    by_name = {key: np.frombuffer(col, dtype=np.int64) for key, col in zip(_INT_COLUMNS, int_cols)}
    bounds = {"pg_id": (-1, 1 << 31), "record_id": (-1, 1 << 62), "seq": (-1, ref.MAX_COUNTER),
              "p2p_seq": (-1, ref.MAX_COUNTER), "op_id": (-1, ref.MAX_COUNTER),
              "time_created_ns": (0, 1 << 63), "time_started_ns": (0, 1 << 63),
              "time_completed_ns": (0, 1 << 63), "timeout_ms": (0, 1 << 62)}
    for key, (lo, hi) in bounds.items():
        col = by_name[key]
        if len(col) and (int(col.min()) < lo or int(col.max()) >= hi):
            return _DROPS
    ints = {key: by_name[key] for key in bounds}
    ints["stack"] = per_distinct[index]
    ints["peer_local"] = np.array([p[3] for p in split] or [-1], dtype=np.int64)[name_index]
    ints["self_local"] = np.array([p[2] for p in split] or [-1], dtype=np.int64)[name_index]
    ints = {key: ref._narrow(values) for key, values in ints.items()}
    strings = {key: ref._narrow(codes) for key, codes in strings.items()}
    sendrecv = np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if op in ("send", "recv")])
    bools = {
        "is_p2p": np.frombuffer(bool_cols[0], dtype=np.bool_) | sendrecv,
        "retired": np.frombuffer(bool_cols[1], dtype=np.bool_).copy(),
        "coalesced": np.isin(strings["op"], [c for c, op in enumerate(vocab["op"]) if "coalesced" in op]),
    }
    floats = {"duration_ms": np.frombuffer(float_col, dtype=np.float64)}

    why = ref._Reasons()
    pg_config, pg_status = ref._tables_of(top, why)
    if why.entries or why.fields:
        return _DROPS
    parsed = ParsedDump(
        rank=rank,
        path=str(path),
        fmt="pickle",
        version=ref._version(top.get("version", "")),
        comm_lib_version=ref._version(top.get("comm_lib_version") or top.get("nccl_version") or ""),
        n_entries=int(n),
        strings={k: strings[k] for k in ref.STRING_FIELDS},
        vocab={k: vocab[k] for k in ref.STRING_FIELDS},
        ints=ints,
        bools=bools,
        floats=floats,
        stacks=stacks,
        pg_config=pg_config,
        pg_status=pg_status,
        warnings=[],
    )
    parsed.reader = NATIVE
    return parsed


__all__ = [
    "NATIVE",
    "PYTHON",
    "READER_ENV",
    "native_available",
    "parse_native",
    "read_dump",
    "read_payload",
    "wanted_reader",
]
