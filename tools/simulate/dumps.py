"""Building one rank's dump from the schedules, and writing the files."""

from __future__ import annotations

import gc
import json
import pickle
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.simulate.constants import (
    BATCH_OP_LEAD_NS,
    COLL,
    COMM_LIB_VERSION,
    FORMAT_VERSION,
    RECV,
    ROLE_DESC,
    SEND,
    WATCHDOG_TICK_NS,
)
from tools.simulate.forms import to_hook_form, to_json_form
from tools.simulate.program import Op
from tools.simulate.scheduler import Schedule
from tools.simulate.topology import Topology


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


@dataclass(kw_only=True)
class _Job:
    """Everything the writers need; shared with worker processes by fork."""

    dialect: str
    blind_times: dict[int, int]  # rank -> time from which its watchdog observes nothing
    topo: Topology
    base: list[list[Op]]  # every rank's program of a healthy step
    fault_progs: dict[int, list[Op]]  # ranks whose last iteration differs
    healthy: Schedule
    faulty: Schedule
    iterations: int  # completed iterations before the last
    buffer_size: int
    timing: bool
    with_frames: bool
    seed: int
    dump_times: list[int]
    timeout_ms: int
    period: int
    t0: int
    out_dir: Path
    fmt: str
    _ranks_str: dict[int, str] = field(default_factory=dict)

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


def _records(prog: list[Op], n_ops: int) -> list[tuple[int, int]]:
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


class _RankView:
    """What rank r's dump is built from: its programs, schedules, counters and groups."""

    def __init__(self, job: _Job, r: int) -> None:
        topo: Topology = job.topo
        self.job, self.r = job, r
        self.stage = topo.coords(r)[1]
        self.prog_h: list[Op] = job.base[r]
        self.prog_f: list[Op] = job.fault_progs.get(r, self.prog_h)
        self.F: int = job.iterations
        self.rg = topo.role_gid[r]
        self.rpg = topo.role_pgid[r]
        self.main_id, self.grad_id = _thread_ids(r, job.seed)
        self.grad_name = f"pt_autograd_{r % 8}"
        self.pgtuple = {
            role: (topo.group_name(self.rg[role]), ROLE_DESC[role])
            for role in range(6)
            if self.rg[role] >= 0
        }
        self.phases = {role: _phase(r, self.rg[role], job.seed) for role in self.pgtuple}
        self.statics: dict[tuple, tuple] = {}
        self.ca_h, self.pa_h, self.ncoll, self.np2p = _counters(self.prog_h)
        self.ca_f, self.pa_f, _, _ = _counters(self.prog_f)
        sch_h: Schedule = job.healthy
        sch_f: Schedule = job.faulty
        self.enq_h, self.rdy_h, self.don_h = sch_h.enq[r], sch_h.ready[r], sch_h.done[r]
        self.enq_f, self.rdy_f, self.don_f = sch_f.enq[r], sch_f.ready[r], sch_f.done[r]
        blind_t = job.blind_times.get(r)
        if blind_t is not None:
            # Events that fired after the watchdog stopped observing were never seen.
            self.rdy_f = [x if 0 <= x < blind_t else -1 for x in self.rdy_f]
            self.don_f = [x if 0 <= x < blind_t else -1 for x in self.don_f]
        self.rec_h = _records(self.prog_h, len(self.prog_h))
        self.rec_f = _records(self.prog_f, len(self.enq_f))
        self.nT = len(self.rec_h)
        total = self.F * self.nT + len(self.rec_f)
        self.lo = max(0, total - job.buffer_size)  # the first record the ring buffer keeps

    def it_start(self, k: int) -> int:
        return _iteration_start(self.job.t0, self.job.period, self.job.seed, k)

    def static(self, op: Op, part: int = 0) -> tuple:
        """The fields of op's entries that do not change between iterations."""
        key = (id(op.site), op.role, op.kind, op.peer, part)
        st = self.statics.get(key)
        if st is None:
            site = op.site if part != 2 else op.site.coalesced
            if part == 2:
                pname = "nccl:coalesced"
            elif op.kind == SEND:
                pname = f"nccl:send {self.stage}->{op.peer}"
            elif op.kind == RECV:
                pname = f"nccl:recv {self.stage}<-{op.peer}"
            else:
                pname = "nccl:" + site.op
            st = (
                self.rpg[op.role],
                self.pgtuple[op.role],
                self.grad_name if site.autograd else "python3",
                self.grad_id if site.autograd else self.main_id,
                pname,
                site.in_sizes,
                site.in_dtypes,
                site.out_sizes,
                site.out_dtypes,
                op.kind != COLL,
                site.frames if self.job.with_frames else None,
                self.phases[op.role],
            )
            self.statics[key] = st
        return st


