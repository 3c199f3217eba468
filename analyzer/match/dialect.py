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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from analyzer.match.dialect_defaults import (
    EVERY_RANK,
    HOOK,
    NONE,
    OBSERVED,
    OWN_TIMEOUT,
    TORCHCOMMS,
    Dialect,
    default_for,
    legacy,
)
from analyzer.match.dialect_evidence import buffer_facts, rank_facts, unrecorded_groups
from analyzer.match.keys import EntryKeys
from analyzer.normalize import Tables


def is_retire_on_end(d: Dialect) -> bool:
    """gloo's own recorder: an entry retires when its work ends, completed or timed out."""
    return d.name == "gloo"


def is_retired_done(d: Dialect) -> bool:
    """TorchComms' recorder on CPU: an entry retires when its call returned."""
    return d.backend == f"{TORCHCOMMS}gloo"


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

    by_buffer: dict[tuple[int, str], Dialect] = field(default_factory=dict)
    """For a rank with several buffers (a gloo one beside the recorder hook's): each
    buffer's own dialect, by (rank, backend); its entries are read by it."""

    def of(self, rank: int) -> Dialect | None:
        return self.by_rank.get(int(rank))

    @cached_property
    def _buffers_by_rank(self) -> dict[int, list[Dialect]]:
        """:attr:`by_buffer` per rank, each rank's buffers in backend order (built once)."""
        out: dict[int, list[Dialect]] = {}
        for (r, _), d in sorted(self.by_buffer.items()):
            out.setdefault(r, []).append(d)
        return out

    def entries_where(self, e: pd.DataFrame, test: Callable[[Dialect], bool]) -> np.ndarray:
        """Per entry of ``e``: whether the dialect of the buffer it comes from passes
        ``test`` (the rank's dialect, or its buffer's where the rank holds several): one
        lookup per entry in a (rank, backend) table."""
        rank = e["rank"].to_numpy().astype(np.int64)
        if not len(rank):
            return np.zeros(0, dtype=bool)
        width = int(rank.max()) + 1
        by_rank = np.zeros(width, dtype=bool)
        for r, d in self.by_rank.items():
            if 0 <= r < width:
                by_rank[r] = test(d)
        if not self.by_buffer:
            return by_rank[rank]
        cats = {str(c): i for i, c in enumerate(e["backend"].cat.categories)}
        table = np.repeat(by_rank[:, None], len(cats) + 1, axis=1)  # column 0: no backend
        for (r, b), d in self.by_buffer.items():
            if 0 <= r < width and b in cats:
                table[r, cats[b] + 1] = test(d)
        return table[rank, e["backend"].cat.codes.to_numpy().astype(np.int64) + 1]

    def buffers_of(self, rank: int) -> list[Dialect]:
        """The dialects ``rank``'s entries are read by: one per buffer it holds."""
        mine = self._buffers_by_rank.get(int(rank))
        if mine:
            return mine
        d = self.of(rank)
        return [d] if d is not None else []

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
    def retire_on_end_ranks(self) -> frozenset[int]:
        """Ranks whose recorder retires an entry when its work ends, completed or failed
        (gloo's own), in one of their buffers at least: the entry not retired is the op the
        rank is blocked in (:func:`is_retire_on_end` tells the entries)."""
        return frozenset(
            r for r in self.by_rank if any(is_retire_on_end(d) for d in self.buffers_of(r))
        )

    @property
    def retired_done_ranks(self) -> frozenset[int]:
        """Ranks whose retired entries finished: TorchComms' recorder on CPU retires an op
        when its call returned, and a call that raised (a timeout) leaves it not retired."""
        return frozenset(
            r for r in self.by_rank if any(is_retired_done(d) for d in self.buffers_of(r))
        )

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
        return frozenset(
            r
            for r, d in self.by_rank.items()
            if d.backend and not d.records_p2p and d.counter == "op_id"
        )

    @property
    def p2p_unrecorded(self) -> bool:
        """Some rank's backend records no send/recv (gloo): op_id gaps are unseen ops."""
        return any(not d.records_p2p for d in self.by_rank.values() if d.backend)

    def dumps_on_own_timeout(self, rank: int) -> bool:
        """``rank``'s backend writes its file only when its own op times out (by default, or
        as its layout shows): that file is then its own timeout's mark."""
        d = self.of(rank)
        return d is not None and d.dump_policy == OWN_TIMEOUT

    @property
    def dumps_only_failed(self) -> bool:
        """A rank's backend writes a file only when its own ops time out (nccl2): a missing
        file is the normal mark of a rank stalled outside communication."""
        return any(d.dump_policy == OWN_TIMEOUT for d in self.by_rank.values() if d.backend) or any(
            default_for(b).dump_policy == OWN_TIMEOUT for b in self.backends if b
        )

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
            key = (
                d.name,
                d.backend,
                d.completion,
                d.counter,
                d.one_sided_p2p,
                d.records_p2p,
                d.dump_policy,
                d.evidence,
            )
            groups.setdefault(key, []).append(r)
            first.setdefault(key, d)
        buffers: dict[tuple[str, str, str], list[int]] = {}
        for (r, b), d in sorted(self.by_buffer.items()):
            buffers.setdefault((b, d.name, d.completion), []).append(r)
        return {
            "per_rank": {str(r): d.name for r, d in sorted(self.by_rank.items())},
            "dialects": [{**first[k].to_dict(), "ranks": ranks} for k, ranks in groups.items()],
            "buffers": [
                {"backend": b, "dialect": name, "completion": completion, "ranks": ranks}
                for (b, name, completion), ranks in buffers.items()
            ],
            "unrecorded_groups": self.unrecorded_groups,
        }


