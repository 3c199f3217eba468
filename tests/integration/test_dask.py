"""Parsing on a Dask cluster (``--scheduler``) gives the analysis the in-process pool gives.

A LocalCluster of 2 workers (threads of this process, reached over TCP on loopback, so a
``hangscope`` subprocess can use it too) parses every sample, the shared fixtures and a
simulated job; the tables, verdict and JSON must be those of the default path. Failures
(unreachable scheduler, a worker error, a file a worker cannot read) are one line each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas.testing as pdt
import pytest

from analyzer.analysis import analyze
from analyzer.load.dask_workers import ClusterError, parse_on_cluster
from analyzer.load.loader import Skipped, _failed_on_worker, _on_worker, _parse
from analyzer.render.json_doc import to_json
from tests.conftest import FIXTURES, SAMPLES
from tools.simulate import simulate_job

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is installed by the dev extra"
)

TABLES = ("entries", "groups", "ranks", "status", "stacks", "skipped")
SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if (p / "EXPECTED.json").is_file())
TIMEOUT = 120


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp://",
        host="127.0.0.1",
        dashboard_address=None,
        death_timeout=30,
    ) as c:
        yield c


def _same(a: Any, b: Any) -> None:
    for name in TABLES:
        pdt.assert_frame_equal(getattr(a.tables, name), getattr(b.tables, name), obj=name)
    assert a.verdict == b.verdict and a.culprit_ranks == b.culprit_ranks
    assert to_json(a) == to_json(b)


def test_every_sample_parsed_on_the_cluster_gives_the_same_analysis(cluster: Any) -> None:
    for sample in SAMPLE_DIRS:
        on_cluster = analyze(sample, scheduler=cluster.scheduler_address)
        _same(on_cluster, analyze(sample, jobs=1))


def test_the_real_fixtures_and_a_simulated_job_on_the_cluster(cluster: Any, tmp_path: Path) -> None:
    jobs = [
        FIXTURES / "nvrx-megatron-moe" / "gpu_error_2nd",
        FIXTURES / "torch2.15-gloo" / "json_tp_dp_w8",
    ]
    jobs = [j for j in jobs if j.is_dir()]
    # 64 ranks: several batches per worker, and both workers busy.
    expected = simulate_job(
        tmp_path / "sim", tp=4, pp=2, dp=8, fault="stall", seed=2, buffer_size=200
    )
    jobs.append(tmp_path / "sim")
    for job in jobs:
        on_cluster = analyze(job, scheduler=cluster.scheduler_address)
        _same(on_cluster, analyze(job))
    assert list(on_cluster.culprit_ranks) == expected["culprits"]
    assert on_cluster.loaded is not None
    assert {d.reader for d in on_cluster.loaded.dumps} == {analyze(job).loaded.dumps[0].reader}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "analyzer", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=full,
    )


def test_the_command_line_on_the_cluster(cluster: Any) -> None:
    sample = str(SAMPLES / "nccl2_chain_tp_dp_w8")
    default = _cli("analyze", sample, "-f", "json", "-q")
    by_option = _cli(
        "analyze", sample, "-f", "json", "-q", "--scheduler", cluster.scheduler_address
    )
    by_env = _cli("graph", sample, "-q", env={"HANGSCOPE_SCHEDULER": cluster.scheduler_address})
    assert (by_option.returncode, by_option.stdout) == (default.returncode, default.stdout)
    assert (by_env.returncode, by_env.stdout) == (
        0,
        _cli("graph", sample, "-q").stdout,
    )
    assert json.loads(by_option.stdout)["verdict"] == json.loads(default.stdout)["verdict"]


def test_an_unreachable_scheduler_is_one_line_and_exit_4() -> None:
    sample = str(SAMPLES / "stall_w4")
    for address in ("tcp://127.0.0.1:9", "nonsense://x", "tcp://"):
        run = _cli(
            "analyze", sample, "--scheduler", address, env={"HANGSCOPE_SCHEDULER_TIMEOUT": "2"}
        )
        assert run.returncode == 4, run.stderr
        assert run.stderr.startswith("hangscope: error: "), run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert run.stdout == ""


def test_a_file_the_worker_cannot_read_is_skipped_and_the_others_are_analyzed(
    cluster: Any, tmp_path: Path
) -> None:
    sample = SAMPLES / "stall_w4"
    items = [(r, str(sample / f"nccl_trace_rank_{r}"), True, False, None) for r in range(4)]
    items[2] = (2, str(tmp_path / "elsewhere" / "nccl_trace_rank_2"), True, False, None)
    results = list(
        parse_on_cluster(
            cluster.scheduler_address, items, _parse, _failed_on_worker, annotate=_on_worker
        )
    )
    assert [type(r[0]).__name__ for r in results] == [
        "ParsedDump",
        "ParsedDump",
        "Skipped",
        "ParsedDump",
    ]
    skipped = results[2][0]
    assert isinstance(skipped, Skipped) and skipped.rank == 2
    assert skipped.reason.startswith("cannot read on the Dask worker at ")
    assert skipped.reason.endswith("No such file or directory")


def _fails_on_rank_1(item: Any) -> list[Any]:
    if item[0] == 1:
        raise RuntimeError("worker lost\nsecond line")
    return _parse(item)


def _always_fails(item: Any) -> list[Any]:
    raise RuntimeError("cannot import analyzer")


def test_a_failed_batch_skips_its_files_and_every_batch_failing_is_an_error(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import analyzer.load.dask_workers as cl

    monkeypatch.setattr(cl, "BATCH_FILES", 1)
    sample = SAMPLES / "stall_w4"
    items = [(r, str(sample / f"nccl_trace_rank_{r}"), True, False, None) for r in range(4)]
    results = list(
        parse_on_cluster(cluster.scheduler_address, items, _fails_on_rank_1, _failed_on_worker)
    )
    failed = results[1][0]
    assert isinstance(failed, Skipped) and failed.rank == 1
    assert failed.reason == "its Dask worker failed (RuntimeError: worker lost)"
    assert all(type(r[0]).__name__ == "ParsedDump" for i, r in enumerate(results) if i != 1)
    with pytest.raises(ClusterError, match="every batch failed on the Dask workers"):
        list(parse_on_cluster(cluster.scheduler_address, items, _always_fails, _failed_on_worker))


def test_dask_is_not_imported_without_a_scheduler() -> None:
    code = (
        "import sys; from analyzer.cli import main; from analyzer.analysis import analyze; "
        f"analyze({str(SAMPLES / 'stall_w4')!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
        env={**os.environ, "HANGSCOPE_SCHEDULER": ""},
    )
    assert run.stdout.strip() == "[]"


def test_the_dask_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    """bench/dask_bench.py on a tiny job: both paths name the culprit (no timing asserted)."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "dask_bench.py"),
            "--ranks",
            "8",
            "--entries",
            "40",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
            str(tmp_path / "out.json"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert "| Dask LocalCluster, 2 worker processes |" in run.stdout
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["default"]["culprit_ok"] and doc["dask"]["culprit_ok"]
    assert doc["parse"]["files"] == 8 and doc["central"]["entries"] == 8 * 40
