"""The scale benchmark runs end to end on a tiny job (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_prints_the_table_and_names_the_culprit(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run_bench.py"),
            "--sizes",
            "8",
            "--entries",
            "50",
            "--no-fr-trace",
            "--cache",
            str(cache),
            "--dask-at",
            "8",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("ranks"))
    for column in (
        "hangscope s",
        "peak MB",
        "us/entry",
        "culprit",
        "unpickle 1p s",
        "fr_trace s",
        "store s",
    ):
        assert column in lines[header], column
    row = lines[header + 2].split()
    assert row[0] == "8" and row[4] == "400"  # 8 ranks x 50 entries
    assert "ok (" in lines[header + 2], lines[header + 2]  # the injected culprit was named
    assert "culprit check FAILED" not in run.stdout
    assert "fr_trace: skipped (--no-fr-trace)" in run.stdout
    # The same job through a Dask LocalCluster of 2 workers, beside the default.
    dask = next(line for line in lines if line.startswith("8 ranks through a Dask LocalCluster"))
    assert "of 2 worker processes" in dask and "named the injected culprit" in dask, dask
    # Which reader parsed the dumps (none declined by the compiled one, where it is built).
    from analyzer.load.parse_native import native_available

    reader = "native" if native_available() else "python"
    assert f"  8 ranks (tp2 pp2 dp2): {reader} 8\n" in run.stdout, run.stdout
    # The simulated dumps are cached by parameters and reused.
    (job,) = [p for p in cache.iterdir() if not p.name.endswith(".store")]
    assert job.name == "r8-tp2-pp2-dp2-e50-stall-seed0-frames"
    assert (job / "EXPECTED.json").is_file()


def test_a_job_simulated_and_exported_shard_by_shard_merges_and_names_the_culprit(
    tmp_path: Path,
) -> None:
    # The route of the 65,536-rank run: each shard's dumps simulated alone, exported, deleted.
    sys.path.insert(0, str(ROOT / "bench"))
    from run_bench import ensure_shard_stores, run_hangscope

    stores, expected = ensure_shard_stores(tmp_path, 16, 50, seed=1, jobs=1, shards=2)
    assert [p.name for p in sorted(tmp_path.iterdir())] == sorted(
        [s.name for s in stores] + ["r16-tp2-pp2-dp4-e50-stall-seed1-frames.EXPECTED.json"]
    )
    assert json.loads((stores[1] / "hangscope-store.json").read_text())["ranks"] == "8-15"
    run = run_hangscope(stores, 1, expected)
    assert run.status == "ok" and run.extra["culprit_ok"], (run.stderr, run.extra)
    assert run.extra["entries"] == 16 * 50
    again, _ = ensure_shard_stores(tmp_path, 16, 50, seed=1, jobs=1, shards=2)  # cached
    assert again == stores
