"""Simulate an NCCL training job and write NCCL-format flight-recorder dumps with a fault.

The simulated job is a Megatron-style tp x pp x dp run (global rank
``dp_idx*(pp*tp) + pp_idx*tp + tp_idx``, tensor parallel fastest). Every rank runs the same
training step: per microbatch a forward pass (receive activations from the previous stage,
a few sequence-parallel all_gather / reduce_scatter ops in its tensor-parallel group, send
activations to the next stage), then the backward passes mirroring it, then the end of the
step (tied-embedding all_reduce between the first and last stage, data-parallel gradient
all_reduce buckets whose size depends on the stage, a small tensor-parallel all_reduce and a
small all_reduce over the whole job whose result the CPU reads).

NCCL is asynchronous, and the dumps are built from a discrete scheduler that respects it:

* a rank's CPU enqueues ops until it has ``K`` ops in flight or reaches an op whose result it
  reads (the end-of-step all_reduce, or a blocking recv);
* each rank has one in-order stream: an op starts when it was enqueued and everything before
  it on that rank finished (plus the compute in between);
* a collective completes when every member has started it; a send/recv pair completes when
  both sides have started their half.

Ranks advance round-robin until nobody can move; whatever never completed is what the hang
leaves behind. Every live rank then dumps after the watchdog timeout.

Only the last iteration (the one where the fault happens) and one healthy iteration (used as
a template for the earlier, fully completed history) are scheduled op by op; the history
before them is laid out from the template, so 16k-rank jobs stay cheap.

Usage::

    python -m tools.simulate -o DIR --tp 2 --pp 2 --dp 2 --fault stall --rank 5 \
        [--timing] [--json] [--buffer-size N] [--jobs N]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import pickle
import random
import sys
import time
from array import array
from collections import deque
from pathlib import Path
from typing import Any

FORMAT_VERSION = "2.10"
COMM_LIB_VERSION = "2.21.5"
BACKEND = "nccl"

#: How the dumps are written: ``nccl`` (the legacy ProcessGroupNCCL recorder, torch <= 2.14
#: and ``nccl-legacy`` in 2.15), ``nccl2`` (torch 2.15's default NCCL, written by the recorder
#: hook: one-sided send/recv sizes, pg_status in op_id units, completed + retired or
#: scheduled and not retired, no coalesced work entries, and a file only from ranks whose own
#: ops timed out), ``mixed`` (odd ranks nccl2, even ranks legacy: a partial upgrade).
DIALECTS = ("nccl", "nccl2", "mixed")

FAULTS = (
    "none",
    "stall",
    "crash",
    "pipeline_stall",
    "pp_deadlock",
    "group_order",
    "gpu_stuck",
    "slow_gpu",
    "size_desync",
    "dtype_desync",
    "p2p_size_desync",
    "p2p_dtype_desync",
)

# Group roles. Each rank belongs to at most one group of each role.
DEFAULT, DP, PP, EMB, TP, MP = range(6)
ROLE_DESC = (
    "default_pg",
    "DATA_PARALLEL_GROUP",
    "PIPELINE_MODEL_PARALLEL_GROUP",
    "EMBEDDING_GROUP",
    "TENSOR_MODEL_PARALLEL_GROUP",
    "MODEL_PARALLEL_GROUP",
)

COLL, SEND, RECV = 0, 1, 2

# Time constants (nanoseconds).
US = 1_000
MS = 1_000_000
SEC = 1_000_000_000
WATCHDOG_TICK_NS = 100 * MS  # kWatchdogThreadSleepMillis
BATCH_OP_LEAD_NS = 12 * US  # an op inside batch_isend_irecv is recorded before its work
SYNC_NS = 25 * US  # CPU wake-up after a synchronising op finished
POST_STEP_NS = 18 * MS  # optimizer step and logging between iterations
DEFAULT_TIMEOUT_MS = 600_000
DEFAULT_INFLIGHT = 32

# Shape of the simulated model (a 7B-class GPT).
HIDDEN = 4096
SEQ = 4096
MICRO_BATCH = 1
VOCAB = 50304
LAYERS = 32
TP_OPS_PER_PASS = 4  # all_gather / reduce_scatter pairs for attention and MLP

NVLINK_BYTES_PER_NS = 150.0
NETWORK_BYTES_PER_NS = 20.0

BASE_EPOCH_NS = 1_760_000_000 * SEC

TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
MEG = "/opt/megatron-lm"

DTYPE_BYTES = {"BFloat16": 2, "Float": 4, "Half": 2, "Long": 8}


# --------------------------------------------------------------------------- topology


class Topology:
    """Ranks and process groups, created in one order that every rank shares."""

    def __init__(self, tp: int, pp: int, dp: int) -> None:
        if min(tp, pp, dp) < 1:
            raise ValueError("tp, pp and dp must be >= 1")
        self.tp, self.pp, self.dp = tp, pp, dp
        self.world = tp * pp * dp
        self.group_ranks: list[tuple[int, ...]] = []
        self.group_role: list[int] = []
        self.role_gid = [[-1] * 6 for _ in range(self.world)]
        # Creation order (global names "0", "1", ...): default, data parallel, pipeline
        # (each followed by its embedding group), tensor parallel, model parallel. Ranks
        # outside a group never create its backend, so the local pg_id counter of a
        # middle pipeline stage (no embedding group) runs behind the others.
        self._add(DEFAULT, range(self.world))
        for p in range(pp):
            for t in range(tp):
                self._add(DP, [self.rank(t, p, d) for d in range(dp)])
        for d in range(dp):
            for t in range(tp):
                ranks = [self.rank(t, p, d) for p in range(pp)]
                self._add(PP, ranks)
                if pp > 1:
                    self._add(EMB, [ranks[0], ranks[-1]])
        for d in range(dp):
            for p in range(pp):
                self._add(TP, [self.rank(t, p, d) for t in range(tp)])
        for d in range(dp):
            self._add(MP, [self.rank(t, p, d) for p in range(pp) for t in range(tp)])
        self.role_pgid = [[-1] * 6 for _ in range(self.world)]
        counters = [0] * self.world
        for gid, ranks in enumerate(self.group_ranks):
            role = self.group_role[gid]
            for r in ranks:
                self.role_pgid[r][role] = counters[r]
                counters[r] += 1

    def _add(self, role: int, ranks) -> None:
        gid = len(self.group_ranks)
        ranks = tuple(ranks)
        self.group_ranks.append(ranks)
        self.group_role.append(role)
        for r in ranks:
            self.role_gid[r][role] = gid

    def rank(self, t: int, p: int, d: int) -> int:
        return d * (self.pp * self.tp) + p * self.tp + t

    def coords(self, r: int) -> tuple[int, int, int]:
        return r % self.tp, (r // self.tp) % self.pp, r // (self.tp * self.pp)

    def group_name(self, gid: int) -> str:
        return str(gid)

    def group_size(self, gid: int) -> int:
        return len(self.group_ranks[gid])

    def members(self, r: int, role: int) -> tuple[int, ...]:
        gid = self.role_gid[r][role]
        return self.group_ranks[gid] if gid >= 0 else ()


# --------------------------------------------------------------------------- op sites


class Site:
    """One call site: what it records and how long it takes."""

    __slots__ = (
        "autograd",
        "coalesced",
        "comm_ns",
        "cpu_ns",
        "frames",
        "gpu_ns",
        "in_dtypes",
        "in_sizes",
        "key",
        "op",
        "out_dtypes",
        "out_sizes",
    )

    def __init__(self, key, op, in_sizes, in_dtypes, out_sizes, out_dtypes, frames,
                 autograd, cpu_ns, gpu_ns, comm_ns, coalesced=None):
        self.key = key
        self.op = op
        self.in_sizes = in_sizes
        self.in_dtypes = in_dtypes
        self.out_sizes = out_sizes
        self.out_dtypes = out_dtypes
        self.frames = frames
        self.autograd = autograd
        self.cpu_ns = cpu_ns
        self.gpu_ns = gpu_ns
        self.comm_ns = comm_ns
        # For an op issued inside batch_isend_irecv: the "nccl:coalesced" work recorded by
        # endCoalescing right after it. The op's own record has no CUDA events.
        self.coalesced = coalesced
        # For an op issued inside batch_isend_irecv: the "nccl:coalesced" work recorded by
        # endCoalescing right after it. The op's own record has no CUDA events.
        self.coalesced = coalesced


class Op:
    """One op of a rank's program: a site issued in a group (and, for p2p, to a peer)."""

    __slots__ = ("kind", "peer", "role", "site", "sync", "tag")

    def __init__(self, site: Site, role: int, kind: int = COLL, peer: int = -1,
                 sync: bool = False, tag: tuple = ()) -> None:
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


def _frames(*stack: tuple[str, str, int]) -> list[dict[str, Any]]:
    return [{"name": n, "filename": f, "line": ln} for n, f, ln in stack]