def p2p_payload(p: pd.DataFrame, one_sided: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sizes and dtypes a send/recv moves: a send's inputs; a recv's outputs when its
    dump is one-sided (its inputs are empty) and its inputs otherwise (both sides are filled,
    as the legacy NCCL recorder writes them)."""
    recv = (p["op"].astype(str) == "recv").to_numpy()
    use_out = recv & one_sided
    sizes = np.where(
        use_out,
        p["output_sizes"].astype(str).to_numpy(dtype=object),
        p["input_sizes"].astype(str).to_numpy(dtype=object),
    )
    dtypes = np.where(
        use_out,
        p["output_dtypes"].astype(str).to_numpy(dtype=object),
        p["input_dtypes"].astype(str).to_numpy(dtype=object),
    )
    return sizes, dtypes


def _from_content(backend: str, f: dict[str, Any]) -> Dialect:
    """The prefix default of ``backend``, confirmed or overridden by one rank's facts."""
    d = default_for(backend)
    why: list[str] = []
    if backend.startswith(TORCHCOMMS):
        # Recognised from content at load; its fields have one meaning (see torchcomms()).
        return d
    if f.get("completed") and d.completion == NONE:
        d = replace(d, completion=HOOK if d.counter == "op_id" and d.records_p2p else OBSERVED)
        why.append("completed entries: the backend reports completion")
    elif not f.get("completed") and not f.get("open") and d.completion != NONE:
        d = replace(d, completion=NONE)
        why.append(
            "no entry completed and every entry is retired: completion is not reported "
            "(ops retire when issued)"
        )
    if f.get("one_sided") and not f.get("two_sided") and not d.one_sided_p2p:
        d = replace(d, one_sided_p2p=True)
        why.append("send entries carry only inputs and recv entries only outputs")
    elif f.get("two_sided") and not f.get("one_sided") and d.one_sided_p2p:
        d = replace(d, one_sided_p2p=False)
        why.append("send/recv entries carry both inputs and outputs")
    vote = f.get("counter")
    if vote and vote != d.counter:
        d = replace(d, counter=vote)
        why.append(
            f"pg_status counters equal the last entries' {'op_id' if vote == 'op_id' else 'sequence numbers'}"
        )
    buffers = sorted(f.get("buffers", set()) - {backend, ""})
    if buffers:
        # Several buffers of one process (one per backend), merged: named after all.
        names = [d.name] + [default_for(b).name for b in buffers]
        why.append(f"{len(buffers) + 1} buffers merged: {', '.join([backend] + buffers)}")
        policy = (
            OWN_TIMEOUT
            if any(default_for(b).dump_policy == OWN_TIMEOUT for b in [backend] + buffers)
            else d.dump_policy
        )
        d = replace(d, name="+".join(sorted(set(names))), dump_policy=policy)
    return replace(d, evidence=tuple(why))


def _backends_seen(backend: pd.Series) -> frozenset[str]:
    """``{str(b) for b in backend.unique()}`` from the codes: the categories some row has,
    and ``nan`` when a row has none."""
    codes = backend.cat.codes.to_numpy().astype(np.int64) + 1
    present = np.bincount(codes, minlength=len(backend.cat.categories) + 1) > 0
    cats = backend.cat.categories
    seen = {str(cats[i]) for i in np.flatnonzero(present[1:]).tolist()}
    return frozenset(seen | ({str(np.nan)} if present[0] else set()))


#: What each TorchComms flow means for a rank without a file.
TUTORIAL_FLOW = (
    "tutorial flow: only ranks that caught a timeout wrote a file (dump_file in the timeout "
    "handler), so a rank without one is stalled outside communication (the usual reading) "
    "or crashed"
)
HEALTH_CHECK_FLOW = "health check flow: every rank wrote a file, stalled ones included"


def _torchcomms_flow(tables: Tables, out: dict[int, Dialect]) -> None:
    """Which TorchComms flow wrote the files: every rank of the world (the debug server's
    health check asks every rank to dump) or only some (the tutorial's timeout handler: the
    rank that never timed out writes none). Said in the dialect's name and evidence."""
    tc = [r for r, d in out.items() if d.backend.startswith(TORCHCOMMS)]
    if not tc:
        return
    every = len(tables.dumped_ranks) >= tables.world_size
    flow = HEALTH_CHECK_FLOW if every else TUTORIAL_FLOW
    for r in tc:
        d = out[r]
        out[r] = replace(
            d,
            name=f"{d.name} ({'health check' if every else 'tutorial'} flow)",
            dump_policy=EVERY_RANK if every else OWN_TIMEOUT,
            evidence=(*d.evidence, "recognised as TorchComms' recorder from its content", flow),
        )


def read_dialects(tables: Tables, keys: EntryKeys | None = None) -> Dialects:
    """Each dumped rank's dialect: the prefix default of its backend, confirmed or overridden
    by its entries (states, send/recv shapes) and its counters against its op ids. ``keys``
    are the entries' integer keys when the caller has them."""
    ranks = tables.ranks[tables.ranks["dumped"]]
    e = tables.entries
    backend_of = {int(r): str(b) for r, b in zip(ranks["rank"], ranks["backend"])}
    # Per rank: states, shapes of send/recv, and per group the last entry against pg_status.
    facts, held = rank_facts(tables, list(backend_of), keys)
    majority = ""
    if any(backend_of.values()):
        counts = ranks[ranks["backend"] != ""]["backend"].value_counts()
        majority = str(counts.index[0]) if len(counts) else ""
    out: dict[int, Dialect] = {}
    for r, backend in backend_of.items():
        if not backend:
            # No entries: read as the job's majority (its counters still need a unit).
            base = default_for(majority) if majority else legacy("")
            out[r] = replace(
                base,
                backend="",
                evidence=(
                    f"no entries: read as the job's majority backend {majority or 'unknown'}",
                ),
            )
            continue
        out[r] = _from_content(backend, facts.get(r, {}))
    buffers = {(r, b): _from_content(b, f) for (r, b), f in buffer_facts(tables, held).items() if b}
    # Read as a whole, a rank reports completion only where every buffer does.
    for r in sorted({r for (r, _), d in buffers.items() if d.completion == NONE}):
        out[r] = replace(out[r], completion=NONE)
    _torchcomms_flow(tables, out)
    seen = _backends_seen(e["backend"]) if len(e) else frozenset()
    return Dialects(
        by_rank=out,
        backends=seen,
        unrecorded_groups=unrecorded_groups(tables, out, held, keys),
        by_buffer=buffers,
    )


__all__ = ["Dialects", "is_retire_on_end", "is_retired_done", "p2p_payload", "read_dialects"]