class _Emitter:
    """Appends one entry from its times (the general path: any state)."""

    def __init__(
        self, append: Callable[[dict[str, Any]], None], timing: bool, dump_t: int, timeout_ms: int
    ) -> None:
        self.append, self.timing, self.dump_t, self.timeout_ms = append, timing, dump_t, timeout_ms
        self.stamp = 0  # dump-time getTime() advance per entry

    def __call__(
        self, rid: int, st: tuple, coll: int, p2p: int, created: int, rdy: int, don: int
    ) -> None:
        (pg_id, pgt, tname, tid, pname, ins, idt, outs, odt, is_p2p, frames, phase) = st
        started = completed = None
        duration = None
        if don >= 0:
            state = "completed"
            # first watchdog pass at or after completion
            completed = don + (phase - don) % WATCHDOG_TICK_NS + 2_000 + (rid % 17) * 1_300
            retired = True
            if self.timing:
                started = completed - 300 - (rid % 5) * 40
                duration = _float32((don - rdy) / 1e6)
        else:
            retired = False
            if self.timing and rdy >= 0:
                state = "started"
                self.stamp += 1
                started = self.dump_t + self.stamp * 650
            else:
                state = "scheduled"
        e: dict[str, Any] = {}
        if frames is not None:
            e["frames"] = frames
        e.update(
            record_id=rid,
            pg_id=pg_id,
            process_group=pgt,
            thread_name=tname,
            thread_id=tid,
            collective_seq_id=coll,
            p2p_seq_id=p2p,
            op_id=coll + p2p,
            profiling_name=pname,
            time_created_ns=created,
        )
        if duration is not None:
            e["duration_ms"] = duration
        e.update(
            input_sizes=ins,
            input_dtypes=idt,
            output_sizes=outs,
            output_dtypes=odt,
            state=state,
            time_discovered_started_ns=started,
            time_discovered_completed_ns=completed,
            retired=retired,
            timeout_ms=self.timeout_ms,
            is_p2p=is_p2p,
        )
        self.append(e)


def _template(v: _RankView) -> list[tuple]:
    """Per record of the healthy iteration: its static fields, counters and relative times."""
    tmpl = []
    scales = (0.94, 0.97, 1.0, 1.03, 1.06)  # run-to-run spread of kernel durations
    all_durs = array(
        "f", [(d - s) / 1e6 * x for d, s in zip(v.don_h, v.rdy_h, strict=True) for x in scales]
    ).tolist()
    for j, part in v.rec_h:
        op = v.prog_h[j]
        role = op.role
        durs = all_durs[5 * j : 5 * j + 5]
        e_rel = v.enq_h[j] - (BATCH_OP_LEAD_NS if part == 1 else 0)
        tmpl.append(
            (
                v.static(op, part),
                v.ncoll[role],
                v.np2p[role],
                v.ca_h[j],
                v.pa_h[j],
                e_rel,
                v.don_h[j] if part != 1 else -1,
                durs,
            )
        )
    return tmpl


def _history(v: _RankView, append: Callable[[dict[str, Any]], None], emit: _Emitter) -> None:
    """The completed iterations before the last, laid out from the template iteration
    (the hot loop: dict literals)."""
    F, nT, timing, timeout_ms, tick = v.F, v.nT, v.job.timing, v.job.timeout_ms, WATCHDOG_TICK_NS
    tmpl = _template(v)
    g = v.lo
    while g < F * nT:
        k, j0 = divmod(g, nT)
        j1 = min(nT, F * nT - k * nT)
        base_t = v.it_start(k)
        rid0 = k * nT
        kv = k % 5
        for j in range(j0, j1):
            st, nc, npp, ca, pa, e_rel, d_rel, durs = tmpl[j]
            (pg_id, pgt, tname, tid, pname, ins, idt, outs, odt, is_p2p, frames, phase) = st
            rid = rid0 + j
            coll = k * nc + ca
            p2p = k * npp + pa
            created = base_t + e_rel - (rid * 7919) % 4000
            if d_rel < 0:  # recorded without events: scheduled forever, never retired
                emit(rid, st, coll, p2p, created, -1, -1)
                continue
            don = base_t + d_rel
            completed = don + (phase - don) % tick + 2_000 + (rid % 17) * 1_300
            if timing:
                e = {
                    "frames": frames,
                    "record_id": rid,
                    "pg_id": pg_id,
                    "process_group": pgt,
                    "thread_name": tname,
                    "thread_id": tid,
                    "collective_seq_id": coll,
                    "p2p_seq_id": p2p,
                    "op_id": coll + p2p,
                    "profiling_name": pname,
                    "time_created_ns": created,
                    "duration_ms": durs[(kv + j) % 5],
                    "input_sizes": ins,
                    "input_dtypes": idt,
                    "output_sizes": outs,
                    "output_dtypes": odt,
                    "state": "completed",
                    "time_discovered_started_ns": completed - 300 - (rid % 5) * 40,
                    "time_discovered_completed_ns": completed,
                    "retired": True,
                    "timeout_ms": timeout_ms,
                    "is_p2p": is_p2p,
                }
            else:
                e = {
                    "frames": frames,
                    "record_id": rid,
                    "pg_id": pg_id,
                    "process_group": pgt,
                    "thread_name": tname,
                    "thread_id": tid,
                    "collective_seq_id": coll,
                    "p2p_seq_id": p2p,
                    "op_id": coll + p2p,
                    "profiling_name": pname,
                    "time_created_ns": created,
                    "input_sizes": ins,
                    "input_dtypes": idt,
                    "output_sizes": outs,
                    "output_dtypes": odt,
                    "state": "completed",
                    "time_discovered_started_ns": None,
                    "time_discovered_completed_ns": completed,
                    "retired": True,
                    "timeout_ms": timeout_ms,
                    "is_p2p": is_p2p,
                }
            if frames is None:
                del e["frames"]  # the others keep their order
            append(e)
        g = (k + 1) * nT


