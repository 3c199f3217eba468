"""Fault plans: what each fault changes in the programs and schedules of the last iteration.

The faults (the fault rank defaults to a seed-chosen rank that can carry the fault):

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
"""

from __future__ import annotations

import random
from collections.abc import Callable

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


class _Faulting:
    """What every fault planner needs: the job, the seeded choices, the plan it fills."""

    def __init__(
        self,
        topo: Topology,
        sites: SiteTable,
        base: list[list[Op]],
        fault_rank: int | None,
        microbatches: int,
        rng: random.Random,
    ) -> None:
        self.topo, self.sites, self.base = topo, sites, base
        self.fault_rank, self.microbatches, self.rng = fault_rank, microbatches, rng
        self.tp, self.pp, self.dp = topo.tp, topo.pp, topo.dp
        self.plan = FaultPlan()
        self.m = rng.randrange(microbatches)  # the microbatch a fault hits
        self.j = rng.randrange(TP_OPS_PER_PASS)  # the TP op of a pass it hits

    def stage(self, r: int) -> int:
        return self.topo.coords(r)[1]

    def check(self, r: int) -> int:
        if not 0 <= r < self.topo.world:
            raise ValueError(f"fault rank {r} outside world of {self.topo.world}")
        return r

    def rank(self) -> int:
        """The fault rank asked for, else one chosen by the seed."""
        return (
            self.check(self.fault_rank)
            if self.fault_rank is not None
            else self.rng.randrange(self.topo.world)
        )

    def sender(self) -> int:
        """The fault rank asked for, else a seed-chosen one that sends activations."""
        if self.fault_rank is not None:
            return self.check(self.fault_rank)
        return _pick_rank(self.topo, self.rng, lambda q: self.stage(q) < self.pp - 1)

    def coll_target(self, r: int, backward: bool = False) -> tuple[int, int]:
        """A collective of rank r's last iteration: TP if any, else DP, else the world flag."""
        prog = self.base[r]
        if self.tp > 1:
            return _find(prog, ("B" if backward else "F", self.m, "tp", self.j)), TP
        if self.dp > 1:
            return _find(prog, ("E", "dp", self.rng.randrange(2))), DP
        return _find(prog, ("E", "world")), DEFAULT


def _stall(fault: str, c: _Faulting) -> int:
    plan, base, pp = c.plan, c.base, c.pp
    r = c.rank()
    idx, role = c.coll_target(r, backward=(fault == "crash"))
    if c.tp == 1 and pp > 1 and c.dp == 1:
        # No collective before the world flag: stop before a send/recv instead.
        idx = _find(base[r], ("F", c.m, "send" if c.stage(r) < pp - 1 else "recv"))
        role = PP
    plan.limit[r] = idx
    plan.target = (r, idx)
    plan.culprits = [r]
    if fault == "crash":
        plan.crashed.add(r)
        plan.description = (
            f"Rank {r} crashed (process died) just before issuing "
            f"{ROLE_DESC[role]} op #{idx} of the step; it wrote no dump and every rank "
            "that needs it waits in a collective or recv it never joins."
        )
    else:
        plan.description = (
            f"Rank {r} stopped enqueuing (stuck in compute) just before a "
            f"{ROLE_DESC[role]} collective; its peers enqueued that collective and ran "
            "ahead until they blocked, and the ranks that need them wait in turn."
        )
    return r


def _pipeline_stall(fault: str, c: _Faulting) -> int:
    plan, topo, pp, m = c.plan, c.topo, c.pp, c.m
    if pp < 2:
        raise ValueError("pipeline_stall needs pp >= 2")
    r = c.sender()
    if c.stage(r) == pp - 1:
        raise ValueError("pipeline_stall: the fault rank must not be on the last stage")
    prog = list(c.base[r])
    first = _find(prog, ("F", m, "send"))
    plan.progs[r] = [
        op
        for op in prog
        if not (op.tag[:1] == ("F",) and op.tag[2:] == ("send",) and op.tag[1] >= m)
    ]
    plan.target = (r, first)
    plan.culprits = [r]
    nxt = topo.rank(topo.coords(r)[0], c.stage(r) + 1, topo.coords(r)[2])
    plan.description = (
        f"Rank {r} (pipeline stage {c.stage(r)}) stopped sending activations to rank {nxt} "
        f"from microbatch {m} on while still running everything else: rank {nxt} waits "
        f"in a recv whose send was never posted, and rank {r} later waits for gradients "
        "that can never come."
    )
    return r


def _pp_deadlock(fault: str, c: _Faulting) -> int:
    plan, topo, pp = c.plan, c.topo, c.pp
    if pp < 2:
        raise ValueError("pp_deadlock needs pp >= 2")
    r = c.rank()
    t_, s_, d_ = topo.coords(r)
    a, b = (r, topo.rank(t_, s_ + 1, d_)) if s_ < pp - 1 else (topo.rank(t_, s_ - 1, d_), r)
    last = c.microbatches - 1
    prog = list(c.base[a])
    i_send = _find(prog, ("F", last, "send"))
    i_recv = _find(prog, ("B", 0, "recv"))
    recv = prog.pop(i_recv).copy(sync=True)
    prog.insert(i_send, recv)
    plan.progs[a] = prog
    progb = list(c.base[b])
    i_b = _find(progb, ("F", last, "recv"))
    progb[i_b] = progb[i_b].copy(sync=True)
    plan.progs[b] = progb
    plan.target = (a, i_send)
    plan.culprits = sorted({a, b})
    plan.deadlock = True
    plan.description = (
        f"Pipeline deadlock: rank {a} (stage {c.stage(a)}) posts a blocking recv of "
        f"gradients from rank {b} before sending it the activations of microbatch "
        f"{last}, while rank {b} (stage {c.stage(b)}) blocks in its recv of those "
        "activations before sending gradients: each waits for the other."
    )
    return r


