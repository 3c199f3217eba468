"""Record TorchComms-format dumps of a pipeline job whose middle stage stalls (gloo, loopback).

TorchComms is not on the package registry, so its recorder is :mod:`tools.torchcomms_fr`, a
faithful writer of its format driven by the ops of a real job: four processes are the four
stages of a pipeline. Each pair of neighbouring stages gets its own comm named ``pp``, split
from the world comm in two rounds as TorchComms' ``split`` allows (a rank outside the new
comm passes no ranks): ``pp`` {0,1} and {2,3}, then ``pp`` {1,2} (ranks 0 and 3 outside).
So the middle stages 1 and 2 each hold two comms named ``pp``, and their dumps' ``pg_config``
keeps only the last one registered (``pp`` = [1,2]); their entries still carry distinct
``pg_id``. Each step sends activations forward (0 -> 1 -> 2 -> 3), gradients backward
(3 -> 2 -> 1 -> 0) and ends with an all_reduce of the world comm. Stage 1 stalls (sleeps) in
its forward compute of step 3, after receiving from stage 0 and before sending to stage 2:
stage 0 times out waiting for its gradient, stage 2 for its activation, stage 3 behind it.

One run writes four sample folders (``--out``, default ``sample_dumps``):

* ``torchcomms_gloo_pipeline_stall_w4``: tutorial flow (each rank that caught the timeout
  calls ``dump_file(rank)``; stage 1 never times out and writes none);
* ``torchcomms_cuda_pipeline_stall_w4``: a second recorder on the same comms, told the
  backend is ``nccl``, writing CUDA's states (read at issue: every issued op retired and
  ``scheduled``), tutorial flow;
* ``torchcomms_gloo_pipeline_stall_w4_health_check`` and
  ``torchcomms_cuda_pipeline_stall_w4_health_check``: the first timeout asks every rank
  (stage 1 included) to dump, as the debug server's TorchComms health check does.

Usage (needs torch; run from the repository root)::

    python -m tools.record_torchcomms_pipeline [--out sample_dumps]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tools import launcher
from tools.torchcomms_fr import Comm, FlightRecorder, OpIds

WORLD = 4
STALL_RANK = 1
STALL_STEP = 3
STEPS = 5
TIMEOUT_S = 3.0
RUN_DEADLINE_S = 60.0
FOLDERS = {
    ("gloo", "tutorial"): "torchcomms_gloo_pipeline_stall_w4",
    ("cuda", "tutorial"): "torchcomms_cuda_pipeline_stall_w4",
    ("gloo", "health"): "torchcomms_gloo_pipeline_stall_w4_health_check",
    ("cuda", "health"): "torchcomms_cuda_pipeline_stall_w4_health_check",
}
PREFIX = "comm_lib_trace_rank_"
HEALTH_KEY = "health_check_dump"
#: The pair comms, in the two split rounds that create them.
ROUNDS = ([[0, 1], [2, 3]], [[1, 2]])


def _pair_comms(rank: int, world: Comm, groups: dict[tuple[int, ...], Any]) -> list[Comm]:
    """This rank's ``pp`` comms, in registration order (every rank takes part in each round)."""
    mine: list[Comm] = []
    for pairs in ROUNDS:
        ranks = next((p for p in pairs if rank in p), [])
        comm = world.split("pp", ranks, groups.get(tuple(ranks)))
        if comm is not None:
            mine.append(comm)
    return mine


