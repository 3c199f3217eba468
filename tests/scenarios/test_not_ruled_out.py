"""Ranks the dumps cannot rule out as a second culprit beside a crash, listed after the
suspects (``Diagnosis.not_ruled_out``), on real recorded cases of the corpus."""

from __future__ import annotations

from pathlib import Path

import analyzer
from analyzer.render import render_markdown, render_text, to_json
from analyzer.render.sentences import verdict_line
from tests.conftest import confidences, corpus_case
from tools.corpus.check import classify, read_said


def _unruled(d: object) -> list[int]:
    return [c.rank for c in d.not_ruled_out]  # type: ignore[attr-defined]


def test_waiters_on_a_crash_in_a_gloo_op_that_retired_are_not_ruled_out(tmp_path: Path) -> None:
    """Rank 0 crashed and rank 3 stalled, both before the context-parallel send/recv (gloo
    2.13). Ranks 1, 2 and 3 each end at the world all_reduce, retired: gloo retires an op that
    timed out as one that completed and records no send/recv, so rank 3's file, which shows
    it finished the all_reduce and stopped before a send/recv, reads exactly like those of the
    ranks it blocks. Before: `suspect rank 0, or a rank with no dump`, without rank 3 (a wrong
    answer, pinned)."""
    truth, folder = corpus_case("two_faults_tp1cp2pp2dp1_gloo_restart_t213_s04240", tmp_path)
    assert sorted(truth["culprits"]) == [0, 3]
    analysis = analyzer.analyze(folder, jobs=1)
    d = analysis.diagnosis
    assert d.verdict == "inconclusive" and confidences(d) == {0: "suspect"}
    assert _unruled(d) == [1, 2, 3]
    assert "only in its last op, all_reduce in default_pg seq 2" in d.not_ruled_out[0].because
    assert "; ranks 1-3 not ruled out (" in verdict_line(d)
    assert "not ruled out, ranks 1-3: it waits on rank 0 (no dump)" in render_text(analysis)
    doc = to_json(analysis)
    assert [x["rank"] for x in doc["not_ruled_out"]] == [1, 2, 3]
    assert classify(truth, read_said(doc))[0] == "unsure"


def test_gloo_ranks_that_wait_on_nobody_beside_a_crash_are_not_ruled_out(tmp_path: Path) -> None:
    """Rank 1 crashed and rank 4 stalled before a monitored_barrier (gloo 2.13, which records
    none of the barrier's send/recv). Ranks 3, 5 and 7 wait on rank 1 and are suspects; ranks
    0, 2, 4 and 6 wait on nobody in any recorded op and nobody waits on them: each may be
    blocked in the barrier or have stopped before it. Before: suspects 1, 3, 5, 7 without
    rank 4 (a wrong answer, pinned)."""
    truth, folder = corpus_case("two_faults_tp1pp2dp4_gloo_wide_mb_restart_t213_s04072", tmp_path)
    assert sorted(truth["culprits"]) == [1, 4]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {1: "suspect", 3: "suspect", 5: "suspect", 7: "suspect"}
    assert _unruled(d) == [0, 2, 4, 6]
    assert "it waits on nobody in any recorded op" in d.not_ruled_out[2].because


def test_a_hang_lists_them_after_how_sure_not_on_its_first_line(tmp_path: Path) -> None:
    """Rank 0 crashed (the nccl2 recorder on a gloo CPU job: no send/recv recorded). The
    verdict names it, likely; ranks 1-3 are listed in the details and the ticket, not on the
    first line, and the answer stays right."""
    truth, folder = corpus_case(
        "crash_exit_tp1cp2pp2dp1_nccl2_restart_cpu_hookjson_t215_s04471", tmp_path
    )
    analysis = analyzer.analyze(folder, jobs=1)
    d = analysis.diagnosis
    assert d.verdict == "hang" and confidences(d) == {0: "likely"}
    assert _unruled(d) == [1, 2, 3]
    assert "not ruled out" not in verdict_line(d)
    assert "- **Not ruled out:** ranks 1-3: it waits on rank 0" in render_markdown(analysis)
    assert classify(truth, read_said(to_json(analysis)))[0] == "right"


def test_a_culprit_its_own_file_proves_leaves_none(tmp_path: Path) -> None:
    """Rank 2 never enqueued a late eval all_reduce (gloo 2.15, every rank dumped): it
    explains the ranks blocked behind it, so nobody is listed, though the second stall, rank
    1, is invisible in the files (a wrong answer, pinned in corpus/BASELINE.json)."""
    truth, folder = corpus_case(
        "two_faults_tp1cp2pp1dp4_gloo_restart_elastic4_t215_s04565", tmp_path
    )
    assert sorted(truth["culprits"]) == [1, 2]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {2: "certain"} and _unruled(d) == []


def test_a_backend_that_records_send_recv_leaves_none(tmp_path: Path) -> None:
    """Rank 1 stalled (the nccl2 recorder, which records send/recv): no op can have
    run after a waiter's newest entry that no entry shows."""
    truth, folder = corpus_case(
        "stall_dataloader_tp4pp1dp2_nccl2_eval_restart_t215_s04546", tmp_path
    )
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [1] and confidences(d) == {1: "likely"}
    assert _unruled(d) == []
