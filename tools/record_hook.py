"""Record real torch 2.15 flight-recorder dumps written by the recorder hook (nccl2, nccl-lazy).

torch 2.15's default NCCL (nccl2) and nccl-lazy record through the generic
``FlightRecorderHook``. The hook records any backend that does not record itself, so on a
CPU the same dumps come from :mod:`tools.hook_backend`: a Python backend that forwards every
op to gloo and calls itself ``nccl2`` (or ``nccl-lazy``). W worker processes join a job on
127.0.0.1, run a few ops and misbehave in one planned way, as in ``tools/record_gloo.py``
(whose scenario bodies several scenarios reuse; both launch through :mod:`tools.launcher`).

Which ranks write a file follows nccl2: a rank dumps when one of **its own** ops times out
or fails (the abort callback; a Python backend has none, so the worker dumps when its op
raises), so a rank stalled outside communication writes no file. Scenarios marked
``policy="all"`` dump every rank once the first one failed (as a user's own watchdog or the
debug server's dump handler would). The files are named ``<backend>_trace_rank_<rank>``;
where a scenario dumps the nccl-lazy buffer too (nccl-lazy never dumps by itself) each rank
leaves one file per backend.

The op-mix scenarios (``nccl2_opmix_*``) run the op mix of ``tools/record_gloo.py``
without ``monitored_barrier``: that is gloo's own protocol of send/recv between rank 0 and
the others (``ProcessGroupGloo.monitored_barrier``), not an op c10d hands a backend, so the
forwarding backend has none to forward. Everything else, list-form ``all_to_all`` included,
is forwarded. torch 2.15 records the mix differently from gloo's own recorder:
``reduce_scatter`` is one entry (gloo: one ``all_reduce`` per output),
``all_gather_object`` two ``_all_gather_base`` entries, ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` ``_all_gather_base`` / ``_reduce_scatter_base``.

A send/recv size desync cannot be recorded this way: gloo aborts a receiver that gets more
than it posted and completes one that gets less, so the pair never hangs (the analysis of a
one-sided send/recv mismatch is tested on synthetic hook dumps, ``tests/unit/match/test_dialect.py``).

Every scenario is written twice:

* ``sample_dumps/<name>``: the dumps exactly as the hook wrote them (paths scrubbed). A
  Python backend reports no completion, so every entry reads ``scheduled`` + retired;
* ``sample_dumps/<name>_states``: the same dumps with nccl2's completion states laid over
  the real entries (:func:`tools.hook_backend.overlay_states`): ``completed`` + retired where
  the gloo work finished, ``scheduled`` and not retired where it never did. Its
  ``EXPECTED.json`` says so (``"states": "overlaid"``).

Usage (needs torch 2.15; run from the repository root)::

    .venv-torch215/bin/python -m tools.record_hook --out sample_dumps [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import launcher
from tools import record_gloo as rg
from tools.hook_backend import LOG, dump, overlay_states, register
from tools.launcher import TRIGGER_KEY

DEFAULT_TIMEOUT_S = 3.0
STALL_S = 600.0
RUN_DEADLINE_S = 60.0
DUMP_WAIT_S = 4.0

#: What an honest analysis says of a healthy run recorded without completion states.
BLIND_HEALTHY = {
    "verdict": "inconclusive",
    "culprits": [],
    "kind": "inconclusive",
    "why": (
        "A Python backend reports no completion: the hook retired every op when it was issued, "
        "so whether the last ops finished is not in these dumps (the _states form, with "
        "nccl2's completion states laid over, says no hang)."
    ),
}

STATES_NOTE = (
    "nccl2's completion states laid over the real entries: a Python backend cannot report "
    "completion, so the hook retired every entry at issue; here an entry whose gloo work "
    "finished reads completed + retired (with the time the backend saw it finish), one that "
    "never finished reads scheduled and not retired, and pg_status last_completed_collective "
    "is the last completed op_id. Everything else is as the hook wrote it."
)


@dataclass
class HookScenario:
    name: str
    world: int
    body: Callable[[Any], None]
    culprits: list[int]
    kind: str
    description: str
    policy: str = "own_timeout"  # or "all"
    no_dump: tuple[int, ...] = ()
    backends: tuple[str, ...] = ("nccl2",)  # buffers each dumping rank writes
    hang: bool = True
    deadlock: bool = False
    healthy: bool = False
    analyzer: dict[str, Any] | None = None
    skip_ops: frozenset[str] = frozenset()  # op-mix steps left out (tools.record_gloo._op_mix)


# The op mix of tools/record_gloo.py without monitored_barrier: it is gloo's own send/recv
# protocol (ProcessGroupGloo.monitored_barrier), not a c10d op a backend serves, and a Python
# backend has none.
OPMIX_SKIP = frozenset({"monitored_barrier", "monitored_barrier_all"})


class HookCtx(rg.Ctx):
    def lazy_group(self, ranks: list[int], desc: str) -> Any:
        return self.dist.new_group(
            ranks=ranks, timeout=self.timeout, group_desc=desc, backend="nccl-lazy"
        )


def _deadlock_p2p_w2(c: Any) -> None:
    d = c.dist
    d.barrier()
    d.all_reduce(c.t())
    peer = 1 - c.rank
    for _ in range(2):  # a few good exchanges first
        if c.rank == 0:
            d.send(c.t(), dst=peer)
            d.recv(c.t(), src=peer)
        else:
            d.recv(c.t(), src=peer)
            d.send(c.t(), dst=peer)
    d.recv(c.t(), src=peer)  # both stages receive first
    d.send(c.t(), dst=peer)


def _anysource_stall_w4(c: Any) -> None:
    """Ranks 1-3 send to rank 0, which receives from any source (``irecv`` without ``src``:
    the hook writes ``recv 0<-?``); then an all_reduce. Rank 3 stalls in compute
    before the all_reduce of the third step, after its sends."""
    d = c.dist
    d.barrier()
    for step in range(3):
        if c.rank == 0:
            for _ in range(c.world - 1):
                # irecv + wait: dist.recv without src asks the hook's work for its source
                # rank, which torch 2.15's hooked works do not report (RuntimeError)
                d.irecv(c.t()).wait()
        else:
            d.send(c.t(), dst=0)
        if step == 2 and c.rank == 3:
            c.stall()
        d.all_reduce(c.t())


def _pp4(c: Any, stall_stage: int | None, lazy: bool) -> None:
    """Four pipeline stages; each step stage s receives from s-1, computes, sends to s+1;
    then every stage all_reduces on the default group (the gradient sync)."""
    d = c.dist
    s = c.rank
    pairs = {}
    for a in range(c.world - 1):
        g = c.lazy_group([a, a + 1], "PIPELINE_MODEL_PARALLEL_GROUP") if lazy else None
        pairs[a] = g
    d.barrier()
    for step in range(3):
        for micro in range(2):
            if s > 0:
                d.recv(c.t(), src=s - 1, group=pairs[s - 1])
            if step == 2 and micro == 1 and s == stall_stage:
                c.stall()
            if s < c.world - 1:
                d.send(c.t(), dst=s + 1, group=pairs[s])
        d.all_reduce(c.t())


SCENARIOS: dict[str, HookScenario] = {
    s.name: s
    for s in [
        HookScenario(
            "nccl2_stall_w4",
            4,
            rg._stall_w4,
            [1],
            "not_joined",
            "nccl2 (recorder hook): rank 1 stalls in compute before the 7th collective, an "
            "all_reduce; ranks 0, 2 and 3 enqueue it and time out. Every rank dumped once the "
            "first timed out (as a watchdog of the job's own would ask); nccl2 alone would dump "
            "only ranks 0, 2 and 3 (see nccl2_stall_nofile_w4).",
            policy="all",
        ),
        HookScenario(
            "nccl2_stall_nofile_w4",
            4,
            rg._stall_w4,
            [1],
            "missing_dump",
            "nccl2 (recorder hook): rank 1 stalls in compute before the 7th collective; ranks 0, 2 "
            "and 3 time out in it and dump (their own ops timed out). Rank 1 has nothing in "
            "flight and writes no file, as nccl2 does.",
            no_dump=(1,),
        ),
        HookScenario(
            "nccl2_crash_w4",
            4,
            rg._crash_w4,
            [2],
            "missing_dump",
            "nccl2 (recorder hook): rank 2 exits hard before the 7th collective and writes no "
            "file; ranks 0, 1 and 3 fail in that all_reduce and dump.",
            no_dump=(2,),
        ),
        HookScenario(
            "nccl2_op_desync_w4",
            4,
            rg._op_desync_w4,
            [2],
            "op_mismatch",
            "nccl2 (recorder hook): rank 2 calls broadcast where ranks 0, 1 and 3 call all_reduce "
            "as the 7th collective; all four time out and dump.",
        ),
        HookScenario(
            "nccl2_size_desync_w4",
            4,
            rg._size_desync_w4,
            [0],
            "size_mismatch",
            "nccl2 (recorder hook): rank 0 all_reduces 4 elements where ranks 1, 2 and 3 use 8; "
            "rank 0 finishes its short all_reduce and times out in the next one, ranks 1-3 time "
            "out in the mismatched one; all four dump.",
        ),
        HookScenario(
            "nccl2_dtype_desync_w4",
            4,
            rg._dtype_desync_w4,
            [3],
            "dtype_mismatch",
            "nccl2 (recorder hook): rank 3 all_reduces int64 where ranks 0, 1 and 2 use float32 "
            "of the same length; gloo (under the hook) aborts rank 2 when it receives rank 3's "
            "oversized chunk, so rank 2, a victim, writes no file.",
            no_dump=(2,),
        ),
        HookScenario(
            "nccl2_chain_tp_dp_w8",
            8,
            rg._chain_tp_dp_w8,
            [3],
            "missing_dump",
            "nccl2 (recorder hook), 8 ranks in tensor-parallel pairs and two data-parallel "
            "groups; rank 3 stalls after its 2nd DP all_reduce, before its 3rd TP one, and writes "
            "no file (nothing of it timed out). Rank 2 times out in TP on rank 3; ranks 0, 4 and 6 "
            "in DP on rank 2; ranks 1, 5 and 7 in DP on rank 3.",
            no_dump=(3,),
        ),
        HookScenario(
            "nccl2_deadlock_p2p_w2",
            2,
            _deadlock_p2p_w2,
            [0, 1],
            "deadlock",
            "nccl2 (recorder hook): after two good send/recv exchanges both ranks post a recv "
            "first and wait for each other's send: a send/recv deadlock; both time out and dump.",
            deadlock=True,
        ),
        HookScenario(
            "nccl2_anysource_stall_w4",
            4,
            _anysource_stall_w4,
            [3],
            "not_joined",
            "nccl2 (recorder hook): each step ranks 1-3 send to rank 0, which receives from any "
            "source (written 'recv 0<-?'), then every rank all_reduces. Rank 3 stalls in compute "
            "before the all_reduce of the third step, after its sends; ranks 0-2 time out in "
            "that all_reduce. Every rank dumped once the first timed out. The any-source "
            "receives each pair with a send that targeted rank 0; none is a wait.",
            policy="all",
        ),
        HookScenario(
            "nccl2_pp4_stall_w4",
            4,
            lambda c: _pp4(c, 2, lazy=True),
            [2],
            "missing_dump",
            "nccl2 + nccl-lazy (recorder hook): a 4-stage pipeline whose send/recv run on "
            "nccl-lazy pair groups and whose gradient all_reduce runs on the nccl2 default group. "
            "Stage 2 stalls in compute before sending its last microbatch and writes no file; "
            "stage 3 times out in its recv, stages 0 and 1 in the all_reduce. Each rank that "
            "dumped wrote both buffers (nccl2_trace_rank_N and nccl-lazy_trace_rank_N), as a "
            "capture tool that dumps every backend would: two files per rank.",
            no_dump=(2,),
            backends=("nccl2", "nccl-lazy"),
        ),
        HookScenario(
            "nccl2_healthy_w4",
            4,
            rg._healthy_w4,
            [],
            "no_hang",
            "nccl2 (recorder hook): no fault; every rank finishes its ops and rank 0 then asks "
            "every rank to dump.",
            policy="all",
            hang=False,
            healthy=True,
        ),
        HookScenario(
            "nccl2_opmix_healthy_w4",
            4,
            rg._opmix_healthy_w4,
            [],
            "no_hang",
            "nccl2 (recorder hook): two rounds of the op mix of opmix_healthy_w4 (gather, scatter, "
            "reduce, broadcast, all_to_all_single with uneven splits, all_to_all, the four object "
            "collectives, reduce_scatter, reduce_scatter_tensor, all_gather_into_tensor, "
            "all_gather, barrier, all_reduce) without monitored_barrier, which the forwarding "
            "backend has not got; no fault, and rank 0 then asks every rank to dump.",
            policy="all",
            hang=False,
            healthy=True,
            skip_ops=OPMIX_SKIP,
        ),
        HookScenario(
            "nccl2_opmix_stall_w4",
            4,
            rg._opmix_stall_w4,
            [2],
            "not_joined",
            "nccl2 (recorder hook): one round of the op mix of nccl2_opmix_healthy_w4, then rank 2 "
            "stalls before the gather that opens the second round. Rank 0, the root, waits in the "
            "gather; ranks 1 and 3, whose part of a gather is a send, finish it and go on: rank 3, "
            "the source, into the scatter, and rank 1 through the scatter into the reduce (root "
            "0), where they time out. Every rank dumped once the first timed out.",
            policy="all",
            skip_ops=OPMIX_SKIP,
        ),
        HookScenario(
            "nccl2_opmix_stall_object_w4",
            4,
            rg._opmix_stall_object_w4,
            [1],
            "not_joined",
            "nccl2 (recorder hook): the op mix of nccl2_opmix_healthy_w4 up to "
            "scatter_object_list, before which rank 1 stalls. Its first op is a Long broadcast "
            "from rank 0: ranks 0 and 3 wait in it, rank 2 receives it and goes on into the first "
            "of its two scatters, where it times out. Every rank dumped once the first timed out.",
            policy="all",
            skip_ops=OPMIX_SKIP,
        ),
    ]
}


def _file(out_dir: Path, backend: str, rank: int) -> Path:
    return out_dir / f"{backend}_trace_rank_{rank}"


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    scen = SCENARIOS[cfg["scenario"]]
    rank, world = cfg["rank"], scen.world
    out_dir, side_dir = Path(cfg["out_dir"]), Path(cfg["side_dir"])
    expected = world - len(scen.no_dump)
    for name in ("nccl2", "nccl-lazy"):
        register(name)
    log = launcher.logger(rank)

    dumped = threading.Lock()

    def write_dumps(side: Any) -> None:
        if not dumped.acquire(blocking=False):
            return
        LOG.poll()
        for backend in scen.backends:
            data = dump(backend)
            path = _file(out_dir, backend, rank)
            launcher.write_atomically(path, data)
            (side_dir / (path.name + ".ops.json")).write_text(json.dumps(LOG.ops.get(backend, [])))
            log(f"wrote {path.name} ({len(data)} bytes)")
        launcher.linger_and_exit(side, expected, DUMP_WAIT_S)

    def poller() -> None:
        side = launcher.store_client(cfg["side_port"], world)
        launcher.wait_for_trigger(side)
        log(f"saw {TRIGGER_KEY}; dumping")
        write_dumps(side)

    job_store = launcher.store_client(cfg["job_port"], world)
    timeout = timedelta(seconds=cfg["timeout_s"])
    dist.init_process_group("nccl2", store=job_store, rank=rank, world_size=world, timeout=timeout)
    if scen.policy == "all":
        threading.Thread(target=poller, name="fr-dump-poller", daemon=True).start()
    side = launcher.store_client(cfg["side_port"], world)
    ctx = HookCtx(
        rank=rank,
        world=world,
        timeout=timeout,
        side=side,
        torch=torch,
        dist=dist,
        skip_ops=scen.skip_ops,
    )
    try:
        scen.body(ctx)
        log("scenario body finished")
        if scen.healthy:
            launcher.finish_healthy(side, rank, world)
    except Exception as exc:  # noqa: BLE001 - one of this rank's own ops timed out or failed
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log(f"op failed: {msg}")
        side.set(f"error_{rank}", msg)
        if scen.policy == "all":
            side.set(TRIGGER_KEY, str(rank))
        else:
            write_dumps(side)
    time.sleep(STALL_S)


def _run_once(
    scen: HookScenario, out_dir: Path, side_dir: Path, timeout_s: float, log_dir: Path
) -> dict[str, Any]:
    launcher.fresh_dirs(out_dir, side_dir)
    job_store = launcher.free_store(scen.world)
    side_store = launcher.free_store(scen.world)
    started = time.monotonic()
    cfgs = [
        {
            "scenario": scen.name,
            "rank": rank,
            "out_dir": str(out_dir),
            "side_dir": str(side_dir),
            "job_port": job_store.port,
            "side_port": side_store.port,
            "timeout_s": timeout_s,
        }
        for rank in range(scen.world)
    ]
    workers = launcher.spawn("tools.record_hook", cfgs, log_dir, launcher.worker_env(2000))
    want = scen.world - len(scen.no_dump)
    enough_at = None
    while time.monotonic() - started < RUN_DEADLINE_S:
        if not any(w.running() for w in workers):
            break
        n = side_store.add("dumped", 0)
        if n >= want and enough_at is None:
            enough_at = time.monotonic()
        if enough_at is not None and time.monotonic() - enough_at > DUMP_WAIT_S + 1:
            break  # the ranks left are stalled (or hung in teardown): end them
        time.sleep(0.1)
    launcher.end(workers)
    launcher.remove_partial(out_dir)
    ranks = sorted({int(f.name.rsplit("_", 1)[1]) for f in out_dir.iterdir()})
    return {
        "scenario": scen.name,
        "elapsed_s": round(time.monotonic() - started, 1),
        "dumped_ranks": ranks,
        "files": sorted(f.name for f in out_dir.iterdir()),
        "logs": str(log_dir),
    }


def _expected(
    scen: HookScenario, torch_version: str, dumped: list[int], files: list[str], states: bool
) -> dict[str, Any]:
    exp: dict[str, Any] = {
        "scenario": scen.name + ("_states" if states else ""),
        "world": scen.world,
        "torch": torch_version,
        "backend": "+".join(scen.backends),
        "recorded_with": "tools/hook_backend.py: a Python c10d backend forwarding to gloo, "
        "recorded by torch's FlightRecorderHook",
        "states": "overlaid" if states else "as_recorded",
        "format": "pickle",
        "dumped_ranks": dumped,
        "files": files,
        "hang": scen.hang,
        "culprits": list(scen.culprits),
        "kind": scen.kind,
        "deadlock": scen.deadlock,
        "description": scen.description,
    }
    if states:
        exp["states_note"] = STATES_NOTE
    if scen.analyzer is not None:
        exp["analyzer"] = scen.analyzer
    elif scen.healthy and not states:
        exp["analyzer"] = BLIND_HEALTHY
    return exp


def record(
    name: str, out_root: Path, timeout_s: float = DEFAULT_TIMEOUT_S, attempts: int = 3
) -> None:
    import torch

    scen = SCENARIOS[name]
    out_dir = out_root / name
    states_dir = out_root / f"{name}_states"
    work = Path(tempfile.mkdtemp(prefix=f"record_hook_{name}_"))
    want = sorted(set(range(scen.world)) - set(scen.no_dump))
    summary: dict[str, Any] = {}
    for attempt in range(1, attempts + 1):
        summary = _run_once(scen, out_dir, work / "side", timeout_s, work / f"logs{attempt}")
        print(json.dumps(summary), flush=True)
        if summary["dumped_ranks"] == want and len(summary["files"]) == len(want) * len(
            scen.backends
        ):
            break
        print(
            f"{name}: dumped {summary['dumped_ranks']}, wanted {want}; "
            f"{'retrying' if attempt < attempts else 'giving up'}",
            file=sys.stderr,
        )
    else:
        raise RuntimeError(f"{name}: no run dumped exactly ranks {want}; see {work}")
    if states_dir.exists():
        shutil.rmtree(states_dir)
    states_dir.mkdir(parents=True)
    for fname in summary["files"]:
        path = out_dir / fname
        rg.scrub_dump(path)
        raw = rg.load_dump(path)
        backend = fname.split("_trace_rank_")[0]
        ops = json.loads((work / "side" / (fname + ".ops.json")).read_text())
        (states_dir / fname).write_bytes(
            pickle.dumps(overlay_states(raw, backend, ops), protocol=2)
        )
    for d, states in ((out_dir, False), (states_dir, True)):
        exp = _expected(scen, torch.__version__, summary["dumped_ranks"], summary["files"], states)
        (d / "EXPECTED.json").write_text(json.dumps(exp, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("sample_dumps"))
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(SCENARIOS))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    return launcher.record_each(
        args.only or list(SCENARIOS), lambda name: record(name, args.out, timeout_s=args.timeout)
    )


if __name__ == "__main__":
    sys.exit(main())
