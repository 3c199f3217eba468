"""Cross-rank matching: line up every rank's entries per (group, sequence number).

Outputs four frames:

* ``progress``: one row per (group, member): how far that member got in the group
  (collectives enqueued, from its entries and its ``pg_status`` counters), with the window
  its ring buffer still holds. A collective that scrolled out of a buffer is never treated
  as missing: a member has *joined* collective N when its progress is at least N.
* ``collectives``: one row per (group, seq): which members recorded, joined and completed
  it, and the majority op, sizes and dtypes.
* ``mismatches``: one row per (group, seq, rank) whose op, dtype or size differs from the
  majority of the members that recorded it (never from "the first rank").
* ``p2p``: one row per recorded send/recv with its global peer and whether the peer's
  matching recv/send was found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.tables import Tables

#: Ops whose input and output shapes must agree on every member.
SIZE_CHECKED_OPS = frozenset({
    "all_reduce", "allreduce", "broadcast", "reduce", "_all_gather_base", "all_gather",
    "allgather", "all_gather_into_tensor", "_reduce_scatter_base", "reduce_scatter",
    "reduce_scatter_tensor", "allreduce_coalesced", "all_reduce_coalesced", "barrier",
})

#: Match states, after PyTorch's flight-recorder analyzer.
FULLY_MATCHED = "fully_matched"
NOT_JOINED = "not_joined"
IN_FLIGHT = "in_flight"
OP_MISMATCH = "op_mismatch"
SIZE_MISMATCH = "size_mismatch"
DTYPE_MISMATCH = "dtype_mismatch"
UNKNOWN = "unknown"
#: ``expected`` of a mismatch where no value has a majority (e.g. a group of two).
NO_MAJORITY = "(no majority)"


@dataclass(frozen=True)
class Matching:
    """The result of matching collectives and send/recv across ranks."""

    progress: pd.DataFrame
    collectives: pd.DataFrame
    mismatches: pd.DataFrame
    p2p: pd.DataFrame
    gloo_like: bool
    """True when completion is not observable (gloo): only enqueues are evidence."""
    stale_completers: dict[int, dict[str, object]]
    """Ranks that enqueued as far as their group but whose completions stopped earlier than
    the others' (their GPU or link stopped; their ``scheduled`` states are stale)."""


def _group_key(entries: pd.DataFrame) -> np.ndarray:
    codes = entries["pg_name"].cat.codes.to_numpy(np.int64)
    return (codes << 40) | (entries["seq"].to_numpy(np.int64) & ((1 << 40) - 1))


