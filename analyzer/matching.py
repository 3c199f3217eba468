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

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.dialect import Dialects, p2p_payload, read_dialects
from analyzer.expectations import (
    Expectation,
    expectation,
    monitored_barrier_gaps,
    sides,
    size_checked_ops,
)
from analyzer.tables import Tables

#: Ops whose shapes are compared on some side (see :mod:`analyzer.expectations`).
SIZE_CHECKED_OPS = size_checked_ops()

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
    p2p_mismatches: pd.DataFrame
    """Send/recv pairs whose two sides posted different sizes or dtypes (``P2P_MISMATCH_COLUMNS``)."""
    dialects: Dialects
    """How each rank's dump is read (:mod:`analyzer.dialect`): what its states mean, what its
    counters count, whether its send/recv sizes are one-sided."""
    stale_completers: dict[int, dict[str, object]]
    """Ranks whose completions stopped before those of most of their group, in ops they
    enqueued too (their GPU or link stopped; their ``scheduled`` states are stale)."""
    barrier_gaps: dict[str, list[int]]
    """gloo groups whose recorded collectives skip sequence numbers the way monitored_barrier
    does (every member alike): group -> first skipped seq of each gap. Not unrecorded work."""


def _group_key(entries: pd.DataFrame) -> np.ndarray:
    codes = entries["pg_name"].cat.codes.to_numpy(np.int64)
    return (codes << 40) | (entries["seq"].to_numpy(np.int64) & ((1 << 40) - 1))


def _as_str(values: pd.Series) -> pd.Series:
    """``values.astype(str)``; a categorical of strings maps its codes, not every value."""
    if isinstance(values.dtype, pd.CategoricalDtype) and values.cat.categories.dtype == "str":
        codes = values.cat.codes.to_numpy()
        if (codes >= 0).all():
            return pd.Series(values.cat.categories.take(codes), index=values.index, name=values.name)
    return values.astype(str)


def _map_categories(values: pd.Series, mapping: Mapping[str, object] | pd.Series) -> pd.Series:
    """``values.astype(str).map(mapping)`` for a categorical without missing values, mapping
    each category once instead of every row."""
    codes = values.cat.codes.to_numpy()
    assert (codes >= 0).all()
    per_category = pd.Series(values.cat.categories.astype(str)).map(mapping).to_numpy()
    return pd.Series(per_category[codes], index=values.index)


def _lookup(keys: pd.MultiIndex, table: pd.Series, default: object) -> tuple[np.ndarray, np.ndarray]:
    """``table`` (unique (group name, rank) index) read at ``keys``: (values, found)."""
    index = pd.MultiIndex.from_arrays([
        _as_str(pd.Series(table.index.get_level_values(0))).to_numpy(),
        table.index.get_level_values(1).to_numpy(np.int64)])
    pos = index.get_indexer(keys)
    found = pos >= 0
    values = table.to_numpy()
    return np.where(found, values[np.maximum(pos, 0)] if len(values) else default, default), found


def _count_at_least(group: np.ndarray, value: np.ndarray, q_group: np.ndarray,
                    q_value: np.ndarray) -> np.ndarray:
    """For each query i: how many pairs (group[j], value[j]) have group q_group[i] and a value
    of at least q_value[i]. Groups are ids >= 0; a query group of -1 counts nothing.

    One sort and two binary searches over (group, value) keys, whatever the number of groups.
    """
    both = np.concatenate([np.asarray(value, np.int64), np.asarray(q_value, np.int64)])
    dense = np.unique(both, return_inverse=True)[1].reshape(-1)  # values as ranks: no overflow
    width = int(dense.max()) + 2 if len(dense) else 1
    keys = np.sort(np.asarray(group, np.int64) * width + dense[: len(value)])
    q = np.asarray(q_group, np.int64)
    start = np.searchsorted(keys, q * width + dense[len(value):], side="left")
    end = np.searchsorted(keys, (q + 1) * width, side="left")
    return np.where(q >= 0, end - start, 0)


