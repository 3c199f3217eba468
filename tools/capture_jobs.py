"""Small real jobs on loopback with :mod:`analyzer.capture` installed, for the capture tests.

Each scenario starts W worker processes that form a job on 127.0.0.1, install the capture
watcher after ``init_process_group`` and train a few steps of all_reduce; then one rank stalls
in a planned place (a sleep, a lock another thread holds, a data-loader-like loop waiting on an
empty queue), or, with no fault, the parent sends SIGUSR1 to one rank, or the job's store
process is killed while the job keeps training. The job's store lives in a process of its own
(so that it can die); the parent waits for the captured files, then ends the workers. Healthy
jobs pause between collectives (an evaluation pass) at step 10 of 20: the parent signals then.

Backends: ``gloo`` (torch 2.13 or 2.15) and ``hook`` (torch 2.15 only): a Python c10d backend
registered as ``nccl2`` that forwards every op to a ProcessGroupGloo; torch 2.15 attaches its
generic flight-recorder hook to it, so its entries read ``nccl2:...`` like those of the real
nccl2 backend (states aside: a Python backend retires every op when issued). The inner gloo
group records the same ops into gloo's own buffer, so a hook job writes both
``nccl2_trace_rank_N`` and ``gloo_trace_rank_N``.

Usage (needs torch; run from the repository root)::

    python -m tools.capture_jobs --out DIR --scenario stall_sleep [--backend gloo|hook]

It prints one JSON line: what the parent saw (exit codes, files, steps).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PG_TIMEOUT_S = 60.0  # the backend's own timeout: far beyond the watcher's deadline
CAPTURE_TIMEOUT_S = 1.5  # the watcher's deadline
STALL_S = 600.0
SCENARIOS = ("stall_sleep", "stall_lock", "stall_loader", "healthy_signal", "store_dies")
STALLED = {"stall_sleep": 1, "stall_lock": 2, "stall_loader": 1}


# ------------------------------------------------------------------ the 2.15 hook backend


def register_hook_backend(name: str = "nccl2") -> None:
    """Register a Python backend ``name`` that forwards to gloo (torch 2.15 hooks it)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import Backend, ProcessGroupGloo

    class Forward(Backend):  # type: ignore[misc, unused-ignore]
        def __init__(self, opts: Any) -> None:
            super().__init__(opts.group_rank, opts.group_size)
            self._gloo = ProcessGroupGloo(
                opts.store, opts.group_rank, opts.group_size, opts.timeout
            )

        def getBackendName(self) -> str:
            return name

        def allreduce(self, tensors: Any, opts: Any) -> Any:
            return self._gloo.allreduce(tensors, opts)

        def barrier(self, opts: Any) -> Any:
            return self._gloo.barrier(opts)

        def broadcast(self, tensors: Any, opts: Any) -> Any:
            return self._gloo.broadcast(tensors, opts)

        def allgather(self, outs: Any, ins: Any, opts: Any) -> Any:
            return self._gloo.allgather(outs, ins, opts)

    dist.Backend.register_backend(
        name, lambda dist_opts, pg_opts: Forward(dist_opts), extended_api=True, devices=["cpu"]
    )


# ------------------------------------------------------------------ stalls (worker side)


def stalled_in_sleep() -> None:
    time.sleep(STALL_S)


_LOCK = threading.Lock()


def stalled_on_lock() -> None:
    # Another thread took the lock (say, a checkpoint writer) and never lets go.
    threading.Thread(target=_hold_lock, name="checkpoint-writer", daemon=True).start()
    time.sleep(0.1)
    with _LOCK:
        pass


def _hold_lock() -> None:
    with _LOCK:
        time.sleep(STALL_S)


def next_batch(q: queue.Queue[Any]) -> Any:
    # Like a data loader's fetch loop: poll the worker queue until a batch arrives (never).
    while True:
        try:
            return q.get(timeout=0.05)
        except queue.Empty:
            continue


def evaluate(seconds: float) -> None:
    time.sleep(seconds)


