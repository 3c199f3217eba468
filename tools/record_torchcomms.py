"""Record TorchComms-format flight-recorder dumps from a real gloo job on loopback.

TorchComms is not on the package registry, so its recorder is :mod:`tools.torchcomms_fr`, a
faithful writer of its format driven by the ops of a real job: four processes form a gloo
job, split a 2x2 device mesh into comms named ``tp`` (ranks 0,1 and 2,3) and ``dp`` (ranks
0,2 and 1,3), as a mesh names them, and run steps of a tp all_reduce, a dp all_reduce and a
send/recv exchange inside each dp pair. Rank 3 stalls (sleeps) before the tp all_reduce of
step 3. Every collective has a short gloo timeout, so ranks 0, 1 and 2 time out.

One run writes four sample folders (``--out``, default ``sample_dumps``):

* ``torchcomms_gloo_mesh_stall_w4``: the tutorial flow: each rank that caught the timeout
  calls ``dump_file(rank)`` in its handler (pickle); rank 3 never times out and writes none;
* ``torchcomms_gloo_mesh_stall_w4_json``: the same handler writing ``dump_json()``;
* ``torchcomms_cuda_mesh_stall_w4``: a second recorder on the same comms, told the backend is
  ``nccl`` and writing CUDA's states (read once at issue: every issued op retired and
  ``scheduled``), tutorial flow;
* ``torchcomms_gloo_health_check_w4``: the health check flow: the first timeout asks every
  rank (rank 3 included) to dump, as the debug server's TorchComms health check does.

Usage (needs torch; run from the repository root)::

    python -m tools.record_torchcomms [--out sample_dumps] [--suffix _t215]

The ``*_t215`` folders are the same run under torch 2.15.0 (``.venv-torch215``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tools import launcher
from tools.torchcomms_fr import Comm, FlightRecorder, OpIds

WORLD = 4
STALL_RANK = 3
STALL_STEP = 3
STEPS = 5
TIMEOUT_S = 3.0
RUN_DEADLINE_S = 60.0
FOLDERS = {
    "tutorial": "torchcomms_gloo_mesh_stall_w4",
    "json": "torchcomms_gloo_mesh_stall_w4_json",
    "cuda": "torchcomms_cuda_mesh_stall_w4",
    "health": "torchcomms_gloo_health_check_w4",
}
PREFIX = "comm_lib_trace_rank_"
HEALTH_KEY = "health_check_dump"


def _mesh(rank: int, dist: Any, timeout: Any) -> tuple[list[int], Any, list[int], Any]:
    """The tp and dp ranks of ``rank`` and their c10d groups (every rank creates every group)."""
    groups: dict[tuple[int, ...], Any] = {}
    for ranks in ([0, 1], [2, 3], [0, 2], [1, 3]):
        groups[tuple(ranks)] = dist.new_group(ranks, timeout=timeout)
    tp = [0, 1] if rank < 2 else [2, 3]
    dp = [rank % 2, rank % 2 + 2]
    return tp, groups[tuple(tp)], dp, groups[tuple(dp)]


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = cfg["rank"]
    out = Path(cfg["out"])
    folders = cfg["folders"]
    log = launcher.logger(rank)
    side = launcher.store_client(cfg["side_port"], WORLD)
    gloo_rec, cuda_rec = FlightRecorder(), FlightRecorder(cuda_states=True)

    def health_check() -> None:  # the debug server asks every rank to dump
        poll = launcher.store_client(cfg["side_port"], WORLD)
        while not poll.check([HEALTH_KEY]):
            time.sleep(0.05)
        gloo_rec.dump_file(rank, str(out / folders["health"] / PREFIX))
        log("health check dump written")
        poll.add("health_dumped", 1)

    timeout = timedelta(seconds=cfg["timeout_s"])
    job = launcher.store_client(cfg["job_port"], WORLD)
    dist.init_process_group("gloo", store=job, rank=rank, world_size=WORLD, timeout=timeout)
    threading.Thread(target=health_check, name="health-check", daemon=True).start()
    tp_ranks, tp_group, dp_ranks, dp_group = _mesh(rank, dist, timeout)
    world = Comm("world", "gloo", list(range(WORLD)), rank, dist.group.WORLD, OpIds())
    world.register(gloo_rec)
    world.register(cuda_rec, "nccl")
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
            buf = torch.zeros(16)
            if dp.rank == 0:
                dp.send(t, 1)
                dp.recv(buf, 1)
            else:
                dp.recv(buf, 0)
                dp.send(t, 0)
        log("finished without a timeout")
    except RuntimeError as exc:  # the tutorial's timeout handler
        log(f"timed out: {str(exc).splitlines()[0][:200]}")
        gloo_rec.dump_file(rank, str(out / folders["tutorial"] / PREFIX))
        (out / folders["json"] / f"{PREFIX}{rank}.json").write_text(gloo_rec.dump_json())
        cuda_rec.dump_file(rank, str(out / folders["cuda"] / PREFIX))
        side.set(HEALTH_KEY, str(rank))
        deadline = time.monotonic() + 20
        while side.add("health_dumped", 0) < WORLD and time.monotonic() < deadline:
            time.sleep(0.05)
        log("exiting")
        sys.stderr.flush()
        import os

        os._exit(0)


def _expected(key: str, name: str, dumped: list[int], torch_version: str) -> dict[str, Any]:
    cuda = key == "cuda"
    health = key == "health"
    return {
        "scenario": name,
        "world": WORLD,
        "torch": torch_version,
        "backend": "torchcomms-nccl" if cuda else "torchcomms-gloo",
        "recorded_with": (
            "tools/torchcomms_fr.py: a writer of TorchComms' flight-recorder format "
            "(meta-pytorch/torchcomms comms/torchcomms/hooks/fr/FlightRecorder.cpp) driven by "
            "the ops of a real gloo job (tools/record_torchcomms.py)"
        ),
        "states": "cuda_at_issue" if cuda else "as_recorded",
        "format": "json" if key == "json" else "pickle",
        "flow": "health_check" if health else "tutorial",
        "dumped_ranks": dumped,
        "hang": True,
        "culprits": [STALL_RANK],
        "kind": "not_joined" if health else "missing_dump",
        "deadlock": False,
        "description": (
            "2x2 device mesh (comms tp = {0,1},{2,3} and dp = {0,2},{1,3}, names reused); "
            f"rank {STALL_RANK} stalls in compute before the tp all_reduce of step "
            f"{STALL_STEP}; rank 2 times out in tp, ranks 0 and 1 in dp. "
            + (
                "Every rank dumped when the first timeout asked them to (health check flow)."
                if health
                else "Only the ranks that timed out dumped (tutorial flow); rank 3 wrote none."
            )
            + (" CUDA states: read at issue, every issued op retired." if cuda else "")
        ),
    }


def record(out_root: Path, suffix: str = "") -> dict[str, list[int]]:
    import torch

    folders = {k: v + suffix for k, v in FOLDERS.items()}
    for folder in folders.values():
        launcher.fresh_dirs(out_root / folder)
    job = launcher.free_store(WORLD)
    side = launcher.free_store(WORLD)
    cfgs = [
        {
            "rank": r,
            "out": str(out_root),
            "job_port": job.port,
            "side_port": side.port,
            "timeout_s": TIMEOUT_S,
            "folders": folders,
        }
        for r in range(WORLD)
    ]
    log_dir = Path("/tmp") / "record_torchcomms_logs"
    env = launcher.worker_env(0)
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    workers = launcher.spawn("tools.record_torchcomms", cfgs, log_dir, env)
    launcher.wait_but(workers, STALL_RANK, time.monotonic() + RUN_DEADLINE_S)  # rank order
    launcher.end(workers)  # the stalled rank is still asleep
    dumped: dict[str, list[int]] = {}
    for key, folder in folders.items():
        d = out_root / folder
        launcher.remove_partial(d)
        ranks = sorted(
            int(p.name.removeprefix(PREFIX).removesuffix(".json")) for p in d.glob(f"{PREFIX}*")
        )
        dumped[folder] = ranks
        expected = _expected(key, folder, ranks, torch.__version__)
        (d / "EXPECTED.json").write_text(json.dumps(expected, indent=1) + "\n")
    return dumped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=launcher.REPO_ROOT / "sample_dumps")
    ap.add_argument("--suffix", default="", help="appended to every folder name (_t215)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    print(json.dumps(record(args.out, args.suffix), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