def _progress(tables: Tables, coll: pd.DataFrame, gloo_like: bool) -> pd.DataFrame:
    """Per (group, member): recorded window and enqueue/complete progress in collectives.

    NCCL's ``pg_status`` counters count sequence numbers (of collectives, or of send/recv
    when the group's last op was one). gloo's count the per-group ``op_id`` and ignore
    send/recv, which gloo does not record either: for gloo the counter is compared in op_id
    units (``op_progress``), never with collective sequence numbers.
    """
    entries = tables.entries
    groups = tables.groups
    # What each rank's entries say, per group.
    per = entries.groupby(["pg_name", "rank"], observed=True, sort=False).agg(
        lo=("seq", "min"), hi=("seq", "max"), last_record=("record_id", "max"),
        n=("seq", "size"), op_hi=("op_id", "max"),
    )
    coll_only = coll.groupby(["pg_name", "rank"], observed=True, sort=False).agg(
        coll_lo=("seq", "min"), coll_hi=("seq", "max"),
    )
    done = coll[coll["state"] == "completed"].groupby(["pg_name", "rank"], observed=True).agg(
        completed_hi=("seq", "max")
    )
    # Type of the rank's last entry in the group decides what its pg_status counter counts.
    last_rows = entries.loc[
        entries.groupby(["pg_name", "rank"], observed=True, sort=False)["record_id"].idxmax()
    ] if len(entries) else entries
    last_is_p2p = pd.Series(
        last_rows["is_p2p"].to_numpy(), index=pd.MultiIndex.from_arrays(
            [last_rows["pg_name"].astype(str), last_rows["rank"]]
        ),
    )
    group_has_p2p = set(entries.loc[entries["is_p2p"], "pg_name"].astype(str).unique())
    group_has_coll = set(coll["pg_name"].astype(str).unique())

    status = tables.status[tables.status["pg_name"] != ""]
    status_idx = {
        (str(g), int(r)): (int(e), int(s), int(c))
        for g, r, e, s, c in status[
            ["pg_name", "rank", "last_enqueued", "last_started", "last_completed"]
        ].itertuples(index=False)
    }
    per_idx = {(str(g), int(r)): row for (g, r), row in zip(per.index, per.itertuples(index=False))}
    coll_idx = {(str(g), int(r)): row for (g, r), row in zip(coll_only.index, coll_only.itertuples(index=False))}
    done_idx = {(str(g), int(r)): int(v) for (g, r), v in done["completed_hi"].items()}
    dumped = set(tables.dumped_ranks)
    active = set(per_idx) | set(status_idx)
    active_groups = {g for g, _ in active}

    rows: dict[str, list[object]] = {k: [] for k in (
        "pg_name", "pg_desc", "rank", "dumped", "window_lo", "window_hi", "enqueued",
        "completed", "counter_enqueued", "counter_completed", "op_progress", "source")}
    for name, desc, members in groups[["pg_name", "pg_desc", "ranks"]].itertuples(index=False):
        if name not in active_groups:
            continue
        for r in members:
            key = (name, int(r))
            has_dump = int(r) in dumped
            e_row = per_idx.get(key)
            c_row = coll_idx.get(key)
            counter = status_idx.get(key)
            lo = int(c_row.coll_lo) if c_row is not None else -1
            hi = int(c_row.coll_hi) if c_row is not None else -1
            enq = int(e_row.hi) if e_row is not None else -1
            comp = done_idx.get(key, -1)
            source = "entries" if e_row is not None else "none"
            c_enq = c_comp = -1
            op_progress = int(e_row.op_hi) if e_row is not None else -1
            if counter is not None and gloo_like:
                c_enq, _, c_comp = counter
                op_progress = max(op_progress, c_enq)
                if e_row is None:
                    source = "unknown"
            elif counter is not None:
                c_enq, _, c_comp = counter
                if e_row is not None:
                    counts_coll = not bool(last_is_p2p.get(key, False))
                elif name in group_has_p2p and name in group_has_coll:
                    counts_coll = False  # ambiguous: the counter may count send/recv
                else:
                    counts_coll = name not in group_has_p2p
                if counts_coll:
                    if c_enq > enq:
                        source = "pg_status" if e_row is None else "entries+pg_status"
                    enq = max(enq, c_enq)
                    comp = max(comp, c_comp)
                elif e_row is None:
                    source = "unknown"
            if not has_dump:
                source = "no_dump"
            elif e_row is None and counter is None:
                source = "unknown"
            rows["pg_name"].append(name)
            rows["pg_desc"].append(desc)
            rows["rank"].append(int(r))
            rows["dumped"].append(has_dump)
            rows["window_lo"].append(lo)
            rows["window_hi"].append(hi)
            rows["enqueued"].append(enq if source not in ("no_dump", "unknown") else -1)
            rows["completed"].append(comp)
            rows["counter_enqueued"].append(c_enq)
            rows["counter_completed"].append(c_comp)
            rows["op_progress"].append(op_progress)
            rows["source"].append(source)
    out = pd.DataFrame(rows)
    return out.astype({"rank": "int32", "window_lo": "int64", "window_hi": "int64",
                       "enqueued": "int64", "completed": "int64", "counter_enqueued": "int64",
                       "counter_completed": "int64", "op_progress": "int64", "dumped": "bool"})


def _majority(values: pd.Series) -> str:
    counts = values.value_counts()
    top = counts[counts == counts.max()]
    return str(sorted(top.index.astype(str))[0])


