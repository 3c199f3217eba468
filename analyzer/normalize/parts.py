"""The parts of :func:`analyzer.normalize.tables.normalize`: one pass over the dumps (stacks, groups
recorded, pg_id names), the world and the groups from the evidence, send/recv peers as global
ranks, and the per-rank and pg_status rows."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.errors import InputError
from analyzer.kernels import first_of, group_ids, pairs, reduce_min
from analyzer.load import Loaded, ParsedDump, SameMembers

__all__ = [
    "check_world_option",
    "check_world_size",
    "default_group_size",
    "group_table",
    "map_pg_ids",
    "peers",
    "rank_rows",
    "scan",
    "stack_column",
    "world_of",
]


def _sort_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def map_pg_ids(d: ParsedDump, known: dict[int, str], config_names: list[str]) -> dict[int, str]:
    """Backend-local pg_id -> global name for one rank.

    Entries give exact pairs. The ids of groups with no entry in the buffer (a rank that
    recorded nothing, onlyActive dumps) are aligned with this rank's ``pg_config`` names:
    both grow in group-creation order, so between two known pairs the unknown ids and
    names correspond one to one when their counts agree.
    """
    mapping = dict(known)
    if all(pid in mapping for pid in d.pg_status):  # nothing to align (the usual case)
        return mapping
    ids = sorted(d.pg_status)
    names = sorted((n for n in config_names if n.isdigit()), key=int)
    if not ids or not names:
        return mapping
    anchors = [(-1, -1)]
    for i, pid in enumerate(ids):
        if pid in mapping and mapping[pid] in names:
            anchors.append((i, names.index(mapping[pid])))
    anchors.append((len(ids), len(names)))
    for (i0, n0), (i1, n1) in itertools.pairwise(anchors):
        gap_ids = ids[i0 + 1 : i1]
        gap_names = names[n0 + 1 : n1]
        if gap_ids and len(gap_ids) == len(gap_names):
            for pid, name in zip(gap_ids, gap_names, strict=True):
                mapping.setdefault(pid, name)
    return mapping


#: Ops whose output lists one shape per member of the group.
_GATHER_OPS = ("all_gather", "allgather")


def _cat(data: dict[str, object], field: str) -> pd.Categorical:
    column = data[field]
    assert isinstance(column, pd.Categorical)
    return column


def _array(data: dict[str, object], field: str) -> np.ndarray:
    column = data[field]
    assert isinstance(column, np.ndarray)
    return column


def default_group_size(
    dumps: Sequence[ParsedDump], starts: np.ndarray, data: dict[str, object], max_rank: int
) -> int:
    """Members of the default group (the world) that its entries show: the number of
    output shapes of an all_gather, and the peers of send/recv (global ranks there, below
    ``max_rank``). Reads the entry columns, and each dump's ``peer_local``."""
    pg_names, ops, outputs = _cat(data, "pg_name"), _cat(data, "op"), _cat(data, "output_sizes")
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


def stack_column(
    dumps: Sequence[ParsedDump],
    starts: np.ndarray,
    n: int,
) -> tuple[np.ndarray, dict[str, list[object]]]:
    """Each entry's key into the stacks table (-1: no frames), and that table's rows: equal
    stacks of different dumps share one key, numbered in order of first use."""
    stack_index: dict[tuple[tuple[str, str, int], ...], int] = {}
    stack_ids = np.full(n, -1, dtype=np.int32)
    by_list: dict[int, np.ndarray] = {}  # dumps that came back with one stacks list share it
    for d, offset in zip(dumps, starts.tolist(), strict=True):
        if not d.n_entries:
            continue
        remap = by_list.get(id(d.stacks))
        if remap is None:
            remap = by_list[id(d.stacks)] = np.array(
                [stack_index.setdefault(s, len(stack_index)) for s in d.stacks] or [0],
                dtype=np.int32,
            )
        local = np.asarray(d.ints["stack"])
        seg = stack_ids[offset : offset + d.n_entries]
        has = local >= 0
        seg[has] = remap[local[has]]
    stacks_rows: dict[str, list[object]] = defaultdict(list)
    for key, sid in stack_index.items():
        for depth, (fname, filename, line) in enumerate(key):
            stacks_rows["stack_id"].append(sid)
            stacks_rows["depth"].append(depth)
            stacks_rows["name"].append(fname)
            stacks_rows["filename"].append(filename)
            stacks_rows["line"].append(line)
    return stack_ids, stacks_rows