_C10D = f"{TORCH}/distributed/distributed_c10d.py"
_LOGGER = f"{TORCH}/distributed/c10d_logger.py"
_MODULE = f"{TORCH}/nn/modules/module.py"
_FUNCTION = f"{TORCH}/autograd/function.py"
_MAPPINGS = f"{MEG}/megatron/core/tensor_parallel/mappings.py"
_LAYERS = f"{MEG}/megatron/core/tensor_parallel/layers.py"
_SCHED = f"{MEG}/megatron/core/pipeline_parallel/schedules.py"
_P2P = f"{MEG}/megatron/core/pipeline_parallel/p2p_communication.py"
_TRAINING = f"{MEG}/megatron/training/training.py"
_FINALIZE = f"{MEG}/megatron/core/distributed/finalize_model_grads.py"


def _call(line_impl: int = 1762, line_wrapped: int = 1751) -> list[tuple[str, str, int]]:
    return [("_call_impl", _MODULE, line_impl), ("_wrapped_call_impl", _MODULE, line_wrapped)]


class SiteTable:
    """Call sites of the simulated Megatron step, shared by all ranks of a stage."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._cache: dict[tuple, Site] = {}
        pipelined = topo.pp > 1
        sched = (
            ("forward_backward_pipelining_without_interleaving", _SCHED, 1916)
            if pipelined
            else ("forward_backward_no_pipelining", _SCHED, 486)
        )
        self._sched_end = (
            ("forward_backward_pipelining_without_interleaving", _SCHED, 2035)
            if pipelined
            else ("forward_backward_no_pipelining", _SCHED, 537)
        )
        self._tail = [
            sched,
            ("train_step", _TRAINING, 1139),
            ("train", _TRAINING, 1831),
            ("pretrain", _TRAINING, 694),
            ("<module>", f"{MEG}/pretrain_gpt.py", 287),
        ]
        self._step_tail = [
            ("train_step", _TRAINING, 1187),
            ("train", _TRAINING, 1831),
            ("pretrain", _TRAINING, 694),
            ("<module>", f"{MEG}/pretrain_gpt.py", 287),
        ]
        tpn = topo.tp
        self.sp_seq = SEQ // tpn if tpn > 1 else SEQ  # sequence parallel shard
        self.layers_per_stage = max(1, LAYERS // topo.pp)

    # -- helpers
    def _get(self, key, build) -> Site:
        site = self._cache.get(key)
        if site is None:
            site = build()
            self._cache[key] = site
        return site

    def _model_forward(self, module_file: str, module_line: int) -> list:
        return (
            _call()
            + [("forward", module_file, module_line)]
            + _call()
            + [("forward", f"{MEG}/megatron/core/transformer/transformer_layer.py", 391)]
            + _call()
            + [("forward", f"{MEG}/megatron/core/transformer/transformer_block.py", 549)]
            + _call()
            + [("forward", f"{MEG}/megatron/core/models/gpt/gpt_model.py", 264)]
            + _call()
            + [
                ("forward_step", f"{MEG}/pretrain_gpt.py", 211),
                ("forward_step", _SCHED, 275),
            ]
            + self._tail
        )

    def _tp_compute_ns(self, backward: bool) -> int:
        per_op = 600 * US * self.layers_per_stage // TP_OPS_PER_PASS
        per_op = per_op * 4 // max(self.topo.tp, 1) if self.topo.tp > 4 else per_op
        return per_op * (2 if backward else 1)

    def _coll_ns(self, nbytes: int, group_size: int, algo: float, bw: float) -> int:
        if group_size <= 1:
            return 8 * US
        return int(18 * US + algo * (group_size - 1) / group_size * nbytes / bw)

    # -- tensor parallel (sequence parallel) ops
    def tp_op(self, index: int, backward: bool, variant: str = "") -> Site:
        """Forward: all_gather, reduce_scatter, all_gather, reduce_scatter (attention, MLP).

        Backward mirrors it: reduce_scatter for a forward all_gather and vice versa.
        """
        return self._get(("tp", index, backward, variant), lambda: self._tp_op(index, backward, variant))

    def _tp_op(self, index: int, backward: bool, variant: str) -> Site:
        tpn = self.topo.tp
        gather = (index % 2 == 0) != backward
        module = (
            (f"{MEG}/megatron/core/transformer/attention.py", 566)
            if index < 2
            else (f"{MEG}/megatron/core/transformer/mlp.py", 142)
        )
        shard = [self.sp_seq, MICRO_BATCH, HIDDEN]
        full = [self.sp_seq * tpn, MICRO_BATCH, HIDDEN]
        dtype = "BFloat16"
        if variant == "size":
            shard = [self.sp_seq - 256 // tpn if self.sp_seq > 256 else self.sp_seq + 64,
                     MICRO_BATCH, HIDDEN]
            full = [shard[0] * tpn, MICRO_BATCH, HIDDEN]
        elif variant == "dtype":
            dtype = "Float"
        if gather:
            op, ins, outs = "_all_gather_base", [shard], [full]
            c10d = ("all_gather_into_tensor", _C10D, 3795)
        else:
            op, ins, outs = "_reduce_scatter_base", [full], [shard]
            c10d = ("reduce_scatter_tensor", _C10D, 4333)
        if backward:
            if gather:
                frames = [c10d, ("wrapper", _LOGGER, 81),
                          ("_gather_along_first_dim", _MAPPINGS, 115),
                          ("backward", _MAPPINGS, 306), ("apply", _FUNCTION, 307)]
            else:
                frames = [c10d, ("wrapper", _LOGGER, 81),
                          ("backward", _LAYERS, 560), ("apply", _FUNCTION, 307)]
        elif gather:
            frames = [c10d, ("wrapper", _LOGGER, 81),
                      ("_gather_along_first_dim", _MAPPINGS, 115),
                      ("forward", _LAYERS, 484), ("apply", _FUNCTION, 575),
                      ("linear_with_grad_accumulation_and_async_allreduce", _LAYERS, 735),
                      ("forward", _LAYERS, 975)] + self._model_forward(*module)
        else:
            frames = [c10d, ("wrapper", _LOGGER, 81),
                      ("_reduce_scatter_along_first_dim", _MAPPINGS, 178),
                      ("forward", _MAPPINGS, 300), ("apply", _FUNCTION, 575),
                      ("reduce_scatter_to_sequence_parallel_region", _MAPPINGS, 511),
                      ("forward", _LAYERS, 1221)] + self._model_forward(*module)
        nbytes = full[0] * full[1] * full[2] * DTYPE_BYTES[dtype]
        return Site(
            key=("tp", index, backward, variant), op=op,
            in_sizes=ins, in_dtypes=[dtype], out_sizes=outs, out_dtypes=[dtype],
            frames=_frames(*frames), autograd=backward,
            cpu_ns=(90 if backward else 160) * US,
            gpu_ns=self._tp_compute_ns(backward),
            comm_ns=self._coll_ns(nbytes, tpn, 1.0, NVLINK_BYTES_PER_NS),
        )

    # -- pipeline p2p
    def p2p(self, kind: int, forward: bool, batched: bool = False, variant: str = "") -> Site:
        return self._get(("p2p", kind, forward, batched, variant),
                         lambda: self._p2p(kind, forward, batched, variant))

    def _p2p(self, kind: int, forward: bool, batched: bool, variant: str = "") -> Site:
        # variant "size": another sequence length; "dtype": float32 activations.
        shape = [self.sp_seq * (2 if variant == "size" else 1), MICRO_BATCH, HIDDEN]
        dtype = "Float" if variant == "dtype" else "BFloat16"
        if kind == SEND:
            api = "send_forward" if forward else "send_backward"
            c10d, p2p_line, comm_line = ("isend", _C10D, 2375), 237, 372
        else:
            api = "recv_forward" if forward else "recv_backward"
            c10d, p2p_line, comm_line = ("irecv", _C10D, 2420), 256, 372
        caller = [(api, _P2P, {"send_forward": 480, "recv_forward": 430,
                               "send_backward": 505, "recv_backward": 455}[api]),
                  (api, _SCHED, {"send_forward": 1708, "recv_forward": 1691,
                                 "send_backward": 1742, "recv_backward": 1725}[api])]
        caller += self._tail
        coalesced = None
        if batched:
            batch = [("batch_isend_irecv", _C10D, 2786), ("_batched_p2p_ops", _P2P, 170),
                     ("_communicate", _P2P, 363)]
            frames = [c10d] + batch + caller
            coalesced = Site(
                key=("coalesced", kind, forward), op="coalesced",
                in_sizes=[], in_dtypes=[], out_sizes=[], out_dtypes=[],
                frames=_frames(("_coalescing_manager", _C10D, 2545),
                               ("__exit__", "/usr/lib/python3.12/contextlib.py", 144),
                               *batch, *caller),
                autograd=False, cpu_ns=0, gpu_ns=0, comm_ns=0)
        else:
            frames = [c10d, ("_p2p_ops", _P2P, p2p_line), ("_communicate", _P2P, comm_line)] + caller
        nbytes = shape[0] * shape[1] * shape[2] * 2
        gpu = (350 if forward else 500) * US if kind == SEND else 40 * US
        return Site(
            key=("p2p", kind, forward, batched, variant), op="send" if kind == SEND else "recv",
            in_sizes=[shape], in_dtypes=[dtype], out_sizes=[shape], out_dtypes=[dtype],
            frames=_frames(*frames), autograd=False,
            cpu_ns=(60 if batched else 45) * US, gpu_ns=gpu,
            comm_ns=int(15 * US + nbytes / NETWORK_BYTES_PER_NS),
            coalesced=coalesced,
        )

    # -- end of step
    def stage_params(self, stage: int) -> int:
        params = self.layers_per_stage * 12 * HIDDEN * HIDDEN
        if stage == 0:
            params += VOCAB * HIDDEN
        if stage == self.topo.pp - 1:
            params += VOCAB * HIDDEN if self.topo.pp > 1 else 0
        return params // self.topo.tp

    def dp_bucket(self, stage: int, bucket: int, variant: str = "") -> Site:
        return self._get(("dp", stage, bucket, variant), lambda: self._dp_bucket(stage, bucket, variant))

    def _dp_bucket(self, stage: int, bucket: int, variant: str) -> Site:
        total = self.stage_params(stage)
        first = total * 2 // 5
        numel = first if bucket == 0 else total - first
        dtype = "Float"
        if variant == "size":
            numel -= 4096
        elif variant == "dtype":
            dtype = "BFloat16"
        frames = [("all_reduce", _C10D, 2806), ("wrapper", _LOGGER, 81),
                  ("start_grad_sync", f"{MEG}/megatron/core/distributed/param_and_grad_buffer.py", 427),
                  ("start_grad_sync", f"{MEG}/megatron/core/distributed/distributed_data_parallel.py", 420),
                  ("finish_grad_sync", f"{MEG}/megatron/core/distributed/distributed_data_parallel.py", 443),
                  ("finalize_model_grads", _FINALIZE, 268), self._sched_end] + self._tail[1:]
        return Site(
            key=("dp", stage, bucket, variant), op="all_reduce",
            in_sizes=[[numel]], in_dtypes=[dtype], out_sizes=[[numel]], out_dtypes=[dtype],
            frames=_frames(*frames), autograd=False,
            cpu_ns=220 * US, gpu_ns=(900 if bucket == 0 else 300) * US,
            comm_ns=self._coll_ns(numel * 4, self.topo.dp, 2.0, NETWORK_BYTES_PER_NS),
        )

    def emb(self) -> Site:
        return self._get(("emb",), self._emb)

    def _emb(self) -> Site:
        shape = [VOCAB // self.topo.tp, HIDDEN]
        frames = [("all_reduce", _C10D, 2806), ("wrapper", _LOGGER, 81),
                  ("_allreduce_word_embedding_grads", _FINALIZE, 153),
                  ("_allreduce_embedding_grads", _FINALIZE, 171),
                  ("finalize_model_grads", _FINALIZE, 285), self._sched_end] + self._tail[1:]
        return Site(
            key=("emb",), op="all_reduce",
            in_sizes=[shape], in_dtypes=["Float"], out_sizes=[shape], out_dtypes=["Float"],
            frames=_frames(*frames), autograd=False,
            cpu_ns=150 * US, gpu_ns=400 * US,
            comm_ns=self._coll_ns(shape[0] * shape[1] * 4, 2, 2.0, NETWORK_BYTES_PER_NS),
        )

    def tp_norm(self, variant: str = "") -> Site:
        return self._get(("tpnorm", variant), lambda: self._small(
            ("tpnorm", variant), self.topo.tp, NVLINK_BYTES_PER_NS,
            [("all_reduce", _C10D, 2806), ("wrapper", _LOGGER, 81),
             ("get_grad_norm_fp32", f"{MEG}/megatron/core/optimizer/clip_grads.py", 125),
             ("get_grad_norm", f"{MEG}/megatron/core/optimizer/optimizer.py", 213),
             ("step", f"{MEG}/megatron/core/optimizer/optimizer.py", 489)] + self._step_tail,
            variant))

    def world_flag(self, variant: str = "") -> Site:
        return self._get(("world", variant), lambda: self._small(
            ("world", variant), self.topo.world, NETWORK_BYTES_PER_NS,
            [("all_reduce", _C10D, 2806), ("wrapper", _LOGGER, 81)] + self._step_tail,
            variant))

    def _small(self, key, group_size, bw, stack, variant) -> Site:
        numel, dtype = 1, "Float"
        if variant == "size":
            numel = 2
        elif variant == "dtype":
            dtype = "Double"
        return Site(
            key=key, op="all_reduce",
            in_sizes=[[numel]], in_dtypes=[dtype], out_sizes=[[numel]], out_dtypes=[dtype],
            frames=_frames(*stack), autograd=False,
            cpu_ns=260 * US, gpu_ns=1200 * US,
            comm_ns=self._coll_ns(64, group_size, 2.0, bw) + 10 * US * max(
                0, int(math.log2(max(group_size, 1)))),
        )

    # -- the op mix: ops whose recorded sides and sizes differ per rank by design
    MIX_OPS = ("gather", "scatter", "reduce", "broadcast", "all_to_all", "all_gather",
               "reduce_scatter", "broadcast_object_list", "all_gather_object")

    def mix(self, kind: str, index: int) -> Site:
        """An op of the mix as group rank ``index`` of the default group records it."""
        return self._get(("mix", kind, index), lambda: self._mix(kind, index))

    def _mix(self, kind: str, index: int) -> Site:
        world = self.topo.world
        n = 1024
        one, flt = [[n]], ["Float"]
        ins, idt, outs, odt = one, flt, one, flt
        op = kind
        if kind == "gather":  # only the root records the gathered outputs
            outs, odt = ([[n]] * world, flt * world) if index == 0 else ([], [])
        elif kind == "scatter":  # only the source (the last rank) records the inputs
            last = index == world - 1
            ins, idt = ([[n]] * world, flt * world) if last else ([], [])
        elif kind == "all_to_all":  # all_to_all_single with uneven splits
            ins, outs = [[(index + 1) * world * 64]], [[world * (world + 1) // 2 * 64]]
        elif kind == "all_gather":  # NCCL's uneven all_gather: each input is its own slot
            ins = [[(index + 1) * 64]]
            outs, odt = [[(q + 1) * 64] for q in range(world)], flt * world
        elif kind == "reduce_scatter":  # uneven reduce_scatter: each output is its own slot
            ins, idt = [[(q + 1) * 64] for q in range(world)], flt * world
            outs = [[(index + 1) * 64]]
        elif kind == "broadcast_object_list":  # a Long size, then the pickled bytes
            op, ins, idt, outs, odt = "broadcast", [[1]], ["Long"], [[1]], ["Long"]
        elif kind == "all_gather_object":  # Long sizes, then bytes padded to the largest
            op, ins, idt = "all_gather", [[1]], ["Long"]
            outs, odt = [[1]] * world, ["Long"] * world
        frames = [(kind, _C10D, 4000 + self.MIX_OPS.index(kind)), ("wrapper", _LOGGER, 81)]
        frames += self._step_tail
        return Site(
            key=("mix", kind, index), op=op, in_sizes=ins, in_dtypes=idt, out_sizes=outs,
            out_dtypes=odt, frames=_frames(*frames), autograd=False, cpu_ns=120 * US,
            gpu_ns=150 * US, comm_ns=self._coll_ns(n * 4 * 2, world, 1.0, NETWORK_BYTES_PER_NS),
        )


def build_program(topo: Topology, sites: SiteTable, stage: int, microbatches: int,
                  batch_p2p: bool = False, mix_rank: int | None = None) -> list[Op]:
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
        for b in range(2):
            ops.append(Op(sites.dp_bucket(stage, b), DP, tag=("E", "dp", b)))
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


# --------------------------------------------------------------------------- scheduler


class _Inst:
    """One collective instance or one send/recv pair, across its participants."""

    __slots__ = ("comm_ns", "count", "enq", "maxready", "parts", "size", "stuck")

    def __init__(self, size: int, comm_ns: int, stuck: bool) -> None:
        self.size = size
        self.enq = 0
        self.count = 0
        self.maxready = 0
        self.parts: list[tuple[int, int]] = []
        self.comm_ns = comm_ns
        self.stuck = stuck


class Schedule:
    """Per-rank times of one iteration, relative to its start (-1: never happened)."""

    def __init__(self, enq, ready, done):
        self.enq = enq  # enqueue (time_created) of each enqueued op
        self.ready = ready  # the op reached the head of the stream (its kernel started)
        self.done = done  # the op finished on the GPU


def run_schedule(
    topo: Topology,
    progs: list[list[Op]],
    *,
    rng: random.Random,
    inflight: int,
    limit: dict[int, int] | None = None,
    frozen: dict[int, int] | None = None,
    slow: dict[int, tuple[int, int, float]] | None = None,
    stuck_keys: set | None = None,
    speed: list[float] | None = None,
) -> Schedule:
    """Round-robin over ranks; each rank enqueues until it blocks. Returns the times."""
    n = topo.world
    limit = limit or {}
    frozen = frozen or {}
    slow = slow or {}
    stuck_keys = stuck_keys or set()
    speed = speed or [1.0] * n
    rand = rng.random
    role_gid = topo.role_gid
    tpn, ppn = topo.tp, topo.pp
    group_ranks = topo.group_ranks

    pc = [0] * n
    head = [0] * n
    cpu = [int(rand() * 200 * US) for _ in range(n)]
    gpu0 = [c + int(rand() * 50 * US) for c in cpu]
    blocked = [False] * n
    queued = [True] * n
    enq: list[list[int]] = [[] for _ in range(n)]
    ready: list[list[int]] = [[-1] * len(p) for p in progs]
    done: list[list[int]] = [[-1] * len(p) for p in progs]
    opinst: list[list[_Inst]] = [[] for _ in range(n)]
    coll_cnt = [[0] * 6 for _ in range(n)]
    p2p_cnt: list[dict] = [dict() for _ in range(n)]
    insts: dict[tuple, _Inst] = {}
    work = deque(range(n))

    def start(r0: int, i0: int) -> None:
        stack = [(r0, i0)]
        while stack:
            r, i = stack.pop()
            if frozen.get(r, 1 << 62) <= i:
                continue  # the GPU never gets to this op
            op = progs[r][i]
            prev = done[r][i - 1] if i else gpu0[r]
            comp = op.site.gpu_ns * speed[r] * (0.96 + 0.08 * rand())
            sl = slow.get(r)
            if sl is not None and sl[0] <= i < sl[1]:
                comp *= sl[2]
            e = enq[r][i]
            rd = prev + int(comp)
            if rd < e:
                rd = e + int(3 * US * rand())
            ready[r][i] = rd
            inst = opinst[r][i]
            inst.count += 1
            inst.parts.append((r, i))
            if rd > inst.maxready:
                inst.maxready = rd
            if inst.count == inst.size and not inst.stuck:
                t_done = inst.maxready + int(inst.comm_ns * (0.95 + 0.1 * rand()))
                for q, j in inst.parts:
                    done[q][j] = t_done
                    head[q] = j + 1
                    if j + 1 < pc[q]:
                        stack.append((q, j + 1))
                    if blocked[q]:
                        blocked[q] = False
                        if not queued[q]:
                            queued[q] = True
                            work.append(q)

    while work:
        r = work.popleft()
        queued[r] = False
        prog = progs[r]
        lim = limit.get(r, len(prog))
        p = pc[r]
        enq_r = enq[r]
        done_r = done[r]
        rg = role_gid[r]
        while p < lim:
            op = prog[p]
            t = cpu[r] + int(op.site.cpu_ns * (0.8 + 0.4 * rand()))
            if p:
                if prog[p - 1].sync:
                    if head[r] < p:
                        blocked[r] = True
                        break
                    w = done_r[p - 1] + SYNC_NS
                    if w > t:
                        t = w
                if p >= inflight:
                    if head[r] <= p - inflight:
                        blocked[r] = True
                        break
                    w = done_r[p - inflight]
                    if w > t:
                        t = w
            enq_r.append(t)
            cpu[r] = t
            gid = rg[op.role]
            if op.kind == COLL:
                cnt = coll_cnt[r]
                cnt[op.role] += 1
                key = (gid, cnt[op.role])
                size = len(group_ranks[gid])
            else:
                peer = (r // (tpn * ppn)) * (ppn * tpn) + op.peer * tpn + r % tpn
                src, dst = (r, peer) if op.kind == SEND else (peer, r)
                ck = (op.kind, peer)
                c = p2p_cnt[r].get(ck, 0) + 1
                p2p_cnt[r][ck] = c
                key = (gid, src, dst, c)
                size = 2
            inst = insts.get(key)
            if inst is None:
                inst = _Inst(size, op.site.comm_ns, key in stuck_keys)
                insts[key] = inst
            inst.enq += 1
            if inst.enq == inst.size:
                del insts[key]
            opinst[r].append(inst)
            p += 1
            pc[r] = p
            if head[r] == p - 1:
                start(r, p - 1)
    return Schedule(enq, ready, done)


# --------------------------------------------------------------------------- faults


class FaultPlan:
    def __init__(self) -> None:
        self.limit: dict[int, int] = {}
        self.frozen: dict[int, int] = {}
        self.blind: dict[int, int] = {}  # rank -> op index from which its watchdog sees nothing
        self.slow: dict[int, tuple[int, int, float]] = {}
        self.stuck_ops: list[tuple[int, int]] = []  # (rank, op index) whose instance hangs
        self.progs: dict[int, list[Op]] = {}  # ranks whose last iteration differs
        self.crashed: set[int] = set()
        self.culprits: list[int] = []
        self.deadlock = False
        self.description = ""
        self.target: tuple[int, int] | None = None  # (rank, op index) named in details

    def desync(self, r: int, prog: list[Op], idx: int, site: Site) -> None:
        """Rank r issues op ``idx`` of ``prog`` (its program) from ``site`` instead: its peers'
        side disagrees, and that op never completes. Rank r is the culprit."""
        prog = list(prog)
        prog[idx] = prog[idx].copy(site=site)
        self.progs[r] = prog
        self.stuck_ops = [(r, idx)]
        self.target = (r, idx)
        self.culprits = [r]


def _pick_rank(topo: Topology, rng: random.Random, ok) -> int:
    candidates = [r for r in range(topo.world) if ok(r)]
    if not candidates:
        raise ValueError("no rank of this topology can carry that fault")
    return rng.choice(candidates)


def plan_fault(fault: str, topo: Topology, sites: SiteTable, base: list[list[Op]],
               fault_rank: int | None, microbatches: int, rng: random.Random) -> tuple[int | None, FaultPlan]:
    plan = FaultPlan()
    if fault == "none":
        plan.description = "Healthy job: every op of every rank completed; the dump was requested."
        return None, plan
    if topo.world < 2:
        raise ValueError(f"fault {fault!r} needs at least two ranks")
    tp, pp, dp = topo.tp, topo.pp, topo.dp
    def stage(r: int) -> int:
        return topo.coords(r)[1]

    def check(r: int) -> int:
        if not 0 <= r < topo.world:
            raise ValueError(f"fault rank {r} outside world of {topo.world}")
        return r

    m = rng.randrange(microbatches)
    j = rng.randrange(TP_OPS_PER_PASS)

    def coll_target(r: int, backward: bool = False) -> tuple[int, int]:
        """A collective of rank r's last iteration: TP if any, else DP, else the world flag."""
        prog = base[r]
        if tp > 1:
            return _find(prog, ("B" if backward else "F", m, "tp", j)), TP
        if dp > 1:
            return _find(prog, ("E", "dp", rng.randrange(2))), DP
        return _find(prog, ("E", "world")), DEFAULT

    if fault in ("stall", "crash"):
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        idx, role = coll_target(r, backward=(fault == "crash"))
        if tp == 1 and pp > 1 and dp == 1:
            # No collective before the world flag: stop before a send/recv instead.
            idx = _find(base[r], ("F", m, "send" if stage(r) < pp - 1 else "recv"))
            role = PP
        plan.limit[r] = idx
        plan.target = (r, idx)
        plan.culprits = [r]
        if fault == "crash":
            plan.crashed.add(r)
            plan.description = (
                f"Rank {r} crashed (process died) just before issuing "
                f"{ROLE_DESC[role]} op #{idx} of the step; it wrote no dump and every rank "
                "that needs it waits in a collective or recv it never joins.")
        else:
            plan.description = (
                f"Rank {r} stopped enqueuing (stuck in compute) just before a "
                f"{ROLE_DESC[role]} collective; its peers enqueued that collective and ran "
                "ahead until they blocked, and the ranks that need them wait in turn.")
        return r, plan

    if fault == "pipeline_stall":
        if pp < 2:
            raise ValueError("pipeline_stall needs pp >= 2")
        r = check(fault_rank) if fault_rank is not None else _pick_rank(
            topo, rng, lambda q: stage(q) < pp - 1)
        if stage(r) == pp - 1:
            raise ValueError("pipeline_stall: the fault rank must not be on the last stage")
        prog = list(base[r])
        first = _find(prog, ("F", m, "send"))
        plan.progs[r] = [op for op in prog if not (op.tag[:1] == ("F",) and op.tag[2:] == ("send",)
                                                   and op.tag[1] >= m)]
        plan.target = (r, first)
        plan.culprits = [r]
        nxt = topo.rank(topo.coords(r)[0], stage(r) + 1, topo.coords(r)[2])
        plan.description = (
            f"Rank {r} (pipeline stage {stage(r)}) stopped sending activations to rank {nxt} "
            f"from microbatch {m} on while still running everything else: rank {nxt} waits "
            f"in a recv whose send was never posted, and rank {r} later waits for gradients "
            "that can never come.")
        return r, plan

    if fault == "pp_deadlock":
        if pp < 2:
            raise ValueError("pp_deadlock needs pp >= 2")
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        t_, s_, d_ = topo.coords(r)
        a, b = (r, topo.rank(t_, s_ + 1, d_)) if s_ < pp - 1 else (topo.rank(t_, s_ - 1, d_), r)
        last = microbatches - 1
        prog = list(base[a])
        i_send = _find(prog, ("F", last, "send"))
        i_recv = _find(prog, ("B", 0, "recv"))
        recv = prog.pop(i_recv).copy(sync=True)
        prog.insert(i_send, recv)
        plan.progs[a] = prog
        progb = list(base[b])
        i_b = _find(progb, ("F", last, "recv"))
        progb[i_b] = progb[i_b].copy(sync=True)
        plan.progs[b] = progb
        plan.target = (a, i_send)
        plan.culprits = sorted({a, b})
        plan.deadlock = True
        plan.description = (
            f"Pipeline deadlock: rank {a} (stage {stage(a)}) posts a blocking recv of "
            f"gradients from rank {b} before sending it the activations of microbatch "
            f"{last}, while rank {b} (stage {stage(b)}) blocks in its recv of those "
            "activations before sending gradients: each waits for the other.")
        return r, plan

    if fault == "group_order":
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        prog = list(base[r])
        iw = _find(prog, ("E", "world"))
        if tp > 1:
            io, role = _find(prog, ("E", "tp")), TP
        elif dp > 1:
            io, role = _find(prog, ("E", "dp", 1)), DP
        elif pp > 1 and stage(r) in (0, pp - 1):
            io, role = _find(prog, ("E", "emb")), EMB
        else:
            raise ValueError("group_order needs tp > 1, dp > 1, or an embedding group")
        world_op = prog.pop(iw)
        prog.insert(io, world_op)
        plan.progs[r] = prog
        plan.target = (r, io + 1)  # the op it delays (never enqueued: the world op blocks)
        plan.culprits = [r]
        plan.deadlock = True
        plan.description = (
            f"Rank {r} issued the end-of-step all_reduce over the whole job (default_pg, "
            f"whose result it reads) before its {ROLE_DESC[role]} all_reduce, while every "
            "other rank issues them in the opposite order: its peers wait in the "
            f"{ROLE_DESC[role]} op for rank {r}, and rank {r} waits in default_pg for them "
            "(a cycle across two groups).")
        return r, plan

    if fault == "gpu_stuck":
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        idx, role = coll_target(r)
        members = topo.members(r, role)
        gid = topo.role_gid[r][role]
        plan.stuck_ops = [(r, idx)]
        plan.target = (r, idx)
        plan.culprits = sorted(members)
        plan.description = (
            f"Every member of {ROLE_DESC[role]} {gid} ({', '.join(map(str, members))}) "
            "enqueued and started the same collective, and none completed: a network or GPU "
            "fault inside the collective, not a rank that failed to call it.")
        return r, plan

    if fault == "slow_gpu":
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        idx, role = coll_target(r, backward=True)
        lag = min(12, idx)
        plan.frozen[r] = idx
        plan.slow[r] = (idx - lag, idx, 8.0)
        plan.blind[r] = idx - lag
        plan.target = (r, idx)
        plan.culprits = [r]
        plan.description = (
            f"Rank {r}'s GPU degraded: from {lag} ops before the hang its kernels ran about 8x "
            "slower and its watchdog stopped observing completions (its dump shows ops as "
            "not completed that its peers' dumps show completed), then the GPU stopped in "
            f"compute before a {ROLE_DESC[role]} collective, which it never started while its "
            "peers did. Its CPU kept enqueuing as far as its peers.")
        return r, plan

    if fault in ("size_desync", "dtype_desync"):
        r = check(fault_rank) if fault_rank is not None else rng.randrange(topo.world)
        variant = "size" if fault == "size_desync" else "dtype"
        idx, role = coll_target(r)
        op = base[r][idx]
        if role == TP:
            site = sites.tp_op(op.tag[3], False, variant)
        elif role == DP:
            site = sites.dp_bucket(stage(r), op.tag[2], variant)
        else:
            site = sites.world_flag(variant)
        plan.desync(r, base[r], idx, site)
        what = "size" if variant == "size" else "dtype"
        plan.description = (
            f"Rank {r} enqueued a {ROLE_DESC[role]} collective with a different {what} than "
            "its peers; every member enqueued it and it never completed.")
        return r, plan

    if fault in ("p2p_size_desync", "p2p_dtype_desync"):
        if pp < 2:
            raise ValueError(f"fault {fault!r} needs at least two pipeline stages")
        r = (check(fault_rank) if fault_rank is not None
             else _pick_rank(topo, rng, lambda q: stage(q) < pp - 1))
        if stage(r) >= pp - 1:
            raise ValueError(f"rank {r} is the last pipeline stage: it sends no activations")
        variant = "size" if fault == "p2p_size_desync" else "dtype"
        idx = _find(base[r], ("F", m, "send"))
        batched = base[r][idx].site.coalesced is not None
        plan.desync(r, base[r], idx, sites.p2p(SEND, True, batched, variant))
        what = "a different shape" if variant == "size" else "another dtype"
        plan.description = (
            f"Rank {r} (pipeline stage {stage(r)}) sent the activations of microbatch {m} with "
            f"{what} than the next stage's recv expects; both posted the pair and it never "
            "completed, and the pipeline backed up behind it.")
        return r, plan

    raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")


