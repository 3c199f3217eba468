"""Call sites: what each op of the simulated step records (sizes, dtypes, stack) and how long it takes."""

from __future__ import annotations

import math
from typing import Any

from tools.simulate.constants import (
    DTYPE_BYTES,
    HIDDEN,
    LAYERS,
    MEG,
    MICRO_BATCH,
    NETWORK_BYTES_PER_NS,
    NVLINK_BYTES_PER_NS,
    SEND,
    SEQ,
    TORCH,
    TP_OPS_PER_PASS,
    US,
    VOCAB,
)
from tools.simulate.topology import Topology


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

    def __init__(
        self,
        key,
        op,
        in_sizes,
        in_dtypes,
        out_sizes,
        out_dtypes,
        frames,
        autograd,
        cpu_ns,
        gpu_ns,
        comm_ns,
        coalesced=None,
    ):
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
        return self._get(
            ("tp", index, backward, variant), lambda: self._tp_op(index, backward, variant)
        )

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
            shard = [
                self.sp_seq - 256 // tpn if self.sp_seq > 256 else self.sp_seq + 64,
                MICRO_BATCH,
                HIDDEN,
            ]
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
                frames = [
                    c10d,
                    ("wrapper", _LOGGER, 81),
                    ("_gather_along_first_dim", _MAPPINGS, 115),
                    ("backward", _MAPPINGS, 306),
                    ("apply", _FUNCTION, 307),
                ]
            else:
                frames = [
                    c10d,
                    ("wrapper", _LOGGER, 81),
                    ("backward", _LAYERS, 560),
                    ("apply", _FUNCTION, 307),
                ]
        elif gather:
            frames = [
                c10d,
                ("wrapper", _LOGGER, 81),
                ("_gather_along_first_dim", _MAPPINGS, 115),
                ("forward", _LAYERS, 484),
                ("apply", _FUNCTION, 575),
                ("linear_with_grad_accumulation_and_async_allreduce", _LAYERS, 735),
                ("forward", _LAYERS, 975),
            ] + self._model_forward(*module)
        else:
            frames = [
                c10d,
                ("wrapper", _LOGGER, 81),
                ("_reduce_scatter_along_first_dim", _MAPPINGS, 178),
                ("forward", _MAPPINGS, 300),
                ("apply", _FUNCTION, 575),
                ("reduce_scatter_to_sequence_parallel_region", _MAPPINGS, 511),
                ("forward", _LAYERS, 1221),
            ] + self._model_forward(*module)
        nbytes = full[0] * full[1] * full[2] * DTYPE_BYTES[dtype]
        return Site(
            key=("tp", index, backward, variant),
            op=op,
            in_sizes=ins,
            in_dtypes=[dtype],
            out_sizes=outs,
            out_dtypes=[dtype],
            frames=_frames(*frames),
            autograd=backward,
            cpu_ns=(90 if backward else 160) * US,
            gpu_ns=self._tp_compute_ns(backward),
            comm_ns=self._coll_ns(nbytes, tpn, 1.0, NVLINK_BYTES_PER_NS),
        )

    # -- pipeline p2p
    def p2p(self, kind: int, forward: bool, batched: bool = False, variant: str = "") -> Site:
        return self._get(
            ("p2p", kind, forward, batched, variant),
            lambda: self._p2p(kind, forward, batched, variant),
        )

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
        caller = [
            (
                api,
                _P2P,
                {
                    "send_forward": 480,
                    "recv_forward": 430,
                    "send_backward": 505,
                    "recv_backward": 455,
                }[api],
            ),
            (
                api,
                _SCHED,
                {
                    "send_forward": 1708,
                    "recv_forward": 1691,
                    "send_backward": 1742,
                    "recv_backward": 1725,
                }[api],
            ),
        ]
        caller += self._tail
        coalesced = None
        if batched:
            batch = [
                ("batch_isend_irecv", _C10D, 2786),
                ("_batched_p2p_ops", _P2P, 170),
                ("_communicate", _P2P, 363),
            ]
            frames = [c10d] + batch + caller
            coalesced = Site(
                key=("coalesced", kind, forward),
                op="coalesced",
                in_sizes=[],
                in_dtypes=[],
                out_sizes=[],
                out_dtypes=[],
                frames=_frames(
                    ("_coalescing_manager", _C10D, 2545),
                    ("__exit__", "/usr/lib/python3.12/contextlib.py", 144),
                    *batch,
                    *caller,
                ),
                autograd=False,
                cpu_ns=0,
                gpu_ns=0,
                comm_ns=0,
            )
        else:
            frames = [
                c10d,
                ("_p2p_ops", _P2P, p2p_line),
                ("_communicate", _P2P, comm_line),
            ] + caller
        nbytes = shape[0] * shape[1] * shape[2] * 2
        gpu = (350 if forward else 500) * US if kind == SEND else 40 * US
        return Site(
            key=("p2p", kind, forward, batched, variant),
            op="send" if kind == SEND else "recv",
            in_sizes=[shape],
            in_dtypes=[dtype],
            out_sizes=[shape],
            out_dtypes=[dtype],
            frames=_frames(*frames),
            autograd=False,
            cpu_ns=(60 if batched else 45) * US,
            gpu_ns=gpu,
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
        return self._get(
            ("dp", stage, bucket, variant), lambda: self._dp_bucket(stage, bucket, variant)
        )

    def _dp_bucket(self, stage: int, bucket: int, variant: str) -> Site:
        total = self.stage_params(stage)
        first = total * 2 // 5
        numel = first if bucket == 0 else total - first
        dtype = "Float"
        if variant == "size":
            numel -= 4096
        elif variant == "dtype":
            dtype = "BFloat16"
        frames = [
            ("all_reduce", _C10D, 2806),
            ("wrapper", _LOGGER, 81),
            ("start_grad_sync", f"{MEG}/megatron/core/distributed/param_and_grad_buffer.py", 427),
            (
                "start_grad_sync",
                f"{MEG}/megatron/core/distributed/distributed_data_parallel.py",
                420,
            ),
            (
                "finish_grad_sync",
                f"{MEG}/megatron/core/distributed/distributed_data_parallel.py",
                443,
            ),
            ("finalize_model_grads", _FINALIZE, 268),
            self._sched_end,
        ] + self._tail[1:]
        return Site(
            key=("dp", stage, bucket, variant),
            op="all_reduce",
            in_sizes=[[numel]],
            in_dtypes=[dtype],
            out_sizes=[[numel]],
            out_dtypes=[dtype],
            frames=_frames(*frames),
            autograd=False,
            cpu_ns=220 * US,
            gpu_ns=(900 if bucket == 0 else 300) * US,
            comm_ns=self._coll_ns(numel * 4, self.topo.dp, 2.0, NETWORK_BYTES_PER_NS),
        )

    def emb(self) -> Site:
        return self._get(("emb",), self._emb)

    def _emb(self) -> Site:
        shape = [VOCAB // self.topo.tp, HIDDEN]
        frames = [
            ("all_reduce", _C10D, 2806),
            ("wrapper", _LOGGER, 81),
            ("_allreduce_word_embedding_grads", _FINALIZE, 153),
            ("_allreduce_embedding_grads", _FINALIZE, 171),
            ("finalize_model_grads", _FINALIZE, 285),
            self._sched_end,
        ] + self._tail[1:]
        return Site(
            key=("emb",),
            op="all_reduce",
            in_sizes=[shape],
            in_dtypes=["Float"],
            out_sizes=[shape],
            out_dtypes=["Float"],
            frames=_frames(*frames),
            autograd=False,
            cpu_ns=150 * US,
            gpu_ns=400 * US,
            comm_ns=self._coll_ns(shape[0] * shape[1] * 4, 2, 2.0, NETWORK_BYTES_PER_NS),
        )

    def tp_norm(self, variant: str = "") -> Site:
        return self._get(
            ("tpnorm", variant),
            lambda: self._small(
                ("tpnorm", variant),
                self.topo.tp,
                NVLINK_BYTES_PER_NS,
                [
                    ("all_reduce", _C10D, 2806),
                    ("wrapper", _LOGGER, 81),
                    ("get_grad_norm_fp32", f"{MEG}/megatron/core/optimizer/clip_grads.py", 125),
                    ("get_grad_norm", f"{MEG}/megatron/core/optimizer/optimizer.py", 213),
                    ("step", f"{MEG}/megatron/core/optimizer/optimizer.py", 489),
                ]
                + self._step_tail,
                variant,
            ),
        )

    def world_flag(self, variant: str = "") -> Site:
        return self._get(
            ("world", variant),
            lambda: self._small(
                ("world", variant),
                self.topo.world,
                NETWORK_BYTES_PER_NS,
                [("all_reduce", _C10D, 2806), ("wrapper", _LOGGER, 81)] + self._step_tail,
                variant,
            ),
        )

    def _small(self, key, group_size, bw, stack, variant) -> Site:
        numel, dtype = 1, "Float"
        if variant == "size":
            numel = 2
        elif variant == "dtype":
            dtype = "Double"
        return Site(
            key=key,
            op="all_reduce",
            in_sizes=[[numel]],
            in_dtypes=[dtype],
            out_sizes=[[numel]],
            out_dtypes=[dtype],
            frames=_frames(*stack),
            autograd=False,
            cpu_ns=260 * US,
            gpu_ns=1200 * US,
            comm_ns=self._coll_ns(64, group_size, 2.0, bw)
            + 10 * US * max(0, int(math.log2(max(group_size, 1)))),
        )

    # -- the op mix: ops whose recorded sides and sizes differ per rank by design
    MIX_OPS = (
        "gather",
        "scatter",
        "reduce",
        "broadcast",
        "all_to_all",
        "all_gather",
        "reduce_scatter",
        "broadcast_object_list",
        "all_gather_object",
    )

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
            key=("mix", kind, index),
            op=op,
            in_sizes=ins,
            in_dtypes=idt,
            out_sizes=outs,
            out_dtypes=odt,
            frames=_frames(*frames),
            autograd=False,
            cpu_ns=120 * US,
            gpu_ns=150 * US,
            comm_ns=self._coll_ns(n * 4 * 2, world, 1.0, NETWORK_BYTES_PER_NS),
        )
