"""The driver: simulate a job, write its dumps and EXPECTED.json; the command line."""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.simulate import dumps
from tools.simulate.constants import (
    BACKEND,
    BASE_EPOCH_NS,
    COLL,
    DEFAULT_INFLIGHT,
    DEFAULT_TIMEOUT_MS,
    DIALECTS,
    FAULTS,
    MS,
    POST_STEP_NS,
    ROLE_DESC,
    SEC,
    SEND,
)
from tools.simulate.dumps import (
    _counters,
    _iteration_start,
    _Job,
    _write_ranks,
    dump_path,
    rank_dialect,
)
from tools.simulate.faults import FaultPlan, plan_fault
from tools.simulate.program import Op, build_program
from tools.simulate.scheduler import Schedule, run_schedule
from tools.simulate.sites import SiteTable
from tools.simulate.topology import Topology


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
    write_ranks: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Simulate the job, write one dump per live rank into ``out_dir``, return EXPECTED.

    Files: ``nccl_trace_rank_<r>`` (pickle protocol 2 of plain dicts, lists, tuples, str,
    int, float, bool and None, like torch's) or ``rank_<r>.json`` (``fmt="json"``: tuples
    become lists, unobserved times 0, pg_status values strings, no frames, sorted keys),
    plus ``EXPECTED.json`` (the returned dict).

    ``fault`` is one of :data:`FAULTS`, described in :mod:`tools.simulate.faults`;
    ``fault_rank`` defaults to a seed-chosen rank that can carry the fault.

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
    as nccl2's abort callback does; a healthy job's dump is an on-demand one of every rank),
    ``write_ranks`` ((lo, hi): write only the dumps of ranks lo <= r < hi, one node's shard of
    the job; EXPECTED.json still describes the whole job).
    """
    _check(dialect, fault, fmt, buffer_size)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    topo = Topology(tp, pp, dp)
    sites = SiteTable(topo)
    M = microbatches if microbatches is not None else min(16, max(4, pp))
    base, by_stage = _programs(topo, sites, M, batch_p2p, op_mix)
    run = _Run(
        out_dir=out_dir,
        topo=topo,
        sites=sites,
        base=base,
        by_stage=by_stage,
        fault=fault,
        fault_rank=fault_rank,
        microbatches=M,
        timing=timing,
        fmt=fmt,
        buffer_size=buffer_size,
        with_frames=with_frames,
        seed=seed,
        jobs=jobs,
        entries_per_rank=entries_per_rank,
        inflight=max(2, inflight),
        timeout_ms=timeout_ms,
        dialect=dialect,
        write_ranks=write_ranks,
    )
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small objects, no cycles: the collector would only rescan them
    try:
        expected = _simulate(run)
        if op_mix:
            expected["op_mix"] = list(SiteTable.MIX_OPS)
            (out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=2) + "\n")
        return expected
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def _check(dialect: str, fault: str, fmt: str, buffer_size: int) -> None:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of {', '.join(DIALECTS)}")
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    if fmt not in ("pickle", "json"):
        raise ValueError("fmt must be 'pickle' or 'json'")
    if buffer_size < 1:
        raise ValueError("buffer_size must be >= 1")


def _programs(
    topo: Topology, sites: SiteTable, M: int, batch_p2p: bool, op_mix: bool
) -> tuple[list[list[Op]], list[list[Op]]]:
    """Every rank's program of one step, and the distinct ones (one per stage)."""
    if op_mix:  # per-rank programs: the mix's sizes depend on the rank
        base = [
            build_program(topo, sites, topo.coords(r)[1], M, batch_p2p, mix_rank=r)
            for r in range(topo.world)
        ]
        return base, base
    by_stage = [build_program(topo, sites, s, M, batch_p2p) for s in range(topo.pp)]
    return [by_stage[topo.coords(r)[1]] for r in range(topo.world)], by_stage


@dataclass(frozen=True, kw_only=True)
class _Run:
    """The parameters of one simulated job (see :func:`simulate_job`)."""

    out_dir: Path
    topo: Topology
    sites: SiteTable
    base: list[list[Op]]
    by_stage: list[list[Op]]
    fault: str
    fault_rank: int | None
    microbatches: int
    timing: bool
    fmt: str
    buffer_size: int
    with_frames: bool
    seed: int
    jobs: int
    entries_per_rank: int | None
    inflight: int
    timeout_ms: int
    dialect: str
    write_ranks: tuple[int, int] | None = None