# ------------------------------------------------------------------ worker


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from analyzer.capture import hook as capture

    rank, world, scen = cfg["rank"], cfg["world"], cfg["scenario"]

    def log(msg: str) -> None:
        print(f"[rank {rank} {time.time():.3f}] {msg}", file=sys.stderr, flush=True)

    log("torch imported")
    backend = "gloo"
    if cfg["backend"] == "hook":
        register_hook_backend("nccl2")
        backend = "nccl2"
    store = dist.TCPStore(
        HOST,
        cfg["port"],
        world,
        is_master=False,
        timeout=timedelta(seconds=30),
        wait_for_workers=False,
    )
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=PG_TIMEOUT_S)
    )
    log("process group ready")
    capture.install(dump_dir=cfg["out"], timeout_s=cfg["capture_timeout_s"])
    del store  # only the process group (and the watcher) keep it
    steps = cfg["steps"]
    x = torch.ones(64)
    done = 0
    for step in range(steps):
        if step == 3 and rank == STALLED.get(scen):
            log(f"stalls ({scen})")
            if scen == "stall_sleep":
                stalled_in_sleep()
            elif scen == "stall_lock":
                stalled_on_lock()
            elif scen == "stall_loader":
                next_batch(queue.Queue())
        dist.all_reduce(x)
        done += 1
        if cfg["step_s"]:
            time.sleep(cfg["step_s"])
        if step == cfg["pause_at"]:
            # Between collectives (say, an evaluation pass): where an on-demand capture
            # sees every rank at the same step. The parent acts now.
            (Path(cfg["logs"]) / f"ready_rank_{rank}").touch()
            evaluate(cfg["pause_s"])
    print(json.dumps({"rank": rank, "steps": done}), flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------ parent


def _store_process(world: int) -> tuple[subprocess.Popen[str], int]:
    code = (
        "import sys, time; from datetime import timedelta; import torch.distributed as d; "
        f"s = d.TCPStore('{HOST}', 0, {world}, is_master=True, timeout=timedelta(seconds=60), "
        "wait_for_workers=False); print(s.port, flush=True); time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    return p, int(p.stdout.readline())


def run(
    out: Path, scenario: str, backend: str = "gloo", world: int = 3, deadline_s: float = 40.0
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    store_proc, port = _store_process(world)
    healthy = scenario in ("healthy_signal", "store_dies")
    env = dict(
        os.environ,
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        TORCH_FR_BUFFER_SIZE="200",
    )
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    env.pop("HANGSCOPE_CAPTURE_DIR", None)
    procs = []
    logs = out.parent / f"{out.name}.logs"
    logs.mkdir(exist_ok=True)
    for rank in range(world):
        cfg = {
            "rank": rank,
            "world": world,
            "scenario": scenario,
            "backend": backend,
            "port": port,
            "out": str(out),
            "logs": str(logs),
            "capture_timeout_s": 30.0 if healthy else CAPTURE_TIMEOUT_S,
            "steps": 20 if healthy else 8,
            "step_s": 0.05 if healthy else 0.0,
            "pause_at": 9 if healthy else -1,
            "pause_s": 7.0,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tools.capture_jobs", "--worker", json.dumps(cfg)],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                text=True,
                stdout=subprocess.PIPE,
                stderr=open(logs / f"rank_{rank}.log", "w"),  # noqa: SIM115
            )
        )
    started = time.monotonic()
    end = started + deadline_s
    signalled = False
    try:
        ready = [logs / f"ready_rank_{r}" for r in range(world)]
        while healthy and time.monotonic() < end and not all(r.exists() for r in ready):
            time.sleep(0.05)  # every rank trains, two steps in
        if scenario == "healthy_signal":
            os.kill(procs[0].pid, signal.SIGUSR1)
            signalled = True
        if scenario == "store_dies":
            store_proc.kill()
            time.sleep(0.5)
            os.kill(procs[1].pid, signal.SIGUSR1)  # a capture with no store: this rank alone
            signalled = True
        if healthy:
            for p in procs:
                p.wait(timeout=max(0.1, end - time.monotonic()))
        else:
            ctx = [out / f"hangscope_context_rank_{r}.json" for r in range(world)]
            while time.monotonic() < end and not all(c.exists() for c in ctx):
                time.sleep(0.1)
            time.sleep(0.3)
    except subprocess.TimeoutExpired:
        pass
    finally:
        codes = {}
        stdout = {}
        for rank, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
            codes[rank] = p.wait()
            stdout[rank] = p.stdout.read() if p.stdout else ""
        store_proc.kill()
        store_proc.wait()
    steps = {}
    for rank, text in stdout.items():
        for line in text.splitlines():
            if line.startswith("{"):
                steps[rank] = json.loads(line)["steps"]
    return {
        "scenario": scenario,
        "backend": backend,
        "elapsed_s": round(time.monotonic() - started, 1),
        "exit_codes": codes,
        "steps": steps,
        "signalled": signalled,
        "files": sorted(p.name for p in out.iterdir()),
        "logs": str(logs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--scenario", choices=SCENARIOS)
    ap.add_argument("--backend", choices=("gloo", "hook"), default="gloo")
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    if args.out is None or args.scenario is None:
        ap.error("--out and --scenario are required")
    print(json.dumps(run(args.out, args.scenario, args.backend, args.world)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
