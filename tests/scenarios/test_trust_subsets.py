"""A subset of the files: cases of the real corpus with some ranks' files taken away, as a
user holds them who copied one host's dumps, or whose copy of another's failed. The files
left are real; the truth is the injected fault's. No answer may then blame, as sure, a rank
that the files left do not set apart."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import analyzer
from analyzer.load.discover import rank_from_name
from tests.conftest import confidences, corpus_case


def _keep(folder: Path, ranks: Iterable[int]) -> Path:
    """``folder`` with every dump of a rank outside ``ranks`` removed (other files stay)."""
    keep = set(ranks)
    for f in [f for f in folder.rglob("*") if f.is_file()]:
        r = rank_from_name(f.name)
        if r is not None and r not in keep:
            f.unlink()
    return folder


def test_one_hosts_files_do_not_blame_each_rank_of_the_other(tmp_path: Path) -> None:
    """nccl2 hook, 8 ranks, rank 4 stalled (no file: this backend dumps only ranks whose own
    op timed out). With only ranks 5-7's files, ranks 0-4 have none and 5-7 wait on all of
    them in one all_reduce of the world: which stopped is in no file. Before: ranks 0-4, each
    a likely culprit."""
    truth, folder = corpus_case("stall_compute_tp2pp2dp2_nccl2_eval_t215_s01000", tmp_path)
    assert truth["culprits"] == [4] and 4 not in truth["dumped_ranks"]
    d = analyzer.analyze(_keep(folder, range(4, 8)), jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {r: "suspect" for r in range(5)}
    assert "no rank waits on one of them alone" in d.culprits[0].because


def test_a_rank_awaited_alone_is_still_told_apart(tmp_path: Path) -> None:
    """The same case with every file: rank 4 is the only rank with no dump, and ranks 0-3 and
    5-7 wait on it: it stays the likely culprit."""
    truth, folder = corpus_case("stall_compute_tp2pp2dp2_nccl2_eval_t215_s01000", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {4: "likely"}
    assert d.verdict == "hang"


def test_a_world_read_off_the_files_may_lack_a_rank(tmp_path: Path) -> None:
    """gloo 2.13 (no member lists, no world size), 4 ranks, rank 3 crashed. With ranks 0
    and 1's files only, both sit in one all_reduce of a world that looks like two ranks: a
    rank no file names may hold it. Before: ranks 0 and 1 stuck inside, and no other reading."""
    truth, folder = corpus_case("crash_exit_tp2pp1dp2_gloo_t213_s00017", tmp_path)
    assert truth["culprits"] == [3]
    d = analyzer.analyze(_keep(folder, (0, 1)), jobs=1).diagnosis
    assert set(confidences(d).values()) == {"suspect"}
    assert "no file gives its number" in d.unseen_suspect


def test_ranks_awaited_together_beside_a_rank_no_file_names(tmp_path: Path) -> None:
    """The same case with rank 2's file only: ranks 0 and 1 have none and rank 2 waits on
    both; rank 3 (the crash) is beyond the highest rank a file gives."""
    truth, folder = corpus_case("crash_exit_tp2pp1dp2_gloo_t213_s00017", tmp_path)
    d = analyzer.analyze(_keep(folder, (2,)), jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 1: "suspect"}
    assert "no file names may be among them" in d.unseen_suspect


def test_a_last_op_alone_in_a_group_may_wait_on_a_rank_no_file_names(tmp_path: Path) -> None:
    """gloo 2.13, 4 ranks, rank 3 killed. With ranks 0 and 1's files, rank 1 never enqueued
    the world's next all_reduce; its last op is a DP all_reduce that gloo retired (ended or
    timed out) and that no other dump holds: its DP peer, whose file is not there, may hold
    it. Before: rank 1, a certain stall."""
    truth, folder = corpus_case("crash_sigkill_tp1pp2dp2_gloo_t213_s00054", tmp_path)
    assert truth["culprits"] == [3]
    d = analyzer.analyze(_keep(folder, (0, 1)), jobs=1).diagnosis
    assert confidences(d) == {1: "suspect"}
    assert "is in a group no other dump holds" in d.culprits[0].because
    assert "a member that wrote no file may have held it there" in d.unseen_suspect