def _progress(tables: Tables, coll: pd.DataFrame, dialects: Dialects) -> pd.DataFrame:
    """Per (group, member): recorded window and enqueue/complete progress in collectives.

    Legacy NCCL's ``pg_status`` counters count sequence numbers (of collectives, or of
    send/recv when the group's last op was one). gloo's and the recorder hook's count the
    per-group ``op_id`` (the dialect of the rank says which): those are compared in op_id
    units (``op_progress``), never with collective sequence numbers. A member whose dumps
    hold no buffer of the group's backend is ``not_recorded``: unseen, not behind.

    One row per member of every group some rank recorded or counted, in group order, built
    column-wise: each per-(group, rank) fact is looked up for all members at once.
    """
    entries = tables.entries
    groups = tables.groups
    # What each rank's entries say, per group.
    by_member = entries.groupby(["pg_name", "rank"], observed=True, sort=False)
    per = by_member.agg(hi=("seq", "max"), op_hi=("op_id", "max"))
    coll_only = coll.groupby(["pg_name", "rank"], observed=True, sort=False).agg(
        coll_lo=("seq", "min"), coll_hi=("seq", "max"),
    )
    done = coll.loc[coll["state"] == "completed", ["pg_name", "rank", "seq"]].groupby(
        ["pg_name", "rank"], observed=True).agg(completed_hi=("seq", "max"))
    # Type of the rank's last entry in the group decides what its pg_status counter counts.
    last_rows = entries.loc[by_member["record_id"].idxmax()] if len(entries) else entries
    last_is_p2p = pd.Series(
        last_rows["is_p2p"].to_numpy(),
        index=pd.MultiIndex.from_arrays([last_rows["pg_name"], last_rows["rank"]]),
    )
    group_has_p2p = {str(g) for g in entries.loc[entries["is_p2p"], "pg_name"].unique()}

    status = tables.status[tables.status["pg_name"] != ""]
    status = status.drop_duplicates(["pg_name", "rank"], keep="last")  # as a dict would keep
    status = status.set_index(["pg_name", "rank"])
    active_groups = set(_as_str(pd.Series(per.index.get_level_values(0))).unique()) | {
        str(g) for g in status.index.get_level_values(0).unique()}

    # Every member of every active group, in group order then member order.
    chosen = groups[groups["pg_name"].isin(active_groups)]
    sizes = chosen["ranks"].map(len).to_numpy()
    names = np.repeat(chosen["pg_name"].to_numpy(dtype=object), sizes)
    descs = np.repeat(chosen["pg_desc"].to_numpy(dtype=object), sizes)
    ranks = np.fromiter(itertools.chain.from_iterable(chosen["ranks"]), dtype=np.int64,
                        count=int(sizes.sum()))
    keys = pd.MultiIndex.from_arrays([names, ranks])

    enq, has_entries = _lookup(keys, per["hi"], -1)
    op_progress, _ = _lookup(keys, per["op_hi"], -1)
    lo, _ = _lookup(keys, coll_only["coll_lo"], -1)
    hi, _ = _lookup(keys, coll_only["coll_hi"], -1)
    comp, _ = _lookup(keys, done["completed_hi"], -1)
    c_enq, counted = _lookup(keys, status["last_enqueued"], -1)
    c_comp, _ = _lookup(keys, status["last_completed"], -1)
    enq, op_progress, comp = enq.astype(np.int64), op_progress.astype(np.int64), comp.astype(np.int64)
    c_enq, c_comp = c_enq.astype(np.int64), c_comp.astype(np.int64)
    dumped = np.isin(ranks, np.array(tables.dumped_ranks, dtype=np.int64))

    source = np.where(has_entries, "entries", "none").astype(object)
    op_units = np.isin(ranks, np.array(sorted(dialects.op_id_counter_ranks), dtype=np.int64))
    # op_id counters (gloo, the hook): compared with the entries' op_id.
    op_progress = np.where(counted & op_units, np.maximum(op_progress, c_enq), op_progress)
    source[counted & op_units & ~has_entries] = "unknown"
    # Sequence-number counters (legacy NCCL).
    last_p2p, _ = _lookup(keys, last_is_p2p, False)
    in_p2p = np.array([n in group_has_p2p for n in chosen["pg_name"]], dtype=bool)
    in_p2p = np.repeat(in_p2p, sizes)
    # With entries, the counter counts what the last entry was; without, only a group
    # with no send/recv is sure to count collectives (with both it is ambiguous).
    counts_coll = np.where(has_entries, ~last_p2p.astype(bool), ~in_p2p)
    use = counted & counts_coll & ~op_units
    ahead = use & (c_enq > enq)
    source[ahead] = np.where(has_entries[ahead], "entries+pg_status", "pg_status")
    enq = np.where(use, np.maximum(enq, c_enq), enq)
    comp = np.where(use, np.maximum(comp, c_comp), comp)
    source[counted & ~counts_coll & ~has_entries & ~op_units] = "unknown"
    source[~dumped] = "no_dump"
    source[dumped & ~has_entries & ~counted] = "unknown"
    unseen = {(g, int(m)) for g, info in dialects.unrecorded_groups.items()
              for m in info["members_without_buffer"]}
    if unseen:
        flag = np.array([(str(g), int(r)) in unseen for g, r in zip(names, ranks)], dtype=bool)
        source[flag & ~has_entries] = "not_recorded"
    out = pd.DataFrame({
        "pg_name": names, "pg_desc": descs, "rank": ranks, "dumped": dumped,
        "window_lo": lo, "window_hi": hi,
        "enqueued": np.where(np.isin(source, ["no_dump", "unknown", "not_recorded"]), -1, enq),
        "completed": comp, "counter_enqueued": c_enq, "counter_completed": c_comp,
        "op_progress": op_progress, "source": source,
    })
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
    checked = coll["op"].isin(SIZE_CHECKED_OPS).to_numpy()
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
        sub[col] = _as_str(sub[col])
    for (_, _), grp in sub.groupby(["pg_name", "seq"], sort=True):
        per_rank = _signatures(grp)
        name, desc, seq = str(grp["pg_name"].iloc[0]), str(grp["pg_desc"].iloc[0]), int(grp["seq"].iloc[0])
        n = len(per_rank)
        if n < 2:
            continue
        checks: list[tuple[str, pd.Series]] = [("op_mismatch", per_rank["op"])]
        op_major = _majority(per_rank["op"])
        if (per_rank["op"] == op_major).all():
            # Only the sides the op's expectation says every member records alike.
            rule = expectation(op_major)
            checks = [("dtype_mismatch", _check_series(per_rank, "dtype_mismatch", rule))]
            if rule.sizes:
                checks.append(("size_mismatch", _check_series(per_rank, "size_mismatch", rule)))
        for kind, series in checks:
            if series.nunique() < 2:
                continue
            counts = series.value_counts()
            tie = len(counts) > 1 and counts.iloc[0] == counts.iloc[1]
            major = NO_MAJORITY if tie else _majority(series)
            agree = int(counts.iloc[0])
            deviating = series if tie else series[series != major]
            basis = "no majority" if tie else "group majority"
            if tie:
                # No majority inside the group (a pair): ask the sibling groups (same desc,
                # e.g. the other tensor-parallel pairs) what they issued at this seq.
                sibling = _sibling_value(coll, name, desc, seq, kind, expectation(op_major))
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


