"""Load every dump a user pointed at, in parallel, keeping going past bad files.

Each file is recognised by its content: dumps (plain, compressed, in archives) are parsed,
files that are no dump are *ignored* (listed with ``-v``), dumps that cannot be read are
*skipped* with their reason. One incident is chosen where the folders hold several
(:mod:`.incidents`), several dumps of one rank resolved (:mod:`.duplicates`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import DumpFormatError
from analyzer.escape import clean
from analyzer.load.batches import ParseBatch, spill
from analyzer.load.discover import Found, RankFile, find, is_dump_name, rank_from_name
from analyzer.load.duplicates import Duplicate, resolve_ranks, set_aside_stale
from analyzer.load.incidents import Incident, set_aside, split_incidents
from analyzer.load.members import SameMembers, own_world
from analyzer.load.no_dump import no_dump_error
from analyzer.load.parse import parse_payload
from analyzer.load.parse_native import read_payload
from analyzer.load.parsed_dump import ParsedDump
from analyzer.load.pool import parse_in_pool
from analyzer.load.snapshot_tables import read_as_written
from analyzer.load.torchcomms import TorchCommsRead, read_torchcomms
from analyzer.load.unpack import Refusal, payloads

Progress = Callable[[int, int, int], None]
"""Called as ``progress(files_done, files_total, entries_so_far)``."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file that could not be analyzed, and why."""

    path: str
    rank: int
    reason: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """A file (or archive member) that is no flight-recorder dump: not analyzed, not a rank."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Loaded:
    """What the loader read: parsed dumps in rank order, and the files it skipped."""

    dumps: tuple[ParsedDump, ...]
    skipped: tuple[Skipped, ...]
    files: tuple[RankFile, ...]
    ignored: tuple[Ignored, ...] = ()
    duplicates: tuple[Duplicate, ...] = ()
    unreadable_dirs: tuple[tuple[str, str], ...] = ()
    beside: tuple[RankFile, ...] = ()
    """Files named like dumps beside the files given, that were not given (never read)."""
    incidents: tuple[Incident, ...] = ()
    """The incidents of the folders when several (newest first; one was loaded)."""
    torchcomms: TorchCommsRead = field(default_factory=TorchCommsRead)
    """The dumps read as TorchComms' recorder (:mod:`analyzer.load.torchcomms`), and why."""
    stale: tuple[tuple[int, str], ...] = ()  # only dump an older round's: set aside, why

    @property
    def warnings(self) -> list[tuple[int, str, str]]:
        """(rank, path, warning) for every value a parse dropped, dump by dump."""
        return [(d.rank, d.path, w) for d in self.dumps for w in d.warnings]

    @property
    def suspect_ranks(self) -> list[int]:
        """Ranks whose dump had entries or values dropped."""
        return sorted({d.rank for d in self.dumps if d.suspect})

    @property
    def not_given(self) -> dict[int, str]:
        """Ranks with no dump given whose file sits beside the given ones: rank -> path."""
        dumped = {d.rank for d in self.dumps} | {s.rank for s in self.skipped}
        out: dict[int, str] = {}
        for f in self.beside:
            if f.rank not in dumped:
                out.setdefault(f.rank, str(f.path))
        return out

    @property
    def unreadable_ranks(self) -> list[int]:
        """Ranks with a file that could not be read and no readable dump."""
        return sorted({s.rank for s in self.skipped if s.rank >= 0} - {d.rank for d in self.dumps})


_Item = tuple[int, str, bool, bool, "str | None"]
_Result = ParsedDump | Skipped | Ignored


