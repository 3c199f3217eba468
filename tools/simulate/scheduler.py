"""The discrete scheduler: enqueue, stream order and completion of every op of one iteration."""

from __future__ import annotations

import random
from collections import deque

from tools.simulate.constants import COLL, SEND, SYNC_NS, US
from tools.simulate.program import Op
from tools.simulate.topology import Topology


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