_SIDE_COLUMNS = {("dtype_mismatch", "inputs"): "dtypes", ("dtype_mismatch", "outputs"): "odtypes",
                 ("size_mismatch", "inputs"): "sizes", ("size_mismatch", "outputs"): "osizes"}


def _check_series(per_rank: pd.DataFrame, kind: str, rule: Expectation | None = None) -> pd.Series:
    """Per rank, the value compared for ``kind``: the op, or the dtypes / shapes of the sides
    ``rule`` says must agree (``inputs|outputs`` when both). On a one-sided op a member that
    left a compared side empty is not compared (it is not that member's side)."""
    if kind == "op_mismatch":
        return per_rank["op"]
    rule = rule if rule is not None else expectation(str(per_rank["op"].iloc[0]))
    compared = sides(rule.dtypes if kind == "dtype_mismatch" else rule.sizes)
    if not compared:
        return pd.Series([], dtype=object)
    cols = [per_rank[_SIDE_COLUMNS[(kind, side)]] for side in compared]
    keep = pd.Series(True, index=per_rank.index)
    if rule.one_sided:
        for col in cols:
            keep &= ~col.str.fullmatch(r"\[\](\+\[\])*")
    value = cols[0] if len(cols) == 1 else cols[0] + "|" + cols[1]
    return value[keep]


