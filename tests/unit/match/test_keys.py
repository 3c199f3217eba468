"""The code-level functions of the matching agree with the pandas definitions they replace:
category tests and text by codes, the entry keys, per-rank reductions, and the waits'
pending collectives, also on entries in shuffled order."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.kernels.category_codes import category_at, from_codes, in_labels, text_at
from analyzer.kernels.group_by import as_int64, reduce_max
from analyzer.load.loader import load_dumps
from analyzer.match.dialect_evidence import _counter_votes, _ranks_where
from analyzer.match.keys import entry_keys
from analyzer.match.matching import Matching, match
from analyzer.normalize.tables import Tables, normalize
from analyzer.waits.pending import pending_first

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"


def _categorical(values: list[str | None], n: int, seed: int) -> pd.Series:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), n)
    return pd.Series(pd.Categorical([values[i] for i in picks]))


@pytest.mark.parametrize("labels", [["b"], ["a", "c", "x"], ["a", "b", "c", "d", "e", "f"]])
def test_in_labels_and_text_at_are_isin_and_astype(labels: list[str]) -> None:
    s = _categorical(["a", "b", None, "c", "d", "e", "f", "g"], 500, seed=len(labels))
    rows = np.arange(0, 500, 3)
    assert (in_labels(s, labels) == s.isin(labels).to_numpy()).all()
    assert (in_labels(s, labels, rows) == s.isin(labels).to_numpy()[rows]).all()
    got = text_at(s, rows)
    pd.testing.assert_series_equal(
        got, s.iloc[rows].astype(str).reset_index(drop=True), check_names=False
    )
    full = _categorical(["a", "b", "c"], 100, seed=7)
    pd.testing.assert_series_equal(
        text_at(full, np.arange(100)), full.astype(str), check_names=False
    )


def test_category_at_is_the_text_with_the_used_categories_in_lexical_order() -> None:
    s = _categorical(["b", "a", None, "c", "d"], 500, seed=5)
    rows = np.arange(0, 500, 7)
    got = category_at(s, rows)
    want = text_at(s, rows)  # a missing value stays missing
    assert want.isna().any() and str(got.dtype) == "category"
    pd.testing.assert_series_equal(got.astype(str), want, check_names=False)
    assert list(got.cat.categories) == sorted(set(want.dropna()))  # only those used, sorted
    full = _categorical(["z", "y", "x"], 50, seed=2)
    got = category_at(full, np.arange(50))
    assert got.astype(str).tolist() == full.astype(str).tolist()
    assert list(got.cat.categories) == sorted(set(full.astype(str)))


def test_from_codes_merges_a_text_given_twice_and_drops_unused_ones() -> None:
    cats = pd.Index(["q", "p", "unused", "p"], dtype="str")
    got = from_codes(np.array([3, 0, 1, -1, 3]), cats, pd.RangeIndex(5))
    assert got.iloc[[0, 1, 2, 4]].astype(str).tolist() == ["p", "q", "p", "p"] and got.isna()[3]
    assert list(got.cat.categories) == ["p", "q"]


def _entries(n: int, seed: int, seq_scale: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "pg_name": _categorical(["0", "1", "2", None], n, seed),
            "rank": rng.integers(0, 6, n).astype(np.int32),
            "seq": rng.integers(0, 20, n).astype(np.int64) * seq_scale,
            "record_id": rng.integers(0, 50, n).astype(np.int64),
            "op_id": rng.integers(0, 90, n).astype(np.int64),
            "is_p2p": rng.random(n) < 0.3,
        }
    )


@pytest.mark.parametrize("seq_scale", [1, 10**12])  # dense seqs, and spans too wide to count
def test_entry_keys_match_the_group_by_definitions(seq_scale: int) -> None:
    e = _entries(3000, seed=seq_scale % 97, seq_scale=seq_scale)
    k = entry_keys(e)
    name = e["pg_name"].astype(object).where(e["pg_name"].notna(), "<none>")
    coll = e[~e["is_p2p"]]
    assert (k.coll == np.flatnonzero(~e["is_p2p"].to_numpy())).all()
    # keep: the first row of each (group, rank, seq) among the collectives.
    first = ~pd.DataFrame({"g": name[coll.index], "r": coll["rank"], "s": coll["seq"]}).duplicated()
    assert (k.keep == first.to_numpy()).all()
    # Per member: its newest entry (first row of the highest record id) and seq window.
    frame = pd.DataFrame(
        {"g": name, "r": e["rank"], "rec": e["record_id"], "seq": e["seq"], "op": e["op_id"]}
    )
    newest = frame.groupby(["g", "r"])["rec"].idxmax()
    tops = frame.groupby(["g", "r"])[["seq", "op"]].max()
    major = np.asarray(k.member.major)
    labels = [str(c) for c in e["pg_name"].cat.categories] + ["<none>"]
    for pair in range(k.member.n):
        key = (labels[int(major[pair])], int(k.member.minor[pair]))
        assert k.last_row[pair] == newest[key]
        assert (k.seq_hi[pair], k.op_hi[pair]) == tuple(tops.loc[key])
        seqs = coll["seq"][(name[coll.index] == key[0]) & (coll["rank"] == key[1])]
        assert (k.coll_lo[pair], k.coll_hi[pair]) == (
            (seqs.min(), seqs.max()) if len(seqs) else (-1, -1)
        )
    # Groups with a send/recv entry (a missing name: a code of its own, after the named).
    assert k.p2p_codes.tolist() == sorted({labels.index(g) for g in name[e["is_p2p"]]})


def test_ranks_where_in_rank_blocks_and_in_any_order() -> None:
    rng = np.random.default_rng(3)
    rank = np.sort(rng.integers(0, 40, 2000)).astype(np.int32)
    mask = rng.random(2000) < 0.01
    naive = sorted(set(rank[mask].tolist()))
    assert _ranks_where(rank, mask) == naive
    perm = rng.permutation(2000)
    assert _ranks_where(rank[perm], mask[perm]) == naive


def test_as_int64_undoes_the_pickled_dtype() -> None:
    back = pickle.loads(pickle.dumps(np.arange(10, dtype=np.int64)))
    assert as_int64(back).dtype is np.dtype(np.int64)
    assert (reduce_max(np.zeros(10, dtype=np.int64), 1, back) == 9).all()


def _tables(sample: str, shuffle: bool) -> Tables:
    t = normalize(load_dumps([SAMPLES / sample], jobs=1))
    if shuffle:
        perm = np.random.default_rng(0).permutation(len(t.entries))
        t = dataclasses.replace(t, entries=t.entries.iloc[perm].reset_index(drop=True))
    return t


def _naive_pending(t: Tables, m: Matching) -> pd.DataFrame:
    e = t.entries
    coll = e[~e["is_p2p"]]
    if m.dialects.completion_unobserved:
        last = e.loc[e.groupby("rank")["record_id"].idxmax()]
        last = last[~last["is_p2p"]]
        # A newest entry retired when its work ended, that another member went past, is done.
        ends = m.dialects.retire_on_end_ranks | m.dialects.retired_done_ranks
        p = m.progress[m.progress["enqueued"] >= 0]
        frontier = p.groupby("pg_name", observed=True)["enqueued"].max()
        passed = [
            bool(x.retired) and int(x.rank) in ends and frontier.get(str(x.pg_name), -1) > x.seq
            for x in last.itertuples()
        ]
        pend = pd.concat([last[~np.array(passed, dtype=bool)], coll[~coll["retired"]]])
    else:
        pend = coll[coll["state"] != "completed"]
    out = pend.groupby(["pg_name", "rank"], observed=True)["seq"].min().reset_index()
    out["pg_name"] = out["pg_name"].astype(str)
    return out


@pytest.mark.parametrize("sample", ["chain_tp_dp_w8", "nccl2_pp4_stall_w4_states", "crash_w4"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_pending_and_counter_votes_match_the_group_by_definitions(
    sample: str, shuffle: bool
) -> None:
    if not (SAMPLES / sample).is_dir():
        pytest.skip(f"{sample} not present")
    t = _tables(sample, shuffle)
    m = match(t)
    got = pending_first(t, m)
    want = _naive_pending(t, m)
    if want.empty:
        assert got.empty
    else:
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
    # Counter votes against a merge of each member's newest entry with its pg_status row.
    e, st = (
        t.entries,
        t.status[t.status["pg_name"] != ""].drop_duplicates(["pg_name", "rank"], keep="last"),
    )
    last = e.loc[e.groupby(["rank", "pg_name"], observed=True)["record_id"].idxmax()]
    merged = last.assign(pg_name=last["pg_name"].astype(str)).merge(
        st[["rank", "pg_name", "last_enqueued"]], on=["rank", "pg_name"]
    )
    seq = np.where(merged["is_p2p"], merged["p2p_seq"], merged["seq"])
    c, op_id = merged["last_enqueued"].to_numpy(), merged["op_id"].to_numpy()
    votes = (
        pd.DataFrame(
            {
                "rank": merged["rank"],
                "op": (c == op_id) & (c != seq),
                "seq": (c == seq) & (c != op_id),
            }
        )
        .groupby("rank")
        .sum()
    )
    want_votes = {
        int(r): "op_id" if o else "seq"
        for r, o, s in zip(votes.index, votes["op"], votes["seq"])
        if bool(o) != bool(s)
    }
    assert _counter_votes(t, entry_keys(e)) == want_votes


def test_per_collective_figures_do_not_depend_on_the_chunk_size() -> None:
    """The collectives' times and counts are read a chunk of rows at a time: chunks of 5 rows
    give what one chunk gives, and what the group-by definitions give."""
    from analyzer.match.matching import _per_collective

    t = _tables("chain_tp_dp_w8", shuffle=False)
    e = t.entries
    k = entry_keys(e)
    whole = _per_collective(e, k.coll, k.cid, k.n_cid)
    for a, b in zip(whole, _per_collective(e, k.coll, k.cid, k.n_cid, chunk=5), strict=True):
        assert (a == b).all()
    coll = e.iloc[k.coll].assign(cid=k.cid)
    by = coll.groupby("cid")
    state = coll["state"].astype(str)
    want = (
        by["time_created_ns"].min(),
        by["time_created_ns"].max(),
        by["time_started_ns"].max(),
        (state == "completed").groupby(coll["cid"]).sum(),
        state.isin(["completed", "started"]).groupby(coll["cid"]).sum(),
    )
    for got, expected in zip(whole, want, strict=True):
        assert got.tolist() == expected.reindex(range(k.n_cid)).tolist()


def _scan_reference(dumps, starts, data):  # type: ignore[no-untyped-def]
    """tableparts.scan as it was written per dump (a few numpy calls per dump)."""
    from collections import defaultdict

    pg_names, pg_descs, backends = data["pg_name"], data["pg_desc"], data["backend"]
    names_of, descs_of, backend_of = (
        list(pg_names.categories),
        list(pg_descs.categories),
        list(backends.categories),
    )
    seen_members, seen_desc, known_by_dump, per_rank = defaultdict(set), {}, [], []
    for d, offset in zip(dumps, starts.tolist(), strict=True):
        known: dict[int, str] = {}
        known_by_dump.append(known)
        if not d.n_entries:
            per_rank.append(("", -1, -1, 0))
            continue
        rows = slice(offset, offset + d.n_entries)
        names = pg_names.codes[rows]
        present, first = np.unique(names, return_index=True)
        for code, desc_code in zip(
            present.tolist(), pg_descs.codes[offset + first].tolist(), strict=True
        ):
            seen_members[names_of[code]].add(d.rank)
            seen_desc.setdefault(names_of[code], descs_of[desc_code])
        pids = data["pg_id"][rows].astype(np.int64)
        order = np.lexsort((names, pids))
        lead = np.flatnonzero(np.diff(pids[order], prepend=pids[order[0]] - 1) != 0)
        for pid, code in zip(pids[order[lead]].tolist(), names[order[lead]].tolist(), strict=True):
            known[int(pid)] = names_of[code]
        tally = np.bincount(backends.codes[rows])
        top = int(np.flatnonzero(tally == tally.max())[0])
        record = data["record_id"][rows]
        per_rank.append(
            (
                str(backend_of[top]),
                int(record.min()),
                int(record.max()),
                int(data["time_created_ns"][rows].max()),
            )
        )
    return dict(seen_members), seen_desc, known_by_dump, per_rank


@pytest.mark.parametrize("seed,block", [(0, 256), (1, 4), (2, 1)])
def test_scan_by_blocks_is_the_per_dump_scan(
    seed: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass over the dumps' rows, done a block of dumps at a time, against its per-dump
    definition: random names, descriptions, pg_ids (several per name, names per pg_id),
    backends with ties, record ids and times, dumps without entries among them (a block of
    only such dumps too)."""
    from types import SimpleNamespace

    import analyzer.normalize.peers
    import analyzer.normalize.scan
    from analyzer.normalize.scan import scan

    monkeypatch.setattr(analyzer.normalize.scan, "SCAN_BLOCK", block)

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 40, 30)
    sizes[[0, 7, 12, 13, 14, 15]] = 0
    dumps = [
        SimpleNamespace(rank=int(r), n_entries=int(k))
        for r, k in zip(rng.permutation(30), sizes, strict=True)
    ]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    n = int(sizes.sum())

    def cat(words: list[str]) -> pd.Categorical:
        return pd.Categorical.from_codes(rng.integers(0, len(words), n), categories=words)

    data = {
        "pg_name": cat(["0", "1", "7", "tp", "dp"]),
        "pg_desc": cat(["default", "a", "b"]),
        "backend": cat(["nccl", "gloo", "nccl2"]),
        "pg_id": rng.integers(-1, 4, n).astype(np.int32),
        "record_id": rng.integers(-5, 1000, n),
        "time_created_ns": rng.integers(0, 10**15, n),
    }
    got = scan(dumps, starts, data)  # type: ignore[arg-type]
    want = _scan_reference(dumps, starts, data)
    assert dict(got[0]) == want[0] and got[1] == want[1] and got[2] == want[2] and got[3] == want[3]
    assert list(got[1]) == list(want[1])  # first descriptions in the same order