#: Dumps scanned at once: a few calls per block instead of per dump, and temporaries of a
#: block's rows (about half a million) instead of the entries' (262 MB each at 16,384 ranks).
SCAN_BLOCK = 256


def scan(
    dumps: Sequence[ParsedDump],
    starts: np.ndarray,
    data: dict[str, object],
) -> tuple[
    dict[str, set[int]], dict[str, str], list[dict[int, str]], list[tuple[str, int, int, int]]
]:
    """What the entry columns say of each dump, :data:`SCAN_BLOCK` dumps at a time (rows of
    one dump are consecutive; (dump, value) pairs numbered by :mod:`analyzer.kernels.group_by`):
    the groups each rank recorded in and each group's first description, the pg_id -> name
    pairs the entries show, and each rank's backend, first and last record id and newest
    enqueue time."""
    seen_members: dict[str, set[int]] = defaultdict(set)
    seen_desc: dict[str, str] = {}
    known_by_dump: list[dict[int, str]] = [{} for _ in dumps]
    top: dict[int, int] = {}
    counts = np.array([d.n_entries for d in dumps], dtype=np.int64)
    for lo in range(0, len(dumps), SCAN_BLOCK):
        hi = min(len(dumps), lo + SCAN_BLOCK)
        if counts[lo:hi].any():
            _scan_block(
                dumps,
                lo,
                counts[lo:hi],
                int(starts[lo]),
                data,
                seen_members,
                seen_desc,
                known_by_dump,
                top,
            )
    # Record range and newest enqueue time: one reduction over each dump's rows.
    backend_of = list(_cat(data, "backend").categories)
    live = np.flatnonzero(counts > 0)
    at = starts[live]
    record, created = _array(data, "record_id"), _array(data, "time_created_ns")
    lows = np.minimum.reduceat(record, at).tolist() if len(live) else []
    highs = np.maximum.reduceat(record, at).tolist() if len(live) else []
    newest = np.maximum.reduceat(created, at).tolist() if len(live) else []
    per_rank: list[tuple[str, int, int, int]] = [("", -1, -1, 0)] * len(dumps)
    for k, i in enumerate(live.tolist()):
        per_rank[i] = (str(backend_of[top[i]]), int(lows[k]), int(highs[k]), int(newest[k]))
    return seen_members, seen_desc, known_by_dump, per_rank


