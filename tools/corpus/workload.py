"""The training steps a corpus case runs, on real torch.distributed groups.

Global rank ``d * (pp * tp) + s * tp + t`` (tensor parallel fastest, then pipeline stage,
then data parallel). Groups: tensor-parallel blocks (optionally with
``use_local_synchronization``), pipeline stages (send/recv between neighbours, on the default
group or, with the nccl-lazy recorder, on nccl-lazy pair groups), data-parallel groups
(non-contiguous), expert groups (= data parallel), HSDP shard and replicate groups, and a
"late" group of the even ranks created in the middle of the run. With a context-parallel
degree (generator 2) the outer index is ``d * cp + c``: CP groups hold the ranks that differ
only in ``c``, DP groups those that differ only in ``d``. With gloo groups beside the
recorder hook's (``spec.cpu_groups``), the checkpoint's ``broadcast_object_list`` runs on a
gloo copy of the world and the DP ops (``dp``: the DP all_reduce, the eval metric's) on a
gloo copy of the DP group; the expert and FSDP ops stay on the hook's DP group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.corpus.spec import CaseSpec

__all__ = ["Job", "run_steps"]


@dataclass
class Job:
    spec: CaseSpec
    rank: int
    torch: Any
    dist: Any
    timeout: Any
    side: Any
    before: Callable[[int, int, str], None]
    freeze: Callable[[], None]
    log: Callable[[str], None]
    groups: dict[str, Any] = field(default_factory=dict)
    members: dict[str, list[int]] = field(default_factory=dict)
    where: str = "setup"
    # Called after each step (and its eval pass) with the step: a periodic dump's round.
    after_step: Callable[[int], None] | None = None

    @property
    def coords(self) -> tuple[int, int, int]:
        tp, pp = self.spec.tp, self.spec.pp
        return self.rank // (pp * tp), (self.rank // tp) % pp, self.rank % tp

    def t(self, n: int = 8, dtype: Any = None) -> Any:
        return self.torch.ones(n, dtype=dtype if dtype is not None else self.torch.float32)


def _new_group(job: Job, key: str, blocks: list[list[int]], desc: str, **kw: Any) -> None:
    """Every rank takes part in creating each block (unless local synchronization)."""
    for ranks in blocks:
        if kw.get("use_local_synchronization") and job.rank not in ranks:
            continue
        g = job.dist.new_group(ranks=ranks, timeout=job.timeout, group_desc=desc, **kw)
        if job.rank in ranks:
            job.groups[key], job.members[key] = g, ranks
            if kw.get("backend") == "gloo":
                from tools.hook_backend import note_c10d_gloo

                note_c10d_gloo()


def make_groups(job: Job) -> None:
    s = job.spec
    tp, pp, dp, cp = s.tp, s.pp, s.dp, s.cp
    # The outer index o = d * cp + c (cp = 1 before generator 2: o is the DP index).
    rank_of = lambda o, p, t: o * (pp * tp) + p * tp + t  # noqa: E731
    job.groups["world"], job.members["world"] = None, list(range(s.world))
    if tp > 1:
        outer = range(dp * cp)
        blocks = [[rank_of(o, p, t) for t in range(tp)] for o in outer for p in range(pp)]
        kw = {"use_local_synchronization": True} if s.local_sync else {}
        _new_group(job, "tp", blocks, "TENSOR_MODEL_PARALLEL_GROUP", **kw)
    if cp > 1:
        blocks = [
            [rank_of(d * cp + c, p, t) for c in range(cp)]
            for d in range(dp)
            for p in range(pp)
            for t in range(tp)
        ]
        _new_group(job, "cp", blocks, "CONTEXT_PARALLEL_GROUP")
    if dp > 1:
        blocks = [
            [rank_of(d * cp + c, p, t) for d in range(dp)]
            for c in range(cp)
            for p in range(pp)
            for t in range(tp)
        ]
        _new_group(job, "dp", blocks, "DATA_PARALLEL_GROUP")
        job.groups["ep"], job.members["ep"] = job.groups["dp"], job.members["dp"]
        if s.hsdp:
            shard = [[b[i], b[i + 1]] for b in blocks for i in range(0, dp, 2)]
            _new_group(job, "shard", shard, "HSDP_SHARD_GROUP")
            repl = [[b[i] for i in range(j, dp, 2)] for b in blocks for j in range(2)]
            _new_group(job, "replicate", repl, "HSDP_REPLICATE_GROUP")
        else:
            job.groups["shard"], job.members["shard"] = job.groups["dp"], job.members["dp"]
        if "dp" in s.cpu_groups:  # the DP ops on a gloo copy (expert and FSDP ops stay)
            _new_group(job, "dp", blocks, "DATA_PARALLEL_GROUP_GLOO", backend="gloo")
    if "ckpt" in s.cpu_groups:
        _new_group(job, "ckpt", [list(range(s.world))], "CHECKPOINT_GROUP_GLOO", backend="gloo")
    if pp > 1 and s.recorder == "nccl-lazy":
        for d in range(dp * cp):
            for t in range(tp):
                for p in range(pp - 1):
                    pair = [rank_of(d, p, t), rank_of(d, p + 1, t)]
                    g = job.dist.new_group(
                        ranks=pair,
                        timeout=job.timeout,
                        group_desc="PIPELINE_MODEL_PARALLEL_GROUP",
                        backend="nccl-lazy",
                    )
                    if job.rank in pair:
                        job.groups[f"pp{pair[0]}"] = g
    if s.fault.kind == "group_order_deadlock" and s.fault.variant == "dup":
        _new_group(job, "dup", [list(range(s.world))], "GROUP_B")


def _pp_group(job: Job, a: int, b: int) -> Any:
    return job.groups.get(f"pp{min(a, b)}")


def _pp(job: Job, batched: bool) -> None:
    """One forward microbatch: receive from the previous stage, send to the next."""
    d, torch = job.dist, job.torch
    _, p, _ = job.coords
    prev, nxt = job.rank - job.spec.tp, job.rank + job.spec.tp
    if batched and job.spec.recorder == "torchcomms":  # one batch_op_issue on one comm
        batch = [("irecv", job.t(), prev)] if p > 0 else []
        batch += [("isend", job.t(), nxt)] if p < job.spec.pp - 1 else []
        if batch:
            d.batch_p2p(batch)
        return
    if batched and job.spec.recorder != "gloo":
        # torch 2.15's batch_isend_irecv recurses without end over a Python backend: the same
        # exchange as isend/irecv, posted together and then waited for.
        works = []
        if p > 0:
            works.append(d.irecv(job.t(), src=prev, group=_pp_group(job, prev, job.rank)))
        if p < job.spec.pp - 1:
            works.append(d.isend(job.t(), dst=nxt, group=_pp_group(job, job.rank, nxt)))
        for w in works:
            w.wait()
        return
    if batched:
        # One batch runs on one group: the default group when the pair groups differ.
        pgs = {_pp_group(job, prev, job.rank) if p > 0 else None}
        pgs |= {_pp_group(job, job.rank, nxt) if p < job.spec.pp - 1 else None}
        g = pgs.pop() if len(pgs) == 1 else None
        ops = []
        if p > 0:
            ops.append(d.P2POp(d.irecv, job.t(), prev, group=g))
        if p < job.spec.pp - 1:
            ops.append(d.P2POp(d.isend, job.t(), nxt, group=g))
        for w in d.batch_isend_irecv(ops) if ops else []:
            w.wait()
        return
    del torch
    if p > 0:
        d.recv(job.t(), src=prev, group=_pp_group(job, prev, job.rank))
    if p < job.spec.pp - 1:
        d.send(job.t(), dst=nxt, group=_pp_group(job, job.rank, nxt))


def _cp_ring(job: Job) -> None:
    """Context parallel's ring: pass a KV block to the next CP rank, take one from the
    previous (even positions send first, odd ones receive first)."""
    members, g = job.members["cp"], job.groups["cp"]
    i, n = members.index(job.rank), len(members)
    nxt, prev = members[(i + 1) % n], members[(i - 1) % n]
    if i % 2 == 0:
        job.dist.send(job.t(), dst=nxt, group=g)
        job.dist.recv(job.t(), src=prev, group=g)
    else:
        job.dist.recv(job.t(), src=prev, group=g)
        job.dist.send(job.t(), dst=nxt, group=g)


def _collective(job: Job, kind: str, group_key: str, variant: str = "") -> None:
    """Run one collective of ``kind`` (``variant``: how a desynced rank deviates)."""
    d, torch = job.dist, job.torch
    kind = kind.removeprefix("eval_")  # the eval pass runs the same ops, forward only
    if group_key == "late" and "late" not in job.groups:
        evens = [r for r in range(job.spec.world) if r % 2 == 0]
        _new_group(job, "late", [evens], "LATE_EVAL_GROUP")
        if job.rank not in evens:
            job.members.setdefault("late", evens)
    if job.rank not in job.members.get(group_key, [job.rank]):
        return
    g = job.groups.get(group_key)
    members = job.members[group_key]
    n = len(members)
    if variant == "broadcast":
        d.broadcast(job.t(), src=members[0], group=g)
    elif variant == "all_gather":
        d.all_gather([job.t() for _ in range(n)], job.t(), group=g)
    elif variant in ("smaller", "larger"):
        d.all_reduce(job.t(4 if variant == "smaller" else 12), group=g)
    elif variant in ("int64", "float64", "float16"):
        d.all_reduce(job.t(8, getattr(torch, variant)), group=g)
    elif kind == "cp_all_gather":
        d.all_gather_into_tensor(job.t(8 * n), job.t(8), group=g)
    elif kind == "monitored_barrier":
        d.monitored_barrier(group=g, timeout=job.timeout)
    elif kind == "fsdp_all_gather":
        d.all_gather_into_tensor(
            torch.ones(8 * n, dtype=torch.bfloat16), torch.ones(8, dtype=torch.bfloat16), group=g
        )
    elif kind == "fsdp_reduce_scatter":
        d.reduce_scatter_tensor(job.t(8), job.t(8 * n), group=g)
    elif kind == "moe_all_to_all":
        i = members.index(job.rank)
        out_splits = [q + 1 for q in range(n)]
        d.all_to_all_single(
            torch.ones(sum(out_splits)),
            torch.ones((i + 1) * n),
            output_split_sizes=out_splits,
            input_split_sizes=[i + 1] * n,
            group=g,
        )
    elif kind == "ckpt_broadcast_object":
        objs: list[Any] = [{"step": 1, "path": "ckpt/step"}] if job.rank == 0 else [None]
        d.broadcast_object_list(objs, src=0, group=g)
    elif kind == "barrier":
        d.barrier(group=g)
    elif kind == "coalesced_all_reduce":
        d.all_reduce_coalesced([job.t(4), job.t(6)], group=g)
    else:
        d.all_reduce(job.t(), group=g)


def _special(job: Job, step: int) -> None:
    """The ops a deadlock fault adds at the start of its step, in each rank's order."""
    f = job.spec.fault
    d = job.dist
    if f.kind == "group_order_deadlock":
        other = "dp" if f.variant == "dp" else "dup"
        pair = [("world_all_reduce", "world"), ("dp_all_reduce", other)]
        if job.rank in f.ranks:
            job.log(f"FAULT group_order_deadlock {other} before world in {step}")
            pair.reverse()
        for i, (kind, key) in enumerate(pair):
            job.where = f"{step}.x{i} {kind}"
            job.log(f"OP {job.where}")
            _collective(job, kind, key)
    elif f.kind == "p2p_deadlock" and job.rank in f.ranks:
        peer = f.ranks[1] if job.rank == f.ranks[0] else f.ranks[0]
        g = _pp_group(job, job.rank, peer)
        job.log(f"FAULT p2p_deadlock recv from {peer} before sending in {step}")
        job.where = f"{step}.x0 recv"
        d.recv(job.t(), src=peer, group=g)
        d.send(job.t(), dst=peer, group=g)


