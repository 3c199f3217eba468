"""Backend dialects: how to read each rank's dump (the one place that knows backend names).

A flight-recorder dump's format version says little about what its fields mean. What does
differ is who wrote the entries (the backend's own recorder, or torch 2.15's generic recorder
hook) and whether the backend reports completion:

* **states** (``completion``): ``observed`` (legacy NCCL: ``scheduled`` until the GPU work is
  seen, ``started`` with timing on, ``completed``); ``hook`` (a hook whose backend reports
  completion, nccl2: ``completed`` + retired is done, ``scheduled`` and not retired is hung);
  ``none`` (no completion reports: gloo retires an op when it finishes *or fails*, the hook
  over a backend without completion hooks retires every op when it is issued; done and hung
  look alike, only enqueues are evidence);
* **counter**: what ``pg_status.last_enqueued_collective`` counts, ``seq`` (the group's
  ``collective_seq_id``, or its ``p2p_seq_id`` after a send/recv; legacy NCCL) or ``op_id``
  (every op of the group: gloo, the hook);
* **one_sided_p2p**: a send entry holds only input sizes and a recv only output sizes (the
  hook): a send is compared with its recv input-to-output;
* **records_p2p**: gloo records no send/recv at all;
* **dump_policy**: which ranks write a file: ``every_rank`` (a timed-out rank tells all ranks
  to dump: legacy NCCL; the gloo recordings), ``own_timeout`` (nccl2: only ranks whose own ops
  timed out or failed, so a rank stalled outside communication usually writes none),
  ``manual`` (no abort hook: nccl-lazy, Python and most plugin backends never dump by
  themselves).

:data:`PREFIXES` gives the default per ``profiling_name`` prefix; each rank's own content
confirms or overrides it (states seen, the shape of its send/recv entries, its counters
against its entries' op ids), and :class:`Dialect.evidence` says which. Matching, the graph and
the diagnosis ask :class:`Dialects`, never a backend name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from analyzer.tables import Tables

OBSERVED = "observed"
HOOK = "hook"
NONE = "none"

EVERY_RANK = "every_rank"
OWN_TIMEOUT = "own_timeout"
MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one rank's dump is read."""

    name: str
    """Dialect name: ``nccl-legacy``, ``nccl2``, ``nccl-lazy``, ``gloo``, ``hook`` (another
    hook-recorded backend), ``xccl``..."""
    backend: str
    """The ``profiling_name`` prefix the rank's entries carry."""
    completion: str
    counter: str
    one_sided_p2p: bool
    records_p2p: bool
    dump_policy: str
    evidence: tuple[str, ...] = ()
    """What the rank's own content confirmed or overrode (empty: the prefix default as is)."""

    @property
    def completion_observed(self) -> bool:
        return self.completion != NONE

    def to_dict(self) -> dict[str, Any]:
        return {"dialect": self.name, "backend": self.backend, "completion": self.completion,
                "counter": self.counter, "one_sided_p2p": self.one_sided_p2p,
                "records_p2p": self.records_p2p, "dump_policy": self.dump_policy,
                "evidence": list(self.evidence)}


def _legacy(name: str) -> Dialect:
    return Dialect(name, name, OBSERVED, "seq", False, True, EVERY_RANK)


def _hooked(name: str, completion: str = NONE, policy: str = MANUAL, dialect: str = "hook") -> Dialect:
    return Dialect(dialect, name, completion, "op_id", True, True, policy)


#: Defaults per ``profiling_name`` prefix (``nccl:`` is the legacy class in torch 2.15 too).
PREFIXES: dict[str, Dialect] = {
    "nccl": replace(_legacy("nccl"), name="nccl-legacy"),
    "nccl-legacy": replace(_legacy("nccl-legacy"), name="nccl-legacy"),
    "ncclx": _legacy("ncclx"),
    "rccl": _legacy("rccl"),
    "hccl": _legacy("hccl"),
    "mccl": _legacy("mccl"),
    "xccl": _legacy("xccl"),
    "nccl2": _hooked("nccl2", HOOK, OWN_TIMEOUT, "nccl2"),
    "nccl-lazy": _hooked("nccl-lazy", HOOK, MANUAL, "nccl-lazy"),
    "c10d": _hooked("c10d"),
    "ucc": _hooked("ucc"),
    "mpi": _hooked("mpi"),
    "gloo": Dialect("gloo", "gloo", NONE, "op_id", False, False, EVERY_RANK),
}


