"""Record what torch 2.15's debug server writes around a real gloo job that hangs.

Four processes form a gloo job on loopback and start ``torch.distributed.debug.
start_debug_server`` with a ``dump_dir`` (every rank a worker server, rank 0 the frontend
and its periodic dumper). The job is the 2x2 mesh of ``tools/record_torchcomms.py``: comms
``world``, ``tp`` and ``dp`` recorded by TorchComms' recorder (``tools/torchcomms_fr.py``,
since TorchComms is not installable here) and, underneath, c10d's own gloo recorder. Rank 3
stalls before the tp all_reduce of step 3; the others time out in gloo after
:data:`TIMEOUT_S`. Steps hold no send/recv: torch's ``fr_trace`` builder, which the debug
server uses for its ``*fr_trace_<ts>.txt`` tables, stops with an ``AssertionError`` on
TorchComms' peerless send/recv and then writes no table at all.

TorchComms registers three control-plane handlers on every worker
(``FlightRecorder.cpp`` 68-184, ``HealthCheck.cpp``): ``torchcomms_fr_trace_json`` (its
recorder's JSON), ``torchcomms_fr_dump_file`` (its per-rank file) and
``torchcomms_health_check`` (``{"healthy": false}`` once the rank's abort hook ran). They are
registered with torch's ``_register_handler`` over the writer (:mod:`tools.debug_server`,
shared with the corpus' ``_debugsrv`` cases), so the debug server's own handlers and dumper
do the rest: ``stacks_<ts>.txt``, ``torchcomms_fr_trace_<ts>.txt``,
``torchcomms_health_check_<ts>.txt`` (which makes every rank dump into ``per_rank/`` when a
rank is unhealthy), ``fr_trace_<ts>.txt`` and ``c10d_health_check_<ts>.txt`` when torch
writes them. A rank that times out also writes its own file (the tutorial's handler) into
``per_rank/``. Rank 0, whose process holds the frontend, outlives ranks 1 and 2 by two
snapshots, so the newest files say ``PARTIAL DATA: 2/4 workers responded``. While the job hangs, the pages ``/fr_trace_json`` and
``/torchcomms_fr_trace_json`` are saved as a browser would (``*.html``).

Worker URLs use the name ``localhost`` (the frontend fetches them; nothing leaves loopback).

Usage (torch 2.15 with jinja2, tabulate and requests; run from the repository root)::

    .venv-torch215/bin/python -m tools.record_debug_server [--out sample_dumps]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tools import debug_server, launcher
from tools.record_torchcomms import STALL_RANK, STALL_STEP, STEPS, WORLD, _mesh
from tools.torchcomms_fr import Comm, FlightRecorder, OpIds

NAME = "debug_server_mesh_stall_w4"
TIMEOUT_S = 10.0
STEP_PAUSE_S = 1.0
DUMP_INTERVAL_S = 3.0
LINGER_S = 8.0
RUN_DEADLINE_S = 90.0
PAGES = ("fr_trace_json", "torchcomms_fr_trace_json")


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = cfg["rank"]
    out = Path(cfg["out"])
    per_rank = out / "per_rank"
    log = launcher.logger(rank)
    rec = FlightRecorder()
    state = {"timed_out": False}
    timeout = timedelta(seconds=cfg["timeout_s"])
    job = launcher.store_client(cfg["job_port"], WORLD)
    dist.init_process_group("gloo", store=job, rank=rank, world_size=WORLD, timeout=timeout)
    debug_server.control_plane(rec, rank, per_rank, state)
    debug_server.start(rank, WORLD, cfg["job_port"], cfg["frontend_port"], out, DUMP_INTERVAL_S)
    tp_ranks, tp_group, dp_ranks, dp_group = _mesh(rank, dist, timeout)
    world = Comm("world", "gloo", list(range(WORLD)), rank, dist.group.WORLD, OpIds())
    world.register(rec)
    try:
        world.barrier()
        tp = world.split("tp", tp_ranks, tp_group)
        dp = world.split("dp", dp_ranks, dp_group)
        assert tp is not None and dp is not None  # every rank is a member
        t = torch.ones(16)
        for step in range(STEPS):
            if rank == STALL_RANK and step == STALL_STEP:
                log(f"stalling before step {step}")
                time.sleep(600)
            tp.all_reduce(t)
            dp.all_reduce(t)
            world.barrier()
            time.sleep(STEP_PAUSE_S)
        log("finished without a timeout")
    except RuntimeError as exc:
        log(f"timed out: {str(exc).splitlines()[0][:200]}")
        rec.dump_file(rank, str(per_rank / "rank_"))  # the tutorial's timeout handler
        state["timed_out"] = True  # TorchComms' abort hook: unhealthy, then waits
        # Rank 0 (the frontend) outlives ranks 1 and 2: its last snapshots are PARTIAL DATA.
        time.sleep(LINGER_S + (2.5 * DUMP_INTERVAL_S if rank == 0 else 0))
        log("exiting")
        sys.stderr.flush()
        debug_server.stop_frontend(rank)
        os._exit(0)


def _save_pages(port: int, out: Path, stall_log: Path) -> None:
    """Save the frontend's pages as a browser would, while the job hangs: half a timeout
    after the stalled rank's log says it stalls (tried again each second for a while)."""
    deadline = time.monotonic() + RUN_DEADLINE_S
    while time.monotonic() < deadline:
        if stall_log.exists() and "stalling" in stall_log.read_text(errors="replace"):
            break
        time.sleep(0.2)
    time.sleep(TIMEOUT_S / 2)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
    for page in PAGES:
        for _ in range(4):
            try:
                with direct.open(f"http://127.0.0.1:{port}/{page}", timeout=30) as r:
                    (out / f"{page}.html").write_bytes(r.read())
                break
            except OSError as exc:
                print(f"page {page}: {exc}", file=sys.stderr)
                time.sleep(1)