def _parse(item: _Item, config: AnalysisConfig = DEFAULT_CONFIG) -> list[_Result]:
    """Everything one file holds: its dump, or one result per archive member."""
    rank, path, named, fingerprint, prefix = item
    out: list[_Result] = []
    for got in payloads(path, fingerprint=fingerprint, lenient=named, config=config):
        member = got.label != path
        member_named = is_dump_name(got.name, prefix) if member else named
        # An item's rank is -1 when its name carries none. A rank no job has is none either:
        # every rank up to the highest is a row of the tables (2e9 of them would take it all).
        named_rank = rank_from_name(got.name, prefix) if member else None if rank < 0 else rank
        member_rank = (
            named_rank if named_rank is not None and named_rank < config.max_rank else None
        )
        if isinstance(got, Refusal):
            context = got.reason.startswith("a hangscope context file")
            if got.foreign and (not member_named or context):
                out.append(Ignored(got.label, got.reason))
            else:
                out.append(
                    Skipped(
                        got.label,
                        -1 if member_rank is None else member_rank,
                        _foreign_reason(got.reason) if got.foreign else got.reason,
                    )
                )
            continue
        try:
            if member_rank is None:
                parse_payload(-1, got, config=config)  # a dump without a rank, or no dump at all?
                out.append(
                    Skipped(
                        got.label,
                        -1,
                        "a dump, but its name carries no rank number (use "
                        "--prefix to say how the files are named)"
                        if named_rank is None
                        else f"a dump, but its name's rank number {named_rank} is beyond any "
                        f"job's ranks (at most {config.max_rank - 1:,})",
                    )
                )
                continue
            dump = read_payload(
                member_rank, got, config=config
            )  # the compiled reader, or the Python one
            world = own_world(dump.pg_config)
            if (
                world is not None and member_rank >= world
            ):  # no evidence of that rank, nor of a world
                out.append(
                    Skipped(
                        got.label,
                        -1,
                        f"a dump, but its name's rank {member_rank} is not in "
                        f"its own default group (ranks 0-{world - 1}): a copy or a renamed file?",
                    )
                )
                continue
            out.append(dump)
        except DumpFormatError as exc:
            if exc.reason.startswith("not a flight-recorder dump") and not member_named:
                out.append(Ignored(got.label, exc.reason))
            else:
                out.append(
                    Skipped(exc.path, -1 if member_rank is None else member_rank, exc.reason)
                )
    return out


def _parse_batch(
    items: list[_Item], config: AnalysisConfig = DEFAULT_CONFIG, folder: str | None = None
) -> ParseBatch | str:
    """:func:`_parse` of each file of a chunk, in a parser process: the results cross to the
    loader as one :class:`ParseBatch` (each entry column of its dumps as one array), through
    a file of ``folder`` when there is one (:func:`analyzer.load.batches.spill`)."""
    return spill(ParseBatch([_parse(item, config) for item in items]), folder)


def _foreign_reason(reason: str) -> str:
    known = reason.startswith(("not a", "empty"))
    return reason if known else f"not a flight-recorder dump ({reason})"


def _failed_on_worker(item: _Item, reason: str) -> _Result:
    """A file whose batch failed on its Dask worker: skipped with the worker's error."""
    return Skipped(item[1], item[0], reason)


def _on_worker(result: _Result, host: str) -> _Result:
    """A file a Dask worker could not open: say which host tried (paths must exist there)."""
    if isinstance(result, Skipped) and result.reason.startswith("cannot read: "):
        return Skipped(
            result.path,
            result.rank,
            f"cannot read on the Dask worker at {clean(host)}: "
            f"{result.reason[len('cannot read: ') :]}",
        )
    return result


