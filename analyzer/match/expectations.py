"""What members of a collective must agree on, per op: the one table matching checks.

Flight-recorder entries of one collective differ between members by design for many ops:
only the root of a ``gather`` records outputs, only the source of a ``scatter`` records
inputs, ``all_to_all`` splits are per member, ... A mismatch of op, dtypes or sizes is only
reported on a side (inputs or outputs) that :data:`EXPECTATIONS` says every member must
record alike. Each line names the dump in ``sample_dumps/`` where it was checked.

``sides`` values: ``"both"`` (inputs and outputs), ``"inputs"``, ``"outputs"``, ``""``
(never compared). ``one_sided``: a member may record a side as empty (``[]``) by design;
an empty side is then "not recorded here", not a different value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "EXPECTATIONS",
    "UNKNOWN_OP",
    "Expectation",
    "barrier_op_gap",
    "completes_without_every_member",
    "expectation",
    "monitored_barrier_gaps",
    "size_checked_ops",
]


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the members of one op must record alike, and why."""

    ops: tuple[str, ...]
    """Op names (``profiling_name`` without the backend prefix) this line covers."""
    dtypes: str
    """Sides whose dtypes must agree: ``both``, ``inputs``, ``outputs`` or ``""``."""
    sizes: str
    """Sides whose shapes must agree."""
    one_sided: bool
    """A member may leave a side empty by design (root-only or source-only side)."""
    why: str
    checked_on: str
    """Recorded dumps (``sample_dumps/...``) that show this line holds, or where it was seen.
    Every line checked on ``opmix_healthy_w4`` (torch 2.13) holds on ``opmix_healthy_w4_t215``
    (torch 2.15) too, and in the stalled ``opmix_*`` samples of both."""
    rooted: bool = False
    """Data flows from or to one root along a tree or a chain, so a member may complete it
    while another never joined (a broadcast's members upstream of a dead one): one member's
    completion does not show that every member joined. Seen in
    ``crash_sigkill_tp1pp1dp8_nccl2_restart_cpu_t215_s04527_states`` (corpus): ranks 2, 4
    and 6 completed the checkpoint's size broadcast, ranks 0, 3, 5 and 7 did not, rank 1 had
    died before it."""


