"""The normalized store: the tables of one incident (or of a shard of it) as Parquet files.

``hangscope export PATH -o DIR`` writes it (:func:`write_store`); every command accepts ``DIR``
(or several such folders) as input and re-opens the incident without parsing the dumps again.
Its files, formats and columns: :mod:`~analyzer.store.layout`; the parsed dumps it holds:
:mod:`~analyzer.store.parsed_dumps`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from analyzer import schema
from analyzer.errors import InputError
from analyzer.load import Contexts, Loaded, is_store
from analyzer.normalize import Tables
from analyzer.store.atomic import begin_store, fsync_file, is_build, swap_in
from analyzer.store.layout import (
    MARKER,
    PARSED_FILES,
    PARSED_TABLES,
    PARSED_VERSIONS,
    STORE_VERSION,
    TABLES,
    TABLES_ONLY_VERSION,
    digest_of,
    read_meta,
    require_pyarrow,
    stray_dumps,
)
from analyzer.store.parsed_dumps import write_parsed

__all__ = ["has_parsed_dumps", "ranges", "read_store", "store_inputs", "write_store"]


def write_store(
    tables: Tables,
    out: str | os.PathLike[str],
    *,
    loaded: Loaded | None = None,
    contexts: Contexts | None = None,
    world_option: int | None = None,
    staged: Path | None = None,
) -> Path:
    """Write ``tables`` as Parquet files as the store ``out``, with the parsed dumps of
    ``loaded`` (what makes stores mergeable) and the ``contexts`` found beside them.
    ``world_option``: the world size the user gave (None: worked out from the dumps).
    ``staged``: the folder :func:`write_parsed` already wrote ``loaded`` to (in a folder of
    :func:`~analyzer.store.atomic.begin_store`, or in ``out``).

    The store is built beside ``out`` and swapped in whole (:mod:`~analyzer.store.atomic`):
    ``out`` is the complete new store, or what it was before (a failure removes what the
    write made). ``out`` must be absent, empty or a store (:class:`InputError`)."""
    require_pyarrow()
    folder = Path(out)
    build = staged.parent if staged is not None and is_build(staged.parent) else None
    try:
        if build is None:
            build = begin_store(folder)
        _write_into(build, tables, loaded, contexts, world_option, staged)
        swap_in(build, folder)
    except BaseException:
        if build is not None:
            shutil.rmtree(build, ignore_errors=True)
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        raise
    return folder


def _write_into(
    build: Path,
    tables: Tables,
    loaded: Loaded | None,
    contexts: Contexts | None,
    world_option: int | None,
    staged: Path | None,
) -> None:
    """Every file of the store in ``build``, flushed to disk, the marker (with each file's
    digest: :func:`~analyzer.store.atomic.digest_of`) last."""
    for name in TABLES:
        frame = getattr(tables, name)
        if name == "groups":
            frame = frame.assign(ranks=frame["ranks"].map(list))
        frame.to_parquet(build / f"{name}.parquet", index=False)
    meta: dict[str, Any] = {
        "format": STORE_VERSION if loaded is not None else TABLES_ONLY_VERSION,
        "world_size": tables.world_size,
        "world_option": world_option,
        "ranks": ranges(tables.dumped_ranks),
        "tables": {name: [c.name for c in cols] for name, cols in TABLES.items()},
    }
    if loaded is not None:
        staging = staged if staged is not None else write_parsed(loaded, build, contexts)
        for name in PARSED_FILES:
            (staging / name).replace(build / name)
        staging.rmdir()
        meta["tables"].update(
            {name: [c.name for c in cols] for name, cols in PARSED_TABLES.items()}
        )
    digests = {}
    for path in sorted(build.iterdir()):
        fsync_file(path)
        digests[path.name] = digest_of(path)
    meta["digests"] = digests
    (build / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    fsync_file(build / MARKER)


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


def has_parsed_dumps(path: str | os.PathLike[str]) -> bool:
    """True for a store that holds its parsed dumps (mergeable, re-normalized when opened)."""
    return read_meta(Path(path)).get("format") in PARSED_VERSIONS


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
        raise InputError(
            f"cannot mix stores and dumps ({os.fspath(store)} is a store, "
            f"{os.fspath(other)} is not): export the dumps first "
            "(hangscope export) or give only dumps"
        )
    if len(inputs) == 1 and not has_parsed_dumps(inputs[0]):
        return "tables"
    return "dumps"


def read_store(path: str | os.PathLike[str], *, world_size: int | None = None) -> Tables:
    """The normalized tables of a store written by :func:`write_store`, as they were written.

    ``world_size`` cannot be applied to the tables alone: unless it is the store's own, it is
    refused (:class:`InputError`)."""
    require_pyarrow()
    folder = Path(path)
    meta = read_meta(folder)
    stray_dumps(folder)
    if world_size is not None and world_size != int(meta["world_size"]):
        raise InputError(
            f"{folder}: --world-size {world_size} cannot be applied to a store of "
            f"format {meta.get('format')!r} (normalized tables of world size "
            f"{meta['world_size']}, no parsed dumps): export the dumps again"
        )
    frames: dict[str, pd.DataFrame] = {}
    for name, cols in TABLES.items():
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
