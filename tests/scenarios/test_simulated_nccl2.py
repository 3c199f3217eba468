"""Simulated jobs in torch 2.15's nccl2 dialect (the recorder hook's form), and mixed jobs of
legacy-NCCL and nccl2 ranks (a partial upgrade), analyzed as one job."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import analyzer
from tools.simulate import FAULTS, simulate_job, to_hook_form

FAULT_LIST = [f for f in FAULTS if f != "none"]


def _load(path: Path) -> dict:
    return pickle.loads(path.read_bytes())


def test_hook_form(tmp_path: Path) -> None:
    simulate_job(
        tmp_path / "legacy", tp=2, pp=2, dp=1, fault="stall", buffer_size=150, batch_p2p=True
    )
    legacy = _load(tmp_path / "legacy" / "nccl_trace_rank_0")
    hook = to_hook_form(legacy)
    assert hook["comm_lib_version"] == ""
    assert all(e["profiling_name"].startswith("nccl2:") for e in hook["entries"])
    assert not any(e["profiling_name"].endswith("coalesced") for e in hook["entries"])
    assert {(e["state"], e["retired"]) for e in hook["entries"]} <= {
        ("completed", True),
        ("scheduled", False),
    }
    ids = [e["record_id"] for e in hook["entries"]]
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    for e in hook["entries"]:
        op = e["profiling_name"].split(":")[1]
        assert e["op_id"] == e["collective_seq_id"] + e["p2p_seq_id"] - 1
        if op.startswith("send"):
            assert e["input_sizes"] and e["output_sizes"] == [] and e["output_dtypes"] == []
        if op.startswith("recv"):
            assert e["output_sizes"] and e["input_sizes"] == [] and e["input_dtypes"] == []
    for key, st in hook["pg_status"].items():
        mine = [e["op_id"] for e in hook["entries"] if e["pg_id"] == int(key)]
        if mine:
            assert st["last_enqueued_collective"] == max(mine)
        assert st["last_started_collective"] == -1


@pytest.mark.parametrize("fault", FAULT_LIST)
def test_simulated_nccl2_fault(tmp_path: Path, fault: str) -> None:
    try:
        expected = simulate_job(
            tmp_path / "j", tp=2, pp=4, dp=2, fault=fault, seed=1, buffer_size=400, dialect="nccl2"
        )
    except ValueError:
        pytest.skip("fault does not fit")
    files = sorted(p.name for p in (tmp_path / "j").glob("nccl2_trace_rank_*"))
    assert len(files) == len(expected["dumped_ranks"])
    a = analyzer.analyze(tmp_path / "j", jobs=1)
    d = a.diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    if "desync" not in fault:
        assert not any(f.kind in ("size_mismatch", "dtype_mismatch") for f in d.findings), (
            d.headline
        )
    assert set(a.matching.dialects.names().values()) == {"nccl2"}


def test_nccl2_stalled_rank_writes_no_file_and_is_named(tmp_path: Path) -> None:
    # A crash and, where its ops all finished, a stalled rank leave no file under nccl2.
    expected = simulate_job(
        tmp_path / "j", tp=2, pp=2, dp=2, fault="crash", seed=0, buffer_size=300, dialect="nccl2"
    )
    culprit = expected["culprits"][0]
    assert culprit not in expected["dumped_ranks"]
    d = analyzer.analyze(tmp_path / "j", jobs=1).diagnosis
    assert d.culprit_ranks == (culprit,) and d.kind == "missing_dump"
    assert "no dump: stalled outside communication or crashed" in d.headline


@pytest.mark.parametrize(
    "fault",
    [
        "stall",
        "crash",
        "pipeline_stall",
        "size_desync",
        "p2p_size_desync",
        "pp_deadlock",
        "gpu_stuck",
    ],
)
def test_mixed_legacy_and_nccl2_ranks_are_one_job(tmp_path: Path, fault: str) -> None:
    expected = simulate_job(
        tmp_path / "j", tp=2, pp=2, dp=2, fault=fault, seed=2, buffer_size=300, dialect="mixed"
    )
    names = {p.name.split("_trace_rank_")[0] for p in (tmp_path / "j").glob("*_trace_rank_*")}
    assert names == {"nccl", "nccl2"}
    a = analyzer.analyze(tmp_path / "j", jobs=1)
    d = a.diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    dialects = a.matching.dialects
    assert {dialects.of(r).name for r in expected["dumped_ranks"]} == {"nccl-legacy", "nccl2"}
    for r in expected["dumped_ranks"]:
        assert dialects.of(r).counter == ("op_id" if r % 2 else "seq")
        assert dialects.of(r).one_sided_p2p == bool(r % 2)
    if "desync" not in fault:
        assert not any(f.kind in ("size_mismatch", "dtype_mismatch") for f in d.findings)
