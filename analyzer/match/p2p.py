"""Send/recv matching: each recorded send/recv with its global peer, paired per stream.

Entries stay categorical codes until the result is built: which rows are send/recv, which
completed, what each moves (a recv of a one-sided dialect moves its outputs), so no string is
compared or built per row except the result's own columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.kernels import category_at, code_of, from_codes
from analyzer.kinds import MatchState, PeerState
from analyzer.match.dialect import Dialects
from analyzer.normalize import Tables

__all__ = ["P2P_COLUMNS", "P2P_MISMATCH_COLUMNS", "match_p2p", "p2p_mismatches"]

#: Columns of the p2p table, in order.
P2P_COLUMNS = [
    "rank",
    "pg_name",
    "pg_desc",
    "op",
    "peer",
    "p2p_seq",
    "seq",
    "record_id",
    "state",
    "time_created_ns",
    "input_sizes",
    "input_dtypes",
    "peer_state",
    "pair_size",
    "pair_dtype",
    "pair_seq",
]

P2P_MISMATCH_COLUMNS = [
    "kind",
    "pg_name",
    "pg_desc",
    "sender",
    "receiver",
    "send_seq",
    "recv_seq",
    "send_value",
    "recv_value",
    "usual_send",
    "usual_recv",
    "culprits",
]

_BASE = P2P_COLUMNS[:12]


def _payload(
    e: pd.DataFrame, side: str, rows: np.ndarray, use_out: np.ndarray, index: pd.Index
) -> pd.Series:
    """What each send/recv moves, as text categories: the ``input_`` column, or the
    ``output_`` one where ``use_out`` (a recv of a one-sided dialect)."""
    inp, out = e[f"input_{side}"], e[f"output_{side}"]
    i_codes, o_codes = inp.cat.codes.to_numpy()[rows], out.cat.codes.to_numpy()[rows]
    if (i_codes < 0).any() or (o_codes < 0).any():
        values = np.where(
            use_out,
            out.iloc[rows].astype(str).to_numpy(dtype=object),
            inp.iloc[rows].astype(str).to_numpy(dtype=object),
        )
        codes, words = pd.factorize(values)
        return from_codes(codes, pd.Index(words, dtype="str"), index)
    both = inp.cat.categories.append(out.cat.categories)
    codes = np.where(use_out, o_codes.astype(np.int64) + len(inp.cat.categories), i_codes)
    return from_codes(codes, pd.Index(both, dtype="str"), index)


def match_p2p(tables: Tables, dialects: Dialects) -> pd.DataFrame:
    """Each recorded send/recv with its global peer, and whether the peer posted its side.

    ``peer_state`` is one of (:class:`~analyzer.kinds.PeerState`):

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
    op_codes = e["op"].cat.codes.to_numpy()
    send, recv = code_of(e["op"], "send"), code_of(e["op"], "recv")
    all_peers = e["peer"].to_numpy()
    any_rows, senders = _any_source(e, op_codes, send, recv, dialects)
    if len(any_rows):  # a recv from any source takes the sender of the send it pairs with
        all_peers = all_peers.copy()
        all_peers[any_rows] = senders
    mask = e["is_p2p"].to_numpy(bool) & ((op_codes == send) | (op_codes == recv)) & (all_peers >= 0)
    rows = np.flatnonzero(mask)
    del mask
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in P2P_COLUMNS})
    index = pd.RangeIndex(len(rows))
    rank = e["rank"].to_numpy()[rows]
    peer = all_peers[rows]
    del all_peers
    is_send = op_codes[rows] == send
    one_sided = np.isin(rank, np.array(sorted(dialects.one_sided_ranks), dtype=np.int64))
    use_out = ~is_send & one_sided
    p = pd.DataFrame(
        copy=False,
        index=index,
        data={
            "rank": rank,
            "pg_name": category_at(e["pg_name"], rows, index),
            "pg_desc": category_at(e["pg_desc"], rows, index),
            "op": category_at(e["op"], rows, index),
            "peer": peer,
            **{c: e[c].to_numpy()[rows] for c in ("p2p_seq", "seq", "record_id")},
            "state": category_at(e["state"], rows, index),
            "time_created_ns": e["time_created_ns"].to_numpy()[rows],
            "input_sizes": _payload(e, "sizes", rows, use_out, index),
            "input_dtypes": _payload(e, "dtypes", rows, use_out, index),
        },
    )
    done = _finished(e, rows, rank, dialects)
    peer_dumped = np.isin(peer, np.array(tables.dumped_ranks, dtype=np.int64))
    # peer_state as codes into _PEER_STATES, the pair columns as codes into their values.
    state = np.where(done, 0, np.where(peer_dumped, 1, 2)).astype(np.int8)
    pair = np.zeros(len(rows), dtype=np.int64)  # code 0: "" (no pair)
    pair_dtype = np.zeros(len(rows), dtype=np.int64)
    pair_seq = np.full(len(rows), -1, dtype=np.int64)
    vocab: list[str] = [""]
    live = np.flatnonzero(~done & peer_dumped)
    if len(live):
        _pair_streams(p, live, is_send, state, (pair, pair_dtype, pair_seq), vocab)
    # A row's worth of arrays each: let go before the columns below are built.
    del live, done, peer_dumped, is_send, one_sided, use_out, rows, rank, peer
    words = pd.Index(vocab, dtype="str")
    p["peer_state"] = from_codes(state, _PEER_STATES, index)
    p["pair_size"] = from_codes(pair, words, index)
    p["pair_dtype"] = from_codes(pair_dtype, words, index)
    p["pair_seq"] = pair_seq
    del state, pair, pair_dtype, pair_seq
    keys = (p["rank"].to_numpy(), p["record_id"].to_numpy(np.int64))
    if len(p) > 1 and not _sorted_pairs(*keys):
        p = p.sort_values(["rank", "record_id"])
    return p.reset_index(drop=True)