#: The table. Ops absent from it: dtypes of both sides must agree (every op PyTorch has moves
#: one dtype), shapes are not compared (see :data:`UNKNOWN_OP`).
EXPECTATIONS: tuple[Expectation, ...] = (
    Expectation(
        (
            "all_reduce",
            "allreduce",
            "all_reduce_coalesced",
            "allreduce_coalesced",
            "all_reduce_barrier",
        ),
        "both",
        "both",
        False,
        "every member reduces the same tensors elementwise; gloo's reduce_scatter (list and "
        "tensor form) is recorded as one all_reduce per output or one all_reduce of the whole "
        "input, alike on every member",
        "sample_dumps/opmix_healthy_w4 (reduce_scatter, reduce_scatter_tensor), "
        "size_desync_w4, dtype_desync_w4",
    ),
    Expectation(
        ("broadcast",),
        "both",
        "both",
        True,
        "every member passes a tensor of the source's shape; a recorder that writes only the "
        "source's side leaves the other side empty; broadcast_object_list is a Long size "
        "broadcast then a Byte broadcast of the largest pickled object, alike on every member",
        "sample_dumps/opmix_healthy_w4 (broadcast, broadcast_object_list, scatter_object_list)",
        rooted=True,
    ),
    Expectation(
        ("reduce",),
        "both",
        "both",
        True,
        "every member contributes a tensor of one shape; the result lands on the root only, and "
        "a recorder may leave non-root outputs empty",
        "sample_dumps/opmix_healthy_w4 (reduce)",
        rooted=True,
    ),
    Expectation(
        ("gather",),
        "inputs",
        "inputs",
        True,
        "every member sends one tensor of one shape; only the root records the gathered outputs "
        "(the others record none); gather_object is an all_gather of Long sizes then a Byte "
        "gather padded to the largest object",
        "sample_dumps/opmix_healthy_w4 (gather, gather_object)",
        rooted=True,
    ),
    Expectation(
        ("scatter",),
        "outputs",
        "outputs",
        True,
        "every member receives one tensor of one shape; only the source records the scattered "
        "inputs; scatter_object_list is a Long broadcast, then Byte and Long scatters from the "
        "source",
        "sample_dumps/opmix_healthy_w4 (scatter, scatter_object_list)",
        rooted=True,
    ),
    Expectation(
        ("all_to_all", "all_to_all_single", "alltoall", "alltoall_base"),
        "both",
        "",
        False,
        "input and output splits are per member (uneven all_to_all_single, and NCCL's list "
        "all_to_all): shapes differ by design, dtypes do not",
        "sample_dumps/opmix_healthy_w4 (all_to_all_single with uneven splits, all_to_all)",
    ),
    Expectation(
        ("all_gather", "allgather"),
        "both",
        "outputs",
        False,
        "every member gathers the same outputs; with NCCL's uneven all_gather each member's input "
        "is its own slot of the output list, so inputs may differ; gloo records "
        "all_gather_into_tensor as all_gather with one [world, n] output, and all_gather_object "
        "as a Long all_gather of sizes and a Byte all_gather padded to the largest object",
        "sample_dumps/opmix_healthy_w4 (all_gather, all_gather_into_tensor, all_gather_object)",
    ),
    Expectation(
        ("reduce_scatter",),
        "both",
        "inputs",
        False,
        "every member reduces the same input list; with NCCL's uneven reduce_scatter each "
        "member's output is its own slot, so outputs may differ (gloo records reduce_scatter as "
        "all_reduce entries instead, see above)",
        "sample_dumps/nccl2_opmix_healthy_w4, sample_dumps/nccl2_opmix_stall_w4 (uneven: simulated op mix, tools/simulate --op-mix)",
    ),
    Expectation(
        (
            "_all_gather_base",
            "all_gather_into_tensor",
            "_reduce_scatter_base",
            "reduce_scatter_tensor",
            "all_gather_into_tensor_coalesced",
            "reduce_scatter_tensor_coalesced",
            "allgather_coalesced",
            "allgather_into_tensor_coalesced",
        ),
        "both",
        "both",
        False,
        "the flat tensor forms split one buffer into equal chunks: every member records the same "
        "input and output shapes",
        "sample_dumps/nccl2_opmix_healthy_w4 (_all_gather_base, _reduce_scatter_base), ../shared/fixtures/nvrx-megatron-moe (coalesced forms: simulated jobs, tools/simulate)",
    ),
    Expectation(
        ("barrier",),
        "both",
        "both",
        False,
        "no tensors in gloo (empty sides on every member), one element in NCCL: alike everywhere",
        "sample_dumps/opmix_healthy_w4 (barrier), healthy_w4",
    ),
    Expectation(
        ("monitored_barrier",),
        "",
        "",
        False,
        "gloo runs it as send/recv between the first member and every other one and records no "
        "entry: it leaves a gap of two collective sequence numbers on every member, skipping two "
        "op_ids on the others and 2 x (members - 1) on the first member, whose op counter (and "
        "pg_status) then runs ahead of the others' by 2 x (members - 2) per barrier; such gaps "
        "are not unrecorded work (see monitored_barrier_gaps)",
        "sample_dumps/opmix_healthy_w4 (monitored_barrier, with and without wait_all_ranks)",
    ),
)

#: What an op missing from the table must agree on.
UNKNOWN_OP = Expectation((), "both", "", False, "not in the table: dtypes only", "")

_BY_OP: dict[str, Expectation] = {op: line for line in EXPECTATIONS for op in line.ops}

_SIDES = {"both": ("inputs", "outputs"), "inputs": ("inputs",), "outputs": ("outputs",), "": ()}