def default_jobs() -> int:
    """Worker processes to use: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


class Loading:
    """Dump files handed to the parser processes (:func:`start_loading`); :meth:`finish`
    gathers them into a :class:`Loaded`. Whatever the caller does in between overlaps the
    parse: the CLI imports the analysis layers meanwhile. Use it as a context manager, or
    call :meth:`finish`: either way the parser processes are let go."""

    def __init__(
        self,
        items: list[_Item],
        files: tuple[RankFile, ...],
        found: Found,
        inputs: Sequence[str | os.PathLike[str]],
        parsed: Iterator[list[_Result]],
        stack: ExitStack,
        aborting: list[bool] | None = None,
    ) -> None:
        self._items = items
        self._files = files
        self._found = found
        self._inputs = inputs
        self._parsed = parsed
        self._stack = stack
        self._aborting = aborting if aborting is not None else [False]

    def __enter__(self) -> Loading:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(abort=kind is not None)

    def close(self, abort: bool = False) -> None:
        """Let the parser processes go (the files not parsed yet never are). ``abort``: the
        load is abandoned (an error, a signal): the processes are ended without waiting
        for the files they are parsing."""
        self._aborting[0] = self._aborting[0] or abort
        self._stack.close()

    def finish(self, progress: Progress | None = None, incident: str | None = None) -> Loaded:
        """Every file's result, then one incident's ranks resolved (:func:`load_dumps`)."""
        try:
            results = self._gather(progress)
        except BaseException:
            self.close(abort=True)
            raise
        self.close()
        return _loaded(results, self._files, self._found, self._inputs, incident)

    def _gather(self, progress: Progress | None) -> list[_Result]:
        results: list[_Result] = []
        entries = 0
        # Dumps repeat their groups' member lists (the default group's is world-size long): keep
        # one tuple per distinct list, so the copy each batch of results brought back dies.
        same = SameMembers()
        for i, batch in enumerate(self._parsed, 1):
            for result in batch:
                if isinstance(result, ParsedDump):
                    entries += result.n_entries
                    result.pg_config = {
                        name: (desc, same(name, members) if members else members)
                        for name, (desc, members) in result.pg_config.items()
                    }
                results.append(result)
            if progress:
                progress(i, len(self._items), entries)
        return results


def start_loading(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    prefix: str | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> Loading:
    """Discover the dumps named by ``inputs`` and hand them to the parsers, without waiting
    for them (see :func:`load_dumps` for the arguments). Raises :class:`InputError` for a
    missing input; the files' own troubles come with :meth:`Loading.finish`."""
    parse = partial(_parse, config=config)  # picklable: it reaches the parser processes
    found = find(inputs, prefix=prefix)
    by_rank = Counter(c.rank for c in found.candidates if c.rank is not None)
    items: list[_Item] = [
        (
            -1 if c.rank is None else c.rank,
            str(c.path),
            c.named,
            c.rank is not None and by_rank[c.rank] > 1,
            c.prefix,
        )
        for c in found.candidates
    ]
    files = tuple(RankFile(c.rank, c.path) for c in found.candidates if c.rank is not None)
    jobs = default_jobs() if jobs is None or jobs <= 0 else jobs
    jobs = min(jobs, len(items))
    parsed: Iterator[list[_Result]]
    stack = ExitStack()
    aborting = [False]
    try:
        if scheduler:
            from analyzer.load.dask_workers import parse_on_cluster

            parsed = parse_on_cluster(
                scheduler, items, parse, _failed_on_worker, annotate=_on_worker
            )
        elif jobs <= 1 or len(items) < 8:
            parsed = map(parse, items)
        else:
            chunk = max(1, min(64, len(items) // (jobs * 8)))
            pooled = parse_in_pool(
                [items[i : i + chunk] for i in range(0, len(items), chunk)],
                jobs,
                partial(_parse_batch, config=config),
                stack,
                aborting,
            )
            parsed = map(parse, items) if pooled is None else pooled  # None: no pool here
    except BaseException:
        aborting[0] = True
        stack.close()
        raise
    return Loading(items, files, found, inputs, parsed, stack, aborting)


def load_dumps(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    prefix: str | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    scheduler: str | None = None,
    config: AnalysisConfig = DEFAULT_CONFIG,
    incident: str | None = None,
) -> Loaded:
    """Discover and parse the dumps named by ``inputs``, within the caps of ``config``.
    Of several incidents (restarts), the newest or ``incident`` (:mod:`.incidents`).

    Bad files are listed in ``skipped`` and the others are still read. Raises
    :class:`InputError` when no file could be read at all. ``scheduler``: the address of a
    Dask scheduler whose workers parse the files (:mod:`analyzer.load.dask_workers`; ``jobs`` does not
    apply then); None parses in this process and its pool.
    """
    with start_loading(
        inputs, prefix=prefix, jobs=jobs, scheduler=scheduler, config=config
    ) as loading:
        return loading.finish(progress, incident)


def _loaded(
    results: list[_Result],
    files: tuple[RankFile, ...],
    found: Found,
    inputs: Sequence[str | os.PathLike[str]],
    incident: str | None = None,
) -> Loaded:
    every_dump = [r for r in results if isinstance(r, ParsedDump)]
    skipped = tuple(r for r in results if isinstance(r, Skipped))
    ignored = tuple(r for r in results if isinstance(r, Ignored))
    ignored += tuple(Ignored(h, "hidden file") for h in found.hidden)
    every_dump, pages, note = read_as_written(every_dump, inputs, skipped, ignored)
    ignored += tuple(Ignored(path, why) for path, why in pages)
    all_dumps, incidents, others = split_incidents(every_dump, incident)
    if others:  # the other incidents' files: listed, never merged with the one analyzed
        paths = [d.path for d in every_dump] + [s.path for s in skipped]
        ignored += tuple(Ignored(p, why) for p, why in set_aside(paths, incidents, others))
        skipped = tuple(s for s in skipped if str(Path(s.path).parent) not in others)
    torchcomms = read_torchcomms(all_dumps, note)
    dumps, duplicates = resolve_ranks(all_dumps)
    dumps, stale, aside = set_aside_stale(dumps, duplicates)  # an older round's only dumps
    if not dumps:
        raise no_dump_error(
            inputs, [(s.path, s.reason) for s in skipped], [i.path for i in ignored]
        )
    return Loaded(
        dumps=tuple(dumps),
        stale=stale,
        skipped=skipped,
        files=files,
        ignored=ignored + tuple(Ignored(path, why) for path, why in aside),
        duplicates=tuple(duplicates),
        unreadable_dirs=found.unreadable_dirs,
        beside=found.beside,
        incidents=incidents,
        torchcomms=torchcomms,
    )


__all__ = ["Ignored", "Loaded", "Skipped", "default_jobs", "load_dumps"]