def test_peers_over_all_rows_map_group_local_ranks_through_the_member_lists() -> None:
    from analyzer.normalize.peers import peers

    rng = np.random.default_rng(4)
    n = 5000
    names = pd.Categorical.from_codes(rng.integers(-1, 4, n), categories=["0", "tp", "pp", "none"])
    members = {"0": (0, 1, 2, 3, 4, 5, 6, 7), "tp": (4, 5), "pp": (1, 5, 3)}  # "none": no list
    local = rng.integers(-2, 9, n)
    got = peers(local, names, members)
    for i in range(n):
        code, at = int(names.codes[i]), int(local[i])
        group = members.get(str(names.categories[code]), ()) if code >= 0 else ()
        assert got[i] == (group[at] if 0 <= at < len(group) else -1), i


def test_peers_in_chunks_are_the_peers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import analyzer.normalize.peers
    import analyzer.normalize.scan
    from analyzer.normalize.peers import peers

    rng = np.random.default_rng(6)
    names = pd.Categorical.from_codes(rng.integers(-1, 3, 1000), categories=["0", "tp", "pp"])
    members = {"0": tuple(range(16)), "tp": (3, 9), "pp": (1, 5, 3)}
    local = rng.integers(-1, 17, 1000).astype(np.int32)
    whole = peers(local, names, members)
    monkeypatch.setattr(analyzer.normalize.peers, "_PEER_CHUNK", 7)
    np.testing.assert_array_equal(peers(local, names, members), whole)
