"""Inputs that must never mislead, on dumps real torch jobs wrote: a member no file names, junk
named like ranks beyond the world, a truncated dump of a real rank, and the confidence each
culprit is given (JSON ``culprits``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import analyzer
from analyzer.render import to_json

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(SAMPLES / name, out, ignore=shutil.ignore_patterns("EXPECTED*"))
    return out


def test_a_member_no_file_names_is_inferred_from_the_layout() -> None:
    # gloo 2.13: empty pg_config, rank 7 crashed before writing anything; nothing names it.
    result = analyzer.analyze(SAMPLES / "crash_tp_w8", jobs=1)
    d = result.diagnosis
    assert result.tables.world_size == 8
    assert d.verdict == "hang" and d.culprit_ranks == (7,) and d.kind == "missing_dump"
    assert (
        7 in result.tables.inferred and "TENSOR_MODEL_PARALLEL_GROUP" in result.tables.inferred[7]
    )
    (culprit,) = d.culprits
    assert culprit.confidence == "likely" and "no file names it" in culprit.because
    # its blocked tensor-parallel peer is never blamed as stalled
    assert not any(f.culprit and 6 in f.ranks for f in d.findings)


def test_junk_named_like_ranks_beyond_the_declared_world_is_no_rank(tmp_path: Path) -> None:
    folder = _copy("chain_tp_dp_w8", tmp_path)
    for r in (8, 9, 10, 11):
        (folder / f"nccl_trace_rank_{r}").write_bytes(b"\x00garbage" * r)
    (folder / "nccl_trace_rank_12.json").write_text("[" * 100_000)
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert result.tables.world_size == 8
    assert d.culprit_ranks == (3,) and d.kind == "not_joined"
    assert d.culprits[0].confidence == "certain"
    assert len(result.tables.skipped) == 5  # every junk file is listed as skipped


def test_a_truncated_dump_of_a_real_rank_is_never_a_confident_answer(tmp_path: Path) -> None:
    folder = _copy("chain_tp_dp_w8", tmp_path)
    whole = (folder / "nccl_trace_rank_5").read_bytes()
    (folder / "nccl_trace_rank_5").write_bytes(whole[: len(whole) // 2])
    for r in (8, 9, 10):
        (folder / f"nccl_trace_rank_{r}").write_bytes(b"not a dump")
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert not {8, 9, 10} & set(d.culprit_ranks)
    for c in d.culprits:  # rank 3 (the truth) or an honest suspect, never a confident other
        assert c.rank == 3 or c.confidence == "suspect", (c, d.headline)


@pytest.mark.parametrize(
    ("sample", "confidence"),
    [("chain_tp_dp_w8", "certain"), ("crash_w4", "likely"), ("deadlock_w4", "certain")],
)
def test_every_culprit_says_how_sure_in_json(sample: str, confidence: str) -> None:
    doc = json.loads(json.dumps(to_json(analyzer.analyze(SAMPLES / sample, jobs=1))))
    assert doc["schema"].endswith("/1.1")
    assert [c["rank"] for c in doc["culprits"]] == doc["culprit_ranks"]
    assert {c["confidence"] for c in doc["culprits"]} == {confidence}
    assert all(c["because"] for c in doc["culprits"])