def _sibling_value(coll: pd.DataFrame, name: str, desc: str, seq: int, kind: str,
                   rule: Expectation | None = None) -> str | None:
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
    values = _check_series(_signatures(rows), kind, rule)
    counts = values.value_counts()
    if counts.empty or counts.iloc[0] * 2 <= len(values):
        return None
    return str(counts.index[0])


def _collectives(coll: pd.DataFrame, progress: pd.DataFrame, tables: Tables) -> pd.DataFrame:
    """One row per (group, seq) with counts of recorded, joined and completed members."""
    if coll.empty:
        return pd.DataFrame({c: [] for c in (
            "pg_name", "pg_desc", "seq", "op", "input_sizes", "input_dtypes", "n_members",
            "n_recorded", "n_joined", "n_completed", "n_started", "first_created_ns",
            "last_created_ns", "last_started_ns", "state")})
    repeated = coll.duplicated(["pg_name", "seq", "rank"])  # coalesced: one row per rank
    first = coll[~repeated] if repeated.any() else coll
    g = first.groupby(["pg_name", "seq"], observed=True, sort=True)
    out = g.agg(
        pg_desc=("pg_desc", "first"), op=("op", "first"), input_sizes=("input_sizes", "first"),
        input_dtypes=("input_dtypes", "first"), n_recorded=("rank", "size"),
        first_created_ns=("time_created_ns", "min"), last_created_ns=("time_created_ns", "max"),
        last_started_ns=("time_started_ns", "max"),
    ).reset_index()
    state = first["state"]
    group_of = g.ngroup().to_numpy()  # rows of `out` are the groups in this order
    out["n_completed"] = np.bincount(group_of, weights=(state == "completed").to_numpy(),
                                     minlength=len(out)).astype(np.int64)
    out["n_started"] = np.bincount(group_of, weights=state.isin(["started", "completed"]).to_numpy(),
                                   minlength=len(out)).astype(np.int64)
    sizes = dict(zip(tables.groups["pg_name"], tables.groups["size"], strict=True))
    names = _as_str(out["pg_name"])
    out["n_members"] = _map_categories(out["pg_name"], sizes).fillna(0).astype("int32")
    # n_joined: members whose progress reaches seq, for every (group, seq) at once.
    known = progress[progress["enqueued"] >= 0]
    known_names = pd.Index(_as_str(known["pg_name"]).unique())
    out["n_joined"] = _count_at_least(
        known_names.get_indexer(_as_str(known["pg_name"])), known["enqueued"].to_numpy(),
        known_names.get_indexer(names), out["seq"].to_numpy()).astype(np.int32)
    out["state"] = np.where(out["n_completed"] >= out["n_members"], FULLY_MATCHED, IN_FLIGHT)
    unknown = progress.assign(u=progress["enqueued"] < 0).groupby("pg_name")["u"].sum()
    unknown_members = _map_categories(out["pg_name"], unknown).fillna(0).astype(int)
    out.loc[out["n_joined"] + unknown_members < out["n_members"], "state"] = NOT_JOINED
    out = out[["pg_name", "pg_desc", "seq", "op", "input_sizes", "input_dtypes", "n_members",
               "n_recorded", "n_joined", "n_completed", "n_started", "first_created_ns",
               "last_created_ns", "last_started_ns", "state"]]
    for col in ("pg_name", "pg_desc", "op", "input_sizes", "input_dtypes"):
        out[col] = _as_str(out[col])
    return out


