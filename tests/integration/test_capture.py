"""analyzer.capture and the context files it writes.

The live tests run small real jobs (``tools/capture_jobs.py``) with the capture watcher
installed: gloo jobs on torch 2.13 (``.venv-torch``) and, on torch 2.15 (``.venv-torch215``),
jobs on a Python backend registered as ``nccl2`` that forwards to gloo, so torch's generic
flight-recorder hook records it (``nccl2:`` entries). The captured sets are analyzed in a
fresh interpreter of the analyzer's environment where torch cannot be imported. Each job is
skipped, with the reason, when its torch environment is missing.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import analyzer
from analyzer.context_file import CONTEXT_SCHEMA
from analyzer.load.contexts import find_contexts, is_context_file, read_context
from analyzer.load.loader import load_dumps

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
TORCH = {
    "gloo": ROOT / ".venv-torch" / "bin" / "python",
    "hook": ROOT / ".venv-torch215" / "bin" / "python",
}
STALLED = {
    "stall_sleep": (1, "stalled_in_sleep"),
    "stall_lock": (2, "stalled_on_lock"),
    "stall_loader": (1, "next_batch"),
}
WORLD = 3


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def _load(path: Path) -> dict[str, Any]:
    return _NoGlobals(io.BytesIO(path.read_bytes())).load()


def _analyze_without_torch(inputs: list[str]) -> dict[str, Any]:
    """JSON document and text of an analysis, in a fresh interpreter without torch."""
    code = textwrap.dedent(f"""
        import sys, json
        sys.modules['torch'] = None
        import analyzer
        from analyzer.render.json_doc import to_json
        from analyzer.render.text import render_text
        a = analyzer.analyze({inputs!r})
        print(json.dumps({{'doc': to_json(a), 'text': render_text(a, width=200)}}))
    """)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


# ------------------------------------------------------------------------- no torch


def test_importing_capture_needs_neither_torch_nor_pandas() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['pandas'] = None; "
        "import analyzer, analyzer.capture as c; "
        "assert c.current() is None; assert 'analyzer.analysis' not in sys.modules; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "HANGSCOPE_CAPTURE_DIR"}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_signal_before_init_writes_a_context_of_the_stuck_main_thread(tmp_path: Path) -> None:
    # The one-line set-up (environment variable + import), a process whose main thread is
    # stuck in a sleep, and ``hangscope capture --signal``: the watcher (not the main thread)
    # writes the context file. No torch here, so no flight-recorder file.
    script = textwrap.dedent("""
        import time
        import analyzer.capture
        def waiting_for_the_data_loader():
            time.sleep(60)
        print('ready', flush=True)
        waiting_for_the_data_loader()
    """)
    env = dict(os.environ, HANGSCOPE_CAPTURE_DIR=str(tmp_path), RANK="5")
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        cli = subprocess.run(
            [sys.executable, "-m", "analyzer", "capture", "--signal", str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert cli.returncode == 0, cli.stderr
        ctx_file = tmp_path / "hangscope_context_rank_5.json"
        deadline = time.monotonic() + 20
        while not ctx_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ctx_file.exists()
        assert proc.poll() is None  # SIGUSR1 did not end the process
    finally:
        proc.kill()
        proc.wait()
    ctx = read_context(ctx_file)
    assert ctx.rank == 5 and ctx.pid == proc.pid and "SIGUSR1" in ctx.reason
    assert ctx.where_now()[0]["name"] == "waiting_for_the_data_loader"
    assert any(t.name == "hangscope-capture" for t in ctx.threads)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_capture_cli_reports_bad_pids() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "analyzer", "capture", "--signal", "999999999"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 2 and "999999999" in run.stderr and "Traceback" not in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "analyzer", "capture", "123"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 2 and "--signal" in run.stderr


def _context(rank: int, **over: Any) -> dict[str, Any]:
    doc = {
        "schema": CONTEXT_SCHEMA,
        "rank": rank,
        "world_size": 4,
        "host": "node07",
        "pid": 4242,
        "local_rank": rank,
        "device": "cpu",
        "time": "2026-01-01T00:00:00Z",
        "time_ns": 1,
        "trigger": {"generation": 1, "reason": "deadline", "by_rank": 0},
        "versions": {"torch": "2.13.0"},
        "dumps": [],
        "threads": [
            {
                "name": "MainThread",
                "main": True,
                "frames": [
                    {"name": "read_shard", "filename": "/train/data.py", "line": 7},
                    {"name": "main", "filename": "/train/train.py", "line": 3},
                ],
            }
        ],
    }
    doc.update(over)
    return doc


def test_rank_with_a_context_but_no_dump_is_stalled_not_crashed(tmp_path: Path) -> None:
    src = SAMPLES / "stall_w4"
    if not src.is_dir():
        pytest.skip("no recorded samples")
    d = tmp_path / "set"
    shutil.copytree(src, d)
    (d / "nccl_trace_rank_1").unlink()
    before = analyzer.analyze(str(d)).diagnosis
    assert before.kind == "missing_dump" and before.culprit_ranks == (1,)
    (d / "hangscope_context_rank_1.json").write_text(json.dumps(_context(1)))
    (d / "hangscope_context_rank_2.json").write_text(json.dumps(_context(2, host="node08")))
    a = analyzer.analyze(str(d))
    assert a.diagnosis.culprit_ranks == (1,) and a.diagnosis.kind == "not_joined"
    assert "alive" in a.diagnosis.headline and "did not crash" in a.diagnosis.headline
    from analyzer.render.json_doc import to_json
    from analyzer.render.text import render_text

    doc = to_json(a)
    assert doc["where_now"][0]["rank"] == 1
    assert doc["where_now"][0]["frames"][0]["name"] == "read_shard"
    assert doc["contexts"]["alive_without_dump"] == [1]
    assert doc["missing_dumps"] == [1]
    text = render_text(a)
    assert text.index("where it is now (rank 1, host node07") < text.index("chain to rank 1")
    assert "/train/data.py:7 in read_shard" in text
    # Timeline lanes grouped by host: node07 (ranks 1, 0, 3 unknown...) sorted by host name.
    labels = list(a.timeline().layout.yaxis.ticktext)
    assert any("node08 · rank 2" in lb for lb in labels)
    html = a.report_html(plotlyjs="cdn")
    assert html.index("id='where-now'") < html.index("id='timeline'")


def test_context_files_are_untrusted(tmp_path: Path) -> None:
    d = tmp_path
    (d / "gloo_trace_rank_0").write_bytes((SAMPLES / "stall_w4" / "nccl_trace_rank_0").read_bytes())
    good = _context(0, host="<script>alert(1)</script>")
    good["threads"][0]["frames"].append(
        {"name": ["not", "a", "string"], "filename": None, "line": "x"}
    )
    (d / "hangscope_context_rank_0.json").write_text(json.dumps(good))
    (d / "hangscope_context_rank_1.json").write_text(
        '{"schema": "hangscope.context/99", "rank": 1}'
    )
    (d / "hangscope_context_rank_2.json").write_text(
        '{"schema": "hangscope.context/1", "rank": -3}'
    )
    (d / "hangscope_context_rank_3.json").write_text(
        '{"schema": "hangscope.context/1", "rank": 3, '
    )
    loaded = load_dumps([str(d)], jobs=1)
    assert [Path(x.path).name for x in loaded.dumps] == [
        "gloo_trace_rank_0"
    ]  # contexts are not dumps
    assert sorted(Path(x.path).name for x in loaded.ignored) == [
        f"hangscope_context_rank_{r}.json" for r in range(4)
    ]
    assert not loaded.skipped  # ignored by content, never an unreadable rank
    assert is_context_file(d / "hangscope_context_rank_0.json")
    assert not is_context_file(d / "gloo_trace_rank_0")
    found = find_contexts([str(d)], [Path(x.path) for x in loaded.dumps])
    assert list(found.by_rank) == [0]
    assert len(found.skipped) == 3 and all(reason for _, reason in found.skipped)
    frames = found.by_rank[0].threads[0].frames
    assert frames[-1] == {"name": "['not', 'a', 'string']", "filename": "", "line": 0}
    a = analyzer.analyze(str(d))
    assert "<script>alert(1)</script>" not in a.report_html(plotlyjs="cdn")


# ------------------------------------------------------------------------- live jobs


def _torch_python(backend: str) -> Path:
    python = TORCH[backend]
    if not python.exists():
        pytest.skip(
            f"no torch environment at {python.relative_to(ROOT)} (make torch installs 2.13)"
        )
    probe = subprocess.run(
        [str(python), "-c", "import torch, torch.distributed as d; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.skip(f"{python.relative_to(ROOT)} cannot import torch.distributed")
    if backend == "hook" and not probe.stdout.startswith("2.15"):
        pytest.skip(f"the hook backend needs torch 2.15, found {probe.stdout.strip()}")
    return python


def _run_job(tmp_path: Path, backend: str, scenario: str) -> tuple[Path, dict[str, Any]]:
    python = _torch_python(backend)
    out = tmp_path / scenario
    run = subprocess.run(
        [
            str(python),
            "-m",
            "tools.capture_jobs",
            "--out",
            str(out),
            "--scenario",
            scenario,
            "--backend",
            backend,
            "--world",
            str(WORLD),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out, json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["gloo", "hook"])
@pytest.mark.parametrize("scenario", sorted(STALLED))
def test_live_stall_is_captured_with_where_it_is_now(
    tmp_path: Path, backend: str, scenario: str
) -> None:
    out, summary = _run_job(tmp_path, backend, scenario)
    stalled, function = STALLED[scenario]
    # Every rank, the stalled one included, wrote its own buffer(s) and its context.
    backends = ["gloo"] if backend == "gloo" else ["gloo", "nccl2"]
    for rank in range(WORLD):
        assert (out / f"hangscope_context_rank_{rank}.json").exists(), summary
        for b in backends:
            dump = out / f"{b}_trace_rank_{rank}"
            assert dump.exists(), summary
            entries = _load(dump)["entries"]
            assert entries and all(e["profiling_name"].startswith(f"{b}:") for e in entries)
    ctx = read_context(out / f"hangscope_context_rank_{stalled}.json")
    assert function in [f["name"] for f in ctx.where_now()[:3]], ctx.where_now()
    assert ctx.dumps == tuple(sorted(backends)) and ctx.reason.startswith("deadline")
    if backend == "hook":
        # The nccl2 buffers (torch 2.15's hook): the stalled rank issued one op fewer.
        ops = {r: len(_load(out / f"nccl2_trace_rank_{r}")["entries"]) for r in range(WORLD)}
        assert all(ops[r] == ops[stalled] + 1 for r in ops if r != stalled), ops
    # Analyzed without torch: a hook job's directory holds two buffers per rank (nccl2 and
    # the inner gloo group), merged per rank.
    got = _analyze_without_torch([str(out)])
    doc, text = got["doc"], got["text"]
    assert doc["culprit_ranks"] == [stalled] and doc["kind"] == "not_joined", text
    assert doc["where_now"][0]["rank"] == stalled
    assert function in [f["name"] for f in doc["where_now"][0]["frames"][:3]]
    assert doc["contexts"]["ranks"] == list(range(WORLD))
    lines = text.splitlines()
    where = next(
        i for i, ln in enumerate(lines) if ln.startswith(f"  where it is now (rank {stalled}")
    )
    assert where == 2 or where < next(
        i for i, ln in enumerate(lines) if ln.startswith("  chain to")
    )
    assert f" in {function}" in "\n".join(lines[where + 1 : where + 4])


@pytest.mark.parametrize("backend", ["gloo", "hook"])
def test_live_sigusr1_on_a_healthy_job_writes_a_no_hang_set(tmp_path: Path, backend: str) -> None:
    out, summary = _run_job(tmp_path, backend, "healthy_signal")
    assert summary["exit_codes"] == {str(r): 0 for r in range(WORLD)}, summary
    assert summary["steps"] == {str(r): 20 for r in range(WORLD)}  # training went on
    for rank in range(WORLD):
        ctx = read_context(out / f"hangscope_context_rank_{rank}.json")
        assert "SIGUSR1" in ctx.reason and ctx.by_rank == 0
    inputs = [str(out / "gloo_trace_rank_*")] if backend == "hook" else [str(out)]
    got = _analyze_without_torch(inputs)
    assert got["doc"]["verdict"] == "no_hang", got["text"]
    assert got["doc"]["culprit_ranks"] == [] and got["doc"]["contexts"]["ranks"] == list(
        range(WORLD)
    )


@pytest.mark.parametrize("backend", ["gloo", "hook"])
def test_live_job_whose_store_dies_keeps_training(tmp_path: Path, backend: str) -> None:
    out, summary = _run_job(tmp_path, backend, "store_dies")
    assert summary["exit_codes"] == {str(r): 0 for r in range(WORLD)}, summary
    assert summary["steps"] == {str(r): 20 for r in range(WORLD)}
    # SIGUSR1 to rank 1 after the store died: it captured alone, locally.
    ctx = read_context(out / "hangscope_context_rank_1.json")
    assert "SIGUSR1" in ctx.reason and ctx.by_rank == 1
    assert (out / "gloo_trace_rank_1").exists()
    logs = Path(summary["logs"])
    assert "store unavailable" in (logs / "rank_0.log").read_text()


def test_capture_never_signals_a_process_without_the_hook() -> None:
    # SIGUSR1's default action ends a process: a PID without the hook (the torchrun agent, a
    # rank started without it) is refused with one line and stays alive.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        run = subprocess.run(
            [sys.executable, "-m", "analyzer", "capture", "--signal", str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert run.returncode == 2, run.stderr
        assert "does not handle SIGUSR1" in run.stderr and "Traceback" not in run.stderr
        time.sleep(0.3)
        assert proc.poll() is None  # not signalled: still alive
    finally:
        proc.kill()
        proc.wait()
