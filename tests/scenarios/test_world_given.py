"""Answers with the job's world size given (``--world-size N``), as the inconclusive answer
on gloo 2.13 advises, on cases of the real corpus (``corpus/cases``): the number settles
which ranks exist, never what the recorder did not write."""

from __future__ import annotations

from pathlib import Path

import analyzer
from analyzer.render.sentences import verdict_line
from tests.conftest import SAMPLES, confidences, corpus_case, reasons


def test_a_stall_before_a_monitored_barrier_is_no_no_hang(tmp_path: Path) -> None:
    """Rank 1 stalled in a lock before a step's monitored_barrier, which gloo runs as
    send/recv the recorder does not write. Every recorded op ended; the op_id and sequence
    gaps of earlier steps show the job runs one. Before: with the world size given, NO HANG."""
    truth, folder = corpus_case(
        "stall_lock_tp1pp1dp4h_gloo_eval_mb_snap_copies_t213_s03641", tmp_path
    )
    assert truth["culprits"] == [1] and truth["world"] == 4
    for world in (None, 4):
        d = analyzer.analyze(folder, jobs=1, world_size=world).diagnosis
        assert d.verdict == "inconclusive" and d.kind == "inconclusive"
        assert verdict_line(d).startswith(
            "INCONCLUSIVE: nothing is pending in these dumps, but the job runs monitored_barrier"
        )
        assert "default_pg (group 0)" in d.headline
        # Without the number, the ranks that wrote no file are said to be open too.
        assert ("ranks that wrote no file cannot be ruled out" in d.headline) == (world is None)


def test_a_job_whose_dumps_show_no_unrecorded_op_is_a_no_hang(tmp_path: Path) -> None:
    """A healthy gloo 2.13 job with no monitored_barrier: with the world size given, every
    recorded op ended, and no gap shows an op the recorder missed."""
    truth, folder = corpus_case("healthy_tp1pp1dp4_gloo_eval_restart_t213_s04418", tmp_path)
    assert truth["hang"] is False
    assert analyzer.analyze(folder, jobs=1).diagnosis.verdict == "inconclusive"
    given = analyzer.analyze(folder, jobs=1, world_size=truth["world"]).diagnosis
    assert given.verdict == "no_hang"
    assert "records no send/recv" in given.headline  # the caveat stays


def test_the_first_monitored_barrier_leaves_no_gap(tmp_path: Path) -> None:
    """The sample whose rank 2 stalls before the job's only monitored_barrier: no gap shows
    that the job runs one, so the answer stays the no-hang with its caveat (a known limit,
    docs/diagnosis.md)."""
    d = analyzer.analyze(SAMPLES / "monitored_barrier_stall_w4", jobs=1).diagnosis
    assert d.verdict == "no_hang" and "monitored_barrier among them" in d.headline


def test_the_member_that_never_timed_out_is_a_suspect_beside_a_rank_with_no_dump(
    tmp_path: Path,
) -> None:
    """Rank 3 crashed before a data-parallel all_reduce; ranks 0 and 2 timed out in it, rank 1
    enqueued it last and had not yet. No dump lists the group's members, and rank 3 wrote
    none: if it is a member, the others all wait on it. Before: with the world size given,
    rank 1 'likely' holds the collective."""
    truth, folder = corpus_case("crash_exit_tp1pp1dp4_gloo_t213_s01010", tmp_path)
    assert truth["culprits"] == [3] and truth["world"] == 4
    d = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis
    assert confidences(d) == {1: "suspect", 3: "suspect"}
    assert "rank 3 wrote no dump" in reasons(d)[1]


def test_too_many_ranks_with_no_dump_to_name_are_one_rank_with_no_dump(tmp_path: Path) -> None:
    """Rank 11 of 16 crashed before an all_to_all of its data-parallel group {3, 7, 11, 15};
    rank 3 timed out there and never reached the world's all_reduce. The newest round holds
    seven ranks' files, so nine have no dump: too many to name each as a suspect beside rank
    3. Before: with the world size given, rank 3 alone."""
    case = "crash_exit_tp1pp4dp4h_gloo_wide_restart_rounds_late_t213_s04049"
    truth, folder = corpus_case(case, tmp_path)
    assert truth["culprits"] == [11] and truth["world"] == 16
    d = analyzer.analyze(folder, jobs=1, world_size=16).diagnosis
    assert d.verdict == "inconclusive" and confidences(d) == {3: "suspect"}
    assert d.unseen_suspect
    assert verdict_line(d).startswith("INCONCLUSIVE: suspect rank 3, or a rank with no dump")


def test_a_last_op_alone_in_its_group_is_no_doubt_when_every_rank_is_seen(
    tmp_path: Path,
) -> None:
    """Rank 1 ran all_reduce in GROUP_B before the default group's (the others, the other
    order). Its last op is in a group no other dump holds: without the number, a rank that
    wrote no file may be the member it waits on there, so rank 1 is a suspect. With the world
    size given and every rank's dump whole from its first entry, any other member is a rank
    whose file shows it never issued that op: rank 1 is the one the others wait on, stalled
    or deadlocked. Before: suspect with the number too."""
    truth, folder = corpus_case("group_order_deadlock_tp1cp2pp2dp1_gloo_eval_t213_s01000", tmp_path)
    assert truth["culprits"] == [1] and truth["world"] == 4
    plain = analyzer.analyze(folder, jobs=1).diagnosis
    assert plain.verdict == "inconclusive" and confidences(plain) == {1: "suspect"}
    given = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis
    assert given.verdict == "hang" and confidences(given) == {1: "certain"}
    assert any("deadlock" in kind for kind, _ in given.also_possible)


def test_pending_ops_with_nobody_blamed_name_the_ranks_with_no_dump(tmp_path: Path) -> None:
    """Ranks 0 and 3 stalled (two faults); ranks 1 and 2 each end in a data-parallel
    all_reduce that gloo retired, ended or timed out alike, in a group no dump lists. Nobody
    is blamed. Without the number, rank 0 (the gap in the numbering) is a suspect, and so is
    a rank beyond the highest dumped one: before, the answer read the world as ranks 0-2 and
    left rank 3 out. With the world size given, both ranks with no dump are suspects: before,
    nobody was named."""
    truth, folder = corpus_case("two_faults_tp1pp2dp2_gloo_restart_t213_s04538", tmp_path)
    assert truth["culprits"] == [0, 3] and truth["dumped_ranks"] == [1, 2]
    plain = analyzer.analyze(folder, jobs=1).diagnosis
    assert plain.verdict == "inconclusive" and confidences(plain) == {0: "suspect"}
    assert "ops are pending with nobody blamed" in plain.unseen_suspect
    assert verdict_line(plain).startswith("INCONCLUSIVE: suspect rank 0, or a rank with no dump")
    given = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis
    assert confidences(given) == {0: "suspect", 3: "suspect"} and not given.unseen_suspect