def _p2p(tables: Tables, dialects: Dialects) -> pd.DataFrame:
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

    ``input_sizes`` and ``input_dtypes`` hold what the op moves: for a recv of a one-sided
    dialect (the recorder hook writes a recv's shapes as outputs only) its outputs, so a
    send is always compared with its recv input-to-output.
    """
    e = tables.entries
    cols = ["rank", "pg_name", "pg_desc", "op", "peer", "p2p_seq", "seq", "record_id", "state",
            "time_created_ns", "input_sizes", "input_dtypes"]
    p = e.loc[e["is_p2p"] & e["op"].isin(["send", "recv"]) & (e["peer"] >= 0),
              cols + ["output_sizes", "output_dtypes"]].copy()
    if p.empty:
        return pd.DataFrame({c: pd.Series(dtype="object")
                             for c in cols + ["peer_state", "pair_size", "pair_dtype", "pair_seq"]})
    one_sided = np.isin(p["rank"].to_numpy(), np.array(sorted(dialects.one_sided_ranks), dtype=np.int64))
    sizes, dtypes = p2p_payload(p, one_sided)
    p = p.drop(columns=["output_sizes", "output_dtypes"])
    p["input_sizes"] = sizes
    p["input_dtypes"] = dtypes
    for col in ("pg_name", "pg_desc", "op", "state", "input_sizes", "input_dtypes"):
        p[col] = _as_str(p[col])
    is_send = (p["op"] == "send").to_numpy()
    p["src"] = np.where(is_send, p["rank"], p["peer"])
    p["dst"] = np.where(is_send, p["peer"], p["rank"])
    peer_dumped = p["peer"].isin(tables.dumped_ranks).to_numpy()
    done = (p["state"] == "completed").to_numpy()
    p["peer_state"] = np.where(done, "paired", np.where(peer_dumped, "", "no_dump"))
    p["pair_size"] = ""
    p["pair_dtype"] = ""
    p["pair_seq"] = -1
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
            (g, s, d, o, k): (size, dtype, seq)
            for g, s, d, o, k, size, dtype, seq in live[paired][
                ["pg_name", "src", "dst", "op", "k", "input_sizes", "input_dtypes", "p2p_seq"]
            ].itertuples(index=False)
        }
        other_side = [
            sides.get((g, s, d, "recv" if o == "send" else "send", k), ("", "", -1))
            for g, s, d, o, k in live[paired][["pg_name", "src", "dst", "op", "k"]].itertuples(index=False)
        ]
        at = live[paired].index
        p.loc[at, "pair_size"] = [size for size, _, _ in other_side]
        p.loc[at, "pair_dtype"] = [dtype for _, dtype, _ in other_side]
        p.loc[at, "pair_seq"] = [int(seq) for _, _, seq in other_side]
    return p.drop(columns=["src", "dst"]).sort_values(["rank", "record_id"]).reset_index(drop=True)


_COMPLETION_LAG = 2


P2P_MISMATCH_COLUMNS = [
    "kind", "pg_name", "pg_desc", "sender", "receiver", "send_seq", "recv_seq", "send_value",
    "recv_value", "usual_send", "usual_recv", "culprits",
]


def p2p_mismatches(p2p: pd.DataFrame) -> pd.DataFrame:
    """Send/recv pairs still in flight whose sides disagree on sizes or dtypes.

    NCCL waits (or fails) when a recv expects more than the send delivers, so such a pair
    never completes. Who changed: each side is compared with what it usually posts on the
    same stream (the most frequent value of its sends to, or recvs from, that peer, in its
    window); the side that deviates is named, or both when that does not tell.
    """
    empty = pd.DataFrame({c: pd.Series(dtype="object") for c in P2P_MISMATCH_COLUMNS})
    if p2p.empty:
        return empty
    sends = p2p[(p2p["op"] == "send") & (p2p["peer_state"] == "paired") & (p2p["pair_seq"] >= 0)]
    rows = []
    for kind, own, other in ((SIZE_MISMATCH, "input_sizes", "pair_size"),
                             (DTYPE_MISMATCH, "input_dtypes", "pair_dtype")):
        bad = sends[sends[own].astype(str) != sends[other].astype(str)]
        if bad.empty:
            continue
        usual = (p2p.groupby(["pg_name", "rank", "peer", "op", own], observed=True).size()
                 .reset_index(name="n").sort_values(["n", own], ascending=[False, True])
                 .drop_duplicates(["pg_name", "rank", "peer", "op"])
                 .set_index(["pg_name", "rank", "peer", "op"])[own])
        # The first disagreeing pair of each stream: later ones queue behind it.
        bad = bad.sort_values("record_id").drop_duplicates(["pg_name", "rank", "peer"])
        for g, d, snd, rcv, sseq, rseq, sval, rval in bad[
                ["pg_name", "pg_desc", "rank", "peer", "p2p_seq", "pair_seq", own, other]].itertuples(index=False):
            u_send = str(usual.get((g, snd, rcv, "send"), ""))
            u_recv = str(usual.get((g, rcv, snd, "recv"), ""))
            sender_changed = bool(u_send) and str(sval) != u_send
            receiver_changed = bool(u_recv) and str(rval) != u_recv
            if sender_changed and not receiver_changed:
                culprits = [int(snd)]
            elif receiver_changed and not sender_changed:
                culprits = [int(rcv)]
            else:
                culprits = sorted([int(snd), int(rcv)])
            rows.append((kind, str(g), str(d), int(snd), int(rcv), int(sseq), int(rseq), str(sval),
                         str(rval), u_send, u_recv, culprits))
    return pd.DataFrame(rows, columns=P2P_MISMATCH_COLUMNS) if rows else empty


def stale_completers(progress: pd.DataFrame,
                     observed: frozenset[int] | None = None) -> dict[int, dict[str, object]]:
    """Members whose completed counter lags what a majority of their group completed, in
    ops they enqueued too.

    A collective completes on every member or on none, so a member that enqueued seq N and
    does not show it completed while most peers do has stopped observing its completions
    (its GPU or watchdog is stuck), whatever it enqueued later. A lag of one op is the
    watchdog's polling; a stopped GPU falls further behind.
    """
    known = progress[progress["enqueued"] >= 0]
    if observed is not None:  # only ranks whose dialect reports completion
        known = known[known["rank"].isin(list(observed))]
    laggers: dict[int, dict[str, object]] = {}
    for name, grp in known.groupby("pg_name", sort=True):
        if len(grp) < 2:
            continue
        done = grp["completed"].to_numpy()
        enq = grp["enqueued"].to_numpy()
        top = int(done.max())
        behind = done <= np.minimum(top, enq) - _COMPLETION_LAG
        if not behind.any() or behind.sum() * 2 >= len(grp) + (len(grp) == 2):
            continue  # nobody behind, or no majority that completed further
        for r, c, q, late in zip(grp["rank"], done, enq, behind):
            if late:
                laggers.setdefault(int(r), {
                    "group": str(name), "group_desc": str(grp["pg_desc"].iloc[0]),
                    "completed": int(c), "peers_completed": top, "enqueued": int(q)})
    return laggers


def match(tables: Tables) -> Matching:
    """Match every collective and send/recv across ranks."""
    entries = tables.entries
    # Collectives, with the columns matching reads (a boolean mask copies every column).
    coll = entries.loc[~entries["is_p2p"], [
        "pg_name", "pg_desc", "rank", "seq", "record_id", "op", "state", "input_sizes",
        "output_sizes", "input_dtypes", "output_dtypes", "time_created_ns", "time_started_ns"]]
    dialects = read_dialects(tables)
    progress = _progress(tables, coll, dialects)
    # monitored_barrier is send/recv only where the backend records none of them and counts
    # op_ids (gloo): there its sequence gaps are no unrecorded work.
    members = tables.members()
    unseen_p2p = _groups_without_p2p_records(members, dialects)
    barrier_gaps = monitored_barrier_gaps(entries, members, unseen_p2p) if unseen_p2p else {}
    if barrier_gaps:
        progress = _discount_monitored_barriers(progress, entries, members, barrier_gaps)
    p2p = _p2p(tables, dialects)
    return Matching(
        progress=progress,
        collectives=_collectives(coll, progress, tables),
        mismatches=_mismatches(coll),
        p2p=p2p,
        p2p_mismatches=p2p_mismatches(p2p),
        dialects=dialects,
        stale_completers=({} if dialects.completion_unobserved
                          else stale_completers(progress, dialects.observed_ranks)),
        barrier_gaps=barrier_gaps,
    )


def _groups_without_p2p_records(members: Mapping[str, tuple[int, ...]],
                                 dialects: Dialects) -> list[str]:
    """Groups every dumped member of which reads as a dialect that records no send/recv and
    counts ``pg_status`` in op_ids (:attr:`Dialects.p2p_unrecorded_ranks`)."""
    unseen = dialects.p2p_unrecorded_ranks
    out = []
    for name, ranks in members.items():
        read = [int(r) for r in ranks if (d := dialects.of(int(r))) is not None and d.backend]
        if read and all(r in unseen for r in read):
            out.append(str(name))
    return out


def _discount_monitored_barriers(progress: pd.DataFrame, entries: pd.DataFrame,
                                 members: dict[str, tuple[int, ...]],
                                 gaps: dict[str, list[int]]) -> pd.DataFrame:
    """gloo's monitored_barrier runs 2 x (members - 1) unrecorded send/recv on the group's
    first member and two on each other member, so the first member's ``op_id`` drifts ahead
    of its ``collective_seq_id`` by 2 x (members - 2) per barrier more than the others' do.
    Where a group shows monitored barrier gaps, the first member's op progress is counted in
    the others' units: less that extra drift (read from its newest entry against the others'
    newest), when it is a positive multiple of 2 x (members - 2). Those ops are no
    unrecorded work, whoever of the group stalled later."""
    out = progress.copy()
    names = out["pg_name"].astype(str)
    coll = entries.loc[~entries["is_p2p"], ["pg_name", "rank", "seq", "op_id", "record_id"]]
    newest = coll.loc[coll.groupby(["pg_name", "rank"], observed=True)["record_id"].idxmax()]
    drift = pd.Series((newest["op_id"] - newest["seq"]).to_numpy(),
                      index=pd.MultiIndex.from_arrays([newest["pg_name"].astype(str),
                                                       newest["rank"].astype(int)]))
    for name in gaps:
        ranks = members.get(name, ())
        n = len(ranks)
        if n < 3 or (name, int(ranks[0])) not in drift.index:
            continue
        first = int(ranks[0])
        others = [int(drift[(name, int(r))]) for r in ranks[1:] if (name, int(r)) in drift.index]
        at = out.index[(names == name) & (out["rank"] == first) & (out["op_progress"] >= 0)]
        if not others or not len(at):
            continue
        extra = int(drift[(name, first)]) - max(others)
        if extra > 0 and extra % (2 * (n - 2)) == 0:
            out.loc[at, "op_progress"] = out.loc[at, "op_progress"] - extra
    return out
