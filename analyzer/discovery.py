"""Find the per-rank dump files a user pointed at, and the global rank of each.

Inputs may be directories (searched recursively), globs, path prefixes such as
``/dumps/nccl_trace_rank_`` (PyTorch's ``TORCH_FR_DUMP_TEMP_FILE`` style), or plain files.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import InputError

#: Extensions a dump may carry; the rank number sits right before them.
DUMP_SUFFIXES: tuple[str, ...] = (".json", ".pkl", ".pickle", ".bin", ".trace", ".fr")
_TRAILING_INT = re.compile(r"(\d+)$")
#: Names that are clearly not dumps even though they end in a number are filtered by suffix.
_NOT_DUMP_SUFFIXES = frozenset(
    {".md", ".txt", ".log", ".py", ".html", ".png", ".svg", ".csv", ".parquet", ".ipynb",
     ".yaml", ".yml", ".toml", ".sh", ".gz", ".zip", ".tar"}
)


@dataclass(frozen=True, slots=True)
class RankFile:
    """One dump file and the global rank it belongs to."""

    rank: int
    path: Path


def rank_from_name(name: str, prefix: str | None = None) -> int | None:
    """Global rank encoded in a dump's file name, or None when the name carries none.

    >>> rank_from_name("nccl_trace_rank_12"), rank_from_name("rank_3.json")
    (12, 3)
    >>> rank_from_name("nccl_trace_rank_node02_5"), rank_from_name("trace_rank7")
    (5, 7)
    """
    stem = name
    for suffix in DUMP_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    if prefix is not None:
        base = os.path.basename(prefix)
        if not stem.startswith(base):
            return None
        rest = stem[len(base):]
        return int(rest) if rest.isdigit() else None
    match = _TRAILING_INT.search(stem)
    return int(match.group(1)) if match else None


def _looks_like_dump(path: Path) -> bool:
    if path.name.startswith("."):
        return False
    return path.suffix.lower() not in _NOT_DUMP_SUFFIXES


def _expand(spec: str) -> list[Path]:
    """Files named by one input: a directory, a file, a glob or a path prefix."""
    path = Path(spec)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and _looks_like_dump(p))
    if path.is_file():
        return [path]
    if any(ch in spec for ch in "*?["):
        return sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    parent = path.parent if str(path.parent) else Path(".")
    if parent.is_dir():
        matches = sorted(p for p in parent.glob(glob.escape(path.name) + "*") if p.is_file())
        if matches:
            return matches
    raise InputError(f"{spec}: no such file or directory")


def discover(inputs: Sequence[str | os.PathLike[str]], prefix: str | None = None) -> list[RankFile]:
    """Every dump file named by ``inputs``, with its global rank, sorted by rank.

    Files whose name carries no rank number (README, EXPECTED.json, logs) are ignored; a
    path prefix given as input also acts as ``prefix``. Raises :class:`InputError` when
    nothing is left. Several different files may hold one rank (a process writes one
    buffer per backend: ``nccl2_trace_rank_3`` and ``nccl-lazy_trace_rank_3``); they are all
    returned, and the loader and normalization decide what each holds.
    """
    if not inputs:
        raise InputError("no input given: name a dump directory, files, a glob or a prefix")
    found: dict[int, list[Path]] = {}
    looked_at = 0
    for spec in inputs:
        spec_s = os.fspath(spec)
        spec_prefix = prefix
        if spec_prefix is None and not Path(spec_s).exists() and not any(c in spec_s for c in "*?["):
            spec_prefix = spec_s
        for path in _expand(spec_s):
            looked_at += 1
            rank = rank_from_name(path.name, spec_prefix)
            if rank is None:
                continue
            paths = found.setdefault(rank, [])
            if path not in paths:
                paths.append(path)
    if not found:
        where = ", ".join(os.fspath(s) for s in inputs)
        if looked_at == 0:
            raise InputError(f"{where}: no files found")
        hint = f" starting with {prefix!r}" if prefix else " ending in a rank number"
        raise InputError(
            f"{where}: none of the {looked_at} file(s) is named like a per-rank dump{hint} "
            "(e.g. nccl_trace_rank_3, _dump_3, rank_3.json); use --prefix to say how they are named"
        )
    return [RankFile(rank, path) for rank, paths in sorted(found.items()) for path in sorted(paths)]

