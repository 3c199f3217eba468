"""Find the files a user pointed at, and the global rank each one's name gives.

Inputs may be directories (searched recursively), globs, path prefixes such as
``/dumps/nccl_trace_rank_`` (PyTorch's ``TORCH_FR_DUMP_TEMP_FILE`` style), or plain files.
Whether a file is a dump is decided later from its content (:mod:`analyzer.load.unpack`): here
every regular file is a candidate, with the rank its name carries (if any) and whether its
name looks like a dump's (a file so named that cannot be read is reported, others ignored).
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analyzer.errors import InputError

#: Extensions a dump may carry; the rank number sits right before them.
DUMP_SUFFIXES: tuple[str, ...] = (".json", ".pkl", ".pickle", ".bin", ".trace", ".fr")
#: Compression and archive extensions, taken off a name before its rank is read.
PACKED_SUFFIXES: tuple[str, ...] = (
    ".tar.gz",
    ".tgz",
    ".tar.zst",
    ".tar.bz2",
    ".tar.xz",
    ".gz",
    ".zst",
    ".bz2",
    ".xz",
    ".tar",
    ".zip",
)
_TRAILING_INT = re.compile(r"(\d+)$")
#: How dump files are named: ``..rank_N``, ``_dump_N``, ``trace_rankN``, ``..rank_node02_N``.
_DUMP_NAME = re.compile(r"(?:rank|dump|trace)[_\-.]?(?:[A-Za-z]+\d*[_\-])?\d+$", re.IGNORECASE)
#: A copy of a dump kept under a suffixed name: ``nccl_trace_rank_3.1`` (a rotation),
#: ``nccl_trace_rank_3.20261207-015536`` (a time stamp), ``rank_3.json.2``: the rank is the
#: number before the suffix, never the suffix's. A suffix starts with a digit (``.tmp`` or
#: ``.part`` is a file being written, not a copy).
_COPY_NAME = re.compile(
    r"(?:rank|dump|trace)[_\-.]?(?:[A-Za-z]+\d*[_\-])?(\d+)"
    r"(?:\.(?:json|pkl|pickle|bin|trace|fr))?(?:[.~]\d[\w\-]*)+$",
    re.IGNORECASE,
)


#: The file that marks a folder as a store written by ``hangscope export`` (:mod:`analyzer.store.parquet`).
STORE_MARKER = "hangscope-store.json"


def is_store(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder written by ``hangscope export``."""
    return (Path(path) / STORE_MARKER).is_file()


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
    >>> rank_from_name("nccl_trace_rank_0.1"), rank_from_name("rank_2.20261207-015536")
    (0, 2)
    """
    stem = _stem(name)
    if prefix is not None:
        base = os.path.basename(prefix)
        if not stem.startswith(base):
            return None
        rest = stem[len(base) :]
        return int(rest) if rest.isdigit() else None
    if _DUMP_NAME.search(stem) is None and (copy := _COPY_NAME.search(stem)) is not None:
        return int(copy.group(1))
    match = _TRAILING_INT.search(stem)
    return int(match.group(1)) if match else None


def _stem(name: str) -> str:
    """``name`` without its compression and dump suffixes (``rank_3.json.gz`` -> ``rank_3``)."""
    stem = _unpacked(name)
    for suffix in DUMP_SUFFIXES:
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def _unpacked(name: str) -> str:
    lower = name.lower()
    for suffix in PACKED_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def is_dump_name(name: str, prefix: str | None = None) -> bool:
    """Whether ``name`` is built like a dump file's (``nccl_trace_rank_3``, ``_dump_3``,
    ``rank_3.json``, ``<prefix>3``, a suffixed copy ``nccl_trace_rank_3.1``), compressed or
    not. A core file or ``train_log_17`` is not.

    >>> is_dump_name("nccl_trace_rank_3.gz"), is_dump_name("core.12345")
    (True, False)
    """
    stem = _stem(name)
    if prefix is not None:
        base = os.path.basename(prefix)
        return stem.startswith(base) and stem[len(base) :].isdigit()
    return _DUMP_NAME.search(stem) is not None or _COPY_NAME.search(stem) is not None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file that may hold dumps: the rank its name gives (None: none), and whether the
    name is built like a dump's."""

    path: Path
    rank: int | None
    named: bool
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """Every regular file named by the inputs, and the folders that could not be read."""

    candidates: tuple[Candidate, ...]
    unreadable_dirs: tuple[tuple[str, str], ...] = ()
    hidden: tuple[str, ...] = field(default=())
    beside: tuple[RankFile, ...] = ()
    """Files named like dumps in the folders of the files given one by one (or by a glob)
    that were not given: the rest of the job, most likely (never read)."""


#: Most entries of one folder looked at for the files beside the given ones.
MAX_BESIDE = 100_000


def _beside(given: Sequence[Candidate], prefix: str | None) -> tuple[RankFile, ...]:
    """Files named like per-rank dumps beside ``given`` (by name only: never opened)."""
    paths = {os.path.realpath(c.path) for c in given}
    out: list[RankFile] = []
    for folder in sorted({os.path.dirname(os.path.realpath(c.path)) for c in given}):
        try:
            with os.scandir(folder) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_BESIDE:
                        break
                    name = entry.name
                    if name.startswith(".") or not is_dump_name(name, prefix):
                        continue
                    rank = rank_from_name(name, prefix)
                    path = os.path.join(folder, name)
                    if rank is not None and path not in paths and entry.is_file():
                        out.append(RankFile(rank, Path(path)))
        except OSError:
            continue
    return tuple(sorted(out, key=lambda f: (f.rank, str(f.path))))


