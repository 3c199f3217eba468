"""Accuracy sweep: simulated NCCL jobs of several topologies, every fault, several seeds;
prints each job whose culprit list differs from the injected one, then the count.

    python bench/accuracy.py                 # 5 topologies x 11 faults x 4 seeds (~5 min)
    python bench/accuracy.py --seeds 1 --topologies 2x8x1
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import analyzer  # noqa: E402
from tools.simulate import FAULTS, simulate_job  # noqa: E402

TOPOLOGIES = ("2x4x2", "2x8x1", "1x8x2", "4x4x1", "2x2x4")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), help="TPxPPxDP")
    ap.add_argument("--faults", nargs="+", default=[f for f in FAULTS if f != "none"])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--buffer-size", type=int, default=600)
    args = ap.parse_args(argv)
    jobs = wrong = 0
    work = Path(tempfile.mkdtemp(prefix="hangscope-accuracy-"))
    try:
        for topo in args.topologies:
            tp, pp, dp = (int(x) for x in topo.split("x"))
            for fault in args.faults:
                for seed in range(args.seeds):
                    job = work / "job"
                    shutil.rmtree(job, ignore_errors=True)
                    try:
                        expected = simulate_job(job, tp=tp, pp=pp, dp=dp, fault=fault, seed=seed,
                                                buffer_size=args.buffer_size)
                    except ValueError:
                        continue  # the fault does not fit this topology
                    d = analyzer.analyze(job, jobs=1).diagnosis
                    jobs += 1
                    want, got = sorted(expected["culprits"]), list(d.culprit_ranks)
                    if got != want:
                        wrong += 1
                        print(f"wrong: tp{tp} pp{pp} dp{dp} {fault} seed {seed}: injected {want}, "
                              f"named {got} ({d.kind})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{jobs} jobs, {wrong} with a wrong culprit list")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
