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


class _Scheduler:
    """The state of one run of :func:`run_schedule`: per rank its program counter, stream
    head, CPU clock and the op instances it joined."""

    def __init__(
        self,
        topo: Topology,
        progs: list[list[Op]],
        rng: random.Random,
        inflight: int,
        limit: dict[int, int],
        frozen: dict[int, int],
        slow: dict[int, tuple[int, int, float]],
        stuck_keys: set,
        speed: list[float],
    ) -> None:
        n = topo.world
        self.topo, self.progs, self.inflight = topo, progs, inflight
        self.limit, self.frozen, self.slow = limit, frozen, slow
        self.stuck_keys, self.speed = stuck_keys, speed
        self.rand = rand = rng.random
        self.pc = [0] * n
        self.head = [0] * n
        self.cpu = [int(rand() * 200 * US) for _ in range(n)]
        self.gpu0 = [c + int(rand() * 50 * US) for c in self.cpu]
        self.blocked = [False] * n
        self.queued = [True] * n
        self.enq: list[list[int]] = [[] for _ in range(n)]
        self.ready: list[list[int]] = [[-1] * len(p) for p in progs]
        self.done: list[list[int]] = [[-1] * len(p) for p in progs]
        self.opinst: list[list[_Inst]] = [[] for _ in range(n)]
        self.coll_cnt = [[0] * 6 for _ in range(n)]
        self.p2p_cnt: list[dict] = [dict() for _ in range(n)]
        self.insts: dict[tuple, _Inst] = {}
        self.work = deque(range(n))

    def start(self, r0: int, i0: int) -> None:
        """Op i0 of rank r0 reached the head of its stream: start it, and whatever its
        completion lets start in turn."""
        progs, done, ready, enq, head, pc = (
            self.progs,
            self.done,
            self.ready,
            self.enq,
            self.head,
            self.pc,
        )
        rand, frozen, slow, speed = self.rand, self.frozen, self.slow, self.speed
        stack = [(r0, i0)]
        while stack:
            r, i = stack.pop()
            if frozen.get(r, 1 << 62) <= i:
                continue  # the GPU never gets to this op
            op = progs[r][i]
            prev = done[r][i - 1] if i else self.gpu0[r]
            comp = op.site.gpu_ns * speed[r] * (0.96 + 0.08 * rand())
            sl = slow.get(r)
            if sl is not None and sl[0] <= i < sl[1]:
                comp *= sl[2]
            e = enq[r][i]
            rd = prev + int(comp)
            if rd < e:
                rd = e + int(3 * US * rand())
            ready[r][i] = rd
            inst = self.opinst[r][i]
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
                    self._wake(q)

    def _wake(self, q: int) -> None:
        if self.blocked[q]:
            self.blocked[q] = False
            if not self.queued[q]:
                self.queued[q] = True
                self.work.append(q)

    def _instance(self, r: int, op: Op) -> _Inst:
        """The collective instance or send/recv pair op joins (created by its first member)."""
        topo = self.topo
        gid = topo.role_gid[r][op.role]
        if op.kind == COLL:
            cnt = self.coll_cnt[r]
            cnt[op.role] += 1
            key: tuple = (gid, cnt[op.role])
            size = len(topo.group_ranks[gid])
        else:
            tpn, ppn = topo.tp, topo.pp
            peer = (r // (tpn * ppn)) * (ppn * tpn) + op.peer * tpn + r % tpn
            src, dst = (r, peer) if op.kind == SEND else (peer, r)
            ck = (op.kind, peer)
            c = self.p2p_cnt[r].get(ck, 0) + 1
            self.p2p_cnt[r][ck] = c
            key = (gid, src, dst, c)
            size = 2
        inst = self.insts.get(key)
        if inst is None:
            inst = _Inst(size, op.site.comm_ns, key in self.stuck_keys)
            self.insts[key] = inst
        inst.enq += 1
        if inst.enq == inst.size:
            del self.insts[key]
        return inst

    def advance(self, r: int) -> None:
        """Rank r's CPU enqueues ops until it blocks or its program (or limit) ends."""
        self.queued[r] = False
        prog = self.progs[r]
        lim = self.limit.get(r, len(prog))
        p = self.pc[r]
        enq_r, done_r, head, cpu = self.enq[r], self.done[r], self.head, self.cpu
        inflight, rand = self.inflight, self.rand
        while p < lim:
            op = prog[p]
            t = cpu[r] + int(op.site.cpu_ns * (0.8 + 0.4 * rand()))
            if p:
                if prog[p - 1].sync:
                    if head[r] < p:
                        self.blocked[r] = True
                        break
                    w = done_r[p - 1] + SYNC_NS
                    if w > t:
                        t = w
                if p >= inflight:
                    if head[r] <= p - inflight:
                        self.blocked[r] = True
                        break
                    w = done_r[p - inflight]
                    if w > t:
                        t = w
            enq_r.append(t)
            cpu[r] = t
            self.opinst[r].append(self._instance(r, op))
            p += 1
            self.pc[r] = p
            if head[r] == p - 1:
                self.start(r, p - 1)


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
    sch = _Scheduler(
        topo,
        progs,
        rng,
        inflight,
        limit or {},
        frozen or {},
        slow or {},
        stuck_keys or set(),
        speed or [1.0] * topo.world,
    )
    work = sch.work
    while work:
        sch.advance(work.popleft())
    return Schedule(sch.enq, sch.ready, sch.done)