def _any_source(
    e: pd.DataFrame, op_codes: np.ndarray, send: int, recv: int, dialects: Dialects
) -> tuple[np.ndarray, np.ndarray]:
    """The receives from any source still in flight (``recv 2<-?``: no peer written) that a
    send still in flight targets, and the sender of each: per (group, receiver), the k-th
    such receive (in the receiver's order) takes the k-th such send (in enqueue order) among
    the streams the receiver posts no receive from a named source on. A receive from any
    source that no send targets keeps no peer: it waits on nobody the dumps name."""
    none = np.zeros(0, dtype=np.int64)
    p2p = e["is_p2p"].to_numpy(bool)
    peer, rank = e["peer"].to_numpy(), e["rank"].to_numpy()
    anys = np.flatnonzero(p2p & (op_codes == recv) & (peer < 0))
    if not len(anys):
        return none, none
    anys = anys[~_finished(e, anys, rank[anys], dialects)]
    sends = np.flatnonzero(p2p & (op_codes == send) & (peer >= 0))
    sends = sends[~_finished(e, sends, rank[sends], dialects)]
    named = np.flatnonzero(p2p & (op_codes == recv) & (peer >= 0))
    named = named[~_finished(e, named, rank[named], dialects)]
    group = e["pg_name"].to_numpy()
    posted = {(group[i], int(peer[i]), int(rank[i])) for i in named}
    times = e["time_created_ns"].to_numpy()
    waiting: dict[tuple[object, int], list[int]] = {}
    for i in sorted(sends.tolist(), key=lambda i: (times[i], rank[i])):
        if (group[i], int(rank[i]), int(peer[i])) not in posted:
            waiting.setdefault((group[i], int(peer[i])), []).append(i)
    rows: list[int] = []
    senders: list[int] = []
    taken: dict[tuple[object, int], int] = {}
    for i in sorted(anys.tolist(), key=lambda i: (rank[i], e["record_id"].iat[i])):
        key = (group[i], int(rank[i]))
        k = taken.get(key, 0)
        if k < len(waiting.get(key, ())):
            rows.append(i)
            senders.append(int(rank[waiting[key][k]]))
            taken[key] = k + 1
    return np.asarray(rows, dtype=np.int64), np.asarray(senders, dtype=np.int64)


def _finished(
    e: pd.DataFrame, rows: np.ndarray, rank: np.ndarray, dialects: Dialects
) -> np.ndarray:
    """Which of the send/recv ``rows`` finished: ``completed``, or retired where retiring
    means the call returned (TorchComms on CPU)."""
    done = e["state"].cat.codes.to_numpy()[rows] == code_of(e["state"], "completed")
    returned = dialects.retired_done_ranks
    if returned:
        done |= e["retired"].to_numpy(bool)[rows] & np.isin(
            rank, np.array(sorted(returned), dtype=np.int64)
        )
    return done