def record(out_root: Path) -> list[str]:
    import torch

    out = out_root / NAME
    launcher.fresh_dirs(out, out / "per_rank")
    job = launcher.free_store(WORLD)
    frontend_port = debug_server.free_port()
    cfgs = [
        {
            "rank": r,
            "out": str(out),
            "job_port": job.port,
            "frontend_port": frontend_port,
            "timeout_s": TIMEOUT_S,
        }
        for r in range(WORLD)
    ]
    env = launcher.worker_env(2000)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(job.port)})
    env["WORLD_SIZE"] = str(WORLD)
    log_dir = Path("/tmp") / "record_debug_server_logs"
    workers = []
    for cfg in cfgs:  # RANK differs per worker
        workers += launcher.spawn(
            "tools.record_debug_server",
            [cfg],
            log_dir / str(cfg["rank"]),
            {**env, "RANK": str(cfg["rank"])},
        )
    stall_log = log_dir / str(STALL_RANK) / "rank_0.log"  # one worker per spawn
    saver = threading.Thread(target=_save_pages, args=(frontend_port, out, stall_log), daemon=True)
    saver.start()
    launcher.wait_but(workers, STALL_RANK, time.monotonic() + RUN_DEADLINE_S)  # rank order
    saver.join(timeout=30)
    launcher.end(workers)
    launcher.remove_partial(out / "per_rank")
    debug_server.scrub(out)
    print(f"frontend port {frontend_port}", file=sys.stderr)
    expected = {
        "scenario": NAME,
        "world": WORLD,
        "torch": torch.__version__,
        "backend": "torchcomms-gloo",
        "recorded_with": (
            "torch.distributed.debug.start_debug_server(dump_dir=...) around a real gloo job "
            "(tools/record_debug_server.py); TorchComms' recorder and control-plane handlers "
            "are tools/torchcomms_fr.py's"
        ),
        "hang": True,
        "culprits": [STALL_RANK],
        "deadlock": False,
        "description": (
            "2x2 mesh (tp = {0,1},{2,3}, dp = {0,2},{1,3}); rank 3 stalls in compute before "
            f"the tp all_reduce of step {STALL_STEP}; ranks 0-2 time out after {TIMEOUT_S:.0f} s. "
            f"The debug server wrote a snapshot every {DUMP_INTERVAL_S:.0f} s."
        ),
    }
    (out / "EXPECTED.json").write_text(json.dumps(expected, indent=1) + "\n")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=launcher.REPO_ROOT / "sample_dumps")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    print("\n".join(record(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
