"""What each rank's own content says about its dialect (for :func:`analyzer.match.dialect.read_dialects`):
its states, the shape of its send/recv entries, the buffers it holds, what its pg_status
counters count, and the groups no loaded dump recorded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzer.kernels import code_of, codes_at, in_labels
from analyzer.match.dialect_defaults import Dialect, default_for
from analyzer.match.keys import EntryKeys, entry_keys
from analyzer.normalize import Tables, unseen_group_names

__all__ = ["buffer_facts", "group_backends", "rank_backends", "rank_facts", "unrecorded_groups"]

_EMPTY = ("[]", "", "None")


def _ranks_where(rank: np.ndarray, mask: np.ndarray) -> list[int]:
    """The ranks of the rows in ``mask``, without sorting every row (a bincount; where the
    rows come rank after rank, as normalize writes them, one reduction per rank block)."""
    if len(rank) > 1 and bool((rank[1:] >= rank[:-1]).all()):
        starts = np.flatnonzero(rank[1:] != rank[:-1]) + 1
        starts = np.concatenate([[0], starts])
        return rank[starts[np.logical_or.reduceat(mask, starts)]].astype(np.int64).tolist()
    rk = rank[mask]
    if not len(rk):
        return []
    return np.flatnonzero(np.bincount(rk.astype(np.int64))).tolist()


def _single_backend(e: pd.DataFrame) -> str | None:
    """The one backend every row carries, or None (several, or a row without one)."""
    backend = e["backend"]
    if len(backend.cat.categories) != 1 or not len(e):
        return None
    return str(backend.cat.categories[0]) if int(backend.cat.codes.min()) >= 0 else None


def _backend_pairs(
    e: pd.DataFrame,
    k_codes: np.ndarray,
    present: np.ndarray | None = None,
) -> list[tuple[int, str]]:
    """(key code, backend) of every pair the rows carry: one bincount over (key, backend)
    codes, no sort of the rows. ``present``: the distinct key codes (>= 0) of the rows, when
    known; with a single backend they are the answer."""
    single = _single_backend(e) if present is not None else None
    if single is not None and present is not None:
        return [(int(k), single) for k in present.tolist()]
    backend = e["backend"]
    b_codes = backend.cat.codes.to_numpy().astype(np.int64)
    nb = max(1, len(backend.cat.categories))
    ok = (b_codes >= 0) & (k_codes >= 0)
    hits = np.flatnonzero(np.bincount(k_codes[ok] * nb + b_codes[ok]))
    cats = [str(c) for c in backend.cat.categories]
    out = []
    for h in hits.tolist():
        k, b = divmod(h, nb)
        out.append((int(k), cats[b]))
    return out


def rank_backends(e: pd.DataFrame, keys: EntryKeys | None = None) -> dict[int, set[str]]:
    """For each rank: the backends its rows carry (its loaded buffers)."""
    present = None
    if keys is not None:
        ranks = np.unique(keys.member.minor)
        present = ranks[ranks >= 0]
    out: dict[int, set[str]] = {}
    for k, b in _backend_pairs(e, e["rank"].to_numpy().astype(np.int64), present):
        out.setdefault(k, set()).add(b)
    return out


def group_backends(e: pd.DataFrame, keys: EntryKeys | None = None) -> dict[str, set[str]]:
    """For each group (the categorical ``pg_name``): the backends its rows carry."""
    labels = [str(c) for c in e["pg_name"].cat.categories]
    present = None
    if keys is not None:
        codes = np.unique(keys.member.major)
        present = codes[codes < keys.named]
    out: dict[str, set[str]] = {}
    for k, b in _backend_pairs(e, e["pg_name"].cat.codes.to_numpy().astype(np.int64), present):
        out.setdefault(labels[k], set()).add(b)
    return out


def _p2p_shapes(e: pd.DataFrame, facts: dict[int, dict[str, Any]]) -> None:
    """Which ranks' send/recv entries are one-sided (a send with only inputs, a recv with
    only outputs) and which carry both sides."""
    rows = np.flatnonzero(e["is_p2p"].to_numpy(bool))
    if not len(rows):
        return
    op = codes_at(e["op"], rows)
    send = op == code_of(e["op"], "send")
    recv = op == code_of(e["op"], "recv")
    inp_empty = in_labels(e["input_sizes"], _EMPTY, rows)
    out_empty = in_labels(e["output_sizes"], _EMPTY, rows)
    one = (send & ~inp_empty & out_empty) | (recv & inp_empty & ~out_empty)
    two = ~inp_empty & ~out_empty
    rk = e["rank"].to_numpy()[rows]
    for r in _ranks_where(rk, one):
        facts.setdefault(int(r), {})["one_sided"] = True
    for r in _ranks_where(rk, two):
        facts.setdefault(int(r), {})["two_sided"] = True


def rank_facts(
    tables: Tables,
    ranks: list[int],
    keys: EntryKeys | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[int, set[str]] | None]:
    """Per rank: whether entries completed (``completed``), are still open (``open``), are
    one- or two-sided send/recv, which buffers it holds (``buffers``) and what its pg_status
    counters count (``counter``); and the backends of each rank (None without entries).
    ``keys`` are the entries' integer keys when the caller has them."""
    e = tables.entries
    facts: dict[int, dict[str, Any]] = {r: {} for r in ranks}
    if not len(e):
        return facts, None
    keys = keys if keys is not None else entry_keys(e)
    rank = e["rank"].to_numpy()
    for r in _ranks_where(rank, in_labels(e["state"], ["completed", "started"])):
        facts.setdefault(int(r), {})["completed"] = True
    for r in _ranks_where(rank, ~e["retired"].to_numpy(bool)):
        facts.setdefault(int(r), {})["open"] = True
    _p2p_shapes(e, facts)
    held = rank_backends(e, keys)
    for r, bs in held.items():
        facts.setdefault(int(r), {})["buffers"] = set(bs)
    for r, vote in _counter_votes(tables, keys).items():
        facts.setdefault(r, {})["counter"] = vote
    return facts, held


