"""Load every dump a user pointed at, in parallel, keeping going past bad files."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from analyzer.discovery import RankFile, discover
from analyzer.errors import DumpFormatError, InputError
from analyzer.fastreader import read_dump
from analyzer.reader import ParsedDump, SameMembers

Progress = Callable[[int, int, int], None]
"""Called as ``progress(files_done, files_total, entries_so_far)``."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file that could not be analyzed, and why."""

    path: str
    rank: int
    reason: str


@dataclass(frozen=True, slots=True)
class Loaded:
    """What the loader read: parsed dumps in rank order, and the files it skipped."""

    dumps: tuple[ParsedDump, ...]
    skipped: tuple[Skipped, ...]
    files: tuple[RankFile, ...]


def _parse(item: tuple[int, str]) -> ParsedDump | Skipped:
    rank, path = item
    try:
        return read_dump(rank, Path(path))  # the compiled reader, or the Python one
    except DumpFormatError as exc:
        return Skipped(exc.path, rank, exc.reason)


def default_jobs() -> int:
    """Worker processes to use: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def load_dumps(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    prefix: str | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Loaded:
    """Discover and parse the dumps named by ``inputs``.

    Bad files are listed in ``skipped`` and the others are still read. Raises
    :class:`InputError` when no file could be read at all.
    """
    files = discover(inputs, prefix=prefix)
    items = [(f.rank, str(f.path)) for f in files]
    jobs = default_jobs() if jobs is None or jobs <= 0 else jobs
    jobs = min(jobs, len(items))
    results: list[ParsedDump | Skipped] = []
    entries = 0
    # Dumps repeat their groups' member lists (the default group's is world-size long): keep
    # one tuple per distinct list, so the copy each batch of results brought back dies.
    same = SameMembers()
    with ExitStack() as stack:
        if jobs <= 1 or len(items) < 8:
            parsed: Iterator[ParsedDump | Skipped] = map(_parse, items)
        else:
            chunk = max(1, min(64, len(items) // (jobs * 8)))
            ctx = None
            if sys.platform.startswith("linux"):
                import multiprocessing

                ctx = multiprocessing.get_context("fork")
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=jobs, mp_context=ctx))
            parsed = pool.map(_parse, items, chunksize=chunk)
        for i, result in enumerate(parsed, 1):
            if isinstance(result, ParsedDump):
                entries += result.n_entries
                result.pg_config = {name: (desc, same(name, members) if members else members)
                                    for name, (desc, members) in result.pg_config.items()}
            results.append(result)
            if progress:
                progress(i, len(items), entries)
    dumps = tuple(r for r in results if isinstance(r, ParsedDump))
    skipped = tuple(r for r in results if isinstance(r, Skipped))
    if not dumps:
        reasons = "; ".join(f"{Path(s.path).name}: {s.reason}" for s in skipped[:3])
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise InputError(f"no readable dump among {len(skipped)} file(s): {reasons}{more}")
    return Loaded(dumps=dumps, skipped=skipped, files=tuple(files))


class ProgressPrinter:
    """Progress on stderr for long loads; silent when stderr is not a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, entries: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done != total and now - self.last < 0.25:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        if elapsed < 1.0 and done != total:
            return
        sys.stderr.write(
            f"\rreading dumps: {done}/{total} files, {entries:,} entries, "
            f"{entries / elapsed:,.0f} entries/s"
        )
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


__all__ = ["Loaded", "Skipped", "load_dumps", "default_jobs", "ProgressPrinter", "InputError"]