#: Values of ``peer_state`` by code (1: not decided yet, set by the pairing).
_PEER_STATES = pd.Index(
    [PeerState.PAIRED.value, "", PeerState.NO_DUMP.value, PeerState.NOT_POSTED.value], dtype="str"
)


def _sorted_pairs(a: np.ndarray, b: np.ndarray) -> bool:
    """Are the rows in non-decreasing (a, b) order already?"""
    da, db = np.diff(a), np.diff(b)
    return bool(((da > 0) | ((da == 0) & (db >= 0))).all())


def _pair_streams(
    p: pd.DataFrame,
    live_pos: np.ndarray,
    is_send: np.ndarray,
    state: np.ndarray,
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
    vocab: list[str],
) -> None:
    """Pair the send/recv still in flight first-in first-out per stream (group, sender,
    receiver): sets their ``state`` code (paired or not posted) and, for the paired ones,
    the other side's size and dtype (codes into ``vocab``, extended) and p2p seq in ``out``."""
    rank, peer = p["rank"].to_numpy()[live_pos], p["peer"].to_numpy()[live_pos]
    live = (
        p.iloc[live_pos]
        .assign(
            src=np.where(is_send[live_pos], rank, peer),
            dst=np.where(is_send[live_pos], peer, rank),
            pos=live_pos,
        )
        .sort_values("record_id", kind="stable")
    )
    stream = ["pg_name", "src", "dst", "op"]
    live = live.assign(k=live.groupby(stream).cumcount())
    counts = live.groupby(stream).size().to_dict()
    other = np.where(live["op"] == "send", "recv", "send")
    other_n = np.array(
        [
            counts.get((g, s, d, o), 0)
            for g, s, d, o in zip(live["pg_name"], live["src"], live["dst"], other, strict=True)
        ],
        dtype=np.int64,
    )
    paired = live["k"].to_numpy() < other_n
    state[live["pos"].to_numpy()] = np.where(paired, 0, 3)
    sides = {
        (g, s, d, o, k): (size, dtype, seq)
        for g, s, d, o, k, size, dtype, seq in live[paired][
            ["pg_name", "src", "dst", "op", "k", "input_sizes", "input_dtypes", "p2p_seq"]
        ].itertuples(index=False)
    }
    other_side = [
        sides.get((g, s, d, "recv" if o == "send" else "send", k), ("", "", -1))
        for g, s, d, o, k in live[paired][["pg_name", "src", "dst", "op", "k"]].itertuples(
            index=False
        )
    ]
    at = live["pos"].to_numpy()[paired]
    codes: dict[str, int] = {"": 0}
    for target, values in (
        (out[0], [size for size, _, _ in other_side]),
        (out[1], [dtype for _, dtype, _ in other_side]),
    ):
        target[at] = [codes.setdefault(str(v), len(codes)) for v in values]
    out[2][at] = [int(seq) for _, _, seq in other_side]
    vocab[:] = list(codes)


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
    sends = p2p[
        (p2p["op"] == "send")
        & (p2p["peer_state"] == PeerState.PAIRED.value)
        & (p2p["pair_seq"] >= 0)
    ]
    rows = []
    for kind, own, other in (
        (MatchState.SIZE_MISMATCH, "input_sizes", "pair_size"),
        (MatchState.DTYPE_MISMATCH, "input_dtypes", "pair_dtype"),
    ):
        bad = sends[sends[own].astype(str) != sends[other].astype(str)]
        if bad.empty:
            continue
        usual = (
            p2p.groupby(["pg_name", "rank", "peer", "op", own], observed=True)
            .size()
            .reset_index(name="n")
            .sort_values(["n", own], ascending=[False, True])
            .drop_duplicates(["pg_name", "rank", "peer", "op"])
            .set_index(["pg_name", "rank", "peer", "op"])[own]
        )
        # The first disagreeing pair of each stream: later ones queue behind it.
        bad = bad.sort_values("record_id").drop_duplicates(["pg_name", "rank", "peer"])
        for g, d, snd, rcv, sseq, rseq, sval, rval in bad[
            ["pg_name", "pg_desc", "rank", "peer", "p2p_seq", "pair_seq", own, other]
        ].itertuples(index=False):
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
            rows.append(
                (
                    kind.value,
                    str(g),
                    str(d),
                    int(snd),
                    int(rcv),
                    int(sseq),
                    int(rseq),
                    str(sval),
                    str(rval),
                    u_send,
                    u_recv,
                    culprits,
                )
            )
    return pd.DataFrame(rows, columns=P2P_MISMATCH_COLUMNS) if rows else empty
