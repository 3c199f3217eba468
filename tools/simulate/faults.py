"""Fault plans: what each fault changes in the programs and schedules of the last iteration."""

from __future__ import annotations

import random

from tools.simulate.constants import (
    DEFAULT,
    DP,
    EMB,
    FAULTS,
    PP,
    ROLE_DESC,
    SEND,
    TP,
    TP_OPS_PER_PASS,
)
from tools.simulate.program import Op, _find
from tools.simulate.sites import Site, SiteTable
from tools.simulate.topology import Topology


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

