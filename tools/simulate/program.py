"""A rank's program: the ops of one training step, in issue order."""

from __future__ import annotations

from tools.simulate.constants import COLL, DEFAULT, DP, EMB, PP, RECV, SEND, TP, TP_OPS_PER_PASS
from tools.simulate.sites import Site, SiteTable
from tools.simulate.topology import Topology


class Op:
    """One op of a rank's program: a site issued in a group (and, for p2p, to a peer)."""

    __slots__ = ("kind", "peer", "role", "site", "sync", "tag")

    def __init__(
        self,
        site: Site,
        role: int,
        kind: int = COLL,
        peer: int = -1,
        sync: bool = False,
        tag: tuple = (),
    ) -> None:
        self.site = site
        self.role = role
        self.kind = kind
        self.peer = peer  # pipeline-local index of the peer stage for send/recv
        self.sync = sync
        self.tag = tag

    def copy(self, **kw) -> Op:
        op = Op(self.site, self.role, self.kind, self.peer, self.sync, self.tag)
        for k, v in kw.items():
            setattr(op, k, v)
        return op


def build_program(
    topo: Topology,
    sites: SiteTable,
    stage: int,
    microbatches: int,
    batch_p2p: bool = False,
    mix_rank: int | None = None,
) -> list[Op]:
    """One training step of a rank on pipeline stage ``stage``.

    With ``batch_p2p`` every send/recv goes through ``batch_isend_irecv`` (Megatron's
    ``batch_p2p_comm``), which the flight recorder records as the op plus a coalesced work.
    With ``mix_rank`` (the rank's global rank) the step starts with the op mix on the
    default group: ops whose recorded sides and sizes differ per rank by design.
    """
    pp, tp = topo.pp, topo.tp
    ops: list[Op] = []
    b = batch_p2p
    if mix_rank is not None:  # at the start of the step, like a broadcast of the batch
        for k, kind in enumerate(SiteTable.MIX_OPS):
            ops.append(Op(sites.mix(kind, mix_rank), DEFAULT, tag=("S", "mix", k)))
    for m in range(microbatches):
        if stage > 0:
            ops.append(Op(sites.p2p(RECV, True, b), PP, RECV, stage - 1, tag=("F", m, "recv")))
        if tp > 1:
            for j in range(TP_OPS_PER_PASS):
                ops.append(Op(sites.tp_op(j, False), TP, tag=("F", m, "tp", j)))
        if stage < pp - 1:
            ops.append(Op(sites.p2p(SEND, True, b), PP, SEND, stage + 1, tag=("F", m, "send")))
    for m in range(microbatches):
        if stage < pp - 1:
            ops.append(Op(sites.p2p(RECV, False, b), PP, RECV, stage + 1, tag=("B", m, "recv")))
        if tp > 1:
            for j in range(TP_OPS_PER_PASS):
                ops.append(Op(sites.tp_op(j, True), TP, tag=("B", m, "tp", j)))
        if stage > 0:
            ops.append(Op(sites.p2p(SEND, False, b), PP, SEND, stage - 1, tag=("B", m, "send")))
    if pp > 1 and stage in (0, pp - 1):
        ops.append(Op(sites.emb(), EMB, tag=("E", "emb")))
    if topo.dp > 1:
        for bucket in range(2):
            ops.append(Op(sites.dp_bucket(stage, bucket), DP, tag=("E", "dp", bucket)))
    if tp > 1:
        # get_grad_norm_fp32 returns total_norm.item(): the CPU waits for this one.
        ops.append(Op(sites.tp_norm(), TP, sync=True, tag=("E", "tp")))
    ops.append(Op(sites.world_flag(), DEFAULT, sync=True, tag=("E", "world")))
    return ops


def _find(prog: list[Op], tag: tuple) -> int:
    for i, op in enumerate(prog):
        if op.tag == tag:
            return i
    raise KeyError(tag)