def expectation(op: str) -> Expectation:
    """The table line of ``op``; for ``a+b`` (coalesced entries of one sequence number) the
    sides every part checks (the strictest common ground), one-sided if any part is."""
    parts = op.split("+")
    lines = [_BY_OP.get(p, UNKNOWN_OP) for p in parts]
    if len(lines) == 1:
        return lines[0]

    def common(attr: str) -> str:
        sides = set(_SIDES[getattr(lines[0], attr)])
        for line in lines[1:]:
            sides &= set(_SIDES[getattr(line, attr)])
        return "both" if len(sides) == 2 else next(iter(sides), "")

    return Expectation(
        tuple(parts),
        common("dtypes"),
        common("sizes"),
        any(line.one_sided for line in lines),
        "coalesced: " + "; ".join(line.why for line in lines),
        "",
    )


def completes_without_every_member(op: str) -> bool:
    """Whether a member may complete ``op`` while another never joined it (a rooted op, or
    a coalesced entry with one); an op of no line does not (it is read as one that needs
    every member)."""
    return any(_BY_OP.get(p, UNKNOWN_OP).rooted for p in op.split("+"))


def sides(value: str) -> tuple[str, ...]:
    """``"both"`` -> ``("inputs", "outputs")`` and so on."""
    return _SIDES[value]


def size_checked_ops() -> frozenset[str]:
    """Ops whose shapes are compared on at least one side."""
    return frozenset(op for line in EXPECTATIONS if line.sizes for op in line.ops)


def barrier_op_gap(missing_seqs: int, first_member: bool, n_members: int) -> int:
    """How many op_ids a run of ``missing_seqs`` unrecorded monitored_barrier sequence numbers
    skips on one member: gloo's monitored_barrier takes two sequence numbers and runs one
    send and one recv on each member, but a recv from and a send to every other member on the
    group's first member."""
    return missing_seqs * (n_members - 1) if first_member else missing_seqs


def monitored_barrier_gaps(
    entries: pd.DataFrame, members: dict[str, tuple[int, ...]], groups: Iterable[str] | None = None
) -> dict[str, list[int]]:
    """gloo groups whose recorded collectives skip sequence numbers the way monitored_barrier
    does: per group, the first skipped seq of each gap.

    A gap counts when ``collective_seq_id`` skips an even number of values and ``op_id``
    skips what :func:`barrier_op_gap` says (gloo's send/recv move ``op_id`` alone), and every
    member whose window holds both neighbours shows the same gap. A group with a gap of any
    other kind is left out (its gaps are unrecorded work).
    """
    out: dict[str, list[int]] = {}
    coll = entries.loc[~entries["is_p2p"], ["pg_name", "rank", "seq", "op_id"]]
    if coll.empty:
        return out
    coll = coll.assign(pg_name=coll["pg_name"].astype(str)).sort_values(["pg_name", "rank", "seq"])
    wanted = set(groups) if groups is not None else None
    for name, grp in coll.groupby("pg_name", sort=True):
        ranks = members.get(str(name), ())
        if (wanted is not None and name not in wanted) or len(ranks) < 2:
            continue
        gaps_by_rank: dict[int, set[tuple[int, int]]] = {}
        windows: dict[int, tuple[int, int]] = {}
        explained = True
        for rank, rows in grp.groupby("rank", sort=True):
            r = int(rank)  # type: ignore[arg-type]
            seq = rows["seq"].to_numpy(np.int64)
            op_id = rows["op_id"].to_numpy(np.int64)
            missing_seq, missing_op = np.diff(seq) - 1, np.diff(op_id) - 1
            want = barrier_op_gap(1, r == int(ranks[0]), len(ranks)) * missing_seq
            barrier = (missing_seq > 0) & (missing_seq % 2 == 0) & (missing_op == want)
            if ((missing_op > 0) & ~barrier).any() or ((missing_seq > 0) & ~barrier).any():
                explained = False
                break
            at = np.nonzero(barrier)[0]
            gaps_by_rank[r] = {(int(seq[i]) + 1, int(missing_seq[i])) for i in at}
            windows[r] = (int(seq[0]), int(seq[-1]))
        found = set().union(*gaps_by_rank.values()) if gaps_by_rank else set()
        if not explained or not found:
            continue
        if all(
            (first, width) in gaps_by_rank[rank]
            for first, width in found
            for rank, (lo, hi) in windows.items()
            if lo < first and first + width <= hi
        ):
            out[str(name)] = sorted(first for first, _ in found)
    return out