def _mismatches(coll: pd.DataFrame) -> pd.DataFrame:
    """Rows whose op, dtype or size differs from the majority of their collective."""
    cols = ["pg_name", "pg_desc", "seq", "kind", "rank", "op", "value", "expected", "n_agree",
            "n_recorded", "basis"]
    if coll.empty:
        return pd.DataFrame({c: [] for c in cols})
    key = _group_key(coll)
    # Signature per row; only collectives whose signature varies are examined in Python.
    op_code = coll["op"].cat.codes.to_numpy(np.int64)
    dt_code = coll["input_dtypes"].cat.codes.to_numpy(np.int64) * 100003 + coll[
        "output_dtypes"].cat.codes.to_numpy(np.int64)
    sz_code = coll["input_sizes"].cat.codes.to_numpy(np.int64) * 100003 + coll[
        "output_sizes"].cat.codes.to_numpy(np.int64)
    checked = coll["op"].astype(str).isin(SIZE_CHECKED_OPS).to_numpy()
    sz_code = np.where(checked, sz_code, -1)
    frame = pd.DataFrame({"key": key, "op": op_code, "dt": dt_code, "sz": sz_code})
    agg = frame.groupby("key", sort=False).agg(["min", "max"])
    varies = agg[(agg[("op", "min")] != agg[("op", "max")]) | (agg[("dt", "min")] != agg[("dt", "max")])
                 | (agg[("sz", "min")] != agg[("sz", "max")])].index
    out: dict[str, list[object]] = {c: [] for c in cols}
    if not len(varies):
        return pd.DataFrame(out)
    sub = coll[np.isin(key, varies.to_numpy())][
        ["pg_name", "pg_desc", "seq", "rank", "record_id", "op", "input_dtypes", "output_dtypes",
         "input_sizes", "output_sizes"]].copy()
    for col in ("pg_name", "pg_desc", "op", "input_dtypes", "output_dtypes", "input_sizes",
                "output_sizes"):
        sub[col] = sub[col].astype(str)
    for (_, _), grp in sub.groupby(["pg_name", "seq"], sort=True):
        per_rank = _signatures(grp)
        name, desc, seq = str(grp["pg_name"].iloc[0]), str(grp["pg_desc"].iloc[0]), int(grp["seq"].iloc[0])
        n = len(per_rank)
        if n < 2:
            continue
        checks: list[tuple[str, pd.Series]] = [("op_mismatch", _check_series(per_rank, "op_mismatch"))]
        op_major = _majority(per_rank["op"])
        if (per_rank["op"] == op_major).all():
            checks = [("dtype_mismatch", _check_series(per_rank, "dtype_mismatch"))]
            if all(part in SIZE_CHECKED_OPS for part in op_major.split("+")):
                checks.append(("size_mismatch", _check_series(per_rank, "size_mismatch")))
        for kind, series in checks:
            counts = series.value_counts()
            tie = len(counts) > 1 and counts.iloc[0] == counts.iloc[1]
            major = NO_MAJORITY if tie else _majority(series)
            agree = int(counts.iloc[0])
            deviating = series if tie else series[series != major]
            basis = "no majority" if tie else "group majority"
            if tie:
                # No majority inside the group (a pair): ask the sibling groups (same desc,
                # e.g. the other tensor-parallel pairs) what they issued at this seq.
                sibling = _sibling_value(coll, name, desc, seq, kind)
                if sibling is not None and (series == sibling).any():
                    major, deviating = sibling, series[series != sibling]
                    agree = int((series == sibling).sum())
                    basis = "sibling groups"
            for rank, value in deviating.items():
                out["pg_name"].append(name)
                out["pg_desc"].append(desc)
                out["seq"].append(seq)
                out["kind"].append(kind)
                out["rank"].append(int(rank))
                out["op"].append(str(per_rank.loc[rank, "op"]))
                out["value"].append(str(value))
                out["expected"].append(major)
                out["n_agree"].append(agree)
                out["n_recorded"].append(n)
                out["basis"].append(basis)
            if len(deviating):
                break
    return pd.DataFrame(out)


def _signatures(grp: pd.DataFrame) -> pd.DataFrame:
    """Per rank of one (group, seq): op, dtypes and sizes, joined over coalesced entries."""
    grp = grp.sort_values("record_id")
    joined = {
        col: grp.groupby("rank", sort=True)[src].agg(lambda s: "+".join(map(str, s)))
        for col, src in (("op", "op"), ("dtypes", "input_dtypes"), ("odtypes", "output_dtypes"),
                         ("sizes", "input_sizes"), ("osizes", "output_sizes"))
    }
    return pd.DataFrame(joined)


def _check_series(per_rank: pd.DataFrame, kind: str) -> pd.Series:
    if kind == "op_mismatch":
        return per_rank["op"]
    if kind == "dtype_mismatch":
        return per_rank["dtypes"] + "|" + per_rank["odtypes"]
    return per_rank["sizes"] + "|" + per_rank["osizes"]