def _stuck_keys(topo: Topology, progs_f: list[list[Op]], plan: FaultPlan) -> set:
    """The matching keys of the instances that never complete: a collective's is (group,
    its count in the group this iteration); a send/recv pair's is (group, sender,
    receiver, its count between them)."""
    stuck_keys: set = set()
    for q, i in plan.stuck_ops:
        op = progs_f[q][i]
        gid = topo.role_gid[q][op.role]
        if op.kind == COLL:
            stuck_keys.add((gid, _counters(progs_f[q])[0][i]))
        else:
            peer = (
                (q // (topo.pp * topo.tp)) * (topo.pp * topo.tp) + op.peer * topo.tp + q % topo.tp
            )
            nth = sum(1 for o in progs_f[q][: i + 1] if o.kind == op.kind and o.peer == op.peer)
            src, dst = (q, peer) if op.kind == SEND else (peer, q)
            stuck_keys.add((gid, src, dst, nth))
    return stuck_keys


def _schedules(run: _Run) -> tuple[int | None, FaultPlan, Schedule, Schedule]:
    """The fault plan, and the schedules of a healthy iteration and of the last one."""
    topo, base, seed = run.topo, run.base, run.seed
    rng = random.Random(seed * 1_000_003 + 17)
    fault_rank, plan = plan_fault(
        run.fault, topo, run.sites, base, run.fault_rank, run.microbatches, rng
    )
    speed_rng = random.Random(seed * 1_000_003 + 29)
    speed = [1.0 + 0.02 * (speed_rng.random() - 0.5) for _ in range(topo.world)]
    healthy = run_schedule(
        topo, base, rng=random.Random(seed * 1_000_003 + 41), inflight=run.inflight, speed=speed
    )
    if any(x < 0 for d in healthy.done for x in d):  # pragma: no cover - schedule bug guard
        raise RuntimeError("healthy schedule did not complete")
    progs_f = [plan.progs.get(r, base[r]) for r in range(topo.world)]
    faulty = run_schedule(
        topo,
        progs_f,
        rng=random.Random(seed * 1_000_003 + 53),
        inflight=run.inflight,
        limit=plan.limit,
        frozen=plan.frozen,
        slow=plan.slow,
        stuck_keys=_stuck_keys(topo, progs_f, plan),
        speed=speed,
    )
    return fault_rank, plan, healthy, faulty


def _simulate(run: _Run) -> dict[str, Any]:
    topo, seed, fault, dialect = run.topo, run.seed, run.fault, run.dialect
    fault_rank, plan, healthy, faulty = _schedules(run)
    period = max(d[-1] for d in healthy.done) + POST_STEP_NS
    nT_min = min(len(p) for p in run.by_stage)
    epr = (
        run.entries_per_rank
        if run.entries_per_rank is not None
        else (run.buffer_size + run.buffer_size // 4)
    )
    iterations = max(1, math.ceil(max(0, epr - nT_min) / nT_min))
    t0 = BASE_EPOCH_NS + (seed % 100_000) * 7 * SEC
    live = [r for r in range(topo.world) if r not in plan.crashed]
    start_f = _iteration_start(t0, period, seed, iterations)
    pending = [
        faulty.enq[r][i] for r in live for i in range(len(faulty.enq[r])) if faulty.done[r][i] < 0
    ]
    hang = bool(pending) or bool(plan.crashed)
    if fault != "none" and not hang:  # pragma: no cover - a fault must leave a hang
        raise RuntimeError(f"fault {fault} did not hang the job")
    if pending:
        detect = start_f + min(pending) + run.timeout_ms * MS
    else:
        last = max((x for r in live for x in faulty.done[r]), default=0)
        detect = start_f + last + 2 * SEC
    drng = random.Random(seed * 1_000_003 + 67)
    dump_times = [detect + int((0.05 + 1.2 * drng.random()) * SEC) for _ in range(topo.world)]
    blind_times = {
        r: faulty.ready[r][b] if faulty.ready[r][b] >= 0 else faulty.enq[r][b]
        for r, b in plan.blind.items()
    }
    if fault != "none":
        # nccl2 dumps from the abort callback of a rank whose own op timed out: a rank with
        # nothing unfinished (stalled outside communication) writes no file.
        def unfinished(r: int) -> bool:
            if r in blind_times:
                return True  # its watchdog stopped observing: its ops look unfinished
            return any(x < 0 for x in faulty.done[r])

        live = [r for r in live if rank_dialect(dialect, r) != "nccl2" or unfinished(r)]
    job = _Job(
        dialect=dialect,
        blind_times=blind_times,
        topo=topo,
        base=run.base,
        fault_progs=plan.progs,
        healthy=healthy,
        faulty=faulty,
        iterations=iterations,
        buffer_size=run.buffer_size,
        timing=run.timing,
        with_frames=run.with_frames and run.fmt == "pickle",
        seed=seed,
        dump_times=dump_times,
        timeout_ms=run.timeout_ms,
        period=period,
        t0=t0,
        out_dir=run.out_dir,
        fmt=run.fmt,
    )
    shard = run.write_ranks
    _write(job, live if shard is None else [r for r in live if shard[0] <= r < shard[1]], run.jobs)
    details: dict[str, Any] = {"iterations": iterations + 1, "microbatches": run.microbatches}
    details.update(_target_details(run, plan, fault_rank, iterations))
    expected = {
        "scenario": fault,
        "world": topo.world,
        "backend": BACKEND
        if dialect == "nccl"
        else ("nccl2" if dialect == "nccl2" else "nccl+nccl2"),
        "format": run.fmt,
        "dumped_ranks": live,
        "hang": hang,
        "culprits": plan.culprits,
        "kind": fault,
        "deadlock": plan.deadlock,
        "description": plan.description,
        "details": details,
    }
    (run.out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected


def _write(job: _Job, live: list[int], jobs: int) -> None:
    """Write the dumps of the ranks in ``live`` (in ``jobs`` forked writers if more than one)."""
    out_dir = job.out_dir
    for r in range(job.topo.world):  # stale files from an earlier run would mislead
        for f in (
            dump_path(out_dir, r, "pickle"),
            dump_path(out_dir, r, "json"),
            dump_path(out_dir, r, "pickle", "nccl2"),
        ):
            if f.exists():
                f.unlink()
    dumps._JOB = job
    try:
        if jobs > 1 and len(live) > 1:
            chunks = [live[i :: jobs * 4] for i in range(jobs * 4)]
            gc.freeze()  # children inherit the schedule without copying its pages
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(jobs) as pool:
                sum(pool.map(_write_ranks, [c for c in chunks if c]))
        else:
            _write_ranks(live)
    finally:
        dumps._JOB = None


def _target_details(
    run: _Run, plan: FaultPlan, fault_rank: int | None, iterations: int
) -> dict[str, Any]:
    """Where the fault is: its rank, group and the op's name and sequence numbers."""
    if plan.target is None:
        return {}
    topo = run.topo
    tr, ti = plan.target
    prog = plan.progs.get(tr, run.base[tr])
    op = prog[ti]
    ca, pa, _, _ = _counters(prog)
    ncoll_h, np2p_h = _counters(run.base[tr])[2:]
    gid = topo.role_gid[tr][op.role]
    return {
        "fault_rank": fault_rank,
        "group": topo.group_name(gid),
        "group_desc": ROLE_DESC[op.role],
        "group_ranks": list(topo.group_ranks[gid]),
        "profiling_name": ("nccl:" + op.site.op)
        if op.kind == COLL
        else (
            f"nccl:{op.site.op} "
            + (
                f"{topo.coords(tr)[1]}->{op.peer}"
                if op.kind == SEND
                else f"{topo.coords(tr)[1]}<-{op.peer}"
            )
        ),
        "collective_seq_id": iterations * ncoll_h[op.role] + ca[ti],
        "p2p_seq_id": iterations * np2p_h[op.role] + pa[ti],
    }


def main(argv: list[str] | None = None) -> int:
    from tools import simulate as package  # the package's docstring describes the command

    doc = package.__doc__ or ""
    ap = argparse.ArgumentParser(prog="python -m tools.simulate", description=doc.split("\n\n")[0])
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
    ap.add_argument(
        "--batch-p2p",
        action="store_true",
        help="send/recv through batch_isend_irecv (coalesced records)",
    )
    ap.add_argument(
        "--op-mix",
        action="store_true",
        help="also run ops whose sides and sizes differ per rank by design",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--dialect",
        default="nccl",
        choices=DIALECTS,
        help="nccl (legacy recorder), nccl2 (torch 2.15 hook form) or mixed",
    )
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument(
        "--write-ranks",
        metavar="LO:HI",
        default=None,
        help="write only the dumps of ranks LO <= r < HI (one node's shard of the job)",
    )
    args = ap.parse_args(argv)
    shard = None
    if args.write_ranks:
        lo, _, hi = args.write_ranks.partition(":")
        shard = (int(lo), int(hi))
    t = time.perf_counter()
    expected = simulate_job(
        args.out,
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        fault=args.fault,
        fault_rank=args.rank,
        timing=args.timing,
        fmt="json" if args.json else "pickle",
        buffer_size=args.buffer_size,
        with_frames=not args.no_frames,
        seed=args.seed,
        jobs=args.jobs,
        entries_per_rank=args.entries_per_rank,
        microbatches=args.microbatches,
        batch_p2p=args.batch_p2p,
        op_mix=args.op_mix,
        dialect=args.dialect,
        write_ranks=shard,
    )
    elapsed = time.perf_counter() - t
    size = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file())
    summary = {
        k: expected[k] for k in ("scenario", "world", "hang", "culprits", "kind", "deadlock")
    }
    summary.update(
        {"seconds": round(elapsed, 2), "bytes": size, "dumps": len(expected["dumped_ranks"])}
    )
    print(json.dumps(summary))
    return 0