def _last_iteration(v: _RankView, emit: _Emitter) -> None:
    """The last iteration, scheduled op by op."""
    F, nT = v.F, v.nT
    base_t = v.it_start(F)
    for i in range(max(0, v.lo - F * nT), len(v.rec_f)):
        j, part = v.rec_f[i]
        op = v.prog_f[j]
        role = op.role
        rdy = v.rdy_f[j] if part != 1 else -1
        don = v.don_f[j] if part != 1 else -1
        created = base_t + v.enq_f[j] - (BATCH_OP_LEAD_NS if part == 1 else 0)
        emit(
            F * nT + i,
            v.static(op, part),
            F * v.ncoll[role] + v.ca_f[j],
            F * v.np2p[role] + v.pa_f[j],
            created,
            base_t + rdy if rdy >= 0 else -1,
            base_t + don if don >= 0 else -1,
        )


def _pg_status(v: _RankView) -> dict[str, dict[str, int]]:
    """pg_status: counters of the works this rank enqueued, observed by its watchdogs."""
    F, timing, ncoll, np2p = v.F, v.job.timing, v.ncoll, v.np2p
    status: dict[int, list[int]] = {}
    if F > 0:
        for j, op in enumerate(v.prog_h):
            seq = (F - 1) * (np2p[op.role] if op.kind != COLL else ncoll[op.role]) + (
                v.pa_h[j] if op.kind != COLL else v.ca_h[j]
            )
            st = status.setdefault(op.role, [-1, -1, -1])
            st[0] = seq
            st[2] = seq
            if timing and seq > st[1]:
                st[1] = seq
    for j in range(len(v.enq_f)):
        op = v.prog_f[j]
        seq = F * (np2p[op.role] if op.kind != COLL else ncoll[op.role]) + (
            v.pa_f[j] if op.kind != COLL else v.ca_f[j]
        )
        st = status.setdefault(op.role, [-1, -1, -1])
        st[0] = seq
        if v.don_f[j] >= 0:
            st[2] = seq
        if timing and v.rdy_f[j] >= 0 and seq > st[1]:
            st[1] = seq
    pg_status = {}
    for role in sorted(status, key=lambda x: v.rpg[x]):
        e_, s_st, c_ = status[role]
        pg_status[str(v.rpg[role])] = {
            "last_enqueued_collective": e_,
            "last_started_collective": s_st,
            "last_completed_collective": c_,
        }
    return pg_status


def build_dump(r: int) -> dict[str, Any]:
    """The flight-recorder dump of rank r (pickle form)."""
    job = _JOB
    assert job is not None
    v = _RankView(job, r)
    entries: list[dict[str, Any]] = []
    emit = _Emitter(entries.append, job.timing, job.dump_times[r], job.timeout_ms)
    _history(v, entries.append, emit)
    _last_iteration(v, emit)
    pg_status = _pg_status(v)
    pg_config = {}
    for role in sorted(v.pgtuple, key=lambda x: (v.pgtuple[x][0], v.pgtuple[x][1])):
        name, desc = v.pgtuple[role]
        pg_config[name] = {"name": name, "desc": desc, "ranks": job.ranks_str(v.rg[role])}
    return {
        "version": FORMAT_VERSION,
        "pg_config": pg_config,
        "comm_lib_version": COMM_LIB_VERSION,
        "pg_status": pg_status,
        "entries": entries,
    }


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
