#!/usr/bin/env python3
"""normalize + match + waits + graph of one dump folder, with the code of an earlier commit
and with the code as it is now, on the same machine in the same session, and the speed-up.

The earlier commit runs from a temporary ``git worktree`` through the API every version has
(``load_dumps``, ``normalize``, ``match``, ``waits``, ``build_graph``, called as its own
``analyze()`` called them, the cyclic garbage collector paused as it paused it); the code of
now runs through ``bench/profile_steps.py``. Both use this interpreter's packages, so a
commit that needs a compiled part or other dependencies cannot be measured this way.

Usage::

    python bench/steps_then.py DIR --rev 4009154 [--jobs 2]

4009154 is the last commit before the compiled reader: the code the issue "Faster than
unpickling" measured ("the benchmark's own 16,384-rank run takes about 99 s").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("normalize", "match", "waits", "build_graph")

#: Runs in the worktree of the earlier commit; prints {"load": seconds, ..., "culprits": [...]}.
THEN = r"""
import gc, json, sys, time
from analyzer.analysis import build_graph, diagnose, load_dumps, match, normalize, waits
gc.disable()
out = {}
def step(name, fn):
    t = time.perf_counter(); value = fn(); out[name] = time.perf_counter() - t; return value
loaded = step("load", lambda: load_dumps([sys.argv[1]], jobs=int(sys.argv[2]) or None))
tables = step("normalize", lambda: normalize(loaded, world_size=None))
del loaded
matching = step("match", lambda: match(tables))
wait_rows = step("waits", lambda: waits(tables, matching))
graph = step("build_graph", lambda: build_graph(tables, wait_rows))
out["culprits"] = list(diagnose(tables, matching, wait_rows, graph).culprit_ranks)
print(json.dumps(out))
"""


def run_then(rev: str, target: Path, jobs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hangscope-then-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), rev],
            check=True,
        )
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, "-c", THEN, str(target), str(jobs)],
                cwd=tree,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
            )
    return json.loads(done.stdout.splitlines()[-1])


def run_now(target: Path, jobs: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "profile_steps.py"),
            str(target),
            "--jobs",
            str(jobs),
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(done.stdout.splitlines()[-1])
    out: dict[str, Any] = {r["step"]: r["seconds"] for r in doc["steps"]}
    out["culprits"] = doc["culprits"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("--rev", default="4009154", help="the earlier commit (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    target = args.target.resolve()
    then = run_then(args.rev, target, args.jobs)
    now = run_now(target, args.jobs)
    print(f"{target.name}: {'step':<12} {args.rev:>10} {'now':>8}")
    for name in ("load", *STEPS):
        print(f"{'':{len(target.name)}}  {name:<12} {then[name]:10.2f} {now[name]:8.2f}")
    a, b = (sum(x[s] for s in STEPS) for x in (then, now))
    print(f"{'':{len(target.name)}}  {'n+m+w+g':<12} {a:10.2f} {b:8.2f}   {a / b:.1f}x faster")
    print(f"culprits: {args.rev} {then['culprits'][:8]}, now {now['culprits'][:8]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