def _regular(path: str) -> bool:
    """A regular file; or, named like a dump, anything but a folder (a dangling symbolic
    link, a FIFO, a device): such a rank's file is reported as unreadable, with its reason,
    not left out (its rank would read as crashed)."""
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            return True
    except OSError:
        pass
    return _odd_dump(path)


def _odd_dump(path: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISDIR(mode) and is_dump_name(os.path.basename(path))


def _walk(top: str, unreadable: list[tuple[str, str]]) -> list[str]:
    """Regular files under ``top`` (sorted); folders that cannot be listed go to ``unreadable``.

    Raises :class:`InputError` when ``top`` itself cannot be listed.
    """
    try:
        with os.scandir(top):
            pass
    except OSError as exc:
        raise InputError(f"{top}: cannot read folder ({exc.strerror or exc})") from None
    out: list[str] = []

    def failed(exc: OSError) -> None:
        unreadable.append((str(exc.filename or ""), exc.strerror or str(exc)))

    for folder, dirs, files in os.walk(top, onerror=failed):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if _regular(path):
                out.append(path)
    return out


def _expand(spec: str, unreadable: list[tuple[str, str]]) -> list[Path]:
    """Files named by one input: a directory, a file, a glob or a path prefix."""
    path = Path(spec)
    if path.is_dir():
        return [Path(p) for p in _walk(spec, unreadable)]
    if path.is_file():
        return [path]
    if any(ch in spec for ch in "*?["):
        return sorted(Path(p) for p in glob.glob(spec, recursive=True) if _regular(p))
    parent = path.parent if str(path.parent) else Path(".")
    if parent.is_dir():
        matches = sorted(p for p in parent.glob(glob.escape(path.name) + "*") if _regular(str(p)))
        if matches:
            return matches
    if os.path.lexists(spec):
        raise InputError(f"{spec}: not a regular file or folder")
    raise InputError(f"{spec}: no such file or directory")


class _RealPaths:
    """``os.path.realpath`` of many files of few folders: a file that is no symbolic link
    is its folder's real path and its name (each folder resolved once: resolving 100,000
    files one by one took seconds)."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def __call__(self, path: Path) -> str:
        text = os.fspath(path)
        if os.path.islink(text):
            return os.path.realpath(text)
        folder, name = os.path.split(text)
        real = self._folders.get(folder)
        if real is None:
            real = self._folders[folder] = os.path.realpath(folder or os.curdir)
        return os.path.join(real, name)


def find(inputs: Sequence[str | os.PathLike[str]], prefix: str | None = None) -> Found:
    """Every regular file named by ``inputs``, in order, each path once.

    A path prefix given as input also acts as ``prefix``. Hidden files (names starting with
    a dot) are listed apart. Raises :class:`InputError` for a missing input, an unreadable
    top folder, or when no file is found at all.
    """
    if not inputs:
        raise InputError("no input given: name a dump directory, files, a glob or a prefix")
    seen: set[str] = set()
    out: list[Candidate] = []
    hidden: list[str] = []
    unreadable: list[tuple[str, str]] = []
    picked: list[Candidate] = []  # given one by one or by a glob, not as a folder
    real = _RealPaths()
    for spec in inputs:
        spec_s = os.fspath(spec)
        spec_prefix = prefix
        if (
            spec_prefix is None
            and not Path(spec_s).exists()
            and not any(c in spec_s for c in "*?[")
        ):
            spec_prefix = spec_s
        for path in _expand(spec_s, unreadable):
            key = real(path)
            if key in seen:
                continue
            seen.add(key)
            if path.name.startswith("."):
                hidden.append(str(path))
                continue
            out.append(
                Candidate(
                    path,
                    rank_from_name(path.name, spec_prefix),
                    is_dump_name(path.name, spec_prefix),
                    spec_prefix,
                )
            )
            if not Path(spec_s).is_dir() and out[-1].named:
                picked.append(out[-1])
    if not out:
        where = ", ".join(os.fspath(s) for s in inputs)
        raise InputError(f"{where}: no files found")
    return Found(tuple(out), tuple(unreadable), tuple(hidden), _beside(picked, prefix))


def discover(inputs: Sequence[str | os.PathLike[str]], prefix: str | None = None) -> list[RankFile]:
    """The files named by ``inputs`` whose name carries a rank, sorted by rank (several
    files may give one rank: the loader decides between them by content).

    Raises :class:`InputError` when no file carries a rank number.
    """
    found = find(inputs, prefix)
    ranked = [RankFile(c.rank, c.path) for c in found.candidates if c.rank is not None]
    looked_at = len(found.candidates)
    if not ranked:
        where = ", ".join(os.fspath(s) for s in inputs)
        if looked_at == 0:
            raise InputError(f"{where}: no files found")
        hint = f" starting with {prefix!r}" if prefix else " ending in a rank number"
        raise InputError(
            f"{where}: none of the {looked_at} file(s) is named like a per-rank dump{hint} "
            "(e.g. nccl_trace_rank_3, _dump_3, rank_3.json); use --prefix to say how they are named"
        )
    return sorted(ranked, key=lambda f: (f.rank, str(f.path)))