def _op(job: Job, step: int, index: int, kind: str, group_key: str) -> None:
    f = job.spec.fault
    job.where = f"{step}.{index} {kind}"
    job.log(f"OP {job.where}")
    job.before(step, index, kind)
    at_fault = (step, index) == (f.step, f.index)
    if at_fault and f.kind in ("op_desync", "size_desync", "dtype_desync") and job.rank in f.ranks:
        job.log(f"FAULT {f.kind} {f.variant} in {step}.{index} {kind}")
        _collective(job, kind, group_key, f.variant)
        return
    if at_fault and f.kind == "stuck_in_collective":
        culprit = f.ranks[0]
        if job.rank == culprit:
            work = job.dist.all_reduce(job.t(), group=job.groups.get(group_key), async_op=True)
            job.freeze()
            work.wait()
            return
        if job.rank in job.members.get(group_key, []) and culprit in job.members[group_key]:
            job.log(f"AWAITS {job.where}")  # a peer of the frozen rank
            job.side.wait([f"frozen_{culprit}"])
            import time

            time.sleep(0.3)  # the culprit stops
            job.log(f"JOINS {job.where}")  # the run is kept only if this comes before a failure
    if kind in ("pp_send_recv", "pp_batch_isend_irecv", "eval_pp_send_recv"):
        _pp(job, kind == "pp_batch_isend_irecv")
    elif kind == "cp_ring":
        _cp_ring(job)
    else:
        _collective(job, kind, group_key)


def run_steps(job: Job) -> None:
    make_groups(job)
    job.log("GROUPS MADE")
    job.dist.barrier()
    for step in range(job.spec.steps):
        if step == job.spec.fault.step:
            _special(job, step)
        for index, op in enumerate(job.spec.step_ops):
            _op(job, step, index, op.kind, op.group)
        if step in job.spec.eval_at:  # an eval pass: its indices follow the step's
            n = len(job.spec.step_ops)
            for j, op in enumerate(job.spec.eval_ops):
                _op(job, step, n + j, op.kind, op.group)
        if job.after_step is not None:
            job.after_step(step)
