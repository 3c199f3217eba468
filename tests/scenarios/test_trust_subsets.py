"""A subset of the files: cases of the real corpus with some ranks' files taken away, as a
user holds them who copied one host's dumps, or whose copy of another's failed. The files
left are real; the truth is the injected fault's. No answer may then blame, as sure, a rank
that the files left do not set apart."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import analyzer
from analyzer.load.discover import rank_from_name
from tests.conftest import confidences, corpus_case, reasons


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


def test_ranks_with_no_file_awaited_together_are_suspects(tmp_path: Path) -> None:
    """The same case with ranks 2-7's files (fewer than half the ranks without one): ranks 0,
    1 and 4 have none and every waiter waits on the three in one op."""
    _truth, folder = corpus_case("stall_compute_tp2pp2dp2_nccl2_eval_t215_s01000", tmp_path)
    d = analyzer.analyze(_keep(folder, range(2, 8)), jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 1: "suspect", 4: "suspect"}
    assert d.culprits[0].because.startswith("ranks 0, 1, 4 wrote no dump and no rank waits")


def test_a_rank_awaited_alone_is_still_told_apart(tmp_path: Path) -> None:
    """The same case with every file: rank 4 is the only rank with no dump, and ranks 0-3 and
    5-7 wait on it: it stays the likely culprit."""
    _truth, folder = corpus_case("stall_compute_tp2pp2dp2_nccl2_eval_t215_s01000", tmp_path)
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
    _truth, folder = corpus_case("crash_exit_tp2pp1dp2_gloo_t213_s00017", tmp_path)
    d = analyzer.analyze(_keep(folder, (2,)), jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 1: "suspect"}
    assert "a rank that no file names may be one the others wait on" in d.unseen_suspect


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


def test_half_the_files_absent_blames_no_absent_rank_as_sure(tmp_path: Path) -> None:
    """nccl2 hook, 4 ranks, rank 0 ran the DP all_reduce before the world's (a group-order
    deadlock). With ranks 0 and 1's files only, rank 0 waits on rank 2 (no file) in DP while
    rank 1 waits on rank 0 in the world: rank 2 is not shown to have stopped (half the files
    are absent), and rank 0 may be held in a deadlock through it. Before: rank 2, likely."""
    truth, folder = corpus_case("group_order_deadlock_tp2pp1dp2_nccl2_t215_s01008_states", tmp_path)
    assert truth["culprits"] == [0]
    d = analyzer.analyze(_keep(folder, (0, 1)), jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 2: "suspect"}
    because = reasons(d)
    assert "(2 of the job's 4) have no dump" in because[2]
    assert "held in a deadlock" in because[0]


def test_a_desync_split_with_no_majority_names_each_side_as_a_suspect(tmp_path: Path) -> None:
    """nccl2 hook, 4 ranks, rank 3 issued all_gather where the others issued all_reduce. With
    ranks 2 and 3's files only, the two split one to one: either may be the odd one. Before:
    ranks 2 and 3, both certain."""
    truth, folder = corpus_case("op_desync_tp1pp1dp4_nccl2_t215_s00012", tmp_path)
    assert truth["culprits"] == [3]
    d = analyzer.analyze(_keep(folder, (2, 3)), jobs=1).diagnosis
    assert confidences(d) == {2: "suspect", 3: "suspect"}
    assert "split with no majority" in d.culprits[0].because
    whole = analyzer.analyze(
        corpus_case("op_desync_tp1pp1dp4_nccl2_t215_s00012", tmp_path / "all")[1], jobs=1
    )
    assert confidences(whole.diagnosis) == {3: "certain"}


def test_ranks_alive_in_the_stacks_but_with_no_dump_are_not_sure_culprits(
    tmp_path: Path,
) -> None:
    """torch 2.15's debug server, 8 ranks, rank 4 issued another op. With ranks 0-3's dumps
    (per_rank/) only, the stacks still show ranks 4-7 alive: none crashed, but whether each
    joined the op the others wait in is in its own absent file. Before: ranks 4-7, certain
    stalls ("its own dump shows it never enqueued", with no dump of its own)."""
    truth, folder = corpus_case("op_desync_tp2pp1dp4h_torchcomms_debugsrv_t215_s04209", tmp_path)
    assert truth["culprits"] == [4]
    d = analyzer.analyze(_keep(folder, range(4)), jobs=1).diagnosis
    assert confidences(d) == {r: "suspect" for r in range(4, 8)}


def test_a_cycle_with_no_majority_order_names_each_rank_a_suspect(tmp_path: Path) -> None:
    """nccl2 hook, 4 ranks, rank 3 ran the world's all_reduce and another group's in the
    other order. With ranks 2 and 3's files only, each ran them in its own order: no majority
    says which is odd, and the wait that began first does not either. Before: rank 2, the
    holder of the first wait, certain."""
    truth, folder = corpus_case("group_order_deadlock_tp1pp1dp4_nccl2_t215_s01005", tmp_path)
    assert truth["culprits"] == [3]
    whole = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(whole) == {3: "certain"}
    d = analyzer.analyze(_keep(folder, (2, 3)), jobs=1).diagnosis
    assert confidences(d) == {2: "suspect", 3: "suspect"}
    assert "no majority of the ranks ran the cycle's groups in one order" in d.culprits[0].because


def test_a_last_op_retired_beside_members_with_no_dump_may_still_hold_it(tmp_path: Path) -> None:
    """nccl2 hook with gloo groups, 8 ranks, rank 6 stalled in a lock. With ranks 0-3's files
    only, ranks 0 and 2 never enqueued the world's all_reduce; their last op is an all_reduce
    of the DP group's gloo copy, which gloo retired (ended or timed out alike) and whose other
    members have no dump here: they may have timed out there. Before: ranks 0 and 2 certain."""
    truth, folder = corpus_case("stall_lock_tp2pp1dp4h_nccl2_cpu_t215_s01195", tmp_path)
    assert truth["culprits"] == [6]
    d = analyzer.analyze(_keep(folder, range(4)), jobs=1).diagnosis
    assert {r: c for r, c in confidences(d).items() if r in (0, 2)} == {0: "suspect", 2: "suspect"}
    assert confidences(d)[6] == "suspect"
    assert "may have timed out there, waiting on them" in d.culprits[0].because


def test_two_attempts_with_no_rank_in_common_are_told_apart_by_a_collectives_times(
    tmp_path: Path,
) -> None:
    """nccl2 hook, JSON dumps, a restart: with ranks 0 and 1's files only, attempt_0 holds
    rank 0's and attempt_1 rank 1's. No rank is in both and they are seconds apart, but one
    collective (seq 1 of one group) began on them further apart than its timeout, which one
    job's collective cannot: two runs. Before: one incident, and the two ranks' waits from two
    processes made a cycle (rank 1 certain, a deadlock)."""
    truth, folder = corpus_case(
        "crash_exit_tp1cp2pp2dp1_nccl2_restart_cpu_hookjson_t215_s04471_states", tmp_path
    )
    assert truth["culprits"] == [0]
    result = analyzer.analyze(_keep(folder, range(2)), jobs=1)
    assert result.loaded is not None
    older = [i for i in result.loaded.incidents if not i.analyzed]
    assert [i.name for i in older] == ["attempt_0"]
    assert "beyond its timeout" in older[0].why
    assert result.diagnosis.kind != "deadlock"
    assert "certain" not in confidences(result.diagnosis).values()


def test_gloo_215s_nameless_list_is_not_the_world(tmp_path: Path) -> None:
    """gloo 2.15, 4 ranks, rank 2 crashed. Every rank's pg_config holds one nameless entry,
    [0, 1]: the last group it created (two members), not the world. With only ranks 0 and 1's
    files it read as a world of two, and rank 1 as stuck inside its data-parallel all_to_all,
    likely. Now a rank no file names may hold that op: rank 1 is a suspect beside it."""
    truth, folder = corpus_case("crash_exit_tp1pp2dp2_gloo_restart_t215_s01020", tmp_path)
    assert truth["culprits"] == [2]
    d = analyzer.analyze(_keep(folder, range(2)), jobs=1).diagnosis
    assert confidences(d) == {1: "suspect"}, d.headline
    assert "a member that wrote no file at all may be the one they all wait on" in (
        d.culprits[0].because
    )
    _, every = corpus_case("crash_exit_tp1pp2dp2_gloo_restart_t215_s01020", tmp_path / "every")
    # With every file and the world given, rank 2 (no file names it) is likely.
    whole = analyzer.analyze(every, jobs=1, world_size=4).diagnosis
    assert confidences(whole)[2] == "likely"


def test_many_members_with_no_file_are_no_less_doubt_than_a_few(tmp_path: Path) -> None:
    """gloo 2.13, 16 ranks, rank 12 stalled in a lock and rank 13 held by it in a send/recv
    gloo does not record. With ranks 8-15's files (8 and 9 wrote none), ranks 0-9 of the
    world wrote no dump. Beyond 8 such members they were not named, and ranks 12 and 13 were
    both certain culprits; now each stays a suspect, the silent members not listed each."""
    truth, folder = corpus_case(
        "stall_lock_tp1cp2pp2dp4_gloo_wide_snap_copies_t213_s04040", tmp_path
    )
    assert truth["culprits"] == [12]
    d = analyzer.analyze(_keep(folder, range(8, 16)), jobs=1).diagnosis
    assert confidences(d) == {12: "suspect", 13: "suspect"}, d.headline
    assert "ranks 0-9 wrote no dump and this backend records no send/recv" in (
        d.culprits[0].because
    )


def test_a_collective_in_flight_alone_in_its_group_is_held_there(tmp_path: Path) -> None:
    """gloo 2.13, 4 ranks, rank 3 stuck inside a data-parallel all_reduce. With ranks 0 and
    1's files only, rank 1's newest op is that all_reduce, still in flight, in a group no other
    file holds nor lists: it never reached the default group's next op because it is held
    there, by a member that wrote no file. Before: rank 1 'stalled outside communication',
    certain."""
    truth, folder = corpus_case("stuck_in_collective_tp1pp2dp2_gloo_t213_s00101", tmp_path)
    assert truth["culprits"] == [3]
    d = analyzer.analyze(_keep(folder, range(2)), jobs=1).diagnosis
    assert confidences(d) == {1: "suspect"}, d.headline
    assert "all_reduce in DATA_PARALLEL_GROUP seq 8 (still in flight)" in d.culprits[0].because
    [root] = [f for f in d.findings if f.culprit]
    assert "still in flight in a group no other dump holds nor lists" in root.summary
    assert "It is stalled outside communication" not in root.summary
    assert "a member that wrote no file may have held it there" in d.unseen_suspect


def test_a_lost_file_beside_a_deadlock_its_own_dumps_show(tmp_path: Path) -> None:
    """nccl2, 4 ranks, rank 3 ran the groups in another order: ranks 1 and 3 wait on each
    other. Without rank 0's file (lost, not a crash), rank 1's recv from it reads as a wait
    on rank 0, and the cycle waits on it: rank 0 was the likely culprit and the cycle a
    consequence. Now the cycle, shown by the ranks' own dumps, is blamed, and rank 0 is a
    suspect beside it."""
    truth, folder = corpus_case("group_order_deadlock_tp1pp2dp2_nccl2_t215_s00003", tmp_path)
    assert truth["culprits"] == [3]
    d = analyzer.analyze(_keep(folder, (1, 2, 3)), jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 3: "certain"}, d.headline
    because = reasons(d)
    assert "rank 3's own dump shows where the job stopped" in because[0]
    assert "its file written but not collected" in because[0]


def test_a_deadlock_behind_a_desync_blames_nobody(tmp_path: Path) -> None:
    """16 ranks, rank 10 issued an all_reduce in int64. Behind the desync, three pairs of
    ranks wait on each other in send/recv a backend without completion reports left pending,
    and on rank 6, which wrote no dump: those cycles are listed, and blame nobody."""
    truth, folder = corpus_case(
        "dtype_desync_tp1cp2pp2dp4_nccllazy_wide_eval_cpu_hookwrap_t215_s04030", tmp_path
    )
    assert truth["culprits"] == [10]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {10: "certain"} and d.kind == "dtype_mismatch", d.headline
    assert len(d.deadlock_cycles) == 3
    assert not any(f.culprit for f in d.findings if f.kind == "deadlock")


def test_a_collective_another_recorder_saw_complete_holds_no_absent_member(
    tmp_path: Path,
) -> None:
    """A healthy run whose ranks hold a gloo buffer beside nccl2's, the latter with completion
    states. Without rank 0's file, ranks 1-3's last all_reduce of the default group read as
    waiting on it (the gloo buffer made every completion unobserved): 'HANG: culprit rank 0'.
    That all_reduce completed on them, so rank 0 joined it: no wait on it."""
    truth, folder = corpus_case("healthy_tp1pp2dp2_nccl2_cpu_t215_s01293_states", tmp_path)
    assert truth["hang"] is False
    d = analyzer.analyze(_keep(folder, (1, 2, 3)), jobs=1).diagnosis
    assert d.verdict == "inconclusive" and not d.culprits, d.headline


def test_three_ranks_or_more_blamed_each_for_its_absent_file_are_suspects(
    tmp_path: Path,
) -> None:
    """Ranks 0-7's files of a 12-rank TorchComms job (the tutorial's flow: only ranks that
    caught a timeout write): ranks 8-11 each hold a data-parallel all_reduce of their own.
    Four ranks stalled at once is not the likelier reading of four absent files: those given
    may be a part only (one host's). Before: ranks 8-11 likely (rank 10 alone stalled)."""
    truth, folder = corpus_case(
        "stall_compute_tp1cp2pp2dp3_torchcomms_wide_eval_snap_copies_t213_s04073", tmp_path
    )
    assert truth["culprits"] == [10]
    d = analyzer.analyze(_keep(folder, range(8)), jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {8: "suspect", 9: "suspect", 10: "suspect", 11: "suspect"}
    assert "ranks 8-11 (4 of the job's 12) have no dump" in d.culprits[0].because


def test_a_rank_whose_newest_round_no_file_orders_is_no_certain_stall(tmp_path: Path) -> None:
    """TorchComms, interval rounds and a restart; rank 2 stalled before a tensor-parallel
    all_reduce. With ranks 2 and 3's files only, rank 2's newest dump is in one round and
    rank 3's in another; both are newer than a round that holds both, and no rank has a file
    in both (rank 1's, which orders them, is gone). Rank 3 waits on rank 2 there, but rank
    2's round may be the older one: where it is now is not in these files. Before: rank 2
    certain (`make accuracy-subsets`). With every file, rank 1's orders the rounds."""
    case = "stall_dataloader_tp2cp2pp1dp1_torchcomms_restart_rounds_late_t215_s04798"
    truth, folder = corpus_case(case, tmp_path)
    assert truth["culprits"] == [2] and 2 not in truth["dumped_ranks"]
    whole = analyzer.analyze(folder, jobs=1).diagnosis
    assert "no file orders them" not in " ".join(reasons(whole).values())
    d = analyzer.analyze(_keep(folder, (2, 3)), jobs=1).diagnosis
    assert d.verdict == "inconclusive" and confidences(d) == {2: "suspect"}
    assert "and no file orders them" in reasons(d)[2]
    assert "dumps_20261207_233254" in reasons(d)[2]  # the newest round both follow