def buffer_facts(
    tables: Tables, held: dict[int, set[str]] | None
) -> dict[tuple[int, str], dict[str, Any]]:
    """For each rank with several buffers (one per backend): per buffer, whether its entries
    completed (``completed``) and whether some are still open (``open``). A rank's gloo
    buffer and its recorder hook's each keep their own meaning."""
    multi = sorted(r for r, bs in (held or {}).items() if len(bs) > 1)
    if not multi:
        return {}
    e = tables.entries
    sub = e[e["rank"].isin(multi)]
    done = in_labels(sub["state"], ["completed", "started"])
    still = ~sub["retired"].to_numpy(bool)
    out: dict[tuple[int, str], dict[str, Any]] = {}
    groups: dict[Any, Any] = sub.groupby(["rank", "backend"], observed=True).indices
    for key, rows in groups.items():
        r, b = key
        out[(int(r), str(b))] = {
            "completed": bool(done[rows].any()),
            "open": bool(still[rows].any()),
        }
    return out


def _counter_votes(tables: Tables, k: EntryKeys) -> dict[int, str]:
    """Per rank, what its pg_status counters count, where its entries tell: ``op_id`` when
    every telling group's counter equals its last entry's op_id, ``seq`` when it equals its
    sequence number (p2p sequence number after a send/recv); nothing when they agree.

    Each (group, rank)'s last entry is its newest (:attr:`EntryKeys.last_row`), read only
    for the members a pg_status counter names."""
    e = tables.entries
    st = tables.status[tables.status["pg_name"] != ""]
    if e.empty or st.empty:
        return {}
    st = st.drop_duplicates(["pg_name", "rank"], keep="last")
    code = e["pg_name"].cat.categories.get_indexer(
        pd.Index(st["pg_name"].to_numpy(dtype=object), dtype=object)
    )
    s_rank = st["rank"].to_numpy(np.int64)
    pair = np.where(code >= 0, k.member.find(np.maximum(code, 0), s_rank), -1)
    found = pair >= 0
    if not found.any():
        return {}
    rows = k.last_row[pair[found]]
    is_p2p = e["is_p2p"].to_numpy(bool)[rows]
    seq_val = np.where(is_p2p, e["p2p_seq"].to_numpy()[rows], e["seq"].to_numpy()[rows])
    op_id = e["op_id"].to_numpy()[rows]
    c = st["last_enqueued"].to_numpy()[found]
    is_op = (c == op_id) & (c != seq_val)
    is_seq = (c == seq_val) & (c != op_id)
    r = s_rank[found]
    width = int(r.max()) + 1
    n_op = np.bincount(r, weights=is_op, minlength=width)
    n_seq = np.bincount(r, weights=is_seq, minlength=width)
    votes: dict[int, str] = {}
    for rank in np.unique(r).tolist():
        if n_op[rank] and not n_seq[rank]:
            votes[int(rank)] = "op_id"
        elif n_seq[rank] and not n_op[rank]:
            votes[int(rank)] = "seq"
    return votes


def _per_backend_buffer(backend: str) -> bool:
    """Does this backend record through torch 2.15's hook (one buffer per backend name)?"""
    d = default_for(backend)
    return d.counter == "op_id" and d.records_p2p


def unrecorded_groups(
    tables: Tables,
    dialects: dict[int, Dialect],
    held: dict[int, set[str]] | None = None,
    keys: EntryKeys | None = None,
) -> dict[str, dict[str, Any]]:
    """Groups some evidence names but no loaded dump recorded, per group: the backend its
    entries carry elsewhere, the members whose dumps hold no buffer of that backend, and the
    evidence. A backend keeps one buffer per process and a file holds one buffer, so a
    member missing a group's buffer is unseen in that group, not stalled in it."""
    e = tables.entries
    out: dict[str, dict[str, Any]] = {}
    if e.empty:
        return out
    # The backends each rank's loaded dumps hold (a rank may have several files).
    if held is None:
        held = rank_backends(e)
    status_ranks: dict[str, set[int]] = {}
    st = tables.status[tables.status["pg_name"] != ""]
    for g, r in zip(st["pg_name"].astype(str), st["rank"].to_numpy()):
        status_ranks.setdefault(g, set()).add(int(r))
    dumped = set(tables.dumped_ranks)
    members = tables.members()
    for g, backends in group_backends(e, keys).items():
        # Only hook-recorded backends keep a buffer per backend name in one process.
        if not any(_per_backend_buffer(b) for b in backends):
            continue
        missing = [
            int(m)
            for m in members.get(g, ())
            if m in dumped
            and held.get(m)
            and not (held[m] & backends)
            and m not in status_ranks.get(g, set())
        ]
        if missing:
            out[g] = {
                "backend": "+".join(sorted(backends)),
                "members_without_buffer": missing,
                "evidence": "entries of other members",
            }
    # Group names are global and numbered in creation order: a gap among the names the
    # dumps show is a group no loaded dump recorded at all.
    # A group in some loaded pg_config is in a loaded buffer (it just ran no op).
    hooked = any(_per_backend_buffer(d.backend) for d in dialects.values() if d.backend)
    for name in unseen_group_names(tables.groups["pg_name"].astype(str)) if hooked else ():
        out.setdefault(
            name,
            {"backend": "", "members_without_buffer": [], "evidence": "a gap in the group names"},
        )
    return dict(
        sorted(out.items(), key=lambda kv: (0, int(kv[0])) if kv[0].isdigit() else (1, kv[0]))
    )
