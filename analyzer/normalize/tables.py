"""The normalized model: parsed dumps -> typed DataFrames (entries, groups, ranks...).

``normalize`` hides every format difference the loader saw (pickle vs JSON, string
counters, 0 vs None, old key names), resolves group membership (from ``pg_config`` or,
when gloo left it empty or wrong, from the entries), maps each rank's backend-local
``pg_id`` to the global group name, and translates send/recv peers to global ranks.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import InputError
from analyzer.kernels import remap_into
from analyzer.load import (
    BOOL_FIELDS,
    FLOAT_FIELDS,
    STRING_FIELDS,
    Loaded,
    ParsedDump,
    Skipped,
    column_bytes,
    default_jobs,
    drop_column,
    is_released,
)
from analyzer.normalize.backends import per_rank as _per_rank_dumps
from analyzer.normalize.backends import process_order
from analyzer.normalize.groups import group_table, with_world
from analyzer.normalize.layout import infer_members, inferred_ranks
from analyzer.normalize.peers import peers
from analyzer.normalize.ranks import rank_rows
from analyzer.normalize.scan import scan, stack_column
from analyzer.normalize.world import beyond_readable, check_world_size, world_of
from analyzer.runtime import trim_heap


@dataclass(frozen=True)
class Tables:
    """Every normalized table of one dump set. Each frame follows :mod:`analyzer.schema`."""

    entries: pd.DataFrame
    groups: pd.DataFrame
    ranks: pd.DataFrame
    status: pd.DataFrame
    stacks: pd.DataFrame
    skipped: pd.DataFrame
    world_size: int

    @property
    def inferred(self) -> dict[int, str]:
        """Ranks no file names, inferred from the layout of the groups: rank -> the groups
        that imply it (:func:`analyzer.normalize.layout.inferred_ranks`; a store keeps it)."""
        return inferred_ranks(self.groups, set(self.dumped_ranks))

    @property
    def dumped_ranks(self) -> list[int]:
        return sorted(int(r) for r in self.ranks.loc[self.ranks["dumped"], "rank"])

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(int(r) for r in self.ranks.loc[~self.ranks["dumped"], "rank"])

    def members(self) -> dict[str, tuple[int, ...]]:
        """Group name -> member global ranks."""
        return dict(zip(self.groups["pg_name"], self.groups["ranks"], strict=True))


#: Integer columns of the entries table (the others are read per dump).
ENTRY_INT_FIELDS: tuple[str, ...] = (
    "record_id",
    "seq",
    "p2p_seq",
    "op_id",
    "time_created_ns",
    "time_started_ns",
    "time_completed_ns",
    "timeout_ms",
)


class _Columns:
    """The entry columns of the normalized dumps, each built end to end. With ``release``,
    each dump's part is freed as soon as it is copied, and the heap trimmed each time a
    :attr:`TRIM_SHARE` of the dumps' column bytes (at least :attr:`TRIM_BYTES`) is freed:
    the two copies of the entries never coexist whole, and as each trim walks the whole
    heap, their number does not grow with the dumps."""

    #: A quarter: each trim walks the whole heap (its cost: docs/performance.md), and
    #: up to a quarter of the dumps' bytes held a while longer stays under matching's peak.
    TRIM_SHARE = 1 / 4
    TRIM_BYTES = 16 << 20
    #: Dumps copied at once: one numpy call per block and column instead of one per dump.
    BLOCK = 256

    def __init__(
        self, dumps: Sequence[ParsedDump], every: Sequence[ParsedDump], release: bool
    ) -> None:
        self.dumps, self.every, self.release = dumps, every, release
        normalized = set(map(id, dumps))
        self.others = [d for d in every if id(d) not in normalized]  # dropped duplicates
        self.n = sum(d.n_entries for d in dumps)
        self.untrimmed = 0
        self.trim_at = (
            max(self.TRIM_BYTES, int(column_bytes(every) * self.TRIM_SHARE)) if release else 0
        )
        self.lock = threading.Lock()  # columns are built in threads (:func:`_in_threads`)

    def _freed(self, nbytes: int, last: bool) -> None:
        with self.lock:
            self.untrimmed += nbytes
            if self.untrimmed >= self.trim_at or (last and self.untrimmed):
                trim_heap()
                self.untrimmed = 0

    def done(self, kind: str, field: str, *, last: bool = False) -> None:
        """Column ``field`` of ``kind`` is no longer needed: free it in every dump
        (``release``)."""
        if self.release:
            self._freed(drop_column(self.every, kind, field), last)

    def _copied_all(self, kind: str, field: str) -> None:
        """Each normalized dump's part is freed: free the others' (dropped duplicates)."""
        if self.release:
            self._freed(drop_column(self.others, kind, field), False)

    def _blocks(self) -> Iterator[Sequence[ParsedDump]]:
        """The dumps, :attr:`BLOCK` at a time: each column is copied a block at a time."""
        for start in range(0, len(self.dumps), self.BLOCK):
            yield self.dumps[start : start + self.BLOCK]

    def _block_copied(self, block: Sequence[ParsedDump], kind: str, field: str) -> None:
        """``block``'s parts of column ``field`` of ``kind`` are copied: free them (``release``)."""
        if self.release:
            self._freed(drop_column(block, kind, field), False)

    def numbers(self, kind: str, field: str, dtype: type) -> np.ndarray:
        """One column of every dump as ``dtype`` (parts come in narrower widths)."""
        out: np.ndarray = np.empty(self.n, dtype=dtype)
        offset = 0
        for block in self._blocks():
            parts = [getattr(d, kind)[field] for d in block if d.n_entries]
            if parts:
                end = offset + sum(d.n_entries for d in block)
                np.concatenate(parts, out=out[offset:end], casting="unsafe")
                offset = end
            self._block_copied(block, kind, field)
        self._copied_all(kind, field)
        return out

    def strings(self, field: str) -> pd.Categorical:
        """One string column of every dump as a categorical (categories in order of first
        use)."""
        categories: dict[str, int] = {}
        # Dumps of one job mostly hold equal vocabularies: each distinct one is mapped once.
        by_words: dict[tuple[str, ...], np.ndarray] = {}
        remaps = []
        for d in self.dumps:
            words = tuple(d.vocab[field])
            remap = by_words.get(words)
            if remap is None:
                remap = by_words[words] = np.fromiter(
                    (categories.setdefault(v, len(categories)) for v in words),
                    dtype=np.int32,
                    count=len(words),
                )
            remaps.append(remap)
        # The code width pandas would pick, so that from_codes keeps the array as it is.
        width = next(
            t for t in (np.int8, np.int16, np.int32, np.int64) if len(categories) < np.iinfo(t).max
        )
        codes = np.empty(self.n, dtype=width)
        offset = 0
        for i, block in enumerate(self._blocks()):
            # Each dump's codes through its remap (one compiled call a block).
            own = remaps[i * self.BLOCK : (i + 1) * self.BLOCK]
            live = [(d, r) for d, r in zip(block, own, strict=True) if d.n_entries]
            if live:
                end = offset + sum(d.n_entries for d, _ in live)
                remap_into(
                    [d.strings[field] for d, _ in live], [r for _, r in live], codes[offset:end]
                )
                offset = end
            self._block_copied(block, "strings", field)
        self._copied_all("strings", field)
        return pd.Categorical.from_codes(codes, categories=list(categories), validate=False)  # type: ignore[call-overload]


