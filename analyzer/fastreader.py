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
from analyzer.reader import ParsedDump

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
    """Read one dump with the compiled reader where it can, else with the Python reader.

    Raises what :func:`analyzer.reader.parse_dump` raises, for the files it reads.
    """
    if wanted_reader() == NATIVE:
        parsed = parse_native(rank, path)
        if isinstance(parsed, ParsedDump):
            return parsed
    return ref.parse_dump(rank, path)


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
    result = _fastpickle.parse(data)
    del data
    if isinstance(result, str):
        return result
    try:
        return _assemble(rank, path, result)
    except Exception as exc:  # any value the reader's functions do not expect: the Python reader decides
        return f"value not handled ({type(exc).__name__})"


def _assemble(rank: int, path: Path, result: tuple[Any, ...]) -> ParsedDump | str:
    """The same steps as :func:`analyzer.reader.parse_dump`, over distinct values."""
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
    names = [pname or "" for pname in names_raw]
    split = [ref.split_profiling_name(pname) for pname in names]
    encode("profiling_name", name_index, names)
    encode("op", name_index, [backend_op[1] for backend_op in split])
    encode("backend", name_index, [backend_op[0] for backend_op in split])
    index, values = distinct("process_group")
    pg_parts = [ref._pg_parts(pg) for pg in values]
    encode("pg_name", index, [name for name, _ in pg_parts])
    encode("pg_desc", index, [desc for _, desc in pg_parts])
    for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
        index, values = distinct(key)
        encode(key, index, [ref._text_of(v) for v in values])
    index, values = distinct("state")
    encode("state", index, [str(v or "unknown") for v in values])
    index, values = distinct("thread_name")
    encode("thread_name", index, [str(v or "") for v in values])

    index, values = distinct("frames")
    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    per_distinct = np.array(
        [stack_ids.setdefault(ref._stack_key(frames), len(stack_ids)) if frames else -1
         for frames in values] or [-1], dtype=np.int64)
    stacks = list(stack_ids)

    by_name = {key: np.frombuffer(col, dtype=np.int64) for key, col in zip(_INT_COLUMNS, int_cols)}
    ints = {key: by_name[key] for key in ("pg_id", "record_id", "seq", "p2p_seq", "op_id",
                                          "time_created_ns", "time_started_ns",
                                          "time_completed_ns", "timeout_ms")}
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

    pg_config: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    config = top.get("pg_config") or {}
    if isinstance(config, dict):
        for key, value in config.items():
            if not isinstance(value, dict):
                continue
            name = str(value.get("name", key))
            pg_config[name] = (str(value.get("desc") or ""), ref._member_ranks(value.get("ranks")))
    pg_status: dict[int, tuple[int, int, int]] = {}
    status = top.get("pg_status") or {}
    if isinstance(status, dict):
        for key, value in status.items():
            if not isinstance(value, dict):
                continue
            pg_status[ref._int(key, -1)] = (
                ref._int(value.get("last_enqueued_collective"), -1),
                ref._int(value.get("last_started_collective"), -1),
                ref._int(value.get("last_completed_collective"), -1),
            )
    parsed = ParsedDump(
        rank=rank,
        path=str(path),
        fmt="pickle",
        version=str(top.get("version", "")),
        comm_lib_version=str(top.get("comm_lib_version") or top.get("nccl_version") or ""),
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


__all__ = ["read_dump", "parse_native", "native_available", "wanted_reader", "READER_ENV",
           "NATIVE", "PYTHON"]
