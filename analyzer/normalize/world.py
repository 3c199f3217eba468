"""The world of a job, in one place: the ranks it has, from readable evidence only (the dumped
ranks, the member lists ``pg_config`` agrees on, the members the default group's entries
show) and the ``--world-size`` a user gave, checked against them."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from analyzer.errors import InputError
from analyzer.load import Loaded, ParsedDump, SameMembers
from analyzer.normalize.scan import categorical

__all__ = [
    "beyond_readable",
    "check_world_option",
    "check_world_size",
    "default_group_size",
    "world_of",
]


#: Ops whose output lists one shape per member of the group.
_GATHER_OPS = ("all_gather", "allgather")


def default_group_size(
    dumps: Sequence[ParsedDump], starts: np.ndarray, data: dict[str, object], max_rank: int
) -> int:
    """Members of the default group (the world) that its entries show: the number of
    output shapes of an all_gather, and the peers of send/recv (global ranks there, below
    ``max_rank``). Reads the entry columns, and each dump's ``peer_local``."""
    pg_names, ops, outputs = (
        categorical(data, "pg_name"),
        categorical(data, "op"),
        categorical(data, "output_sizes"),
    )
    if "0" not in pg_names.categories:
        return 0
    code = pg_names.categories.get_loc("0")
    gather = [c for c, op in enumerate(ops.categories) if op in _GATHER_OPS]
    output_texts = list(outputs.categories)
    size = 0
    for d, offset in zip(dumps, starts.tolist(), strict=True):
        if not d.n_entries:
            continue
        rows = slice(offset, offset + d.n_entries)
        in_default = pg_names.codes[rows] == code
        peers = d.ints["peer_local"][in_default]
        peers = peers[peers < max_rank]
        if len(peers):
            size = max(size, int(peers.max()) + 1)
        if not gather:
            continue
        gathers = in_default & np.isin(ops.codes[rows], gather)
        for out_code in np.unique(outputs.codes[rows][gathers]).tolist():
            text = output_texts[out_code]
            if text.startswith("[["):
                size = max(size, text.count("[") - 1)
    return size


def check_world_option(world_size: int | None, max_rank: int) -> None:
    """Refuse a given world size no job has: below one rank, or beyond ``max_rank`` ranks
    (every rank is a row of the tables: the memory of billions of rows would be claimed)."""
    if world_size is not None and world_size < 1:
        raise InputError(f"world size {world_size}: a job has at least one rank")
    if world_size is not None and world_size > max_rank:
        raise InputError(
            f"world size {world_size:,}: beyond any job's (at most {max_rank:,} ranks)"
        )


def check_world_size(dumps: Sequence[ParsedDump], world_size: int | None, max_rank: int) -> None:
    """Refuse a given world size no job has, or below the highest dumped rank + 1."""
    check_world_option(world_size, max_rank)
    top_dumped = max((d.rank for d in dumps), default=-1)
    if world_size is not None and world_size < top_dumped + 1:
        raise InputError(
            f"world size {world_size} is below the highest dumped rank + 1 ({top_dumped + 1})"
        )


def world_of(
    loaded: Loaded,
    dumps: Sequence[ParsedDump],
    world_size: int | None,
    starts: np.ndarray,
    data: dict[str, object],
    max_rank: int,
) -> tuple[int, dict[str, list[tuple[tuple[str, tuple[int, ...]], int]]], bool]:
    """The world, the member lists ``pg_config`` votes for by group, and whether readable
    evidence declares the world (a member list of the whole job, or the default group's
    entries) rather than only the highest dumped rank bounding it."""
    # ``world_size`` was checked against the dumped ranks (check_world_size) by the caller.
    # Groups: pg_config where it is real, entries where gloo left it empty or wrong.
    # Votes per group name for (desc, members); equal member tuples are one object (same), so
    # a vote is keyed by the tuple's identity and counting never hashes a long tuple again.
    same = SameMembers()
    tallies: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    by_id: dict[int, tuple[int, ...]] = {}
    unnamed_max = -1  # gloo's nameless pg_config entry: the size of some group, a world bound
    for d in dumps:
        for name, (desc, members) in d.pg_config.items():
            if name and members:
                members = same(name, members)
                by_id[id(members)] = members
                tallies[name][(desc, id(members))] += 1
            elif members:
                unnamed_max = max(unnamed_max, max(members))
    config_votes: dict[str, list[tuple[tuple[str, tuple[int, ...]], int]]] = {
        name: [((desc, by_id[key]), count) for (desc, key), count in votes.most_common()]
        for name, votes in tallies.items()
    }  # most voted first; ties in order of first appearance, as Counter.most_common
    # The world from evidence only: the dumped ranks, the member lists pg_config agrees on,
    # and the members the default group's entries show (all_gather outputs, send/recv
    # peers). A file that could not be read, or is no dump, never extends it.
    top_dumped = max((d.rank for d in dumps), default=-1)
    evident = max(
        [top_dumped + 1, unnamed_max + 1]
        + [max(votes[0][0][1]) + 1 for votes in config_votes.values() if votes]
    )
    # The nameless list is the last group this process created (gloo 2.15 writes each new
    # group's ranks 0..n-1 under one key): a bound on the world, never a declaration of it.
    declared = "0" in config_votes
    if "0" not in config_votes:  # no member list of the default group: what do entries show?
        shown = default_group_size(dumps, starts, data, max_rank)
        evident = max(evident, shown)
        declared = declared or shown > 0
    world = world_size or evident
    return world, config_votes, declared


def beyond_readable(world: int, loaded: Loaded) -> int:
    """Where no readable evidence declares the world: unreadable files named like the next
    ranks extend it, one contiguous rank at a time (a lone high number with no file between
    does not); those ranks are unknown. A rank whose only dump is an older round's (set aside,
    ``loaded.stale``) is one of the job's ranks: its file was read, only its time is past.
    Where the world is declared, a name beyond it is no rank."""
    world = max([world, *(r + 1 for r, _ in loaded.stale)])
    unreadable = {s.rank for s in loaded.skipped if s.rank >= 0}
    while world in unreadable:
        world += 1
    return world
