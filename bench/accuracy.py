"""Accuracy sweep: simulated NCCL jobs of several topologies, every fault, several seeds and
every dialect (the legacy NCCL recorder, torch 2.15's nccl2 recorder hook); prints each job
whose culprit list differs from the injected one, then a table per dialect (per step kind and
fault: jobs, wrong culprit lists, false desyncs) and the count.

Every topology runs the plain training step; the op-mix topologies run it again with the op
mix (gather, scatter, reduce, broadcast, uneven all_to_all_single / all_gather /
reduce_scatter, the ops of the object collectives), whose sides and sizes differ per rank by
design, healthy jobs included: a desync finding where none was injected is a false desync.

    python bench/accuracy.py                 # (5 + 3 topologies) x 11 faults x 4 seeds x 2 dialects
    python bench/accuracy.py --seeds 1 --topologies 2x8x1 --op-mix-topologies --dialects nccl2
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
OP_MIX_TOPOLOGIES = ("2x2x2", "2x4x2", "1x8x2")
DIALECTS = ("nccl", "nccl2")
DESYNC_KINDS = {"op_mismatch", "size_mismatch", "dtype_mismatch"}
DESYNC_FAULTS = {"size_desync", "dtype_desync", "p2p_size_desync", "p2p_dtype_desync"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topologies", nargs="*", default=list(TOPOLOGIES), help="TPxPPxDP")
    ap.add_argument(
        "--op-mix-topologies",
        nargs="*",
        default=list(OP_MIX_TOPOLOGIES),
        help="TPxPPxDP, run with the op mix",
    )
    ap.add_argument("--faults", nargs="+", default=[f for f in FAULTS if f != "none"])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--buffer-size", type=int, default=600)
    ap.add_argument(
        "--dialects", nargs="+", default=list(DIALECTS), choices=("nccl", "nccl2", "mixed")
    )
    args = ap.parse_args(argv)
    # (dialect, steps, fault) -> jobs, wrong, false_desync
    per: dict[tuple[str, str, str], Counter[str]] = {}
    work = Path(tempfile.mkdtemp(prefix="hangscope-accuracy-"))
    runs = [(t, False) for t in args.topologies] + [(t, True) for t in args.op_mix_topologies]
    faults = list(args.faults) + (
        ["none"] if args.op_mix_topologies and "none" not in args.faults else []
    )
    try:
        for dialect in args.dialects:
            for topo, mix in runs:
                tp, pp, dp = (int(x) for x in topo.split("x"))
                for fault in faults:
                    if fault == "none" and not mix:
                        continue  # healthy jobs are covered by the op-mix runs and the tests
                    for seed in range(args.seeds):
                        job = work / "job"
                        shutil.rmtree(job, ignore_errors=True)
                        try:
                            expected = simulate_job(
                                job,
                                tp=tp,
                                pp=pp,
                                dp=dp,
                                fault=fault,
                                seed=seed,
                                buffer_size=args.buffer_size,
                                op_mix=mix,
                                dialect=dialect,
                            )
                        except ValueError:
                            continue  # the fault does not fit this topology
                        d = analyzer.analyze(job, jobs=1).diagnosis
                        steps = "op mix" if mix else "plain"
                        row = per.setdefault((dialect, steps, fault), Counter())
                        row["jobs"] += 1
                        want, got = sorted(expected["culprits"]), list(d.culprit_ranks)
                        row["false_desync"] += fault not in DESYNC_FAULTS and (
                            d.kind in DESYNC_KINDS
                            or any(f.kind in DESYNC_KINDS for f in d.findings)
                        )
                        if got != want or (fault == "none" and d.verdict.value != "no_hang"):
                            row["wrong"] += 1
                            print(
                                f"wrong: {dialect} tp{tp} pp{pp} dp{dp}{' op-mix' if mix else ''} "
                                f"{fault} seed {seed}: injected {want}, named {got} ({d.kind})",
                                flush=True,
                            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for dialect in args.dialects:
        rows = {k[1:]: v for k, v in per.items() if k[0] == dialect}
        print(f"\ndialect {dialect}")
        print("| steps | fault | jobs | wrong culprits | false desync |\n|---|---|---:|---:|---:|")
        for (steps, fault), row in rows.items():
            print(f"| {steps} | {fault} | {row['jobs']} | {row['wrong']} | {row['false_desync']} |")
        print(
            f"| all | all | {sum(r['jobs'] for r in rows.values())} | "
            f"{sum(r['wrong'] for r in rows.values())} | "
            f"{sum(r['false_desync'] for r in rows.values())} |"
        )
    total = sum(r["jobs"] for r in per.values())
    wrong = sum(r["wrong"] for r in per.values())
    false = sum(r["false_desync"] for r in per.values())
    print(f"\n{total} jobs, {wrong} with a wrong culprit list, {false} false desync")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
