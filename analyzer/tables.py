"""The normalized model: parsed dumps -> typed DataFrames (entries, groups, ranks...).

``normalize`` hides every format difference the loader saw (pickle vs JSON, string
counters, 0 vs None, old key names), resolves group membership (from ``pg_config`` or,
when gloo left it empty or wrong, from the entries), maps each rank's backend-local
``pg_id`` to the global group name, and translates send/recv peers to global ranks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer import schema
from analyzer.loader import Loaded, Skipped
from analyzer.reader import BOOL_FIELDS, FLOAT_FIELDS, INT_FIELDS, STRING_FIELDS, ParsedDump


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
    def dumped_ranks(self) -> list[int]:
        return sorted(int(r) for r in self.ranks.loc[self.ranks["dumped"], "rank"])

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(int(r) for r in self.ranks.loc[~self.ranks["dumped"], "rank"])

    def members(self) -> dict[str, tuple[int, ...]]:
        """Group name -> member global ranks."""
        return dict(zip(self.groups["pg_name"], self.groups["ranks"], strict=True))


def _sort_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _concat_strings(dumps: Iterable[ParsedDump], field: str) -> pd.Categorical:
    categories: dict[str, int] = {}
    parts: list[np.ndarray] = []
    for d in dumps:
        local = d.vocab[field]
        remap = np.fromiter(
            (categories.setdefault(v, len(categories)) for v in local), dtype=np.int32, count=len(local)
        )
        codes = np.frombuffer(d.strings[field], dtype=np.int32) if d.n_entries else np.empty(0, np.int32)
        parts.append(remap[codes] if len(remap) else codes)
    codes = np.concatenate(parts) if parts else np.empty(0, np.int32)
    return pd.Categorical.from_codes(codes, categories=list(categories))


def _map_pg_ids(
    d: ParsedDump, known: dict[int, str], config_names: list[str]
) -> dict[int, str]:
    """Backend-local pg_id -> global name for one rank.

    Entries give exact pairs. The ids of groups with no entry in the buffer (a rank that
    recorded nothing, onlyActive dumps) are aligned with this rank's ``pg_config`` names:
    both grow in group-creation order, so between two known pairs the unknown ids and
    names correspond one to one when their counts agree.
    """
    mapping = dict(known)
    ids = sorted(d.pg_status)
    names = sorted((n for n in config_names if n.isdigit()), key=int)
    if not ids or not names:
        return mapping
    anchors = [(-1, -1)]
    for i, pid in enumerate(ids):
        if pid in mapping and mapping[pid] in names:
            anchors.append((i, names.index(mapping[pid])))
    anchors.append((len(ids), len(names)))
    for (i0, n0), (i1, n1) in zip(anchors, anchors[1:]):
        gap_ids = ids[i0 + 1 : i1]
        gap_names = names[n0 + 1 : n1]
        if gap_ids and len(gap_ids) == len(gap_names):
            for pid, name in zip(gap_ids, gap_names, strict=True):
                mapping.setdefault(pid, name)
    return mapping


def normalize(loaded: Loaded, *, world_size: int | None = None) -> Tables:
    """Build the normalized tables from what the loader read. Returns new frames."""
    dumps = loaded.dumps
    n = sum(d.n_entries for d in dumps)
    data: dict[str, object] = {}
    data["rank"] = np.repeat(np.array([d.rank for d in dumps], dtype=np.int32),
                             [d.n_entries for d in dumps])
    for field in STRING_FIELDS:
        data[field] = _concat_strings(dumps, field)
    for field in INT_FIELDS:
        parts = [np.frombuffer(d.ints[field], dtype=np.int64) for d in dumps if d.n_entries]
        data[field] = np.concatenate(parts) if parts else np.empty(0, np.int64)
    for field in BOOL_FIELDS:
        parts = [np.frombuffer(bytes(d.bools[field]), dtype=np.uint8) for d in dumps if d.n_entries]
        data[field] = (np.concatenate(parts) if parts else np.empty(0, np.uint8)).astype(bool)
    for field in FLOAT_FIELDS:
        parts = [np.frombuffer(d.floats[field], dtype=np.float64) for d in dumps if d.n_entries]
        data[field] = np.concatenate(parts) if parts else np.empty(0, np.float64)

    # Stacks: one global table, entries point into it.
    stack_index: dict[tuple[tuple[str, str, int], ...], int] = {}
    stack_ids = np.full(n, -1, dtype=np.int32)
    offset = 0
    for d in dumps:
        if d.n_entries:
            remap = np.array(
                [stack_index.setdefault(s, len(stack_index)) for s in d.stacks] or [0], dtype=np.int32
            )
            local = np.frombuffer(d.ints["stack"], dtype=np.int64)
            seg = stack_ids[offset : offset + d.n_entries]
            has = local >= 0
            seg[has] = remap[local[has]]
            offset += d.n_entries
    stacks_rows: dict[str, list[object]] = defaultdict(list)
    for key, sid in stack_index.items():
        for depth, (fname, filename, line) in enumerate(key):
            stacks_rows["stack_id"].append(sid)
            stacks_rows["depth"].append(depth)
            stacks_rows["name"].append(fname)
            stacks_rows["filename"].append(filename)
            stacks_rows["line"].append(line)

    # Groups: pg_config where it is real, entries where gloo left it empty or wrong.
    file_ranks = [f.rank for f in loaded.files]
    config_votes: dict[str, Counter[tuple[str, tuple[int, ...]]]] = defaultdict(Counter)
    unnamed_max = -1  # gloo's nameless pg_config entry: no group to trust, but a world bound
    for d in dumps:
        for name, (desc, members) in d.pg_config.items():
            if name and members:
                config_votes[name][(desc, members)] += 1
            elif members:
                unnamed_max = max(unnamed_max, max(members))
    world = world_size or 0
    if not world:
        default = config_votes.get("0")
        candidates = [max(file_ranks) + 1 if file_ranks else 0, unnamed_max + 1]
        if default:
            candidates.append(max(max(m) for (_, m) in default) + 1)
        for votes in config_votes.values():
            for (_, m) in votes:
                candidates.append(max(m) + 1)
        world = max(candidates)

    pg_names = data["pg_name"]
    assert isinstance(pg_names, pd.Categorical)
    pg_descs = data["pg_desc"]
    assert isinstance(pg_descs, pd.Categorical)
    ranks_arr = data["rank"]
    assert isinstance(ranks_arr, np.ndarray)
    seen = pd.DataFrame({"pg_name": pg_names, "pg_desc": pg_descs, "rank": ranks_arr})
    seen_members: dict[str, set[int]] = {}
    seen_desc: dict[str, str] = {}
    if n:
        pairs = seen.drop_duplicates(["pg_name", "rank"])
        for name, grp in pairs.groupby("pg_name", observed=True):
            seen_members[str(name)] = set(int(r) for r in grp["rank"])
        descs = seen.drop_duplicates(["pg_name", "pg_desc"])
        for name, grp in descs.groupby("pg_name", observed=True):
            seen_desc[str(name)] = str(grp["pg_desc"].iloc[0])
    group_rows: dict[str, list[object]] = defaultdict(list)
    all_names = sorted(set(config_votes) | set(seen_members) | {"0"}, key=_sort_key)
    for name in all_names:
        votes = config_votes.get(name)
        recorded = seen_members.get(name, set())
        if votes:
            (desc, members), _ = votes.most_common(1)[0]
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
    members_of = dict(zip(groups["pg_name"], groups["ranks"], strict=True))

    # Peers of send/recv: group-local ranks -> global ranks.
    peer = np.full(n, -1, dtype=np.int32)
    peer_local = data["peer_local"]
    assert isinstance(peer_local, np.ndarray)
    p2p_rows = np.flatnonzero(peer_local >= 0)
    if len(p2p_rows):
        codes = pg_names.codes[p2p_rows]
        for code in np.unique(codes):
            name = str(pg_names.categories[code])
            members_arr = np.array(members_of.get(name, ()), dtype=np.int32)
            rows = p2p_rows[codes == code]
            local = peer_local[rows]
            ok = local < len(members_arr)
            peer[rows[ok]] = members_arr[local[ok]]

    # pg_status: backend-local ids -> global names, per rank.
    pgid_arr = data["pg_id"]
    assert isinstance(pgid_arr, np.ndarray)
    status_rows: dict[str, list[object]] = defaultdict(list)
    rank_rows: dict[str, list[object]] = defaultdict(list)
    record_arr = data["record_id"]
    time_arr = data["time_created_ns"]
    backend_cat = data["backend"]
    assert isinstance(record_arr, np.ndarray) and isinstance(time_arr, np.ndarray)
    assert isinstance(backend_cat, pd.Categorical)
    offset = 0
    by_rank = {d.rank: d for d in dumps}
    for d in dumps:
        sl = slice(offset, offset + d.n_entries)
        offset += d.n_entries
        known: dict[int, str] = {}
        if d.n_entries:
            pid = pgid_arr[sl]
            names_codes = pg_names.codes[sl]
            uniq = np.unique(np.stack([pid, names_codes.astype(np.int64)]), axis=1)
            for p, c in uniq.T:
                known.setdefault(int(p), str(pg_names.categories[c]))
        mapping = _map_pg_ids(d, known, list(d.pg_config))
        for pid_key, (enq, started, completed) in sorted(d.pg_status.items()):
            status_rows["rank"].append(d.rank)
            status_rows["pg_id"].append(pid_key)
            status_rows["pg_name"].append(mapping.get(pid_key, ""))
            status_rows["last_enqueued"].append(enq)
            status_rows["last_started"].append(started)
            status_rows["last_completed"].append(completed)
        if d.n_entries:
            backends = pd.Series(backend_cat[sl]).value_counts()
            backend = str(backends.index[0]) if len(backends) else ""
            rec = record_arr[sl]
            first, last = int(rec.min()), int(rec.max())
            last_time = int(time_arr[sl].max())
        else:
            backend, first, last, last_time = "", -1, -1, 0
        rank_rows["rank"].append(d.rank)
        rank_rows["path"].append(d.path)
        rank_rows["format"].append(d.fmt)
        rank_rows["version"].append(d.version)
        rank_rows["backend"].append(backend)
        rank_rows["comm_lib_version"].append(d.comm_lib_version)
        rank_rows["entries"].append(d.n_entries)
        rank_rows["dumped"].append(True)
        rank_rows["first_record_id"].append(first)
        rank_rows["last_record_id"].append(last)
        rank_rows["last_time_ns"].append(last_time)
    skipped_by_rank = {s.rank: s for s in loaded.skipped}
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
    ranks = schema.frame(schema.RANKS, rank_rows).sort_values("rank", ignore_index=True)

    entry_data = {
        "rank": data["rank"], "pg_name": pg_names, "pg_desc": pg_descs,
        "pg_id": pgid_arr.astype(np.int32), "record_id": record_arr, "seq": data["seq"],
        "p2p_seq": data["p2p_seq"], "op_id": data["op_id"], "op": data["op"],
        "backend": backend_cat, "profiling_name": data["profiling_name"],
        "is_p2p": data["is_p2p"], "coalesced": data["coalesced"], "peer": peer,
        "input_sizes": data["input_sizes"], "output_sizes": data["output_sizes"],
        "input_dtypes": data["input_dtypes"], "output_dtypes": data["output_dtypes"],
        "state": data["state"], "retired": data["retired"],
        "time_created_ns": time_arr, "time_started_ns": data["time_started_ns"],
        "time_completed_ns": data["time_completed_ns"], "duration_ms": data["duration_ms"],
        "timeout_ms": data["timeout_ms"], "thread_name": data["thread_name"],
        "stack_id": stack_ids,
    }
    entries = pd.DataFrame({c.name: entry_data[c.name] for c in schema.ENTRIES})
    entries = entries.astype({c.name: c.dtype for c in schema.ENTRIES if c.dtype != "category"})
    skipped = schema.frame(
        schema.SKIPPED,
        {"path": [s.path for s in loaded.skipped], "rank": [s.rank for s in loaded.skipped],
         "reason": [s.reason for s in loaded.skipped]},
    )
    return Tables(
        entries=schema.validate(entries, schema.ENTRIES, "entries"),
        groups=schema.validate(groups, schema.GROUPS, "groups"),
        ranks=schema.validate(ranks, schema.RANKS, "ranks"),
        status=schema.validate(schema.frame(schema.STATUS, status_rows), schema.STATUS, "status"),
        stacks=schema.validate(schema.frame(schema.STACKS, stacks_rows), schema.STACKS, "stacks"),
        skipped=schema.validate(skipped, schema.SKIPPED, "skipped"),
        world_size=world,
    )


def skipped_list(tables: Tables) -> list[Skipped]:
    """The skipped files as records."""
    return [Skipped(str(p), int(r), str(why)) for p, r, why in
            tables.skipped[["path", "rank", "reason"]].itertuples(index=False)]
