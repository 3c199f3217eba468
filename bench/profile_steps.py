#!/usr/bin/env python3
"""Wall time, peak memory, system time and page faults of each pipeline step on one dump
folder, in one process (the parser processes' own are not counted).

Steps: load (or re-open a store), normalize, match, waits, build_graph, diagnose, and the rendering of the JSON
document. Peak memory is the process's resident high-water mark during the step (Linux:
reset before each step through ``/proc/self/clear_refs``), and the resident size after it.

Usage::

    python bench/profile_steps.py DIR|STORE [--jobs N] [--repeat-analysis K]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T = TypeVar("T")


def _status_mb(key: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def step(name: str, fn: Callable[[], T], rows: list[dict[str, Any]]) -> T:
    _reset_peak()
    start_rss = _status_mb("VmRSS")
    before = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    rows.append(
        {
            "step": name,
            "seconds": wall,
            "peak_mb": _status_mb("VmHWM"),
            "rss_mb": _status_mb("VmRSS"),
            "start_mb": start_rss,
            "sys_s": after.ru_stime - before.ru_stime,
            "page_faults": after.ru_minflt - before.ru_minflt,
        }
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)

    from analyzer.analysis import Analysis
    from analyzer.diagnosis.engine import diagnose
    from analyzer.load.contexts import Contexts
    from analyzer.load.discover import is_store
    from analyzer.load.loader import load_dumps
    from analyzer.match.matching import match
    from analyzer.normalize.tables import normalize, without_hugepage_advice
    from analyzer.render.json_doc import to_json
    from analyzer.runtime import freed_memory_reused
    from analyzer.store.merge import open_stores
    from analyzer.waits.edges import waits
    from analyzer.waits.graph import build_graph

    gc.disable()
    huge = without_hugepage_advice()  # as analyze() runs the pipeline
    huge.__enter__()
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    if is_store(args.target):  # one store (or a folder of the dumps)
        loaded = step("load", lambda: open_stores([args.target]).loaded, rows)
    else:
        loaded = step("load", lambda: load_dumps([args.target], jobs=args.jobs or None), rows)
    tables = step("normalize", lambda: normalize(loaded, release=True), rows)  # as analyze() does
    with freed_memory_reused():  # as analyze() does
        matching = step("match", lambda: match(tables), rows)
        wait_rows = step("waits", lambda: waits(tables, matching), rows)
        graph = step("build_graph", lambda: build_graph(tables, wait_rows), rows)
        diagnosis = step("diagnose", lambda: diagnose(tables, matching, wait_rows, graph), rows)
    analysis = Analysis(
        tables=tables,
        matching=matching,
        waits=wait_rows,
        graph=graph,
        diagnosis=diagnosis,
        contexts=Contexts(),
        loaded=loaded,
    )
    step("render_json", lambda: json.dumps(to_json(analysis), indent=1), rows)
    total = time.perf_counter() - t0
    entries = len(tables.entries)
    if args.json:
        print(
            json.dumps(
                {
                    "target": args.target.name,
                    "entries": entries,
                    "total": total,
                    "culprits": list(diagnosis.culprit_ranks),
                    "steps": rows,
                }
            )
        )
        return 0
    print(
        f"{args.target.name}: {entries:,} entries, {len(tables.ranks):,} ranks, "
        f"culprits {list(diagnosis.culprit_ranks)[:8]}"
    )
    print(f"{'step':<12} {'s':>8} {'peak MB':>9} {'RSS MB':>9} {'sys s':>7} {'faults':>10}")
    for r in rows:
        print(
            f"{r['step']:<12} {r['seconds']:8.2f} {r['peak_mb']:9,.0f} {r['rss_mb']:9,.0f} "
            f"{r['sys_s']:7.2f} {r['page_faults']:10,}"
        )
    mid = sum(
        r["seconds"] for r in rows if r["step"] in ("normalize", "match", "waits", "build_graph")
    )
    print(f"{'total':<12} {total:8.2f}   normalize+match+waits+graph {mid:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
