"""Building one rank's dump from the schedules, and writing the files."""

from __future__ import annotations

import gc
import json
import pickle
from array import array
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