# --------------------------------------------------------------------------- dumps


def _phase(r: int, gid: int, seed: int) -> int:
    x = (r * 2654435761 + gid * 40503 + seed * 97 + 12345) & 0xFFFFFFFF
    x = (x ^ (x >> 13)) * 1274126177 & 0xFFFFFFFF
    return x % WATCHDOG_TICK_NS


def _iteration_start(t0: int, period: int, seed: int, k: int) -> int:
    """Start of iteration k: one period apart plus up to 2% of jitter, never overlapping."""
    x = ((k * 2654435761 + seed * 977) & 0xFFFFFFFF) % 997
    return t0 + k * period + k * (period // 100) + (period // 100) * x // 997


def _float32(x: float) -> float:
    """cudaEventElapsedTime returns a float: keep single precision."""
    return array("f", (x,))[0]


class _Job:
    """Everything the writers need; shared with worker processes by fork."""

    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)
        self._ranks_str: dict[int, str] = {}

    def ranks_str(self, gid: int) -> str:
        """pg_config's ``ranks`` value, e.g. ``"[0, 1, 2]"`` (built once per group)."""
        s = self._ranks_str.get(gid)
        if s is None:
            s = "[" + ", ".join(map(str, self.topo.group_ranks[gid])) + "]"
            self._ranks_str[gid] = s
        return s


