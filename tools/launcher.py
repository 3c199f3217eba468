"""The launcher the recorders share (``tools/record_gloo.py``, ``tools/record_hook.py``).

A recording runs W worker processes (``python -m <recorder> --worker CFG``) that form a job
on 127.0.0.1 through a job TCPStore and talk to each other and the parent through a side
TCPStore: the key :data:`TRIGGER_KEY` asks every rank to dump (the NCCL watchdog's
protocol), ``dumped`` counts the ranks that did, ``finished`` the ones whose healthy run
ended. This module holds what both sides of that protocol need: the stores, the workers'
environment, spawning them with one log file per rank, ending the stragglers, and in a
worker the store clients, its log line and the dump handshake.

Scenario bodies and the worker's own ``_worker`` stay in each recorder: the dumps' stack
frames name them (``<recorder>.py ... in _worker``, ``main``, ``<module>``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
TRIGGER_KEY = "exception_dump"
STORE_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------


def free_store(world: int) -> Any:
    """A master TCPStore on a free loopback port (its ``port`` tells the workers where)."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(
        HOST,
        0,
        world,
        is_master=True,
        timeout=timedelta(seconds=STORE_TIMEOUT_S),
        wait_for_workers=False,
    )


def worker_env(buffer_size: int) -> dict[str, str]:
    """This process's environment with the flight recorder on and loopback-only gloo."""
    env = dict(os.environ)
    env.update(
        {
            "TORCH_FR_BUFFER_SIZE": str(buffer_size),  # turns the flight recorder on
            "GLOO_SOCKET_IFNAME": "lo",  # loopback only
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)  # keep the raw backend, no wrapper checks
    env.pop("TORCH_DIST_USE_NCCL2", None)  # torch 2.15: the backends asked for, nothing else
    return env


def fresh_dirs(*dirs: Path) -> None:
    """Empty (or create) each directory."""
    for d in dirs:
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)


@dataclass
class Worker:
    """One rank's process and the log file its output goes to."""

    rank: int
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def running(self) -> bool:
        return self.proc.poll() is None


def spawn(
    module: str, cfgs: list[dict[str, Any]], log_dir: Path, env: dict[str, str]
) -> list[Worker]:
    """Start ``python -m module --worker CFG`` for each rank's config, output in
    ``log_dir/rank_<r>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    workers = []
    for rank, cfg in enumerate(cfgs):
        log = open(log_dir / f"rank_{rank}.log", "wb")  # noqa: SIM115 - closed by end()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--worker", json.dumps(cfg)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        workers.append(Worker(rank, proc, log))
    return workers


def wait_all(workers: list[Worker], deadline: float) -> dict[int, int | None]:
    """Wait for every worker until ``deadline`` (monotonic); kill what is left. Returns each
    rank's exit code, ``None`` for a straggler that was killed."""
    codes: dict[int, int | None] = {}
    for w in workers:
        try:
            codes[w.rank] = w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[w.rank] = None
    end(workers)
    return codes


def wait_but(workers: list[Worker], skip: int, deadline: float) -> None:
    """Wait until ``deadline`` (monotonic) for every worker but the one at position ``skip``
    (the rank a recording leaves stalled on purpose); one that runs past it raises
    ``subprocess.TimeoutExpired``. :func:`end` then kills what is left."""
    for i, w in enumerate(workers):
        if i != skip:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))


def end(workers: list[Worker]) -> None:
    """Kill the workers still running and close every log."""
    for w in workers:
        if w.running():
            w.proc.kill()
            w.proc.wait()
        w.log.close()


def remove_partial(out_dir: Path) -> None:
    """Remove dumps a killed rank left half written (``*.tmp``)."""
    for stray in out_dir.glob("*.tmp"):
        stray.unlink()


def side_value(store: Any, key: str) -> str | None:
    return store.get(key).decode() if store.check([key]) else None


# --------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------


def store_client(port: int, world: int) -> Any:
    """A client of the store the parent listens on at ``port``."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(
        HOST,
        port,
        world,
        is_master=False,
        timeout=timedelta(seconds=STORE_TIMEOUT_S),
        wait_for_workers=False,
    )


def logger(rank: int) -> Callable[[str], None]:
    """A worker's log line: rank and monotonic time, on stderr (its log file)."""

    def log(msg: str) -> None:
        print(f"[rank {rank} {time.monotonic():.3f}] {msg}", file=sys.stderr, flush=True)

    return log


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def wait_for_trigger(side: Any) -> None:
    """Block until some rank (or the parent) set :data:`TRIGGER_KEY`."""
    while not side.check([TRIGGER_KEY]):
        time.sleep(0.05)


def linger_and_exit(side: Any, expected_dumpers: int, wait_s: float) -> None:
    """Count this rank's dump, stay alive until every rank that can dump has done so (or
    ``wait_s``), then end the process. Exiting early would close this rank's gloo
    connections and turn the others' pending ops into errors."""
    side.add("dumped", 1)
    deadline = time.monotonic() + wait_s
    while side.add("dumped", 0) < expected_dumpers and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.stderr.flush()
    os._exit(0)


def finish_healthy(side: Any, rank: int, world: int) -> None:
    """A healthy run ended on this rank; rank 0 asks every rank to dump once all ended."""
    side.add("finished", 1)
    if rank == 0:
        while side.add("finished", 0) < world:
            time.sleep(0.05)
        side.set(TRIGGER_KEY, str(rank))


def record_each(names: list[str], record_one: Callable[[str], object]) -> int:
    """Record every scenario in ``names``; a failed one is reported on stderr and the others
    are still recorded. Returns the exit code (1 when any failed)."""
    failed = []
    for name in names:
        try:
            record_one(name)
        except RuntimeError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
