"""One pass over the dumps for :func:`analyzer.normalize.normalize`: the stacks as one column,
the groups each rank recorded, and the name of every backend-local pg_id."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analyzer.kernels import first_of, group_ids, pairs, reduce_min
from analyzer.load import ParsedDump

__all__ = ["SCAN_BLOCK", "categorical", "column_array", "map_pg_ids", "scan", "stack_column"]


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


def categorical(data: dict[str, object], field: str) -> pd.Categorical:
    column = data[field]
    assert isinstance(column, pd.Categorical)
    return column


def column_array(data: dict[str, object], field: str) -> np.ndarray:
    column = data[field]
    assert isinstance(column, np.ndarray)
    return column


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
#: block's rows (about half a million) instead of the entries'.
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
    backend_of = list(categorical(data, "backend").categories)
    live = np.flatnonzero(counts > 0)
    at = starts[live]
    record, created = column_array(data, "record_id"), column_array(data, "time_created_ns")
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
        categorical(data, "pg_name"),
        categorical(data, "pg_desc"),
        categorical(data, "backend"),
    )
    # As lists: indexing a pandas Index of Arrow strings costs microseconds a value
    # (docs/performance.md).
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
    ids = pairs(dump_of, column_array(data, "pg_id")[rows])
    smallest = reduce_min(ids.ids, ids.n, name_codes).tolist()
    for i, pid, code in zip(ids.major.tolist(), ids.minor.tolist(), smallest, strict=True):
        known_by_dump[i][pid] = names_of[code]
    # Most frequent backend of each dump; a tie goes to the first category.
    used = pairs(dump_of, backends.codes[rows])
    tally = np.bincount(used.ids, minlength=used.n)
    order = np.lexsort((used.minor, -tally, used.major))
    lead = order[np.flatnonzero(np.diff(used.major[order], prepend=-1) != 0)]
    top.update(zip(used.major[lead].tolist(), used.minor[lead].tolist(), strict=True))
