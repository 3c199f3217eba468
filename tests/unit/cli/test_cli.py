"""The command line: exit codes, JSON document, bad input as one-line messages."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli.commands import app
from tests.conftest import ROOT, SAMPLES, entry

runner = CliRunner()


def _stall_job(make_job: Callable[..., Path]) -> Path:
    job = {r: [entry(1, state="completed", retired=True), entry(2)] for r in (0, 2, 3)}
    job[1] = [entry(1, state="completed", retired=True)]
    return make_job(job)


def test_analyze_text_names_culprit_first(make_job: Callable[..., Path]) -> None:
    res = runner.invoke(app, ["analyze", str(_stall_job(make_job))])
    assert res.exit_code == 1
    assert res.stdout.splitlines()[0].startswith("HANG: culprit rank 1")


def test_analyze_json_document(make_job: Callable[..., Path]) -> None:
    res = runner.invoke(app, ["analyze", str(_stall_job(make_job)), "--format", "json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    for key in (
        "schema",
        "verdict",
        "culprit_ranks",
        "missing_dumps",
        "deadlock_cycles",
        "findings",
        "skipped_files",
        "graph",
        "chains",
    ):
        assert key in doc
    assert doc["schema"].startswith("hangscope.diagnosis/")
    assert doc["verdict"] == "hang" and doc["culprit_ranks"] == [1]
    f = doc["findings"][0]
    assert {"kind", "ranks", "group", "seq", "op", "evidence"} <= f.keys()
    assert f["kind"] == "not_joined" and f["seq"] == 2


def test_no_hang_exits_zero(make_job: Callable[..., Path]) -> None:
    job = {r: [entry(1, state="completed", retired=True)] for r in range(4)}
    res = runner.invoke(app, ["analyze", str(make_job(job))])
    assert res.exit_code == 0, res.stdout
    assert res.stdout.startswith("NO HANG")


@pytest.mark.parametrize("setup", ["missing", "empty", "unrelated", "all_bad"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, setup: str) -> None:
    target = tmp_path / "dumps"
    if setup != "missing":
        target.mkdir()
    if setup == "unrelated":
        (target / "notes.txt").write_text("x")
        (target / "weights.bin").write_bytes(b"\x00" * 10)
    if setup == "all_bad":
        (target / "nccl_trace_rank_0").write_bytes(b"")
        (target / "nccl_trace_rank_1").write_bytes(b"\x80\x04garbage")
    res = subprocess.run(
        [sys.executable, "-m", "analyzer", "analyze", str(target)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hangscope: error:"), res.stderr
    assert "Traceback" not in res.stderr


def test_bad_files_are_skipped_and_analysis_continues(
    make_job: Callable[..., Path], tmp_path: Path
) -> None:
    job_dir = _stall_job(make_job)
    (job_dir / "nccl_trace_rank_4").write_bytes(b"")
    evil_target = tmp_path / "created_by_pickle"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {evil_target}",))

    (job_dir / "nccl_trace_rank_5").write_bytes(
        pickle.dumps({"version": "2.10", "entries": [Evil()]})
    )
    good = (job_dir / "nccl_trace_rank_0").read_bytes()
    (job_dir / "nccl_trace_rank_6").write_bytes(good[: len(good) // 3])
    res = runner.invoke(app, ["analyze", str(job_dir), "-f", "json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    reasons = {Path(s["path"]).name: s["reason"] for s in doc["skipped_files"]}
    assert reasons["nccl_trace_rank_4"] == "empty file"
    assert "unsafe pickle" in reasons["nccl_trace_rank_5"]
    assert "truncated" in reasons["nccl_trace_rank_6"]
    assert not evil_target.exists()
    assert doc["culprit_ranks"] == [1]


def test_entries_command_filters(make_job: Callable[..., Path]) -> None:
    res = runner.invoke(app, ["entries", str(_stall_job(make_job)), "--rank", "1", "-f", "csv"])
    assert res.exit_code == 0
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("rank,record_id,pg_name")
    assert len(lines) == 2 and lines[1].startswith("1,")


def test_help_lists_every_command() -> None:
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    for cmd in ("analyze", "entries"):
        assert cmd in res.stdout


@pytest.mark.parametrize("fmt", ["text", "json", "graphml", "dot"])
def test_graph_command_exports(make_job: Callable[..., Path], fmt: str) -> None:
    res = runner.invoke(app, ["graph", str(_stall_job(make_job)), "-f", fmt])
    assert res.exit_code == 0  # it wrote the graph (the verdict's code is analyze's)
    out = res.stdout
    if fmt == "json":
        doc = json.loads(out)
        assert {(e["waiter"], e["holder"]) for e in doc["edges"]} == {(0, 1), (2, 1), (3, 1)}
        assert [n["rank"] for n in doc["nodes"] if n["culprit"]] == [1]
    elif fmt == "graphml":
        import networkx as nx

        g = nx.parse_graphml(out, node_type=int)
        assert set(g.edges) == {(0, 1), (2, 1), (3, 1)}
        assert g.nodes[1]["culprit"] is True
    elif fmt == "dot":
        assert out.startswith("digraph waits {") and "0 -> 1" in out
    else:
        assert "rank 1 [culprit] is waited on by:" in out


def test_export_store_reopens_with_the_same_answer(
    make_job: Callable[..., Path], tmp_path: Path
) -> None:
    job = _stall_job(make_job)
    store = tmp_path / "incident"
    res = runner.invoke(app, ["export", str(job), "-o", str(store)])
    assert res.exit_code == 0, res.output
    assert (store / "entries.parquet").exists() and (store / "stacks.parquet").exists()
    direct = json.loads(runner.invoke(app, ["analyze", str(job), "-f", "json"]).stdout)
    reopened = json.loads(runner.invoke(app, ["analyze", str(store), "-f", "json"]).stdout)
    for doc in (direct, reopened):
        doc.pop("skipped_files")
    assert reopened == direct
    res = runner.invoke(app, ["entries", str(store), "-r", "1", "-f", "csv"])
    assert res.exit_code == 0 and res.stdout.count("\n") == 2


def test_the_command_ends_with_its_exit_code_and_all_its_output() -> None:
    """``hangscope`` (``analyzer.cli.run``) ends the process at once after flushing: the exit
    codes are main()'s, and nothing written is lost."""
    stall = SAMPLES / "stall_w4"
    res = subprocess.run(
        [sys.executable, "-m", "analyzer", "analyze", str(stall), "-q", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr  # a hang found
    assert json.loads(res.stdout)["verdict"] == "hang"
    res = subprocess.run(
        [sys.executable, "-m", "analyzer", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 0 and res.stdout.strip()
    res = subprocess.run(
        [sys.executable, "-m", "analyzer", "analyze", "--no-such-option"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2 and "no-such-option" in res.stderr


def test_a_dump_named_with_an_impossible_rank_is_skipped(tmp_path: Path) -> None:
    # Every rank up to the highest dumped one is a row: nccl_trace_rank_2000000000 beside
    # the dumps had the analysis claim all the memory there was (killed).
    import shutil

    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "chain_tp_dp_w8", job)
    shutil.copy(job / "nccl_trace_rank_0", job / "nccl_trace_rank_2000000000")
    res = runner.invoke(app, ["analyze", str(job), "--format", "json"])
    ref = runner.invoke(app, ["analyze", str(SAMPLES / "chain_tp_dp_w8"), "--format", "json"])
    assert res.exit_code == ref.exit_code == 1
    doc, want = json.loads(res.stdout), json.loads(ref.stdout)
    for key in (
        "headline",
        "culprit_ranks",
        "world_size",
        "dumped_ranks",
        "entries",
        "missing_dumps",
    ):
        assert doc[key] == want[key], key
    [skipped] = doc["skipped_files"]
    assert skipped["path"].endswith("nccl_trace_rank_2000000000")
    assert (
        "a dump, but its name's rank number 2000000000 is beyond any job's ranks (at most 4,194,303)"
        in skipped["reason"]
    )
    # Unreadable, named like a dump: skipped as before, and it does not extend the world.
    (job / "nccl_trace_rank_2000000000").write_bytes(b"\x80\x04\x95 truncated")
    doc = json.loads(runner.invoke(app, ["analyze", str(job), "--format", "json"]).stdout)
    assert doc["world_size"] == 8 and doc["culprit_ranks"] == want["culprit_ranks"]
    assert [s["rank"] for s in doc["skipped_files"]] == [-1]


@pytest.mark.parametrize("command", ["analyze", "export"])
def test_a_world_size_no_job_has_is_refused(tmp_path: Path, command: str) -> None:
    out = ["-o", str(tmp_path / "store")] if command == "export" else []
    res = runner.invoke(
        app, [command, str(SAMPLES / "chain_tp_dp_w8"), "--world-size", "2000000000", *out]
    )
    assert res.exit_code == 2
    assert "world size 2,000,000,000: beyond any job's (at most 4,194,304 ranks)" in res.output
    assert not (tmp_path / "store").exists()


def test_a_dump_named_outside_its_own_default_group_is_skipped(tmp_path: Path) -> None:
    # A copy of rank 0's nccl2 dump named rank 4,000,000: its own pg_config says the default
    # group is ranks 0-3. It is no evidence of that rank (nor of a world of 4M ranks, which
    # cost 37 s and 7 GB to analyse).
    import shutil

    src = SAMPLES / "nccl2_stall_w4"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    shutil.copy(job / "nccl2_trace_rank_0", job / "nccl2_trace_rank_4000000")
    doc = json.loads(runner.invoke(app, ["analyze", str(job), "--format", "json"]).stdout)
    want = json.loads(runner.invoke(app, ["analyze", str(src), "--format", "json"]).stdout)
    for key in ("headline", "culprit_ranks", "world_size", "dumped_ranks", "missing_dumps"):
        assert doc[key] == want[key], key
    [skipped] = doc["skipped_files"]
    assert skipped["rank"] == -1 and skipped["path"].endswith("nccl2_trace_rank_4000000")
    assert skipped["reason"].startswith(
        "a dump, but its name's rank 4000000 is not in its own default group (ranks 0-3)"
    )


def test_missing_ranks_are_runs_in_the_text(tmp_path: Path) -> None:
    import shutil

    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "chain_tp_dp_w8", job)
    (job / "nccl_trace_rank_20").write_bytes(b"\x80\x04\x95 truncated")
    res = runner.invoke(app, ["analyze", str(job), "--world-size", "40"])
    assert "missing dumps: ranks 8-19, 20 (unreadable file), 21-39\n" in res.stdout
    res = runner.invoke(app, ["analyze", str(job), "--world-size", "100000"])
    line = next(x for x in res.stdout.splitlines() if x.startswith("missing dumps"))
    assert line == "missing dumps: ranks 8-19, 20 (unreadable file), 21-99999"
    for r in range(22, 60, 2):
        (job / f"nccl_trace_rank_{r}").write_bytes(b"\x80\x04\x95 truncated")
    res = runner.invoke(app, ["analyze", str(job), "--world-size", "100"])
    line = next(x for x in res.stdout.splitlines() if x.startswith("missing dumps"))
    assert line == (
        "missing dumps: ranks 8-19, 20 (unreadable file), 21, 22 (unreadable file), 23, "
        "24 (unreadable file), 25, 26 (unreadable file), 27, 28 (unreadable file), 29, "
        "30 (unreadable file), 31, 32 (unreadable file), 33, 34 (unreadable file), … (92 ranks in all)"
    )
    doc = json.loads(
        runner.invoke(app, ["analyze", str(job), "--world-size", "40", "-f", "json"]).stdout
    )
    assert doc["missing_dumps"] == list(range(8, 40))  # the JSON keeps every rank