def _in_threads(work: Sequence[tuple[str, Callable[[], object]]]) -> dict[str, object]:
    """Each named column built, two at a time where there are two cores: copying the parts
    and faulting the new pages in release the GIL (most of normalize is the kernel's time at
    scale: docs/performance.md). Each column is built as it would be alone."""
    if default_jobs() < 2 or len(work) < 2:
        return {name: build() for name, build in work}
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="hangscope-normalize") as pool:
        futures = {name: pool.submit(build) for name, build in work}
        return {name: future.result() for name, future in futures.items()}


@contextmanager
def without_hugepage_advice() -> Iterator[None]:
    """numpy marks arrays of 4 MB and more MADV_HUGEPAGE; where the kernel's THP defrag
    setting is ``madvise``, faulting them in can stall on synchronous compaction (numpy
    issue 31590). normalize allocates gigabytes of fresh columns at scale (seconds of
    stalls: docs/performance.md), and matching more. Off inside, then as before
    (``analyze`` holds it over the whole pipeline; nesting is harmless)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - numpy < 2 or another platform
        yield
        return
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)


def normalize(
    loaded: Loaded,
    *,
    world_size: int | None = None,
    config: AnalysisConfig = DEFAULT_CONFIG,
    release: bool = False,
) -> Tables:
    """Build the normalized tables from what the loader read. Returns new frames.
    ``config.max_rank`` bounds the peers that count towards the world.

    ``release``: free each dump's part of each entry column as soon as it is copied, so the
    loaded dumps and the entries table never hold every entry twice (at 4,096 ranks the
    peak of this step drops from 1.67 to 1.27 GB). The dumps keep everything else they read
    (ranks, paths, counts, group tables, warnings: what the notes and the report use), but
    they can neither be normalized nor written to a store again."""
    if any(is_released(d) for d in loaded.dumps):
        raise InputError(
            "these dumps handed their entries over to an earlier normalize "
            "(release=True): load them again to normalize them"
        )
    with without_hugepage_advice():
        return _normalize(loaded, world_size, config, release)


def _normalize(
    loaded: Loaded, world_size: int | None, config: AnalysisConfig, release: bool
) -> Tables:
    # Several dumps of one rank (one buffer per backend) become one rank's entries.
    dumps, dropped = _per_rank_dumps(loaded.dumps)
    check_world_size(dumps, world_size, config.max_rank)  # before any column is released
    rank_count = Counter(d.rank for d in dumps)
    multi = {r for r, c in rank_count.items() if c > 1}
    counts = np.array([d.n_entries for d in dumps], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    cols = _Columns(dumps, loaded.dumps, release)
    n = cols.n
    stack_ids, stacks_rows = stack_column(dumps, starts, n)
    cols.done("ints", "stack")
    data: dict[str, object] = {}
    data["rank"] = np.repeat(np.array([d.rank for d in dumps], dtype=np.int32), counts)
    work: list[tuple[str, Callable[[], object]]] = [
        (f, partial(cols.strings, f)) for f in STRING_FIELDS
    ]
    work += [(f, partial(cols.numbers, "ints", f, np.int64)) for f in ENTRY_INT_FIELDS]
    work.append(
        ("pg_id", partial(cols.numbers, "ints", "pg_id", np.int32))
    )  # as astype(int32) would
    work += [(f, partial(cols.numbers, "bools", f, np.bool_)) for f in BOOL_FIELDS]
    work += [(f, partial(cols.numbers, "floats", f, np.float64)) for f in FLOAT_FIELDS]
    data.update(_in_threads(work))
    if multi:
        data["record_id"] = process_order(
            data["rank"],  # type: ignore[arg-type]
            data["record_id"],  # type: ignore[arg-type]
            data["time_created_ns"],  # type: ignore[arg-type]
            multi,
        )
    pg_names = data["pg_name"]
    pg_descs = data["pg_desc"]
    backend_cat = data["backend"]
    assert isinstance(pg_names, pd.Categorical) and isinstance(pg_descs, pd.Categorical)
    assert isinstance(backend_cat, pd.Categorical)

    seen_members, seen_desc, known_by_dump, per_rank = scan(dumps, starts, data)
    world, config_votes, declared = world_of(
        loaded, dumps, world_size, starts, data, config.max_rank
    )
    groups = group_table(world, config_votes, seen_members, seen_desc)
    layout = infer_members(groups, world, {d.rank for d in dumps})
    if world_size is None or layout.world <= world_size:
        groups, world = layout.groups, max(world, layout.world)
    if world_size is None and not declared and not layout.declared:
        world = beyond_readable(world, loaded)
    groups = with_world(groups, world)  # the default group, where read off the world
    if world_size is not None or declared:  # evidence of the default group's members
        groups = groups.assign(
            source=groups["source"].mask(
                (groups["pg_name"] == "0") & (groups["source"] == "world"),
                "option" if world_size is not None else "declared",
            )
        )
    members_of = dict(zip(groups["pg_name"], groups["ranks"], strict=True))
    # The group-local peers, as wide as their widest part (the readers narrow each column).
    wide = any(d.ints["peer_local"].dtype.itemsize > 4 for d in dumps if d.n_entries)
    peer = peers(
        cols.numbers("ints", "peer_local", np.int64 if wide else np.int32), pg_names, members_of
    )
    cols.done("ints", "self_local", last=True)
    ranks, status_rows = rank_rows(loaded, dumps, world, known_by_dump, per_rank)
    entries = _entries_frame(data, peer, stack_ids)
    skipped = _skipped_frame([*loaded.skipped, *dropped])
    return Tables(
        entries=schema.validate(entries, schema.ENTRIES, "entries"),
        groups=schema.validate(groups, schema.GROUPS, "groups"),
        ranks=schema.validate(ranks, schema.RANKS, "ranks"),
        status=schema.validate(schema.frame(schema.STATUS, status_rows), schema.STATUS, "status"),
        stacks=schema.validate(schema.frame(schema.STACKS, stacks_rows), schema.STACKS, "stacks"),
        skipped=schema.validate(skipped, schema.SKIPPED, "skipped"),
        world_size=world,
    )


def _entries_frame(
    data: dict[str, object], peer: np.ndarray, stack_ids: np.ndarray
) -> pd.DataFrame:
    """The entries table from its columns, each typed as :data:`analyzer.schema.ENTRIES` says."""
    entry_data = {
        "rank": data["rank"],
        "pg_name": data["pg_name"],
        "pg_desc": data["pg_desc"],
        "pg_id": data["pg_id"],
        "record_id": data["record_id"],
        "seq": data["seq"],
        "p2p_seq": data["p2p_seq"],
        "op_id": data["op_id"],
        "op": data["op"],
        "backend": data["backend"],
        "profiling_name": data["profiling_name"],
        "is_p2p": data["is_p2p"],
        "coalesced": data["coalesced"],
        "peer": peer,
        "input_sizes": data["input_sizes"],
        "output_sizes": data["output_sizes"],
        "input_dtypes": data["input_dtypes"],
        "output_dtypes": data["output_dtypes"],
        "state": data["state"],
        "retired": data["retired"],
        "time_created_ns": data["time_created_ns"],
        "time_started_ns": data["time_started_ns"],
        "time_completed_ns": data["time_completed_ns"],
        "duration_ms": data["duration_ms"],
        "timeout_ms": data["timeout_ms"],
        "thread_name": data["thread_name"],
        "stack_id": stack_ids,
    }
    # The arrays become the frame's columns as they are (no copy, no consolidation).
    entries = pd.DataFrame({c.name: entry_data[c.name] for c in schema.ENTRIES}, copy=False)
    cast = {
        c.name: c.dtype
        for c in schema.ENTRIES
        if c.dtype != "category" and str(entries[c.name].dtype) != c.dtype
    }
    if cast:
        entries = entries.astype(cast)
    return entries


def _skipped_frame(all_skipped: list[Skipped]) -> pd.DataFrame:
    """The skipped files as a table."""
    return schema.frame(
        schema.SKIPPED,
        {
            "path": [s.path for s in all_skipped],
            "rank": [s.rank for s in all_skipped],
            "reason": [s.reason for s in all_skipped],
        },
    )


def skipped_list(tables: Tables) -> list[Skipped]:
    """The skipped files as records."""
    return [
        Skipped(str(p), int(r), str(why))
        for p, r, why in tables.skipped[["path", "rank", "reason"]].itertuples(index=False)
    ]