_JOB: _Job | None = None


def _counters(prog: list[Op]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per op: collective and p2p counters of its group after it; and per-role totals."""
    cc = [0] * 6
    pc = [0] * 6
    coll_after, p2p_after = [], []
    for op in prog:
        if op.kind == COLL:
            cc[op.role] += 1
        else:
            pc[op.role] += 1
        coll_after.append(cc[op.role])
        p2p_after.append(pc[op.role])
    return coll_after, p2p_after, cc, pc


def _thread_ids(r: int, seed: int) -> tuple[str, str]:
    base = 139_800_000_000_000 + ((r * 7919 + seed * 31) % 65536) * 4096 * 256
    return str(base + 1792), str(base + 4096 * 64 + 1600)


def build_dump(r: int) -> dict[str, Any]:
    """The flight-recorder dump of rank r (pickle form)."""
    job = _JOB
    assert job is not None
    topo: Topology = job.topo
    s_ = topo.coords(r)[1]
    prog_h: list[Op] = job.base[r]
    prog_f: list[Op] = job.fault_progs.get(r, prog_h)
    sch_h: Schedule = job.healthy
    sch_f: Schedule = job.faulty
    F: int = job.iterations
    B: int = job.buffer_size
    timing: bool = job.timing
    with_frames: bool = job.with_frames
    seed: int = job.seed
    dump_t: int = job.dump_times[r]
    timeout_ms: int = job.timeout_ms
    P: int = job.period
    T0: int = job.t0

    rg = topo.role_gid[r]
    rpg = topo.role_pgid[r]
    main_id, grad_id = _thread_ids(r, seed)
    grad_name = f"pt_autograd_{r % 8}"
    pgtuple = {role: (topo.group_name(rg[role]), ROLE_DESC[role]) for role in range(6) if rg[role] >= 0}
    phases = {role: _phase(r, rg[role], seed) for role in pgtuple}

    statics: dict[tuple, tuple] = {}

    def static(op: Op, part: int = 0) -> tuple:
        key = (id(op.site), op.role, op.kind, op.peer, part)
        st = statics.get(key)
        if st is None:
            site = op.site if part != 2 else op.site.coalesced
            if part == 2:
                pname = "nccl:coalesced"
            elif op.kind == SEND:
                pname = f"nccl:send {s_}->{op.peer}"
            elif op.kind == RECV:
                pname = f"nccl:recv {s_}<-{op.peer}"
            else:
                pname = "nccl:" + site.op
            st = (
                rpg[op.role], pgtuple[op.role],
                grad_name if site.autograd else "python3",
                grad_id if site.autograd else main_id,
                pname, site.in_sizes, site.in_dtypes, site.out_sizes, site.out_dtypes,
                op.kind != COLL, site.frames if with_frames else None, phases[op.role],
            )
            statics[key] = st
        return st

    ca_h, pa_h, ncoll, np2p = _counters(prog_h)
    ca_f, pa_f, _, _ = _counters(prog_f)

    enq_h, rdy_h, don_h = sch_h.enq[r], sch_h.ready[r], sch_h.done[r]
    enq_f, rdy_f, don_f = sch_f.enq[r], sch_f.ready[r], sch_f.done[r]
    blind_t = job.blind_times.get(r)
    if blind_t is not None:
        # Events that fired after the watchdog stopped observing were never seen.
        rdy_f = [x if 0 <= x < blind_t else -1 for x in rdy_f]
        don_f = [x if 0 <= x < blind_t else -1 for x in don_f]

    def records(prog: list[Op], n_ops: int) -> list[tuple[int, int]]:
        """(op index, part): part 0 a plain op, 1 an op inside batch_isend_irecv (no
        events: it stays scheduled forever), 2 the coalesced work that follows it."""
        out = []
        for j in range(n_ops):
            if prog[j].site.coalesced is not None:
                out.append((j, 1))
                out.append((j, 2))
            else:
                out.append((j, 0))
        return out

    rec_h = records(prog_h, len(prog_h))
    rec_f = records(prog_f, len(enq_f))
    nT = len(rec_h)
    nF = len(rec_f)
    total = F * nT + nF
    lo = max(0, total - B)

    def it_start(k: int) -> int:
        return _iteration_start(T0, P, seed, k)

    entries: list[dict[str, Any]] = []
    append = entries.append
    tick = WATCHDOG_TICK_NS
    stamp = 0  # dump-time getTime() advance per entry

    def emit(rid, st, coll, p2p, created, rdy, don):
        nonlocal stamp
        (pg_id, pgt, tname, tid, pname, ins, idt, outs, odt, is_p2p, frames, phase) = st
        started = completed = None
        duration = None
        if don >= 0:
            state = "completed"
            # first watchdog pass at or after completion
            completed = don + (phase - don) % tick + 2_000 + (rid % 17) * 1_300
            retired = True
            if timing:
                started = completed - 300 - (rid % 5) * 40
                duration = _float32((don - rdy) / 1e6)
        else:
            retired = False
            if timing and rdy >= 0:
                state = "started"
                stamp += 1
                started = dump_t + stamp * 650
            else:
                state = "scheduled"
        e: dict[str, Any] = {}
        if frames is not None:
            e["frames"] = frames
        e["record_id"] = rid
        e["pg_id"] = pg_id
        e["process_group"] = pgt
        e["thread_name"] = tname
        e["thread_id"] = tid
        e["collective_seq_id"] = coll
        e["p2p_seq_id"] = p2p
        e["op_id"] = coll + p2p
        e["profiling_name"] = pname
        e["time_created_ns"] = created
        if duration is not None:
            e["duration_ms"] = duration
        e["input_sizes"] = ins
        e["input_dtypes"] = idt
        e["output_sizes"] = outs
        e["output_dtypes"] = odt
        e["state"] = state
        e["time_discovered_started_ns"] = started
        e["time_discovered_completed_ns"] = completed
        e["retired"] = retired
        e["timeout_ms"] = timeout_ms
        e["is_p2p"] = is_p2p
        append(e)

    # Healthy history, laid out from the template iteration (the hot loop: dict literals).
    tmpl = []
    scales = (0.94, 0.97, 1.0, 1.03, 1.06)  # run-to-run spread of kernel durations
    all_durs = array("f", [(d - s) / 1e6 * v for d, s in zip(don_h, rdy_h) for v in scales]).tolist()
    for j, part in rec_h:
        op = prog_h[j]
        role = op.role
        durs = all_durs[5 * j:5 * j + 5]
        e_rel = enq_h[j] - (BATCH_OP_LEAD_NS if part == 1 else 0)
        tmpl.append((static(op, part), ncoll[role], np2p[role], ca_h[j], pa_h[j], e_rel,
                     don_h[j] if part != 1 else -1, durs))
    g = lo
    while g < F * nT:
        k, j0 = divmod(g, nT)
        j1 = min(nT, F * nT - k * nT)
        base_t = it_start(k)
        rid0 = k * nT
        kv = k % 5
        for j in range(j0, j1):
            ((pg_id, pgt, tname, tid, pname, ins, idt, outs, odt, is_p2p, frames, phase),
             nc, npp, ca, pa, e_rel, d_rel, durs) = tmpl[j]
            rid = rid0 + j
            coll = k * nc + ca
            p2p = k * npp + pa
            created = base_t + e_rel - (rid * 7919) % 4000
            if d_rel < 0:  # recorded without events: scheduled forever, never retired
                emit(rid, (pg_id, pgt, tname, tid, pname, ins, idt, outs, odt, is_p2p, frames,
                           phase), coll, p2p, created, -1, -1)
                continue
            don = base_t + d_rel
            completed = don + (phase - don) % tick + 2_000 + (rid % 17) * 1_300
            if timing:
                started = completed - 300 - (rid % 5) * 40
                if frames is not None:
                    append({
                        "frames": frames, "record_id": rid, "pg_id": pg_id,
                        "process_group": pgt, "thread_name": tname, "thread_id": tid,
                        "collective_seq_id": coll, "p2p_seq_id": p2p, "op_id": coll + p2p,
                        "profiling_name": pname, "time_created_ns": created,
                        "duration_ms": durs[(kv + j) % 5], "input_sizes": ins,
                        "input_dtypes": idt, "output_sizes": outs, "output_dtypes": odt,
                        "state": "completed", "time_discovered_started_ns": started,
                        "time_discovered_completed_ns": completed, "retired": True,
                        "timeout_ms": timeout_ms, "is_p2p": is_p2p})
                else:
                    append({
                        "record_id": rid, "pg_id": pg_id,
                        "process_group": pgt, "thread_name": tname, "thread_id": tid,
                        "collective_seq_id": coll, "p2p_seq_id": p2p, "op_id": coll + p2p,
                        "profiling_name": pname, "time_created_ns": created,
                        "duration_ms": durs[(kv + j) % 5], "input_sizes": ins,
                        "input_dtypes": idt, "output_sizes": outs, "output_dtypes": odt,
                        "state": "completed", "time_discovered_started_ns": started,
                        "time_discovered_completed_ns": completed, "retired": True,
                        "timeout_ms": timeout_ms, "is_p2p": is_p2p})
            elif frames is not None:
                append({
                    "frames": frames, "record_id": rid, "pg_id": pg_id,
                    "process_group": pgt, "thread_name": tname, "thread_id": tid,
                    "collective_seq_id": coll, "p2p_seq_id": p2p, "op_id": coll + p2p,
                    "profiling_name": pname, "time_created_ns": created,
                    "input_sizes": ins, "input_dtypes": idt, "output_sizes": outs,
                    "output_dtypes": odt, "state": "completed",
                    "time_discovered_started_ns": None, "time_discovered_completed_ns": completed,
                    "retired": True, "timeout_ms": timeout_ms, "is_p2p": is_p2p})
            else:
                append({
                    "record_id": rid, "pg_id": pg_id,
                    "process_group": pgt, "thread_name": tname, "thread_id": tid,
                    "collective_seq_id": coll, "p2p_seq_id": p2p, "op_id": coll + p2p,
                    "profiling_name": pname, "time_created_ns": created,
                    "input_sizes": ins, "input_dtypes": idt, "output_sizes": outs,
                    "output_dtypes": odt, "state": "completed",
                    "time_discovered_started_ns": None, "time_discovered_completed_ns": completed,
                    "retired": True, "timeout_ms": timeout_ms, "is_p2p": is_p2p})
        g = (k + 1) * nT
    # The last iteration, scheduled op by op.
    base_t = it_start(F)
    for i in range(max(0, lo - F * nT), nF):
        j, part = rec_f[i]
        op = prog_f[j]
        role = op.role
        rdy = rdy_f[j] if part != 1 else -1
        don = don_f[j] if part != 1 else -1
        created = base_t + enq_f[j] - (BATCH_OP_LEAD_NS if part == 1 else 0)
        emit(F * nT + i, static(op, part), F * ncoll[role] + ca_f[j], F * np2p[role] + pa_f[j],
             created, base_t + rdy if rdy >= 0 else -1, base_t + don if don >= 0 else -1)

    # pg_status: counters of the works this rank enqueued, observed by its watchdogs.
    status: dict[int, list[int]] = {}
    if F > 0:
        for j, op in enumerate(prog_h):
            seq = (F - 1) * (np2p[op.role] if op.kind != COLL else ncoll[op.role]) + (
                pa_h[j] if op.kind != COLL else ca_h[j])
            st = status.setdefault(op.role, [-1, -1, -1])
            st[0] = seq
            st[2] = seq
            if timing and seq > st[1]:
                st[1] = seq
    for j in range(len(enq_f)):
        op = prog_f[j]
        seq = F * (np2p[op.role] if op.kind != COLL else ncoll[op.role]) + (
            pa_f[j] if op.kind != COLL else ca_f[j])
        st = status.setdefault(op.role, [-1, -1, -1])
        st[0] = seq
        if don_f[j] >= 0:
            st[2] = seq
        if timing and rdy_f[j] >= 0 and seq > st[1]:
            st[1] = seq
    pg_status = {}
    for role in sorted(status, key=lambda x: rpg[x]):
        e_, s_st, c_ = status[role]
        pg_status[str(rpg[role])] = {
            "last_enqueued_collective": e_,
            "last_started_collective": s_st,
            "last_completed_collective": c_,
        }

    pg_config = {}
    for role in sorted(pgtuple, key=lambda x: (pgtuple[x][0], pgtuple[x][1])):
        name, desc = pgtuple[role]
        pg_config[name] = {"name": name, "desc": desc, "ranks": job.ranks_str(rg[role])}

    return {
        "version": FORMAT_VERSION,
        "pg_config": pg_config,
        "comm_lib_version": COMM_LIB_VERSION,
        "pg_status": pg_status,
        "entries": entries,
    }


def to_hook_form(dump: dict[str, Any], backend: str = "nccl2") -> dict[str, Any]:
    """The same rank's dump as torch 2.15's recorder hook writes it for ``backend``.

    * ``profiling_name`` prefix ``nccl2:``; ``op_id`` counts every op of the group, 0-based;
    * send entries carry only input sizes/dtypes, recv entries only output ones;
    * states: ``completed`` + retired, or ``scheduled`` and not retired (nccl2 reports
      completion; ``started`` never appears);
    * no ``coalesced`` work entries: a batched send/recv carries its own completion;
    * ``pg_status``: the last enqueued and completed op_id of each group, started -1;
    * ``comm_lib_version`` empty; ``record_id`` numbers the remaining entries in order.
    """
    entries: list[dict[str, Any]] = []
    first_rid = dump["entries"][0]["record_id"] if dump["entries"] else 0
    for e in dump["entries"]:
        pname = e["profiling_name"]
        op = pname.split(":", 1)[1]
        if op == "coalesced":
            if entries and entries[-1]["is_p2p"] and not entries[-1]["retired"]:
                prev = entries[-1]  # the batched op this work completes
                done = e["state"] == "completed"
                prev["state"] = "completed" if done else "scheduled"
                prev["retired"] = done
                prev["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] if done else None
            continue
        h = dict(e)
        h["profiling_name"] = f"{backend}:{op}"
        h["op_id"] = e["collective_seq_id"] + e["p2p_seq_id"] - 1
        done = e["state"] == "completed"
        h["state"] = "completed" if done else "scheduled"
        h["retired"] = done
        h["time_discovered_started_ns"] = None
        if not done:
            h["time_discovered_completed_ns"] = None
        if op.startswith("send"):
            h["output_sizes"], h["output_dtypes"] = [], []
        elif op.startswith("recv"):
            h["input_sizes"], h["input_dtypes"] = [], []
        entries.append(h)
    for i, h in enumerate(entries):
        h["record_id"] = first_rid + i
    last: dict[int, list[int]] = {}
    for h in entries:
        st = last.setdefault(h["pg_id"], [-1, -1])
        st[0] = max(st[0], h["op_id"])
        if h["state"] == "completed":
            st[1] = max(st[1], h["op_id"])
    status = {}
    for key, value in dump["pg_status"].items():
        enq, comp = last.get(int(key), [-1, -1])
        status[key] = {"last_enqueued_collective": enq if enq >= 0 else value["last_enqueued_collective"],
                       "last_started_collective": -1, "last_completed_collective": comp}
    return {**dump, "comm_lib_version": "", "pg_status": status, "entries": entries}


def to_json_form(dump: dict[str, Any]) -> dict[str, Any]:
    """What ``_dump_nccl_trace_json`` writes for the same state."""
    out: dict[str, Any] = {
        "version": dump["version"],
        "comm_lib_version": dump["comm_lib_version"],
        "pg_config": dump["pg_config"],
        "pg_status": {k: {kk: str(vv) for kk, vv in v.items()} for k, v in dump["pg_status"].items()},
    }
    entries = []
    for e in dump["entries"]:
        j = {k: v for k, v in e.items() if k != "frames"}
        j["process_group"] = list(e["process_group"])
        if j["time_discovered_started_ns"] is None:
            j["time_discovered_started_ns"] = 0
        if j["time_discovered_completed_ns"] is None:
            j["time_discovered_completed_ns"] = 0
        entries.append(j)
    if entries:
        out["entries"] = entries
    return out


def dump_path(out_dir: Path, r: int, fmt: str, backend: str = "nccl") -> Path:
    return out_dir / (f"rank_{r}.json" if fmt == "json" else f"{backend}_trace_rank_{r}")


def rank_dialect(dialect: str, r: int) -> str:
    """The dialect rank ``r`` writes in a job simulated as ``dialect``."""
    if dialect == "mixed":
        return "nccl2" if r % 2 else "nccl"
    return dialect


def _write_ranks(ranks: list[int]) -> int:
    job = _JOB
    assert job is not None
    gc.disable()  # dumps are trees of fresh dicts: nothing for the cycle collector to find
    written = 0
    for r in ranks:
        dump = build_dump(r)
        backend = rank_dialect(job.dialect, r)
        if backend == "nccl2":
            dump = to_hook_form(dump)
        path = dump_path(job.out_dir, r, job.fmt, backend)
        if job.fmt == "json":
            data = json.dumps(to_json_form(dump), sort_keys=True, separators=(",", ":")).encode()
        else:
            data = pickle.dumps(dump, protocol=2)
        with open(path, "wb") as f:
            f.write(data)
        written += len(data)
    return written


# --------------------------------------------------------------------------- driver


def simulate_job(
    out_dir: Path,
    *,
    tp: int,
    pp: int,
    dp: int,
    fault: str = "stall",
    fault_rank: int | None = None,
    timing: bool = False,
    fmt: str = "pickle",
    buffer_size: int = 2000,
    with_frames: bool = True,
    seed: int = 0,
    jobs: int = 1,
    entries_per_rank: int | None = None,
    microbatches: int | None = None,
    inflight: int = DEFAULT_INFLIGHT,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    batch_p2p: bool = False,
    op_mix: bool = False,
    dialect: str = "nccl",
) -> dict[str, Any]:
    """Simulate the job, write one dump per live rank into ``out_dir``, return EXPECTED.

    Files: ``nccl_trace_rank_<r>`` (pickle protocol 2 of plain dicts, lists, tuples, str,
    int, float, bool and None, like torch's) or ``rank_<r>.json`` (``fmt="json"``: tuples
    become lists, unobserved times 0, pg_status values strings, no frames, sorted keys),
    plus ``EXPECTED.json`` (the returned dict).

    Faults (``fault_rank`` defaults to a seed-chosen rank that can carry the fault):

    * ``none``: healthy, every op completed; the dump is an on-demand one.
    * ``stall``: the rank stops enqueuing before a TP collective (DP/world if tp == 1).
    * ``crash``: like a stall in the backward pass, and the rank writes no file.
    * ``pipeline_stall``: the rank (not on the last stage) stops sending activations to the
      next stage from some microbatch on but runs everything else.
    * ``pp_deadlock``: the rank posts a blocking recv of gradients from the next stage before
      sending it the last activations; the next stage blocks in that recv. Culprits: both.
    * ``group_order``: the rank issues the end-of-step world all_reduce before its TP (else DP,
      else embedding) all_reduce; both are read by the CPU. Deadlock across two groups.
    * ``gpu_stuck``: every member of the rank's TP group enqueued and started a collective that
      never completes. Culprits: the group.
    * ``slow_gpu``: the rank's GPU slows down, its watchdog stops observing completions, then
      the GPU stops before a collective its peers started. Its CPU keeps enqueuing.
    * ``size_desync`` / ``dtype_desync``: the rank enqueues a collective with another size /
      dtype; everyone enqueued it, nobody completes it.
    * ``p2p_size_desync`` / ``p2p_dtype_desync``: the rank (not the last pipeline stage) sends
      one microbatch's activations with another shape / dtype than the next stage's recv; the
      pair never completes.

    Other options: ``timing`` (TORCH_NCCL_ENABLE_TIMING: "started" states, duration_ms and
    last_started_collective), ``entries_per_rank`` (history length; default 1.25 x the buffer
    so the ring buffer is full and has wrapped), ``microbatches``, ``inflight`` (ops a CPU may
    have in flight before it blocks), ``timeout_ms`` (the watchdog timeout; dumps are written
    just after it), ``batch_p2p`` (send/recv through batch_isend_irecv: each op is recorded
    without events, so it stays "scheduled" and unretired forever, followed by a
    "nccl:coalesced" work that carries the state), ``op_mix`` (every step also runs gather,
    scatter, reduce, broadcast, uneven all_to_all_single, all_gather and reduce_scatter, and
    the ops of broadcast_object_list and all_gather_object on the default group: their sides
    and sizes differ per rank by design), ``jobs`` (writer processes), ``dialect``
    (:data:`DIALECTS`: ``nccl2`` writes torch 2.15's hook form, :func:`to_hook_form`, as
    ``nccl2_trace_rank_<r>``, and only ranks with an op that never finished write a file,
    as nccl2's abort callback does; a healthy job's dump is an on-demand one of every rank).
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of {', '.join(DIALECTS)}")
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    if fmt not in ("pickle", "json"):
        raise ValueError("fmt must be 'pickle' or 'json'")
    if buffer_size < 1:
        raise ValueError("buffer_size must be >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    topo = Topology(tp, pp, dp)
    sites = SiteTable(topo)
    M = microbatches if microbatches is not None else min(16, max(4, pp))
    inflight = max(2, inflight)
    if op_mix:  # per-rank programs: the mix's sizes depend on the rank
        base = [build_program(topo, sites, topo.coords(r)[1], M, batch_p2p, mix_rank=r)
                for r in range(topo.world)]
        by_stage = base
    else:
        by_stage = [build_program(topo, sites, s, M, batch_p2p) for s in range(pp)]
        base = [by_stage[topo.coords(r)[1]] for r in range(topo.world)]

    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small objects, no cycles: the collector would only rescan them
    try:
        expected = _simulate(out_dir, topo, sites, base, by_stage, fault, fault_rank, M, timing,
                             fmt, buffer_size, with_frames, seed, jobs, entries_per_rank,
                             inflight, timeout_ms, dialect)
        if op_mix:
            expected["op_mix"] = list(SiteTable.MIX_OPS)
            (out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=2) + "\n")
        return expected
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def _simulate(out_dir, topo, sites, base, by_stage, fault, fault_rank, M, timing, fmt,
              buffer_size, with_frames, seed, jobs, entries_per_rank, inflight, timeout_ms,
              dialect="nccl"):
    rng = random.Random(seed * 1_000_003 + 17)
    fault_rank, plan = plan_fault(fault, topo, sites, base, fault_rank, M, rng)

    speed_rng = random.Random(seed * 1_000_003 + 29)
    speed = [1.0 + 0.02 * (speed_rng.random() - 0.5) for _ in range(topo.world)]

    healthy = run_schedule(topo, base, rng=random.Random(seed * 1_000_003 + 41),
                           inflight=inflight, speed=speed)
    period = max(d[-1] for d in healthy.done) + POST_STEP_NS
    if any(x < 0 for d in healthy.done for x in d):  # pragma: no cover - schedule bug guard
        raise RuntimeError("healthy schedule did not complete")

    progs_f = [plan.progs.get(r, base[r]) for r in range(topo.world)]
    stuck_keys: set = set()
    for q, i in plan.stuck_ops:
        # A collective's matching key is (group, its count in the group this iteration); a
        # send/recv pair's is (group, sender, receiver, its count between them).
        op = progs_f[q][i]
        gid = topo.role_gid[q][op.role]
        if op.kind == COLL:
            stuck_keys.add((gid, _counters(progs_f[q])[0][i]))
        else:
            peer = (q // (topo.pp * topo.tp)) * (topo.pp * topo.tp) + op.peer * topo.tp + q % topo.tp
            nth = sum(1 for o in progs_f[q][: i + 1] if o.kind == op.kind and o.peer == op.peer)
            src, dst = (q, peer) if op.kind == SEND else (peer, q)
            stuck_keys.add((gid, src, dst, nth))
    faulty = run_schedule(topo, progs_f, rng=random.Random(seed * 1_000_003 + 53),
                          inflight=inflight, limit=plan.limit, frozen=plan.frozen,
                          slow=plan.slow, stuck_keys=stuck_keys, speed=speed)

    nT_min = min(len(p) for p in by_stage)
    epr = entries_per_rank if entries_per_rank is not None else buffer_size + buffer_size // 4
    iterations = max(1, math.ceil(max(0, epr - nT_min) / nT_min))
    t0 = BASE_EPOCH_NS + (seed % 100_000) * 7 * SEC

    def it_start(k: int) -> int:
        return _iteration_start(t0, period, seed, k)

    live = [r for r in range(topo.world) if r not in plan.crashed]
    start_f = it_start(iterations)
    pending = [faulty.enq[r][i] for r in live for i in range(len(faulty.enq[r]))
               if faulty.done[r][i] < 0]
    hang = bool(pending) or bool(plan.crashed)
    if fault != "none" and not hang:  # pragma: no cover - a fault must leave a hang
        raise RuntimeError(f"fault {fault} did not hang the job")
    if pending:
        detect = start_f + min(pending) + timeout_ms * MS
    else:
        last = max((x for r in live for x in faulty.done[r]), default=0)
        detect = start_f + last + 2 * SEC
    drng = random.Random(seed * 1_000_003 + 67)
    dump_times = [detect + int((0.05 + 1.2 * drng.random()) * SEC) for _ in range(topo.world)]

    blind_times = {}
    for r, b in plan.blind.items():
        blind_times[r] = faulty.ready[r][b] if faulty.ready[r][b] >= 0 else faulty.enq[r][b]

    if fault != "none":
        # nccl2 dumps from the abort callback of a rank whose own op timed out: a rank with
        # nothing unfinished (stalled outside communication) writes no file.
        def unfinished(r: int) -> bool:
            if r in blind_times:
                return True  # its watchdog stopped observing: its ops look unfinished
            return any(x < 0 for x in faulty.done[r])

        live = [r for r in live if rank_dialect(dialect, r) != "nccl2" or unfinished(r)]

    global _JOB
    _JOB = _Job(
        dialect=dialect,
        blind_times=blind_times,
        topo=topo, base=base, fault_progs=plan.progs, healthy=healthy, faulty=faulty,
        iterations=iterations, buffer_size=buffer_size, timing=timing,
        with_frames=with_frames and fmt == "pickle", seed=seed, dump_times=dump_times,
        timeout_ms=timeout_ms, period=period, t0=t0, out_dir=out_dir, fmt=fmt,
    )
    for r in range(topo.world):  # stale files from an earlier run would mislead
        for f in (dump_path(out_dir, r, "pickle"), dump_path(out_dir, r, "json"),
                  dump_path(out_dir, r, "pickle", "nccl2")):
            if f.exists():
                f.unlink()
    try:
        if jobs > 1 and len(live) > 1:
            chunks = [live[i::jobs * 4] for i in range(jobs * 4)]
            gc.freeze()  # children inherit the schedule without copying its pages
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(jobs) as pool:
                sum(pool.map(_write_ranks, [c for c in chunks if c]))
        else:
            _write_ranks(live)
    finally:
        _JOB = None

    details: dict[str, Any] = {"iterations": iterations + 1, "microbatches": M}
    if plan.target is not None:
        tr, ti = plan.target
        prog = plan.progs.get(tr, base[tr])
        op = prog[ti]
        ca, pa, _, _ = _counters(prog)
        ncoll_h, np2p_h = _counters(base[tr])[2:]
        gid = topo.role_gid[tr][op.role]
        details.update({
            "fault_rank": fault_rank,
            "group": topo.group_name(gid),
            "group_desc": ROLE_DESC[op.role],
            "group_ranks": list(topo.group_ranks[gid]),
            "profiling_name": ("nccl:" + op.site.op) if op.kind == COLL else (
                f"nccl:{op.site.op} " + (f"{topo.coords(tr)[1]}->{op.peer}" if op.kind == SEND
                                         else f"{topo.coords(tr)[1]}<-{op.peer}")),
            "collective_seq_id": iterations * ncoll_h[op.role] + ca[ti],
            "p2p_seq_id": iterations * np2p_h[op.role] + pa[ti],
        })
    expected = {
        "scenario": fault,
        "world": topo.world,
        "backend": BACKEND if dialect == "nccl" else ("nccl2" if dialect == "nccl2" else "nccl+nccl2"),
        "format": fmt,
        "dumped_ranks": live,
        "hang": hang,
        "culprits": plan.culprits,
        "kind": fault,
        "deadlock": plan.deadlock,
        "description": plan.description,
        "details": details,
    }
    (out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.simulate", description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", required=True, type=Path, help="output directory")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--fault", default="stall", choices=FAULTS)
    ap.add_argument("--rank", type=int, default=None, help="fault rank (default: chosen by seed)")
    ap.add_argument("--timing", action="store_true", help="TORCH_NCCL_ENABLE_TIMING=1")
    ap.add_argument("--json", action="store_true", help="write rank_<r>.json instead of pickles")
    ap.add_argument("--buffer-size", type=int, default=2000)
    ap.add_argument("--entries-per-rank", type=int, default=None)
    ap.add_argument("--microbatches", type=int, default=None)
    ap.add_argument("--no-frames", action="store_true")
    ap.add_argument("--batch-p2p", action="store_true",
                    help="send/recv through batch_isend_irecv (coalesced records)")
    ap.add_argument("--op-mix", action="store_true",
                    help="also run ops whose sides and sizes differ per rank by design")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dialect", default="nccl", choices=DIALECTS,
                    help="nccl (legacy recorder), nccl2 (torch 2.15 hook form) or mixed")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    t = time.perf_counter()
    expected = simulate_job(
        args.out, tp=args.tp, pp=args.pp, dp=args.dp, fault=args.fault, fault_rank=args.rank,
        timing=args.timing, fmt="json" if args.json else "pickle", buffer_size=args.buffer_size,
        with_frames=not args.no_frames, seed=args.seed, jobs=args.jobs,
        entries_per_rank=args.entries_per_rank, microbatches=args.microbatches,
        batch_p2p=args.batch_p2p, op_mix=args.op_mix, dialect=args.dialect,
    )
    elapsed = time.perf_counter() - t
    size = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file())
    summary = {k: expected[k] for k in ("scenario", "world", "hang", "culprits", "kind", "deadlock")}
    summary.update({"seconds": round(elapsed, 2), "bytes": size, "dumps": len(expected["dumped_ranks"])})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
