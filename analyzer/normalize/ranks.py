"""The per-rank rows and the pg_status rows of the tables: what each rank's dump says of
itself and of each of its groups' counters."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pandas as pd

from analyzer import schema
from analyzer.load import Loaded, ParsedDump
from analyzer.normalize.scan import map_pg_ids

__all__ = ["rank_rows"]


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
