"""Several stores (shards of one job) opened as one: the union of their parsed dumps, as
the loader would have read the union of their files (:func:`open_stores`); and what
``hangscope export`` writes from dumps or stores (:func:`prepare_export`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DEFAULT_CONFIG
from analyzer.errors import InputError, OutputError
from analyzer.load import (
    Contexts,
    Duplicate,
    Ignored,
    Loaded,
    ParsedDump,
    Progress,
    TorchCommsRead,
    resolve_across_shards,
    resolve_ranks,
    set_aside_stale,
)
from analyzer.normalize import Tables
from analyzer.store.layout import (
    PARSED_VERSIONS,
    STAGING,
    TABLES_ONLY_VERSION,
    read_meta,
    require_pyarrow,
    stray_dumps,
)
from analyzer.store.notes import read_notes
from analyzer.store.parquet import store_inputs
from analyzer.store.parsed_dumps import read_dumps, write_parsed

__all__ = ["HANG_SLACK_NS", "HANG_TIMEOUTS", "Exported", "Opened", "open_stores", "prepare_export"]


@dataclass(frozen=True)
class Opened:
    """Several stores (or one) as the loader's result: their dumps, notes and contexts."""

    loaded: Loaded
    contexts: Contexts
    #: The world size given when the stores were exported (None: worked out from the dumps).
    world_option: int | None
    #: Per store: its folder and the ranks it holds.
    stores: tuple[tuple[str, str], ...]


def _content_digest(d: ParsedDump) -> str:
    """A hash of what a parsed dump holds (two stores holding one rank: the same dump?)."""
    h = hashlib.blake2b(digest_size=16)
    for kind in ("ints", "bools", "floats", "strings"):
        columns = getattr(d, kind)
        for name in sorted(columns):
            h.update(name.encode())
            kind_of = np.float64 if kind == "floats" else np.int64
            h.update(np.ascontiguousarray(np.asarray(columns[name], dtype=kind_of)).tobytes())
    h.update(
        json.dumps(
            [
                d.vocab,
                [list(map(list, s)) for s in d.stacks],
                {k: [v[0], v[1] and list(v[1])] for k, v in d.pg_config.items()},
                sorted(d.pg_status.items()),
                d.version,
                d.fmt,
            ]
        ).encode()
    )
    return "content:" + h.hexdigest()


def _config_majority(dumps: list[ParsedDump]) -> dict[str, tuple[int, ...]]:
    """Per group name, the member list most of these dumps' pg_config give."""
    # Dumps share one tuple per distinct list: counted by identity, then merged by value
    # (hashing a world-long tuple per dump would cost world size squared).
    by_id: dict[str, dict[int, tuple[tuple[int, ...], int]]] = defaultdict(dict)
    for d in dumps:
        for name, (_, members) in d.pg_config.items():
            if name and members:
                seen = by_id[name].get(id(members))
                by_id[name][id(members)] = (members, (seen[1] if seen else 0) + 1)
    out: dict[str, tuple[int, ...]] = {}
    for name, counted in by_id.items():
        votes: dict[tuple[int, ...], int] = defaultdict(int)
        for members, n in counted.values():
            votes[members] += n
        out[name] = max(votes.items(), key=lambda kv: kv[1])[0]
    return out


#: Stores whose newest entries are further apart than this many timeouts (and than
#: HANG_SLACK_NS) are of different jobs: when a job hangs, the first op to time out makes
#: every rank dump, so no rank enqueues anything more than about one timeout after another.
HANG_TIMEOUTS = 2
HANG_SLACK_NS = 10 * 10**9


def _same_hang(folders: list[Path], per_store: list[list[ParsedDump]]) -> None:
    """Refuse stores whose dumps cannot be of one hang (:data:`HANG_TIMEOUTS`)."""
    newest: list[tuple[int, Path]] = []
    timeout_ns = 0
    for folder, dumps in zip(folders, per_store):
        times = [int(np.max(d.ints["time_created_ns"])) for d in dumps if d.n_entries]
        if times:
            newest.append((max(times), folder))
        for d in dumps:
            if d.n_entries:
                timeout_ns = max(timeout_ns, int(np.max(d.ints["timeout_ms"])) * 10**6)
    if len(newest) < 2:
        return
    bound = max(HANG_TIMEOUTS * timeout_ns, HANG_SLACK_NS)
    (early, first), (late, last) = min(newest), max(newest)
    if late - early > bound:
        raise InputError(
            f"stores of different jobs: the newest entries of {first} and {last} are "
            f"{(late - early) / 1e9:,.0f} s apart (one hang leaves them within "
            f"{bound / 1e9:,.0f} s: {HANG_TIMEOUTS} op timeouts)"
        )