def _scan_block(
    dumps: Sequence[ParsedDump],
    lo: int,
    counts: np.ndarray,
    start: int,
    data: dict[str, object],
    seen_members: dict[str, set[int]],
    seen_desc: dict[str, str],
    known_by_dump: list[dict[int, str]],
    top: dict[int, int],
) -> None:
    """:func:`scan`'s facts of dumps ``lo`` to ``lo + len(counts)`` (rows from ``start``)."""
    pg_names, pg_descs, backends = (
        _cat(data, "pg_name"),
        _cat(data, "pg_desc"),
        _cat(data, "backend"),
    )
    # As lists: indexing a pandas Index of Arrow strings costs some 4 us a value, 0.6 s over
    # the (dump, group) pairs of 16,384 ranks.
    names_of, descs_of = pg_names.categories.tolist(), pg_descs.categories.tolist()
    rows = slice(start, start + int(counts.sum()))
    dump_of = np.repeat(np.arange(lo, lo + len(counts), dtype=np.int64), counts)
    name_codes = pg_names.codes[rows]
    # Groups: the names in each dump (in code order), each with its first entry's description.
    named, n_named = group_ids(dump_of, name_codes)
    first = first_of(named, n_named)
    descs = pg_descs.codes[rows][first].tolist()
    for i, code, desc in zip(
        dump_of[first].tolist(), name_codes[first].tolist(), descs, strict=True
    ):
        name = names_of[code]
        seen_members[name].add(dumps[i].rank)
        seen_desc.setdefault(name, descs_of[desc])
    # pg_id -> name: for each pg_id of a dump, the name with the smallest category code.
    ids = pairs(dump_of, _array(data, "pg_id")[rows])
    smallest = reduce_min(ids.ids, ids.n, name_codes).tolist()
    for i, pid, code in zip(ids.major.tolist(), ids.minor.tolist(), smallest, strict=True):
        known_by_dump[i][pid] = names_of[code]
    # Most frequent backend of each dump; a tie goes to the first category.
    used = pairs(dump_of, backends.codes[rows])
    tally = np.bincount(used.ids, minlength=used.n)
    order = np.lexsort((used.minor, -tally, used.major))
    lead = order[np.flatnonzero(np.diff(used.major[order], prepend=-1) != 0)]
    top.update(zip(used.major[lead].tolist(), used.minor[lead].tolist(), strict=True))


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
) -> tuple[int, dict[str, list[tuple[tuple[str, tuple[int, ...]], int]]]]:
    # ``world_size`` was checked against the dumped ranks (check_world_size) by the caller.
    # Groups: pg_config where it is real, entries where gloo left it empty or wrong.
    # Votes per group name for (desc, members); equal member tuples are one object (same), so
    # a vote is keyed by the tuple's identity and counting never hashes a long tuple again.
    same = SameMembers()
    tallies: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    by_id: dict[int, tuple[int, ...]] = {}
    unnamed_max = -1  # gloo's nameless pg_config entry: no group to trust, but a world bound
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
    if "0" not in config_votes:  # no member list of the default group: what do entries show?
        evident = max(evident, default_group_size(dumps, starts, data, max_rank))
    # Unreadable files named like the next ranks extend it, one contiguous rank at a time
    # (a lone high number with no file between does not): those ranks are unknown.
    unreadable = {s.rank for s in loaded.skipped if s.rank >= 0}
    while evident in unreadable:
        evident += 1
    world = world_size or evident
    return world, config_votes


def group_table(
    world: int,
    config_votes: dict[str, list[tuple[tuple[str, tuple[int, ...]], int]]],
    seen_members: dict[str, set[int]],
    seen_desc: dict[str, str],
) -> pd.DataFrame:

    group_rows: dict[str, list[object]] = defaultdict(list)
    all_names = sorted(set(config_votes) | set(seen_members) | {"0"}, key=_sort_key)
    for name in all_names:
        votes = config_votes.get(name)
        recorded = seen_members.get(name, set())
        if votes:
            (desc, members), _ = votes[0]
            source = "pg_config"
            if not recorded <= set(members):
                members = tuple(sorted(set(members) | recorded))
                source = "entries"
            desc = seen_desc.get(name) or desc
        elif name == "0":
            members, desc, source = tuple(range(world)), seen_desc.get(name, "default_pg"), "world"
        else:
            members, desc, source = tuple(sorted(recorded)), seen_desc.get(name, ""), "entries"
        group_rows["pg_name"].append(name)
        group_rows["pg_desc"].append(desc)
        group_rows["ranks"].append(tuple(int(m) for m in members))
        group_rows["size"].append(len(members))
        group_rows["source"].append(source)
    groups = schema.frame(schema.GROUPS, group_rows)

    return groups


_PEER_CHUNK = 1 << 20


def peers(
    local: np.ndarray,
    pg_names: pd.Categorical,
    members_of: dict[str, tuple[int, ...]],
) -> np.ndarray:
    """Peers of send/recv: each entry's group-local peer (``local``: the entries'
    ``peer_local``, -1 for none) as a global rank, through one flat array holding the members
    of every group in the order of the pg_name categories; -1 where the group is unnamed or
    has no such member."""
    peer = np.full(len(local), -1, dtype=np.int32)
    lists = [members_of.get(str(name), ()) for name in pg_names.categories]
    sizes = np.array([len(m) for m in lists] + [0], dtype=np.int64)  # the last: no name
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(sizes.sum()))
    first_member = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for lo in range(0, len(local), _PEER_CHUNK):  # temporaries of a chunk's size, not the entries'
        part = local[lo : lo + _PEER_CHUNK]
        rows = np.flatnonzero(part >= 0)
        codes = pg_names.codes[lo + rows].astype(np.int64)
        codes[codes < 0] = len(lists)
        at = part[rows]
        ok = at < sizes[codes]
        peer[lo + rows[ok]] = flat[first_member[codes[ok]] + at[ok]]
    return peer