def default_for(backend: str) -> Dialect:
    """The prefix table's dialect for ``backend``; an unknown custom name is hook-recorded
    (torch 2.15 hooks every backend that does not record itself) without completion reports."""
    known = PREFIXES.get(backend)
    if known is not None:
        return known
    return _hooked(backend)


@dataclass(frozen=True)
class Dialects:
    """The dialect of every dumped rank, and what the analysis layers ask of them."""

    by_rank: dict[int, Dialect]
    backends: frozenset[str] = frozenset()
    """Every ``profiling_name`` prefix the entries carry (a rank may hold several buffers)."""
    unrecorded_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Groups that other evidence names (a gap in the global group names, ``pg_config``,
    peers' entries) but that no loaded dump recorded for some or all of their members:
    ``{group: {"backend", "members_without_buffer", "evidence"}}``."""

    def of(self, rank: int) -> Dialect | None:
        return self.by_rank.get(int(rank))

    @property
    def completion_unobserved(self) -> bool:
        """No dumped rank reports completion (gloo, backends without completion hooks): only
        enqueues are evidence of progress."""
        with_entries = [d for d in self.by_rank.values() if d.backend]
        return bool(with_entries) and all(not d.completion_observed for d in with_entries)

    @property
    def observed_ranks(self) -> frozenset[int]:
        """Ranks whose ``completed`` states (and their absence) are evidence."""
        return frozenset(r for r, d in self.by_rank.items() if d.completion_observed)

    @property
    def unobserved_ranks(self) -> frozenset[int]:
        return frozenset(r for r, d in self.by_rank.items() if not d.completion_observed)

    @property
    def op_id_counter_ranks(self) -> frozenset[int]:
        return frozenset(r for r, d in self.by_rank.items() if d.counter == "op_id")

    @property
    def one_sided_ranks(self) -> frozenset[int]:
        return frozenset(r for r, d in self.by_rank.items() if d.one_sided_p2p)

    @property
    def p2p_unrecorded_ranks(self) -> frozenset[int]:
        """Ranks whose backend records no send/recv and counts ``pg_status`` in op_ids
        (gloo): an op_id gap between their entries is send/recv that ran, monitored_barrier's
        among them."""
        return frozenset(r for r, d in self.by_rank.items()
                         if d.backend and not d.records_p2p and d.counter == "op_id")

    @property
    def p2p_unrecorded(self) -> bool:
        """Some rank's backend records no send/recv (gloo): op_id gaps are unseen ops."""
        return any(not d.records_p2p for d in self.by_rank.values() if d.backend)

    @property
    def dumps_only_failed(self) -> bool:
        """A rank's backend writes a file only when its own ops time out (nccl2): a missing
        file is the normal mark of a rank stalled outside communication."""
        return (any(d.dump_policy == OWN_TIMEOUT for d in self.by_rank.values() if d.backend)
                or any(default_for(b).dump_policy == OWN_TIMEOUT for b in self.backends if b))

    def names(self) -> dict[int, str]:
        return {r: d.name for r, d in sorted(self.by_rank.items())}

    def summary(self) -> dict[str, list[int]]:
        """Dialect name -> the ranks read as it."""
        out: dict[str, list[int]] = {}
        for r, d in sorted(self.by_rank.items()):
            label = d.name if d.backend else "no entries"
            if d.backend and d.completion == NONE and default_for(d.backend).completion != NONE:
                label += " without completion reports"
            elif d.backend and d.completion != NONE and default_for(d.backend).completion == NONE:
                label += " with completion reports"
            out.setdefault(label, []).append(r)
        return out

    def to_dict(self) -> dict[str, Any]:
        groups: dict[tuple[Any, ...], list[int]] = {}
        first: dict[tuple[Any, ...], Dialect] = {}
        for r, d in sorted(self.by_rank.items()):
            key = (d.name, d.backend, d.completion, d.counter, d.one_sided_p2p, d.records_p2p,
                   d.dump_policy, d.evidence)
            groups.setdefault(key, []).append(r)
            first.setdefault(key, d)
        return {
            "per_rank": {str(r): d.name for r, d in sorted(self.by_rank.items())},
            "dialects": [{**first[k].to_dict(), "ranks": ranks} for k, ranks in groups.items()],
            "unrecorded_groups": self.unrecorded_groups,
        }


def p2p_payload(p: pd.DataFrame, one_sided: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sizes and dtypes a send/recv moves: a send's inputs; a recv's outputs when its
    dump is one-sided (its inputs are empty) and its inputs otherwise (both sides are filled,
    as the legacy NCCL recorder writes them)."""
    recv = (p["op"].astype(str) == "recv").to_numpy()
    use_out = recv & one_sided
    sizes = np.where(use_out, p["output_sizes"].astype(str).to_numpy(dtype=object),
                     p["input_sizes"].astype(str).to_numpy(dtype=object))
    dtypes = np.where(use_out, p["output_dtypes"].astype(str).to_numpy(dtype=object),
                      p["input_dtypes"].astype(str).to_numpy(dtype=object))
    return sizes, dtypes


_EMPTY = ("[]", "", "None")


def _ranks_where(e: pd.DataFrame, mask: np.ndarray) -> list[int]:
    """The ranks of the rows in ``mask``, without sorting every row (a bincount)."""
    rk = e["rank"].to_numpy()[mask]
    if not len(rk):
        return []
    return np.flatnonzero(np.bincount(rk.astype(np.int64))).tolist()


def _pairs(e: pd.DataFrame, key: str) -> dict[str, set[str]] | dict[int, set[str]]:
    """For each value of ``key`` (``rank`` or the categorical ``pg_name``): the backends its
    rows carry. One bincount over (key, backend) codes, no sort of the rows."""
    backend = e["backend"]
    b_codes = backend.cat.codes.to_numpy().astype(np.int64)
    nb = max(1, len(backend.cat.categories))
    if key == "rank":
        k_codes = e["rank"].to_numpy().astype(np.int64)
        labels = None
    else:
        k_codes = e[key].cat.codes.to_numpy().astype(np.int64)
        labels = [str(c) for c in e[key].cat.categories]
    ok = (b_codes >= 0) & (k_codes >= 0)
    hits = np.flatnonzero(np.bincount(k_codes[ok] * nb + b_codes[ok]))
    out: dict = {}
    cats = [str(c) for c in backend.cat.categories]
    for h in hits.tolist():
        k, b = divmod(h, nb)
        out.setdefault(int(k) if labels is None else labels[k], set()).add(cats[b])
    return out


def read_dialects(tables: Tables) -> Dialects:
    """Each dumped rank's dialect: the prefix default of its backend, confirmed or overridden
    by its entries (states, send/recv shapes) and its counters against its op ids."""
    ranks = tables.ranks[tables.ranks["dumped"]]
    e = tables.entries
    backend_of = {int(r): str(b) for r, b in zip(ranks["rank"], ranks["backend"])}
    # Per rank: states, shapes of send/recv, and per group the last entry against pg_status.
    facts: dict[int, dict[str, Any]] = {r: {} for r in backend_of}
    if len(e):
        state = e["state"]
        for r in _ranks_where(e, state.isin(["completed", "started"]).to_numpy()):
            facts.setdefault(int(r), {})["completed"] = True
        for r in _ranks_where(e, ~e["retired"].to_numpy(bool)):
            facts.setdefault(int(r), {})["open"] = True
        p = e.loc[e["is_p2p"].to_numpy(bool), ["rank", "op", "input_sizes", "output_sizes"]]
        if len(p):
            send = (p["op"] == "send").to_numpy()
            recv = (p["op"] == "recv").to_numpy()
            inp_empty = p["input_sizes"].isin(_EMPTY).to_numpy()
            out_empty = p["output_sizes"].isin(_EMPTY).to_numpy()
            one = (send & ~inp_empty & out_empty) | (recv & inp_empty & ~out_empty)
            two = ~inp_empty & ~out_empty
            rk = p["rank"].to_numpy()
            for r in np.unique(rk[one]):
                facts.setdefault(int(r), {})["one_sided"] = True
            for r in np.unique(rk[two]):
                facts.setdefault(int(r), {})["two_sided"] = True
        rank_backends = _pairs(e, "rank")
        for r, bs in rank_backends.items():
            facts.setdefault(int(r), {})["buffers"] = set(bs)
        counters = _counter_votes(tables)
        for r, vote in counters.items():
            facts.setdefault(r, {})["counter"] = vote
    by_backend = {b for b in backend_of.values() if b}
    majority = ""
    if by_backend:
        counts = ranks[ranks["backend"] != ""]["backend"].value_counts()
        majority = str(counts.index[0]) if len(counts) else ""
    out: dict[int, Dialect] = {}
    for r, backend in backend_of.items():
        f = facts.get(r, {})
        if not backend:
            # No entries: read as the job's majority (its counters still need a unit).
            base = default_for(majority) if majority else _legacy("")
            out[r] = replace(base, backend="", evidence=(
                f"no entries: read as the job's majority backend {majority or 'unknown'}",))
            continue
        d = default_for(backend)
        why: list[str] = []
        if f.get("completed") and d.completion == NONE:
            d = replace(d, completion=HOOK if d.counter == "op_id" and d.records_p2p else OBSERVED)
            why.append("completed entries: the backend reports completion")
        elif not f.get("completed") and not f.get("open") and d.completion != NONE:
            d = replace(d, completion=NONE)
            why.append("no entry completed and every entry is retired: completion is not reported "
                       "(ops retire when issued)")
        if f.get("one_sided") and not f.get("two_sided") and not d.one_sided_p2p:
            d = replace(d, one_sided_p2p=True)
            why.append("send entries carry only inputs and recv entries only outputs")
        elif f.get("two_sided") and not f.get("one_sided") and d.one_sided_p2p:
            d = replace(d, one_sided_p2p=False)
            why.append("send/recv entries carry both inputs and outputs")
        vote = f.get("counter")
        if vote and vote != d.counter:
            d = replace(d, counter=vote)
            why.append(f"pg_status counters equal the last entries' {'op_id' if vote == 'op_id' else 'sequence numbers'}")
        buffers = sorted(f.get("buffers", set()) - {backend, ""})
        if buffers:
            # Several buffers of one process (one per backend), merged: named after all.
            names = [d.name] + [default_for(b).name for b in buffers]
            why.append(f"{len(buffers) + 1} buffers merged: {', '.join([backend] + buffers)}")
            policy = OWN_TIMEOUT if any(default_for(b).dump_policy == OWN_TIMEOUT
                                        for b in [backend] + buffers) else d.dump_policy
            d = replace(d, name="+".join(sorted(set(names))), dump_policy=policy)
        out[r] = replace(d, evidence=tuple(why))
    seen = frozenset(str(b) for b in e["backend"].unique()) if len(e) else frozenset()
    return Dialects(by_rank=out, backends=seen,
                    unrecorded_groups=_unrecorded_groups(tables, out, rank_backends if len(e) else None))


def _counter_votes(tables: Tables) -> dict[int, str]:
    """Per rank, what its pg_status counters count, where its entries tell: ``op_id`` when
    every telling group's counter equals its last entry's op_id, ``seq`` when it equals its
    sequence number (p2p sequence number after a send/recv); nothing when they agree."""
    e = tables.entries
    st = tables.status[tables.status["pg_name"] != ""]
    if e.empty or st.empty:
        return {}
    last = e.loc[e.groupby(["rank", "pg_name"], observed=True)["record_id"].idxmax(),
                 ["rank", "pg_name", "seq", "p2p_seq", "op_id", "is_p2p"]]
    last = last.assign(pg_name=last["pg_name"].astype(str))
    st = st.drop_duplicates(["pg_name", "rank"], keep="last")
    m = last.merge(st[["rank", "pg_name", "last_enqueued"]], on=["rank", "pg_name"])
    if m.empty:
        return {}
    seq_val = np.where(m["is_p2p"].to_numpy(bool), m["p2p_seq"].to_numpy(), m["seq"].to_numpy())
    c = m["last_enqueued"].to_numpy()
    is_op = (c == m["op_id"].to_numpy()) & (c != seq_val)
    is_seq = (c == seq_val) & (c != m["op_id"].to_numpy())
    votes: dict[int, str] = {}
    frame = pd.DataFrame({"rank": m["rank"].to_numpy(), "op": is_op, "seq": is_seq})
    agg = frame.groupby("rank").agg(op=("op", "sum"), seq=("seq", "sum"))
    for r, n_op, n_seq in zip(agg.index, agg["op"], agg["seq"]):
        if n_op and not n_seq:
            votes[int(r)] = "op_id"
        elif n_seq and not n_op:
            votes[int(r)] = "seq"
    return votes


def _per_backend_buffer(backend: str) -> bool:
    """Does this backend record through torch 2.15's hook (one buffer per backend name)?"""
    d = default_for(backend)
    return d.counter == "op_id" and d.records_p2p


def _unrecorded_groups(tables: Tables, dialects: dict[int, Dialect],
                       held: dict[int, set[str]] | None = None) -> dict[str, dict[str, Any]]:
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
        held = _pairs(e, "rank")  # type: ignore[assignment]
    group_backends: dict[str, set[str]] = _pairs(e, "pg_name")  # type: ignore[assignment]
    status_ranks: dict[str, set[int]] = {}
    st = tables.status[tables.status["pg_name"] != ""]
    for g, r in zip(st["pg_name"].astype(str), st["rank"].to_numpy()):
        status_ranks.setdefault(g, set()).add(int(r))
    dumped = set(tables.dumped_ranks)
    members = tables.members()
    for g, backends in group_backends.items():
        # Only hook-recorded backends keep a buffer per backend name in one process.
        if not any(_per_backend_buffer(b) for b in backends):
            continue
        missing = [int(m) for m in members.get(g, ())
                   if m in dumped and held.get(m) and not (held[m] & backends)
                   and m not in status_ranks.get(g, set())]
        if missing:
            out[g] = {"backend": "+".join(sorted(backends)), "members_without_buffer": missing,
                      "evidence": "entries of other members"}
    # Group names are global and numbered in creation order: a gap among the names the
    # dumps show is a group no loaded dump recorded at all.
    # A group in some loaded pg_config is in a loaded buffer (it just ran no op).
    known = set(tables.groups["pg_name"].astype(str))
    names = sorted({int(n) for n in known if n.isdigit()})
    hooked = any(_per_backend_buffer(d.backend) for d in dialects.values() if d.backend)
    if hooked and names:
        for n in range(0, max(names) + 1):
            if str(n) not in known and str(n) not in out:
                out[str(n)] = {"backend": "", "members_without_buffer": [],
                               "evidence": "a gap in the group names"}
    return dict(sorted(out.items(), key=lambda kv: (0, int(kv[0])) if kv[0].isdigit() else (1, kv[0])))


__all__ = [
    "EVERY_RANK",
    "HOOK",
    "MANUAL",
    "NONE",
    "OBSERVED",
    "OWN_TIMEOUT",
    "PREFIXES",
    "Dialect",
    "Dialects",
    "default_for",
    "p2p_payload",
    "read_dialects",
]