def _step(rank: int, prev: Comm | None, nxt: Comm | None, world: Comm, log: Any, step: int) -> None:
    import torch

    act = torch.ones(16)
    if prev is not None:
        prev.recv(act, 0)
    if rank == STALL_RANK and step == STALL_STEP:
        log(f"stalling in the forward compute of step {step}")
        time.sleep(600)
    if nxt is not None:
        nxt.send(act, 1)
    grad = torch.zeros(16)
    if nxt is not None:
        nxt.recv(grad, 1)
    if prev is not None:
        prev.send(grad, 0)
    world.all_reduce(torch.ones(4))


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    rank = cfg["rank"]
    out = Path(cfg["out"])
    folders = {tuple(k.split("/")): v for k, v in cfg["folders"].items()}
    log = launcher.logger(rank)
    side = launcher.store_client(cfg["side_port"], WORLD)
    recs = {"gloo": FlightRecorder(), "cuda": FlightRecorder(cuda_states=True)}

    def health_check() -> None:  # the debug server asks every rank to dump
        poll = launcher.store_client(cfg["side_port"], WORLD)
        while not poll.check([HEALTH_KEY]):
            time.sleep(0.05)
        for kind, rec in recs.items():
            rec.dump_file(rank, str(out / folders[(kind, "health")] / PREFIX))
        log("health check dumps written")
        poll.add("health_dumped", 1)

    timeout = timedelta(seconds=cfg["timeout_s"])
    job = launcher.store_client(cfg["job_port"], WORLD)
    dist.init_process_group("gloo", store=job, rank=rank, world_size=WORLD, timeout=timeout)
    threading.Thread(target=health_check, name="health-check", daemon=True).start()
    groups = {tuple(p): dist.new_group(p, timeout=timeout) for pairs in ROUNDS for p in pairs}
    world = Comm("world", "gloo", list(range(WORLD)), rank, dist.group.WORLD, OpIds())
    world.register(recs["gloo"])
    world.register(recs["cuda"], "nccl")
    try:
        world.barrier()
        pp = _pair_comms(rank, world, groups)
        prev = next((c for c in pp if c.ranks[1] == rank), None)
        nxt = next((c for c in pp if c.ranks[0] == rank), None)
        for step in range(STEPS):
            _step(rank, prev, nxt, world, log, step)
        log("finished without a timeout")
    except RuntimeError as exc:  # the tutorial's timeout handler
        log(f"timed out: {str(exc).splitlines()[0][:200]}")
        for kind, rec in recs.items():
            rec.dump_file(rank, str(out / folders[(kind, "tutorial")] / PREFIX))
        side.set(HEALTH_KEY, str(rank))
        deadline = time.monotonic() + 20
        while side.add("health_dumped", 0) < WORLD and time.monotonic() < deadline:
            time.sleep(0.05)
        log("exiting")
        sys.stderr.flush()
        os._exit(0)


def _expected(kind: str, flow: str, name: str, dumped: list[int], torch_version: str) -> dict:
    cuda = kind == "cuda"
    health = flow == "health"
    return {
        "scenario": name,
        "world": WORLD,
        "torch": torch_version,
        "backend": "torchcomms-nccl" if cuda else "torchcomms-gloo",
        "recorded_with": (
            "tools/torchcomms_fr.py: a writer of TorchComms' flight-recorder format "
            "(meta-pytorch/torchcomms comms/torchcomms/hooks/fr/FlightRecorder.cpp) driven by "
            "the ops of a real gloo job (tools/record_torchcomms_pipeline.py)"
        ),
        "states": "cuda_at_issue" if cuda else "as_recorded",
        "format": "pickle",
        "flow": "health_check" if health else "tutorial",
        "dumped_ranks": dumped,
        "hang": True,
        "culprits": [STALL_RANK],
        "kind": "not_joined" if health else "missing_dump",
        "deadlock": False,
        "description": (
            "4-stage pipeline, one comm named pp per neighbouring pair ({0,1}, {1,2}, {2,3}): "
            "stages 1 and 2 hold two comms of the same name and their pg_config keeps only "
            f"pp [1,2]; stage {STALL_RANK} stalls in its forward compute of step {STALL_STEP} "
            "(after receiving from stage 0, before sending to stage 2); stage 0 times out "
            "waiting for its gradient, stages 2 and 3 for their activations. "
            + (
                "Every rank dumped when the first timeout asked them to (health check flow)."
                if health
                else f"Only the ranks that timed out dumped (tutorial flow); rank {STALL_RANK} "
                "wrote none."
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
            "folders": {"/".join(k): v for k, v in folders.items()},
        }
        for r in range(WORLD)
    ]
    log_dir = Path("/tmp") / "record_torchcomms_pipeline_logs"
    env = launcher.worker_env(0)
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    workers = launcher.spawn("tools.record_torchcomms_pipeline", cfgs, log_dir, env)
    launcher.wait_but(workers, STALL_RANK, time.monotonic() + RUN_DEADLINE_S)  # rank order
    launcher.end(workers)  # the stalled rank is still asleep
    dumped: dict[str, list[int]] = {}
    for (kind, flow), folder in folders.items():
        d = out_root / folder
        launcher.remove_partial(d)
        ranks = sorted(int(p.name.removeprefix(PREFIX)) for p in d.glob(f"{PREFIX}*"))
        dumped[folder] = ranks
        expected = _expected(kind, flow, folder, ranks, torch.__version__)
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