def _group_order(fault: str, c: _Faulting) -> int:
    plan, pp = c.plan, c.pp
    r = c.rank()
    prog = list(c.base[r])
    iw = _find(prog, ("E", "world"))
    if c.tp > 1:
        io, role = _find(prog, ("E", "tp")), TP
    elif c.dp > 1:
        io, role = _find(prog, ("E", "dp", 1)), DP
    elif pp > 1 and c.stage(r) in (0, pp - 1):
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
        "(a cycle across two groups)."
    )
    return r


def _gpu_stuck(fault: str, c: _Faulting) -> int:
    plan = c.plan
    r = c.rank()
    idx, role = c.coll_target(r)
    members = c.topo.members(r, role)
    gid = c.topo.role_gid[r][role]
    plan.stuck_ops = [(r, idx)]
    plan.target = (r, idx)
    plan.culprits = sorted(members)
    plan.description = (
        f"Every member of {ROLE_DESC[role]} {gid} ({', '.join(map(str, members))}) "
        "enqueued and started the same collective, and none completed: a network or GPU "
        "fault inside the collective, not a rank that failed to call it."
    )
    return r


def _slow_gpu(fault: str, c: _Faulting) -> int:
    plan = c.plan
    r = c.rank()
    idx, role = c.coll_target(r, backward=True)
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
        "peers did. Its CPU kept enqueuing as far as its peers."
    )
    return r


def _desync(fault: str, c: _Faulting) -> int:
    plan, sites, base = c.plan, c.sites, c.base
    r = c.rank()
    variant = "size" if fault == "size_desync" else "dtype"
    idx, role = c.coll_target(r)
    op = base[r][idx]
    if role == TP:
        site = sites.tp_op(op.tag[3], False, variant)
    elif role == DP:
        site = sites.dp_bucket(c.stage(r), op.tag[2], variant)
    else:
        site = sites.world_flag(variant)
    plan.desync(r, base[r], idx, site)
    what = "size" if variant == "size" else "dtype"
    plan.description = (
        f"Rank {r} enqueued a {ROLE_DESC[role]} collective with a different {what} than "
        "its peers; every member enqueued it and it never completed."
    )
    return r


def _p2p_desync(fault: str, c: _Faulting) -> int:
    plan, base, pp, m = c.plan, c.base, c.pp, c.m
    if pp < 2:
        raise ValueError(f"fault {fault!r} needs at least two pipeline stages")
    r = c.sender()
    if c.stage(r) >= pp - 1:
        raise ValueError(f"rank {r} is the last pipeline stage: it sends no activations")
    variant = "size" if fault == "p2p_size_desync" else "dtype"
    idx = _find(base[r], ("F", m, "send"))
    batched = base[r][idx].site.coalesced is not None
    plan.desync(r, base[r], idx, c.sites.p2p(SEND, True, batched, variant))
    what = "a different shape" if variant == "size" else "another dtype"
    plan.description = (
        f"Rank {r} (pipeline stage {c.stage(r)}) sent the activations of microbatch {m} with "
        f"{what} than the next stage's recv expects; both posted the pair and it never "
        "completed, and the pipeline backed up behind it."
    )
    return r


#: The planner of each fault but ``none``: it fills the plan and returns the fault rank.
PLANNERS: dict[str, Callable[[str, _Faulting], int]] = {
    "stall": _stall,
    "crash": _stall,
    "pipeline_stall": _pipeline_stall,
    "pp_deadlock": _pp_deadlock,
    "group_order": _group_order,
    "gpu_stuck": _gpu_stuck,
    "slow_gpu": _slow_gpu,
    "size_desync": _desync,
    "dtype_desync": _desync,
    "p2p_size_desync": _p2p_desync,
    "p2p_dtype_desync": _p2p_desync,
}


def plan_fault(
    fault: str,
    topo: Topology,
    sites: SiteTable,
    base: list[list[Op]],
    fault_rank: int | None,
    microbatches: int,
    rng: random.Random,
) -> tuple[int | None, FaultPlan]:
    """The fault rank and the plan of ``fault`` (see :data:`PLANNERS`)."""
    if fault == "none":
        plan = FaultPlan()
        plan.description = "Healthy job: every op of every rank completed; the dump was requested."
        return None, plan
    if topo.world < 2:
        raise ValueError(f"fault {fault!r} needs at least two ranks")
    c = _Faulting(topo, sites, base, fault_rank, microbatches, rng)
    planner = PLANNERS.get(fault)
    if planner is None:
        raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    return planner(fault, c), c.plan
