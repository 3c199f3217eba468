"""Inputs that must never mislead, on dumps real torch jobs wrote: a member no file names, junk
named like ranks beyond the world, a truncated dump of a real rank, and the confidence each
culprit is given (JSON ``culprits``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import analyzer
from analyzer.load import load_dumps
from analyzer.render import render_markdown, render_text, to_json
from tests.conftest import confidences, reasons

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(SAMPLES / name, out, ignore=shutil.ignore_patterns("EXPECTED*"))
    return out


def test_a_member_no_file_names_is_inferred_from_the_layout() -> None:
    # gloo 2.13: empty pg_config, rank 7 crashed before writing anything; nothing names it.
    # The layout implies it; the world given (8) confirms the layout.
    result = analyzer.analyze(SAMPLES / "crash_tp_w8", jobs=1, world_size=8)
    d = result.diagnosis
    assert result.tables.world_size == 8
    assert d.verdict == "hang" and d.kind == "missing_dump"
    assert (
        7 in result.tables.inferred and "TENSOR_MODEL_PARALLEL_GROUP" in result.tables.inferred[7]
    )
    culprit, peer = d.culprits[1], d.culprits[0]
    assert culprit.rank == 7
    assert culprit.confidence == "likely" and "no file names it" in culprit.because
    # its tensor-parallel peer, whose wait on it only a retired gloo entry shows, is a
    # suspect (it may have finished that op and stopped), never blamed as stalled
    assert peer.rank == 6 and peer.confidence == "suspect"
    assert not any(f.culprit and 6 in f.ranks for f in d.findings)


def test_a_layout_with_no_world_given_fits_a_larger_job_as_well() -> None:
    # The same files with no world given: a job of 16 ranks whose ranks 7-15 wrote no file
    # fits them as well, so rank 7 is a suspect, with a rank no file names beside it.
    d = analyzer.analyze(SAMPLES / "crash_tp_w8", jobs=1).diagnosis
    assert d.verdict == "inconclusive" and d.kind == "missing_dump"
    assert confidences(d) == {6: "suspect", 7: "suspect"}
    because = reasons(d)
    assert "the layout fits a larger job as well" in because[7]
    assert "--world-size N" in because[7]
    assert d.unseen_suspect


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
    assert doc["schema"].endswith("/1.5")
    assert [c["rank"] for c in doc["culprits"]] == doc["culprit_ranks"]
    assert {c["confidence"] for c in doc["culprits"]} == {confidence}
    assert all(c["because"] for c in doc["culprits"])


def _attempts(tmp_path: Path, *samples: str) -> Path:
    """A restart folder: ``attempt_i/`` holds the dumps of ``samples[i]``."""
    for i, name in enumerate(samples):
        shutil.copytree(
            SAMPLES / name, tmp_path / f"attempt_{i}", ignore=shutil.ignore_patterns("EXPECTED*")
        )
    return tmp_path


def _newest_ns(sample: str) -> int:
    dumps = load_dumps([SAMPLES / sample], jobs=1).dumps
    return max(int(d.ints["time_created_ns"].max()) for d in dumps)


def test_restarts_under_one_folder_are_never_merged(tmp_path: Path) -> None:
    # attempt_0: rank 1 stalled (all 4 files); attempt_1: rank 2 crashed (ranks 0, 1, 3).
    # Merged per rank they read as every member stuck inside the all_reduce (rank 0): wrong for both.
    root = _attempts(tmp_path, "stall_w4", "crash_w4")
    newest = "attempt_1" if _newest_ns("crash_w4") > _newest_ns("stall_w4") else "attempt_0"
    truth = {"attempt_0": ((1,), "not_joined"), "attempt_1": ((2,), "missing_dump")}
    result = analyzer.analyze(root, jobs=1)
    names = [i.name for i in result.loaded.incidents]
    assert sorted(names) == ["attempt_0", "attempt_1"] and names[0] == newest
    assert (result.diagnosis.culprit_ranks, result.diagnosis.kind) == truth[newest]
    for name, expected in truth.items():
        d = analyzer.analyze(root, jobs=1, incident=name).diagnosis
        assert (d.culprit_ranks, d.kind) == expected, name
    doc = to_json(result)
    assert [i["analyzed"] for i in doc["incidents"]] == [True, False]
    why = doc["incidents"][1]["why"]
    assert "share no entry time and their record ids start again: a restart" in why, why
    assert doc["incidents"][0]["why"] == ""
    assert "these folders held 2 incidents" in render_text(result).splitlines()[0]
    assert "**Incidents:** these folders held 2 incidents" in render_markdown(result)
    with pytest.raises(analyzer.InputError, match="no such incident"):
        analyzer.analyze(root, jobs=1, incident="attempt_9")


def test_one_job_split_across_node_folders_is_one_incident(tmp_path: Path) -> None:
    for r in range(8):
        node = tmp_path / f"node{r // 4}"
        node.mkdir(exist_ok=True)
        shutil.copy(SAMPLES / "chain_tp_dp_w8" / f"nccl_trace_rank_{r}", node)
    shutil.copy(SAMPLES / "chain_tp_dp_w8" / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_0")
    result = analyzer.analyze(tmp_path, jobs=1)  # a byte-identical copy is the same dump
    assert result.loaded.incidents == ()
    assert result.diagnosis.culprit_ranks == (3,)


def _older_snapshot(src: Path, dst: Path, keep: int) -> None:
    """A snapshot of a gloo dump taken earlier: its first ``keep`` entries, and the pg_status
    counters they give (op ids per group; every one of them ended)."""
    import pickle

    obj = pickle.loads(src.read_bytes())
    obj["entries"] = obj["entries"][:keep]
    status: dict[str, dict[str, int]] = {}
    for e in obj["entries"]:
        pg = str(e["pg_id"])
        n = int(e["op_id"])
        status[pg] = {
            "last_enqueued_collective": n,
            "last_started_collective": -1,
            "last_completed_collective": n,
        }
    obj["pg_status"] = status
    dst.write_bytes(pickle.dumps(obj, protocol=2))


def test_a_rank_whose_only_dump_is_an_older_snapshot_is_not_blamed(tmp_path: Path) -> None:
    """Two dump rounds of the same job (a periodic dump into dated folders): the older one
    taken before the hang, the newer after it, where rank 5's newer file is missing. Its
    older buffer stops short of ops its peers went on to: read as it stands, rank 5 is
    behind, and every wait leads to it. The other ranks moved on between the rounds, so rank
    5 may have too: its older dump is set aside (listed among the ignored files, with why),
    rank 5 reads as a rank with no dump, and the answer is the newer round's alone: the rank
    whose newest dump shows it stalled (3), beside rank 5, which may not have joined either
    (gloo records no send/recv that could hold rank 3 on it). Before: 'HANG: culprit rank 5',
    certain."""
    src = SAMPLES / "chain_tp_dp_w8"
    job = tmp_path / "job"
    old, new = job / "dumps_20261206_101500", job / "dumps_20261206_101600"
    old.mkdir(parents=True)
    new.mkdir()
    for r in range(8):
        name = f"nccl_trace_rank_{r}"
        _older_snapshot(src / name, old / name, keep=3)
        if r != 5:
            shutil.copy(src / name, new / name)
    result = analyzer.analyze(job, jobs=1)
    d = result.diagnosis
    alone = analyzer.analyze(new, jobs=1).diagnosis
    assert confidences(d) == confidences(alone) == {3: "suspect", 5: "suspect"}, d.headline
    assert d.kind == alone.kind == "not_joined"
    assert d.missing_dumps == (5,)
    assert result.loaded is not None
    assert [r for r, _ in result.loaded.stale] == [5]
    assert any("rank 5: its only dump is in" in i.reason for i in result.loaded.ignored)


def test_a_rank_whose_newest_dump_is_copied_through_older_rounds_is_not_blamed(
    tmp_path: Path,
) -> None:
    """Three rounds of an interval dump: rank 5's buffer did not move between the first two
    (byte-identical files), and its file of the newest round is missing. The second round was
    superseded by the newest, the first by the second: rank 5's copy in the second round does
    not make its dump current. It is set aside, and the answer is the newest round's alone
    (the stalled rank 3, and rank 5 beside it). Before: only the round right after the kept
    copy was looked at, and rank 5 was blamed from its old position."""
    src = SAMPLES / "chain_tp_dp_w8"
    job = tmp_path / "job"
    first, second, newest = (job / f"dumps_20261206_1015{m}0" for m in (0, 3, 5))
    for folder in (first, second, newest):
        folder.mkdir(parents=True)
    for r in range(8):
        name = f"nccl_trace_rank_{r}"
        _older_snapshot(src / name, first / name, keep=2)
        if r == 5:
            shutil.copy(first / name, second / name)
        else:
            _older_snapshot(src / name, second / name, keep=3)
            shutil.copy(src / name, newest / name)
    result = analyzer.analyze(job, jobs=1)
    d = result.diagnosis
    alone = analyzer.analyze(newest, jobs=1).diagnosis
    assert confidences(d) == confidences(alone) == {3: "suspect", 5: "suspect"}, d.headline
    assert result.loaded is not None
    assert [r for r, _ in result.loaded.stale] == [5]
    why = dict(result.loaded.stale)[5]
    assert f"superseded by newer ones in {newest}" in why