def open_stores(paths: list[str | os.PathLike[str]]) -> Opened:
    """The union of the dumps of several stores (shards of one job), as the loader would
    have read the union of their files.

    A rank held by two stores: the same dump is merged (noted as a copy), two different
    dumps are resolved as the loader resolves two files of one rank (the newer kept, the
    other reported as dropped; ``--strict`` refuses). Raises :class:`InputError` for a
    store without its parsed dumps (format 1) among several, and for stores of different
    jobs: exported with different ``--world-size``, or whose group configurations give one
    group different members, or whose newest entries are too far apart in time for one
    hang (:data:`HANG_TIMEOUTS`).
    """
    require_pyarrow()
    folders = [Path(p) for p in paths]
    metas = [read_meta(f) for f in folders]
    for folder in folders:
        stray_dumps(folder)
    per_store, world_option = _one_job(folders, metas)
    dumps, new_duplicates = _union(per_store)
    if len(folders) > 1:  # a comm its shard could not name, named from the others' configs
        resolve_across_shards(dumps)
    notes = read_notes(folders)
    duplicates = notes.duplicates
    if len(folders) > 1:  # the orders the loader gives one set of files
        notes.skipped.sort(key=lambda s: s.path)
        notes.ignored.sort(key=lambda i: i.path)
        notes.files.sort(key=lambda f: str(f.path))
        duplicates = sorted(duplicates + new_duplicates, key=lambda d: d.rank)
    dumps, stale, aside = set_aside_stale(dumps, duplicates)  # as the loader does
    held = {d.rank for d in dumps}  # a rank an older round's only: as each store found it
    stale = tuple(sorted(({r: w for r, w in notes.stale if r not in held} | dict(stale)).items()))
    if not dumps:
        raise InputError(f"{', '.join(map(str, folders))}: the store(s) hold no readable dump")
    loaded = Loaded(
        dumps=tuple(dumps),
        stale=stale,
        torchcomms=TorchCommsRead(unaligned=dict(sorted(notes.unaligned.items()))),
        skipped=tuple(notes.skipped),
        files=tuple(notes.files),
        ignored=tuple(notes.ignored) + tuple(Ignored(p, why) for p, why in aside),
        duplicates=tuple(duplicates),
        unreadable_dirs=tuple(notes.unreadable),
        beside=tuple(sorted(set(notes.beside), key=lambda f: (f.rank, str(f.path)))),
    )
    by_rank = dict(sorted(notes.contexts.items()))
    return Opened(
        loaded=loaded,
        contexts=Contexts(
            by_rank=by_rank,
            skipped=tuple(notes.ctx_skipped),
            no_answer={r: g for r, g in sorted(notes.no_answer.items()) if r not in by_rank},
        ),
        world_option=world_option,
        stores=tuple((str(f), str(m.get("ranks", ""))) for f, m in zip(folders, metas)),
    )


def _one_job(
    folders: list[Path], metas: list[dict[str, Any]]
) -> tuple[list[list[ParsedDump]], int | None]:
    """Every store's parsed dumps, once they are shown to be of one job; and the
    ``--world-size`` they were exported with (None: not given)."""
    for folder, meta in zip(folders, metas):
        if meta.get("format") not in PARSED_VERSIONS:
            raise InputError(
                f"{folder}: a store of format {meta.get('format')!r} holds no parsed "
                "dumps and cannot be merged with others: export it again"
            )
    options = {int(m["world_option"]) for m in metas if m.get("world_option") is not None}
    if len(options) > 1:
        given = ", ".join(
            f"{f} --world-size {m['world_option']}"
            for f, m in zip(folders, metas)
            if m.get("world_option") is not None
        )
        raise InputError(f"stores of different jobs: exported with different world sizes ({given})")
    per_store = [read_dumps(f, str(m["format"])) for f, m in zip(folders, metas)]
    majority: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for folder, dumps in zip(folders, per_store):
        for name, members in _config_majority(dumps).items():
            seen = majority.setdefault(name, (folder, members))
            if seen[1] != members:
                raise InputError(
                    f"stores of different jobs: group {name!r} has {len(seen[1])} "
                    f"members in {seen[0]} and {len(members)} in {folder} "
                    "(other member lists)"
                )
    _same_hang(folders, per_store)
    return per_store, next(iter(options), None)