def rank_rows(
    loaded: Loaded,
    dumps: Sequence[ParsedDump],
    world: int,
    known_by_dump: list[dict[int, str]],
    per_rank: list[tuple[str, int, int, int]],
) -> tuple[pd.DataFrame, dict[str, list[object]]]:
    status_rows: dict[str, list[object]] = defaultdict(list)
    rank_rows: dict[str, list[object]] = defaultdict(list)
    by_rank = {d.rank: d for d in dumps}
    merged: dict[int, list[int]] = defaultdict(list)  # rank -> its dumps (indices)
    for i, d in enumerate(dumps):
        known = known_by_dump[i]
        for pid, name in d.dropped_pg_ids.items():
            known.setdefault(pid, name)
        mapping = map_pg_ids(d, known, list(d.pg_config))
        for pid_key, (enq, started, completed) in sorted(d.pg_status.items()):
            status_rows["rank"].append(d.rank)
            status_rows["pg_id"].append(pid_key)
            status_rows["pg_name"].append(mapping.get(pid_key, ""))
            status_rows["last_enqueued"].append(enq)
            status_rows["last_started"].append(started)
            status_rows["last_completed"].append(completed)
        merged[d.rank].append(i)
    for rank, idx in merged.items():
        # One row per rank; a rank with several buffers lists its files, its main backend
        # (most entries) and its whole record range.
        parts = [dumps[i] for i in idx]
        facts = [per_rank[i] for i in idx]
        main = max(range(len(idx)), key=lambda k: (parts[k].n_entries, -k))
        with_entries = [f for f in facts if f[1] >= 0]
        rank_rows["rank"].append(rank)
        rank_rows["path"].append("; ".join(p.path for p in parts))
        rank_rows["format"].append("+".join(dict.fromkeys(p.fmt for p in parts)))
        rank_rows["version"].append("+".join(dict.fromkeys(p.version for p in parts)))
        rank_rows["backend"].append(facts[main][0])
        rank_rows["comm_lib_version"].append(
            next((p.comm_lib_version for p in parts if p.comm_lib_version), "")
        )
        rank_rows["entries"].append(sum(p.n_entries for p in parts))
        rank_rows["dumped"].append(True)
        rank_rows["first_record_id"].append(min((f[1] for f in with_entries), default=-1))
        rank_rows["last_record_id"].append(max((f[2] for f in with_entries), default=-1))
        rank_rows["last_time_ns"].append(max(f[3] for f in facts))
        rank_rows["reader"].append("+".join(dict.fromkeys(p.reader for p in parts)))
    skipped_by_rank = {s.rank: s for s in loaded.skipped if 0 <= s.rank < world}
    all_ranks = set(range(world)) | set(by_rank) | set(skipped_by_rank)
    for r in sorted(all_ranks - set(by_rank)):
        rank_rows["rank"].append(r)
        rank_rows["path"].append(skipped_by_rank[r].path if r in skipped_by_rank else "")
        rank_rows["format"].append("")
        rank_rows["version"].append("")
        rank_rows["backend"].append("")
        rank_rows["comm_lib_version"].append("")
        rank_rows["entries"].append(0)
        rank_rows["dumped"].append(False)
        rank_rows["first_record_id"].append(-1)
        rank_rows["last_record_id"].append(-1)
        rank_rows["last_time_ns"].append(0)
        rank_rows["reader"].append("")
    ranks = schema.frame(schema.RANKS, rank_rows).sort_values("rank", ignore_index=True)

    return ranks, status_rows
