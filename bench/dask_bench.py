#!/usr/bin/env python3
"""The parse on a Dask cluster beside the default in-process one, and the figures of the
100,000-rank estimate.

For the simulated job of ``bench/run_bench.py`` (tensor x pipeline x data parallel, one rank
stalled, ``--entries`` entries per ring buffer, cached under ``.bench/``) it measures, each
``hangscope analyze`` in a fresh process with the dumps in the page cache:

* the default: ``hangscope analyze DIR`` (the in-process pool of parser processes);
* through Dask: ``hangscope analyze DIR --scheduler ADDR``, ADDR a ``LocalCluster`` of
  ``--workers`` worker processes (one thread each) started by this script beforehand (its
  start-up time is printed apart);
* the two costs the estimate extrapolates from: the parse of one file (one process, the
  compiled reader, a sample of the files) and the central step after parsing (normalize,
  match, waits, graph, diagnose) over the whole job, both in this process.

Usage::

    python bench/dask_bench.py [--ranks 16384] [--entries 2000] [--workers 2] [--cache .bench]

``run(ranks, ...)`` returns the figures as a dict, for ``bench/run_bench.py`` to print in
its table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from run_bench import (  # noqa: E402 - the job generator and the runs of run_bench.py
    ensure_job,
    run_hangscope,
    run_on_dask,
)


def parse_cost(target: Path, sample: int = 256) -> dict[str, float]:
    """Seconds and bytes per file of the parse alone: ``sample`` files, one process."""
    from analyzer.load.loader import load_dumps

    files = sorted(p for p in target.iterdir() if p.name.startswith("nccl_trace_rank_"))[:sample]
    size = sum(p.stat().st_size for p in files)
    warm = time.perf_counter()
    loaded = load_dumps(files, jobs=1)
    seconds = time.perf_counter() - warm
    entries = sum(d.n_entries for d in loaded.dumps)
    return {
        "files": len(files),
        "s_per_file": seconds / len(files),
        "bytes_per_file": size / len(files),
        "entries_per_file": entries / len(files),
    }


def central_cost(target: Path, jobs: int) -> dict[str, float]:
    """Seconds of each step after the parse, over the whole job (what one machine still
    does when the workers parse)."""
    from analyzer.diagnosis.engine import diagnose
    from analyzer.load.loader import load_dumps
    from analyzer.match.matching import match
    from analyzer.normalize.tables import normalize
    from analyzer.waits.edges import waits
    from analyzer.waits.graph import build_graph

    gc.disable()
    t0 = time.perf_counter()
    loaded = load_dumps([target], jobs=jobs)
    t1 = time.perf_counter()
    tables = normalize(loaded, release=True)  # as analyze() does
    t2 = time.perf_counter()
    matching = match(tables)
    wait_rows = waits(tables, matching)
    graph = build_graph(tables, wait_rows)
    diagnose(tables, matching, wait_rows, graph)
    t3 = time.perf_counter()
    gc.enable()
    return {
        "load_s": t1 - t0,
        "normalize_s": t2 - t1,
        "match_to_diagnosis_s": t3 - t2,
        "entries": float(len(tables.entries)),
    }


def run(
    ranks: int,
    *,
    entries: int = 2000,
    workers: int = 2,
    jobs: int = 0,
    seed: int = 0,
    cache: Path = ROOT / ".bench",
    timeout: float = 1800.0,
    costs: bool = True,
) -> dict[str, Any]:
    """Both runs on the job of ``ranks`` ranks; the figures as a dict."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    target = ensure_job(cache, ranks, entries, seed=seed, jobs=jobs)
    expected = json.loads((target / "EXPECTED.json").read_text())["culprits"]
    out: dict[str, Any] = {"ranks": ranks, "entries": entries, "workers": workers}
    default = run_hangscope(target, jobs, expected, timeout=timeout)
    out["default"] = {
        "wall_s": default.wall,
        "peak_mb": default.peak_mb,
        "status": default.status,
        **default.extra,
    }
    dask, out["cluster_start_s"], why = run_on_dask(target, expected, workers, timeout=timeout)
    if dask is None:
        raise SystemExit(why)
    out["dask"] = {
        "wall_s": dask.wall,
        "peak_mb": dask.peak_mb,
        "status": dask.status,
        **dask.extra,
    }
    if dask.status != "ok":
        out["dask"]["stderr"] = dask.stderr.strip()[-300:]
    if costs:
        out["parse"] = parse_cost(target)
        out["central"] = central_cost(target, jobs)
    return out


def print_result(r: dict[str, Any]) -> None:
    d, k = r["default"], r["dask"]
    print(f"{r['ranks']:,} ranks x {r['entries']:,} entries")
    print("| path | wall s | peak MB (client tree) | culprit named |")
    print("|---|---:|---:|---|")
    print(
        f"| default (in-process pool) | {d['wall_s']:.1f} | {d['peak_mb']:,.0f} | {d.get('culprit_ok')} |"
    )
    print(
        f"| Dask LocalCluster, {r['workers']} worker processes | {k['wall_s']:.1f} | "
        f"{k['peak_mb']:,.0f} | {k.get('culprit_ok')} |"
    )
    print(
        f"cluster start-up (not in the wall time above): {r['cluster_start_s']:.1f} s; "
        f"Dask / default: {k['wall_s'] / d['wall_s']:.2f}x"
    )
    if "parse" in r:
        p, c = r["parse"], r["central"]
        print(
            f"parse of one file (one process, {p['files']} files): {p['s_per_file'] * 1e3:.1f} ms, "
            f"{p['bytes_per_file'] / 1e3:,.0f} KB, {p['entries_per_file']:,.0f} entries"
        )
        print(
            f"after the parse, whole job in one process: normalize {c['normalize_s']:.1f} s, "
            f"match..diagnosis {c['match_to_diagnosis_s']:.1f} s ({c['entries']:,.0f} entries); "
            f"load with the pool {c['load_s']:.1f} s"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/dask_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=16_384, help="ranks of the simulated job")
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    ap.add_argument(
        "--jobs", type=int, default=0, help="parser processes of the default run (0: all cores)"
    )
    ap.add_argument("--seed", type=int, default=0, help="simulator seed")
    ap.add_argument(
        "--cache", type=Path, default=ROOT / ".bench", help="where simulated dumps are kept"
    )
    ap.add_argument("--no-costs", action="store_true", help="skip the per-file and central costs")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    result = run(
        args.ranks,
        entries=args.entries,
        workers=args.workers,
        jobs=args.jobs,
        seed=args.seed,
        cache=args.cache,
        costs=not args.no_costs,
    )
    print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    ok = result["dask"]["status"] == "ok" and result["dask"].get("culprit_ok")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