def _sibling_value(coll: pd.DataFrame, name: str, desc: str, seq: int, kind: str) -> str | None:
    """The value most sibling groups (same desc, other name) used at ``seq``, if unanimous
    enough to break a tie (a strict majority of the siblings' ranks)."""
    if not desc or desc in ("undefined", "default_pg"):
        return None
    rows = coll[(coll["pg_desc"] == desc) & (coll["seq"] == seq) & (coll["pg_name"] != name)]
    if rows.empty:
        return None
    rows = rows[["pg_name", "rank", "record_id", "op", "input_dtypes", "output_dtypes",
                 "input_sizes", "output_sizes"]].astype({c: str for c in (
                     "op", "input_dtypes", "output_dtypes", "input_sizes", "output_sizes")})
    values = _check_series(_signatures(rows), kind)
    counts = values.value_counts()
    if counts.iloc[0] * 2 <= len(values):
        return None
    return str(counts.index[0])


def _collectives(coll: pd.DataFrame, progress: pd.DataFrame, tables: Tables) -> pd.DataFrame:
    """One row per (group, seq) with counts of recorded, joined and completed members."""
    if coll.empty:
        return pd.DataFrame({c: [] for c in (
            "pg_name", "pg_desc", "seq", "op", "input_sizes", "input_dtypes", "n_members",
            "n_recorded", "n_joined", "n_completed", "n_started", "first_created_ns",
            "last_created_ns", "last_started_ns", "state")})
    first = coll.drop_duplicates(["pg_name", "seq", "rank"])
    g = first.groupby(["pg_name", "seq"], observed=True, sort=True)
    out = g.agg(
        pg_desc=("pg_desc", "first"), op=("op", "first"), input_sizes=("input_sizes", "first"),
        input_dtypes=("input_dtypes", "first"), n_recorded=("rank", "size"),
        first_created_ns=("time_created_ns", "min"), last_created_ns=("time_created_ns", "max"),
        last_started_ns=("time_started_ns", "max"),
    ).reset_index()
    state = first["state"].astype(str)
    out["n_completed"] = (state == "completed").groupby(
        [first["pg_name"], first["seq"]], observed=True, sort=True).sum().to_numpy()
    out["n_started"] = state.isin(["started", "completed"]).groupby(
        [first["pg_name"], first["seq"]], observed=True, sort=True).sum().to_numpy()
    sizes = dict(zip(tables.groups["pg_name"], tables.groups["size"], strict=True))
    out["n_members"] = out["pg_name"].astype(str).map(sizes).fillna(0).astype("int32")
    # n_joined: members whose progress reaches seq (searchsorted per group; no per-entry loop).
    joined = np.zeros(len(out), dtype=np.int32)
    known = progress[progress["enqueued"] >= 0]
    prog_by_group = {str(k): np.sort(v.to_numpy()) for k, v in known.groupby("pg_name")["enqueued"]}
    names = out["pg_name"].astype(str).to_numpy()
    seqs = out["seq"].to_numpy()
    for name in np.unique(names):
        mask = names == name
        arr = prog_by_group.get(name)
        if arr is None:
            continue
        joined[mask] = len(arr) - np.searchsorted(arr, seqs[mask], side="left")
    out["n_joined"] = joined
    out["state"] = np.where(out["n_completed"] >= out["n_members"], FULLY_MATCHED, IN_FLIGHT)
    unknown = progress.assign(u=progress["enqueued"] < 0).groupby("pg_name")["u"].sum()
    unknown_members = out["pg_name"].astype(str).map(unknown).fillna(0).astype(int)
    out.loc[out["n_joined"] + unknown_members < out["n_members"], "state"] = NOT_JOINED
    out = out[["pg_name", "pg_desc", "seq", "op", "input_sizes", "input_dtypes", "n_members",
               "n_recorded", "n_joined", "n_completed", "n_started", "first_created_ns",
               "last_created_ns", "last_started_ns", "state"]]
    for col in ("pg_name", "pg_desc", "op", "input_sizes", "input_dtypes"):
        out[col] = out[col].astype(str)
    return out


