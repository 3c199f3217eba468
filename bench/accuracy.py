"""Accuracy sweep: simulated NCCL jobs of several topologies, every fault, several seeds and
every dialect (the legacy NCCL recorder, torch 2.15's nccl2 recorder hook); prints each job
whose culprit list differs from the injected one, then a table per dialect.

    python bench/accuracy.py                 # 5 topologies x 11 faults x 4 seeds x 2 dialects
    python bench/accuracy.py --seeds 1 --topologies 2x8x1 --dialects nccl2
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import analyzer  # noqa: E402
from tools.simulate import FAULTS, simulate_job  # noqa: E402

TOPOLOGIES = ("2x4x2", "2x8x1", "1x8x2", "4x4x1", "2x2x4")
DIALECTS = ("nccl", "nccl2")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), help="TPxPPxDP")
    ap.add_argument("--faults", nargs="+", default=[f for f in FAULTS if f != "none"])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--buffer-size", type=int, default=600)
    ap.add_argument("--dialects", nargs="+", default=list(DIALECTS), choices=("nccl", "nccl2", "mixed"))
    args = ap.parse_args(argv)
    jobs: Counter[tuple[str, str]] = Counter()
    wrong: Counter[tuple[str, str]] = Counter()
    mismatch: Counter[tuple[str, str]] = Counter()  # false size/dtype findings
    work = Path(tempfile.mkdtemp(prefix="hangscope-accuracy-"))
    try:
        for dialect in args.dialects:
            for topo in args.topologies:
                tp, pp, dp = (int(x) for x in topo.split("x"))
                for fault in args.faults:
                    for seed in range(args.seeds):
                        job = work / "job"
                        shutil.rmtree(job, ignore_errors=True)
                        try:
                            expected = simulate_job(job, tp=tp, pp=pp, dp=dp, fault=fault, seed=seed,
                                                    buffer_size=args.buffer_size, dialect=dialect)
                        except ValueError:
                            continue  # the fault does not fit this topology
                        d = analyzer.analyze(job, jobs=1).diagnosis
                        jobs[dialect, fault] += 1
                        want, got = sorted(expected["culprits"]), list(d.culprit_ranks)
                        if "desync" not in fault and any(
                                f.kind in ("size_mismatch", "dtype_mismatch") for f in d.findings):
                            mismatch[dialect, fault] += 1
                        if got != want:
                            wrong[dialect, fault] += 1
                            print(f"wrong: {dialect} tp{tp} pp{pp} dp{dp} {fault} seed {seed}: "
                                  f"injected {want}, named {got} ({d.kind})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for dialect in args.dialects:
        print(f"\ndialect {dialect}")
        print(f"| {'fault':<18} | jobs | wrong | false size/dtype |")
        print(f"|{'-' * 20}|-----:|------:|-----------------:|")
        for fault in args.faults:
            if jobs[dialect, fault]:
                print(f"| {fault:<18} | {jobs[dialect, fault]:>4} | {wrong[dialect, fault]:>5} | "
                      f"{mismatch[dialect, fault]:>16} |")
        n = sum(v for (di, _), v in jobs.items() if di == dialect)
        w = sum(v for (di, _), v in wrong.items() if di == dialect)
        print(f"| {'all':<18} | {n:>4} | {w:>5} | "
              f"{sum(v for (di, _), v in mismatch.items() if di == dialect):>16} |")
    total = sum(jobs.values())
    print(f"\n{total} jobs, {sum(wrong.values())} with a wrong culprit list")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