def _union(per_store: list[list[ParsedDump]]) -> tuple[list[ParsedDump], list[Duplicate]]:
    """One dump per rank (and backend) from the stores' dumps, as the loader resolves files."""
    holders: dict[int, set[int]] = defaultdict(set)
    for n, dumps in enumerate(per_store):
        for d in dumps:
            holders[d.rank].add(n)
    shared = {r for r, h in holders.items() if len(h) > 1}
    all_dumps = [d for dumps in per_store for d in dumps]
    for d in all_dumps:
        if d.rank in shared:
            d.fingerprint = _content_digest(d)
    return resolve_ranks(all_dumps)


@dataclass(frozen=True)
class Exported:
    """What ``hangscope export`` writes: the normalized tables and what they were built from."""

    tables: Tables
    loaded: Loaded
    contexts: Contexts
    world_option: int | None
    #: Where the parsed dumps were staged (their entry columns were then handed over to the
    #: tables): ``write_store(..., staged=parsed_in)`` completes the store around them.
    parsed_in: Path | None = None


def _written(loaded: Loaded, out: str | os.PathLike[str], contexts: Contexts) -> Path:
    try:
        return write_parsed(loaded, out, contexts)
    except OSError as exc:
        shutil.rmtree(Path(out) / STAGING, ignore_errors=True)
        raise OutputError(f"{os.fspath(out)}: cannot write ({exc.strerror or exc})") from None


def prepare_export(
    inputs: list[str | os.PathLike[str]],
    *,
    prefix: str | None = None,
    world_size: int | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    scheduler: str | None = None,
    parsed_to: str | os.PathLike[str] | None = None,
    check: Callable[[Loaded], None] | None = None,
) -> Exported:
    """Load and normalize ``inputs`` (dumps, or stores to merge) for :func:`write_store`,
    as :func:`analyzer.analysis.analyze` does, without matching or diagnosing: a shard of a
    large job is no job to diagnose, and its store is written as it was given.

    ``parsed_to``: write the parsed dumps into this folder as soon as they are loaded, then
    normalize with ``release=True``: the dumps and the tables never hold every entry twice
    (which lowers the export's peak: docs/store.md). ``check`` is called on
    what was loaded before anything is written (``--strict``)."""
    import gc

    from analyzer.load import find_contexts, load_dumps
    from analyzer.normalize import check_world_option, normalize

    check_world_option(world_size, DEFAULT_CONFIG.max_rank)  # before any file is read
    kind = store_inputs(inputs)
    if kind == "tables":
        raise InputError(
            f"{os.fspath(inputs[0])}: a store of format {TABLES_ONLY_VERSION!r} holds "
            "no parsed dumps to export again: export the dumps"
        )
    enabled = gc.isenabled()
    gc.disable()  # as the analysis does: millions of long-lived containers, no cycles
    try:
        if kind:
            opened = open_stores(inputs)
            loaded, contexts = opened.loaded, opened.contexts
            option = world_size or opened.world_option
        else:
            loaded = load_dumps(
                inputs, prefix=prefix, jobs=jobs, progress=progress, scheduler=scheduler
            )
            contexts = find_contexts(inputs, [Path(d.path) for d in loaded.dumps])
            option = world_size
        if check is not None:
            check(loaded)
        world = option or contexts.world_hint(d.rank for d in loaded.dumps)
        folder = None if parsed_to is None else _written(loaded, parsed_to, contexts)
        try:
            tables = normalize(loaded, world_size=world, release=folder is not None)
        except BaseException:
            if folder is not None:  # no store: take back the parsed dumps just staged
                shutil.rmtree(folder, ignore_errors=True)
            raise
    finally:
        if enabled:
            gc.enable()
    return Exported(
        tables=tables, loaded=loaded, contexts=contexts, world_option=option, parsed_in=folder
    )