def _p2p(tables: Tables) -> pd.DataFrame:
    """Each recorded send/recv with its global peer, and whether the peer posted its side.

    ``peer_state`` is one of:

    * ``paired``: completed, or matched by an op the peer posted;
    * ``not_posted``: the peer holds no matching op: this rank waits on it;
    * ``no_dump``: the peer wrote no dump.

    A stream is (group, sender, receiver). Ops that completed are paired by definition (a
    send and its recv finish together). The others are paired first-in first-out per stream,
    which is how NCCL pairs them: the newest sends (or recvs) beyond what the other side
    posted are the unmatched ones. Only ops still in flight are compared, so ring buffers
    that kept different amounts of history do not matter, batched send/recv that stay
    ``scheduled`` pair with the peer's ops, and a send is never paired with a receive of
    another pipeline stage (no false size errors in groups larger than two).
    """
    e = tables.entries
    cols = ["rank", "pg_name", "pg_desc", "op", "peer", "p2p_seq", "seq", "record_id", "state",
            "time_created_ns", "input_sizes", "input_dtypes"]
    p = e.loc[e["is_p2p"] & e["op"].isin(["send", "recv"]) & (e["peer"] >= 0), cols].copy()
    if p.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols + ["peer_state", "pair_size"]})
    for col in ("pg_name", "pg_desc", "op", "state", "input_sizes", "input_dtypes"):
        p[col] = p[col].astype(str)
    is_send = (p["op"] == "send").to_numpy()
    p["src"] = np.where(is_send, p["rank"], p["peer"])
    p["dst"] = np.where(is_send, p["peer"], p["rank"])
    peer_dumped = p["peer"].isin(tables.dumped_ranks).to_numpy()
    done = (p["state"] == "completed").to_numpy()
    p["peer_state"] = np.where(done, "paired", np.where(peer_dumped, "", "no_dump"))
    p["pair_size"] = ""
    live = p[p["peer_state"] == ""].sort_values("record_id", kind="stable")
    if len(live):
        stream = ["pg_name", "src", "dst", "op"]
        live = live.assign(k=live.groupby(stream).cumcount())
        counts = live.groupby(stream).size().to_dict()
        other = np.where(live["op"] == "send", "recv", "send")
        other_n = np.array([
            counts.get((g, s, d, o), 0)
            for g, s, d, o in zip(live["pg_name"], live["src"], live["dst"], other)
        ], dtype=np.int64)
        paired = live["k"].to_numpy() < other_n
        p.loc[live.index, "peer_state"] = np.where(paired, "paired", "not_posted")
        sides = {
            (g, s, d, o, k): size
            for g, s, d, o, k, size in live[paired][
                ["pg_name", "src", "dst", "op", "k", "input_sizes"]].itertuples(index=False)
        }
        p.loc[live[paired].index, "pair_size"] = [
            sides.get((g, s, d, "recv" if o == "send" else "send", k), "")
            for g, s, d, o, k in live[paired][["pg_name", "src", "dst", "op", "k"]].itertuples(index=False)
        ]
    return p.drop(columns=["src", "dst"]).sort_values(["rank", "record_id"]).reset_index(drop=True)


_COMPLETION_LAG = 2


def stale_completers(progress: pd.DataFrame) -> dict[int, dict[str, object]]:
    """Members whose completed counter lags a majority of a group that all enqueued as far.

    A lag of one op is the watchdog's polling; a stopped GPU falls further behind.
    """
    known = progress[progress["enqueued"] >= 0]
    laggers: dict[int, dict[str, object]] = {}
    for name, grp in known.groupby("pg_name", sort=True):
        if grp["enqueued"].nunique() != 1 or len(grp) < 2:
            continue
        done = grp["completed"]
        top = int(done.max())
        behind = done <= top - _COMPLETION_LAG
        if not behind.any() or behind.sum() * 2 >= len(grp) + (len(grp) == 2):
            continue  # nobody behind, or no majority that completed further
        for r, c in zip(grp["rank"], done):
            if int(c) <= top - _COMPLETION_LAG:
                laggers.setdefault(int(r), {
                    "group": str(name), "group_desc": str(grp["pg_desc"].iloc[0]),
                    "completed": int(c), "peers_completed": top,
                    "enqueued": int(grp["enqueued"].iloc[0])})
    return laggers


def match(tables: Tables) -> Matching:
    """Match every collective and send/recv across ranks."""
    entries = tables.entries
    coll = entries[~entries["is_p2p"]]
    backends = set(entries["backend"].astype(str).unique())
    gloo_like = bool(backends) and backends <= {"gloo"}
    progress = _progress(tables, coll, gloo_like)
    return Matching(
        progress=progress,
        collectives=_collectives(coll, progress, tables),
        mismatches=_mismatches(coll),
        p2p=_p2p(tables),
        gloo_like=gloo_like,
        stale_completers={} if gloo_like else stale_completers(progress),
    )
