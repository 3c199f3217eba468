"""Readings the dumps cannot decide, on cases of the real corpus (``corpus/cases``: hangs real
torch jobs recorded, the truth injected by construction): each answer names what it cannot
rule out instead of a confident wrong culprit, kind or no-hang."""

from __future__ import annotations

import json
from pathlib import Path

import analyzer
from analyzer.render import render_text, to_json
from analyzer.render.sentences import verdict_line
from tests.conftest import confidences, corpus_case, reasons, undecided_torchcomms_job


def test_crashed_ranks_beside_finished_peers_are_no_no_hang(tmp_path: Path) -> None:
    """Ranks 2 and 3 of four crashed; ranks 0 and 1 timed out in an all_to_all and retired it
    (gloo ends a timed-out op as a completed one); gloo 2.13 lists no members. Before: NO HANG."""
    truth, folder = corpus_case("two_faults_tp1pp1dp4_gloo_t213_s00026", tmp_path)
    assert truth["culprits"] == [2, 3] and truth["dumped_ranks"] == [0, 1]
    result = analyzer.analyze(folder, jobs=1)
    assert result.diagnosis.verdict == "inconclusive"
    assert verdict_line(result.diagnosis).startswith(
        "INCONCLUSIVE: nothing is pending in these dumps, but they list no group's members"
    )
    assert "--world-size N" in result.diagnosis.headline
    given = analyzer.analyze(folder, jobs=1, world_size=2)  # the user says: two ranks only
    assert given.diagnosis.verdict == "no_hang"


def test_a_crash_beside_a_stall_is_named_as_a_suspect(tmp_path: Path) -> None:
    """Rank 0 crashed and rank 2 stalled before the same all_reduce (gloo 2.13). Ranks 1 and 3
    went past the op rank 2 last retired, so rank 2 is not blocked in it: it never enqueued the
    next one. Whether rank 0 (no dump) did is in no file, and gloo records no send/recv that
    could hold rank 2 on it: both are suspects. Before: rank 0 alone, rank 2 'waiting' on it."""
    truth, folder = corpus_case("two_faults_tp1pp1dp4_gloo_t213_s00061", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [0, 2]
    assert confidences(d) == {0: "suspect", 2: "suspect"}
    assert d.verdict == "inconclusive"
    because = reasons(d)
    assert "whether it joined" in because[0] and "records no send/recv" in because[2]


def test_a_crash_beside_a_stall_where_send_recv_is_recorded(tmp_path: Path) -> None:
    """The same two faults under the 2.15 hook with completion states (send/recv recorded):
    the stalled rank stays certain, the crashed one beside it is a suspect."""
    truth, folder = corpus_case("two_faults_tp1pp2dp2_nccl2_t215_s00058_states", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert sorted(truth["culprits"]) == [1, 3]
    assert d.verdict == "hang" and confidences(d) == {1: "suspect", 3: "certain"}


def test_two_gloo_ranks_that_never_joined_may_be_a_send_recv_deadlock(tmp_path: Path) -> None:
    """Pipeline neighbours 2 and 3 both receive first (gloo 2.13 records no send/recv): the
    ranks are suspects (one may have stopped and the other wait on it in a send/recv), the
    kind is not decided. Before: 'stalled outside communication' only."""
    truth, folder = corpus_case("p2p_deadlock_tp1pp2dp2_gloo_t213_s00055", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert truth["culprits"] == [2, 3] and truth["kinds"] == ["deadlock"]
    assert d.culprit_ranks == (2, 3) and set(confidences(d).values()) == {"suspect"}
    assert [k for k, _ in d.also_possible] == ["deadlock"]
    doc = to_json(result)
    assert doc["also_possible"][0]["kind"] == "deadlock"
    assert "deadlocked in send/recv" in render_text(result)


def test_every_member_at_one_last_collective_without_completion(tmp_path: Path) -> None:
    """Rank 3 froze inside a TP all_reduce its peer rank 2 also entered (the 2.15 hook, no
    completion states): both never joined the next world all_reduce. Stuck inside or both
    stalled after look alike: suspects, and stuck_in_collective not ruled out. Before: ranks 2
    and 3 'stalled outside communication', certain (rank 2 is a victim)."""
    truth, folder = corpus_case("stuck_in_collective_tp2pp1dp2_nccl2_t215_s00062", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [3]
    assert d.verdict == "inconclusive" and confidences(d) == {2: "suspect", 3: "suspect"}
    assert [k for k, _ in d.also_possible] == ["stuck_in_collective"]


def test_a_rank_with_no_dump_may_be_the_member_a_stuck_gloo_collective_waits_on(
    tmp_path: Path,
) -> None:
    """Rank 1 of six was killed; the five others all entered a DP all_reduce. gloo 2.13 lists no
    members, so 'every member entered it' rests on the dumps alone: rank 1, with no dump, may be
    the member that never did. Before: ranks 0, 2-5 stuck inside, rank 1 not among them."""
    truth, folder = corpus_case("crash_sigkill_tp1pp1dp6_gloo_t213_s00081", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [1]
    assert confidences(d)[1] == "suspect" and set(confidences(d).values()) == {"suspect"}
    assert "no dump lists the members" in reasons(d)[1]


def test_a_group_no_other_dump_shows_may_be_a_group_order_deadlock(tmp_path: Path) -> None:
    """Rank 1 ran an all_reduce of a duplicate world group before the world one, the others
    after (gloo 2.13, no member lists): its last op is in a group no other dump shows. Its
    peers may be members waiting on it elsewhere: a deadlock is not ruled out. Before: only
    'stalled outside communication'."""
    truth, folder = corpus_case("group_order_deadlock_tp1cp2pp2dp1_gloo_eval_t213_s01000", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [1] and truth["kinds"] == ["deadlock"]
    assert d.culprit_ranks == (1,) and [k for k, _ in d.also_possible] == ["deadlock"]
    assert "in a group no other dump shows" in d.also_possible[0][1]


def test_a_stuck_holder_is_a_suspect_where_no_dump_lists_the_members(tmp_path: Path) -> None:
    """Rank 3 of four crashed and no file names it (gloo 2.13, small buffers): the three others
    look like every member of a DP all_reduce, rank 1's entry the one that never timed out.
    A member no file names may be the one they wait on: rank 1 is a suspect, not likely, and
    so is "a rank with no dump" (no file gives its number). Before: rank 1 alone."""
    truth, folder = corpus_case("crash_exit_tp1pp1dp4_gloo_t213_s01010", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert truth["culprits"] == [3] and truth["dumped_ranks"] == [0, 1, 2]
    assert confidences(d) == {1: "suspect"}
    assert "may be the one they all wait on" in d.culprits[0].because
    assert d.unseen_suspect and "no file gives its number" in d.unseen_suspect
    assert "or a rank with no dump: " in render_text(result)
    assert to_json(result)["unseen_suspect"] == d.unseen_suspect
    given = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis  # the world is known
    assert not given.unseen_suspect and 3 in given.culprit_ranks


def test_monitored_barrier_counters_blame_nobody_behind(tmp_path: Path) -> None:
    """gloo's monitored_barrier is send/recv that no buffer records, rank 0 with every member
    and each other rank once: the op counters drift apart without anyone being behind. Ranks 0
    and 1 stalled before one; before, ranks 1-3 were suspects of 'unrecorded ops' rank 0
    waited in (the truth, rank 0, left out)."""
    truth, folder = corpus_case("two_faults_tp1cp2pp2dp1_gloo_mb_t213_s01015", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [0, 1]
    assert d.verdict == "inconclusive" and not d.culprits


def test_the_first_line_says_what_the_dumps_do_not_decide(tmp_path: Path) -> None:
    """The first line is what on-call acts on: a kind not ruled out is on it, and a hang whose
    every culprit is a suspect names them as suspects."""
    _, folder = corpus_case("p2p_deadlock_tp1pp2dp2_gloo_t213_s00055", tmp_path)
    line = verdict_line(analyzer.analyze(folder, jobs=1).diagnosis)
    assert line == (
        "INCONCLUSIVE: suspect ranks 2, 3 (a rank stalled outside communication; or "
        "deadlocked: the dumps do not decide); the dumps do not single anyone out"
    )
    _, folder = corpus_case("crash_exit_tp1pp1dp4_gloo_t213_s01010", tmp_path)
    assert verdict_line(analyzer.analyze(folder, jobs=1).diagnosis).startswith(
        "HANG: suspect rank 1, or a rank with no dump (stuck inside communication"
    )


def test_a_waiter_whose_wait_on_a_crash_rests_on_a_retired_op_is_a_suspect(
    tmp_path: Path,
) -> None:
    """Rank 0 crashed and rank 1 stalled right after the TP all_reduce they shared (gloo 2.13).
    Rank 1's last entry, that all_reduce, is retired, and gloo retires an op that timed out
    as one that completed: whether rank 1 waited on rank 0 there or finished it and stopped
    is in no file, so rank 1 is a suspect beside the crash. Before: rank 0 alone. (The world
    is given: no file names rank 0, and without it a larger job fits the layout as well.)"""
    truth, folder = corpus_case("two_faults_tp2pp1dp2_gloo_t213_s00004", tmp_path)
    d = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis
    assert truth["culprits"] == [0, 1] and truth["dumped_ranks"] == [1, 2, 3]
    assert d.verdict == "hang" and confidences(d) == {0: "likely", 1: "suspect"}
    because = reasons(d)
    assert "only in its last op" in because[1] and "stopped after it" in because[1]


def test_the_same_under_a_hook_without_completion_reports(tmp_path: Path) -> None:
    """Rank 3 crashed, rank 1 stalled after the DP all_reduce it shares with 3 (nccl-lazy
    through the 2.15 hook: every op retires when issued). Before: rank 3 alone."""
    truth, folder = corpus_case("two_faults_tp2pp1dp2_nccllazy_t215_s00032", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert sorted(truth["culprits"]) == [1, 3]
    assert confidences(d) == {1: "suspect", 3: "likely"}


def test_ranks_with_no_dump_are_suspects_where_nobody_else_can_be_blamed(
    tmp_path: Path,
) -> None:
    """Ranks 0 and 2 of four stalled and wrote no file (gloo 2.13, JSON); ranks 1 and 3 sit in
    a DP all_reduce whose members no dump lists. Nobody who dumped can be blamed; the ranks
    with no dump are the suspects, and (nothing lists the world) a rank beyond the highest
    dumped one may be another. Before: 'no rank can be blamed', no suspect named."""
    truth, folder = corpus_case("two_faults_tp1pp1dp4h_gloo_t213_s00084", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [0, 2] and truth["dumped_ranks"] == [1, 3]
    assert d.verdict == "inconclusive" and confidences(d) == {0: "suspect", 2: "suspect"}
    assert verdict_line(d) == (
        "INCONCLUSIVE: suspect ranks 0, 2, or a rank with no dump (ops are pending; the "
        "suspects wrote no dump); "
        "the dumps do not single anyone out"
    )


def test_an_elastic_restart_is_told_apart_by_its_declared_world(tmp_path: Path) -> None:
    """A 4-rank attempt, then an 8-rank one a few seconds later (gloo 2.15), where only the
    added node's ranks (4-7) of the newest attempt dumped: no rank in common and no time gap,
    but their group configurations declare worlds of 4 and 8. Before: one incident of
    '7 of 8 ranks', the older attempt's ranks taken for members of the newest."""
    truth, folder = corpus_case(
        "crash_exit_tp2pp1dp4_gloo_mb_restart_elastic4_t215_s01634", tmp_path
    )
    assert truth["restart"]["worlds"] == {"attempt_0": 4, "attempt_1": 8}
    for f in (folder / "attempt_1").iterdir():
        if f.name.rsplit("_", 1)[-1] in {"0", "1", "2", "3"}:
            f.unlink()
    result = analyzer.analyze(folder, jobs=1)
    assert result.loaded is not None
    assert [i.analyzed for i in result.loaded.incidents] == [True, False]
    assert sorted(result.tables.dumped_ranks) == [4, 5, 6, 7]


def test_a_rank_alone_in_the_first_op_of_a_group_beside_a_stalled_rank(tmp_path: Path) -> None:
    """gloo 2.15: rank 3 stalled before the first op ever run on its TP group; rank 2 timed
    out in it, and gloo retires a timed-out op as a finished one. No dump lists the group and
    no other dump holds it: a collective no other member recorded did not complete, so rank 2
    may be waiting on rank 3 there. Before: ranks 2 and 3 both certain stalls."""
    truth, folder = corpus_case(
        "stall_compute_tp2cp2pp1dp1_gloo_eval_mb_periodic_t215_s02616", tmp_path
    )
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [3]
    assert confidences(d) == {2: "suspect", 3: "certain"}
    assert "is in a group no other dump holds" in reasons(d)[2]


def test_ranks_waiting_on_older_rounds_only_dumps_are_suspects_too(tmp_path: Path) -> None:
    """Ranks 1 and 3 stalled before a monitored_barrier (gloo 2.13); the newer round holds
    only ranks 1 and 2, both past a barrier that gloo retired (ended, or timed out). Ranks 0
    and 3 have only an older round's dump: they are ranks of the job (a world of 4, not 3),
    and suspects. Ranks 1 and 2 wait on them only in that retired barrier; nothing in the
    files sets the stalled rank 1 apart from rank 2: both are suspects. Before: rank 0 alone
    (rank 3 left out of a world of 3, rank 1 read as a waiter)."""
    truth, folder = corpus_case("two_faults_tp1cp2pp1dp2_gloo_mb_periodic_t213_s02659", tmp_path)
    assert truth["culprits"] == [1, 3] and truth["dumped_ranks"] == [1, 2]
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert result.tables.world_size == 4
    assert d.verdict == "inconclusive"
    assert confidences(d) == {0: "suspect", 1: "suspect", 2: "suspect", 3: "suspect"}
    because = reasons(d)
    assert "an older round" in because[3]
    assert "no dump of this round, so a suspect itself" in because[1]
    assert "barrier in default_pg seq 6" in because[1]


def test_a_rank_with_only_an_older_rounds_dump_is_blamed_as_one_with_no_dump(
    tmp_path: Path,
) -> None:
    """Ranks 0 and 1 deadlocked in recvs gloo does not record (interval rounds); rank 1's
    file of the hang's round was lost, so its only dump is round 3's and is set aside. Rank
    0's own dump shows it never joined the next DP all_reduce. Without rank 1's older file
    both would be named (rank 1 as a rank with no dump); the older file must not clear it.
    Before: `HANG: culprit rank 0`, certain, rank 1 'not blamed'. Rank 0 is a suspect too:
    gloo records no send/recv, and it may be blocked in one with rank 1 (it is)."""
    truth, folder = corpus_case("p2p_deadlock_tp1pp2dp2_gloo_eval_rounds_t213_s03009", tmp_path)
    assert truth["culprits"] == [0, 1]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 1: "suspect"}
    because = reasons(d)
    assert "an older round" in because[1]
    assert "rank 1 wrote no dump and this backend records no send/recv" in because[0]


def test_ranks_inside_a_collective_with_older_rounds_ranks_are_suspects(tmp_path: Path) -> None:
    """Rank 3 froze inside a world all_reduce (nccl-lazy, states laid over); ranks 0 and 1
    lost their files of the hang's round, so their only dumps are an older round's. Ranks 2
    and 3 hold the all_reduce in flight: if ranks 0 and 1 joined it after their older dumps,
    every member is inside and one of 2, 3 holds it. Before: suspects 0, 1 only (the rank
    stuck inside left out)."""
    truth, folder = corpus_case(
        "stuck_in_collective_tp2pp1dp2_nccllazy_cpu_rounds_t215_s03006_states", tmp_path
    )
    assert truth["culprits"] == [3]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {0: "suspect", 1: "suspect", 2: "suspect", 3: "suspect"}
    because = reasons(d)
    assert "still in flight" in because[3] and "only an older round's dump" in because[3]


def test_ranks_with_only_an_older_rounds_dump_beside_a_chain_ending_at_one_are_suspects(
    tmp_path: Path,
) -> None:
    """Rank 5 sent a larger all_reduce (TorchComms, gloo); ranks 1, 4, 5 and 7 have only an
    older round's file. Rank 0 waits on rank 4, so the chain ends there, but where rank 4 went
    after its older dump is in no file: it may wait on rank 1, 5 or 7. Before: suspects 0 and
    4 only, so the rank that sent the odd size was not among them (a wrong answer)."""
    truth, folder = corpus_case(
        "size_desync_tp2pp2dp2_torchcomms_eval_restart_rounds_late_t213_s04162", tmp_path
    )
    assert truth["culprits"] == [5]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {r: "suspect" for r in (0, 1, 4, 5, 7)}
    because = reasons(d)
    assert "older round's too" in because[5] and "as with rank 4" in because[5]


def test_a_collective_in_flight_in_a_group_of_one_known_member_holds_nobody(
    tmp_path: Path,
) -> None:
    """A group-order deadlock (gloo 2.13): rank 1 ran GROUP_B's all_reduce first, the others
    the default group's. In a round taken while the ranks hung, rank 1's all_reduce is in
    flight in a group no dump lists and no other dump holds: its only known member is rank 1.
    A group of one never holds a collective (the others are in no file), so it is no
    collective 'every member joined': rank 1 never joined the default group's op. Before:
    'ops are pending but no rank can be blamed'."""
    truth, folder = corpus_case(
        "group_order_deadlock_tp2cp2pp1dp1_gloo_mb_restart_rounds_late_t213_s03242", tmp_path
    )
    assert truth["culprits"] == [1]
    d = analyzer.analyze(folder / "attempt_1" / "dumps_20261207_012851", jobs=1).diagnosis
    assert d.culprit_ranks == (1,) and d.kind == "not_joined", d.headline
    assert "deadlock" in dict(d.also_possible)


def test_rounds_a_small_buffer_wrapped_between_are_not_called_a_restart_alone(
    tmp_path: Path,
) -> None:
    """Interval rounds of one job with a 12-entry gloo buffer: between the first round and the
    next, rank 2's buffer wrapped, so its two dumps share no entry time and read as two
    processes. Their record ids run on (a restart starts them again): the note says both
    readings. Before: 'these folders held 2 incidents', a restart told as a fact."""
    _, folder = corpus_case("dtype_desync_tp2pp1dp2_gloo_eval_rounds_t213_s03022", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    assert result.loaded is not None
    [newest, other] = result.loaded.incidents
    assert newest.why == "" and "record ids run on" in other.why
    first = render_text(result).splitlines()[0]
    assert "a restart, or rounds between which its ring buffer wrapped" in first


def test_a_rotated_or_stamped_copy_is_read_as_its_own_rank(tmp_path: Path) -> None:
    """Repeated snapshots of the recorder hook in one folder: a rotation keeps the older file
    as `<name>.1`, a time stamp as `<name>.<YYYYmmdd-HHMMSS>`. Read by their trailing number,
    every `.1` file was rank 1 (a p2p deadlock of ranks 0 and 1 read as rank 1 alone) and a
    stamped file a rank of 15,536 (a world of 15,537 ranks). Now the rank is the number before
    the suffix: the deadlock names both ranks, the stamped job has 4 ranks."""
    truth, folder = corpus_case(
        "p2p_deadlock_tp1cp2pp2dp1_nccl2_cpu_snap_hookwrap_t215_s03474", tmp_path / "a"
    )
    assert truth["culprits"] == [0, 1]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.kind == "deadlock" and set(d.culprit_ranks) == {0, 1}, d.headline
    _, folder = corpus_case(
        "crash_exit_tp1pp2dp2_nccl2_eval_cpu_snap_hookwrap_t215_s03410", tmp_path / "b"
    )
    result = analyzer.analyze(folder, jobs=1)
    assert result.tables.world_size == 4


def test_two_rounds_of_one_buffer_read_as_two_backends_are_one_buffer(tmp_path: Path) -> None:
    """TorchComms rounds: rank 0's first round was taken before its first step (a split and a
    barrier only), too early for the recorder's signs, so it read as another backend than its
    later files, and both were kept as two buffers. Its older one then made rank 0 'an older
    round's only', and every dump of rank 0 was set aside: ranks 2 and 3 alone disagreed on a
    size with no majority. Files of one name in two folders are one buffer's rounds: the
    newer is kept. Before: culprits 2 and 3, certain."""
    truth, folder = corpus_case(
        "size_desync_tp1pp2dp2_torchcomms_restart_cuda_rounds_late_mixed_t213_s03861", tmp_path
    )
    assert truth["culprits"] == [2]
    result = analyzer.analyze(folder, jobs=1)
    assert confidences(result.diagnosis) == {2: "certain"}, result.diagnosis.headline
    assert result.loaded is not None and 0 not in dict(result.loaded.stale)


def test_a_desync_in_a_group_of_two_is_decided_by_its_sibling_groups(tmp_path: Path) -> None:
    """Rank 2 issued an all_gather where its data-parallel peer, rank 3, issued an all_reduce
    (gloo 2.13). A pair has no majority, but the other DATA_PARALLEL_GROUP pair issued an
    all_reduce at that seq, as rank 3 did: rank 2 is the odd one, likely (not certain: a
    sibling group may run another program by design). Before: both sides' suspect."""
    truth, folder = corpus_case("op_desync_tp2pp1dp2_gloo_t213_s00013", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [2] and truth["kinds"] == ["op_mismatch"]
    assert d.kind == "op_mismatch" and confidences(d) == {2: "likely"}, d.headline
    [because] = [c.because for c in d.culprits]
    assert "the other DATA_PARALLEL_GROUP groups issued all_reduce there, as its peer did" in (
        because
    )


def test_a_desync_in_a_group_of_two_with_no_sibling_group_names_both_sides(
    tmp_path: Path,
) -> None:
    """The same in a TorchComms pair whose communicators name no description shared with
    another group: nothing says which side is odd, so both are suspects."""
    truth, folder = corpus_case(
        "op_desync_tp2pp1dp2_torchcomms_eval_snap_copies_t215_s03642", tmp_path
    )
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"][0] in (0, 2)
    assert d.verdict == "inconclusive" and confidences(d) == {0: "suspect", 2: "suspect"}


def test_a_gloo_rank_that_never_joined_may_wait_on_a_crashed_pipeline_peer(
    tmp_path: Path,
) -> None:
    """Rank 10 of 16 crashed before the eval pass's pipeline send/recv; its pipeline peer,
    rank 11, then blocked in a recv gloo 2.13 does not record, so its dump shows only that it
    never enqueued its data-parallel all_reduce. Rank 10 is a culprit itself, but that does
    not clear rank 11 of waiting on it. Before: rank 11 certain (found by a newly recorded
    case; a fresh seed of the wide worlds)."""
    truth, folder = corpus_case(
        "crash_exit_tp1cp2pp2dp4h_gloo_wide_eval_restart_t213_s04055", tmp_path
    )
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [10] and 10 not in truth["dumped_ranks"]
    assert d.verdict == "inconclusive"
    assert confidences(d)[11] == "suspect" and confidences(d)[10] == "suspect"
    because = reasons(d)
    assert "rank 10 wrote no dump" in because[11] and "records no send/recv" in because[11]


def test_a_rank_the_debug_server_stopped_reaching_is_said_so(tmp_path: Path) -> None:
    """Rank 6 of 8 crashed beside rank 4's stall; the debug server's rounds list it as not
    answering from the round after its last answer. Its reason says so, at the same
    confidence: a rank that exits after its own timeout, its file not collected, leaves the
    same silence (the subsets check found that when the silence raised it to likely)."""
    truth, folder = corpus_case("two_faults_tp1pp1dp8_torchcomms_debugsrv_t215_s04203", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    assert truth["culprits"] == [4, 6] and 6 not in truth["dumped_ranks"]
    gone = result.contexts.no_answer
    assert list(gone) == [6]
    assert (gone[6].answered, gone[6].since, gone[6].error) == (
        "stacks_20261207_033759.txt",
        "c10d_health_check_20261207_033805.txt",
        "ConnectionError",
    )
    d = result.diagnosis
    assert confidences(d) == {4: "certain", 6: "suspect"}
    because = reasons(d)
    assert "the debug server stopped reaching it (ConnectionError)" in because[6]
    assert "stopped reaching" not in because[4]


def test_wrapped_torchcomms_buffers_are_lined_up_across_comms_of_one_name(
    tmp_path: Path,
) -> None:
    """Rank 10 of 12 stalled before a pipeline send/recv; every TorchComms buffer (12
    entries) wrapped, at different records. Ranks whose ``cp`` comm is not rank 10's had their
    ``world`` entries lined up a step off (nothing decided among the shifts that fit, and 0
    was taken), which read ranks 2 and 6 as stalled, certain. The streams are now compared by
    comm name, and a comm's own record ids decide where they agree under one shift. Found by
    a fresh wide-world case."""
    truth, folder = corpus_case(
        "stall_compute_tp1cp2pp2dp3_torchcomms_wide_eval_snap_copies_t213_s04073", tmp_path
    )
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert truth["culprits"] == [10]
    assert confidences(d) == {10: "certain", 11: "suspect"}
    notes = result.loaded.torchcomms.notes if result.loaded is not None else ()
    assert any(n.startswith("rank 0: its buffer starts at record 16") for n in notes)
    assert len(notes) == len(set(notes))


def test_a_wrapped_buffer_no_record_lines_up_is_doubtful_evidence(tmp_path: Path) -> None:
    """Where several positions of a wrapped TorchComms buffer fit and nothing decides, the
    rank's evidence is doubtful (as an unreadable file's is), not read at position 0."""
    folder = undecided_torchcomms_job(tmp_path / "job")
    result = analyzer.analyze(folder, jobs=1)
    assert result.loaded is not None
    unaligned = result.loaded.torchcomms.unaligned
    assert sorted(unaligned) == [1]
    assert "is not decided: several positions fit" in unaligned[1]
    assert result.diagnosis.verdict == "inconclusive"
    assert confidences(result.diagnosis) == {1: "suspect"}


def test_members_inside_one_collective_beside_a_gloo_buffer_are_suspects(tmp_path: Path) -> None:
    """Rank 0 froze inside the eval metric's all_reduce of its data-parallel pair (ranks 0
    and 2, the recorder hook) while ranks 1 and 3 went on to the next step's all_gather and
    wait on them. Every member of the pair entered it last and none went past: which one
    holds it is not in these dumps. A gloo buffer each rank holds beside the hook's (the
    checkpoint's group) made the rule that says so pass them by; with the states laid over,
    none of them completed it. Before: ranks 0 and 2 stalled, certain (found by a fresh case)."""
    for name in (
        "stuck_in_collective_tp1cp2pp1dp2_nccllazy_eval_cpu_hookjson_t215_s04496",
        "stuck_in_collective_tp1cp2pp1dp2_nccllazy_eval_cpu_hookjson_t215_s04496_states",
    ):
        truth, folder = corpus_case(name, tmp_path / name)
        d = analyzer.analyze(folder, jobs=1).diagnosis
        assert truth["culprits"] == [0]
        assert d.verdict == "inconclusive" and confidences(d) == {0: "suspect", 2: "suspect"}
        because = d.culprits[0].because
        assert "all_reduce in DATA_PARALLEL_GROUP seq 6 as its last op" in because
        observed = name.endswith("_states")
        assert ("none of them completed it" in because) == observed
        assert ("this backend reports no completion" in because) == (not observed)
        # Rank 1's file lost: nobody visible waits on rank 0, but its newest entry is the same.
        for f in folder.rglob("*rank_1*"):
            f.unlink()
        d = analyzer.analyze(folder, jobs=1).diagnosis
        assert confidences(d) == {0: "suspect", 2: "suspect"}, d.headline


def test_a_broadcast_some_members_completed_still_waits_on_a_member_with_no_dump(
    tmp_path: Path,
) -> None:
    """Rank 1 was killed before the checkpoint's broadcast_object_list. Ranks 2, 4 and 6
    completed its size broadcast (seq 11: upstream of rank 1 in gloo's tree) and wait in the
    data broadcast (seq 12); ranks 0, 3, 5 and 7 never completed seq 11 (the states show it).
    A broadcast completes on some members without every member joining: seq 11's
    completions do not show that rank 1 joined it. Before: ranks 0, 3, 5 and 7 stalled,
    certain (found by a fresh case)."""
    name = "crash_sigkill_tp1pp1dp8_nccl2_restart_cpu_t215_s04527_states"
    truth, folder = corpus_case(name, tmp_path / name)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [1]
    assert confidences(d) == {1: "likely"}, d.headline
    assert d.kind == "missing_dump"
    assert "broadcast in default_pg (group 0) seq 11 (awaited by ranks 0, 3, 5, 7)" in d.headline


def test_only_rooted_ops_complete_without_every_member() -> None:
    from analyzer.match import completes_without_every_member

    for op in ("broadcast", "reduce", "gather", "scatter", "all_reduce+broadcast"):
        assert completes_without_every_member(op), op
    for op in ("all_reduce", "all_gather", "_reduce_scatter_base", "barrier", "unknown_op"):
        assert not completes_without_every_member(op), op


def test_two_ranks_stopped_alike_where_unrecorded_send_recv_ran_are_suspects(
    tmp_path: Path,
) -> None:
    """Rank 1 stalled before its pipeline send/recv with rank 0 (gloo 2.13 records neither);
    rank 0 blocked in it. Both dumps end at the same all_reduce, and ranks 2 and 3 show
    unrecorded ops of the default group right after it: either may have stopped and the
    other wait on it there. Before: ranks 0 and 1 stalled, certain (found by a fresh case).
    Two ranks that both stalled on their own read the same, suspects both (the price)."""
    truth, folder = corpus_case("stall_compute_tp1pp2dp2_gloo_restart_t213_s04166", tmp_path / "a")
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [1]
    assert d.verdict == "inconclusive" and confidences(d) == {0: "suspect", 1: "suspect"}
    assert "may have stopped and the rest be blocked in one with it" in d.culprits[0].because
    truth, folder = corpus_case("two_faults_tp2pp1dp4_gloo_t213_s00006", tmp_path / "b")
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {1: "suspect", 6: "suspect"} and truth["culprits"] == [1, 6]


def test_gloo_ranks_stopped_apart_where_no_counter_shows_send_recv_are_suspects(
    tmp_path: Path,
) -> None:
    """Rank 4 stalled before a DP all_reduce (gloo 2.13); ranks 2 and 6 went on and blocked in
    the context-parallel ring's send/recv, which gloo records nowhere, not even in its op
    counters. All three never joined the world all_reduce: either the three stopped, or one
    did and the others are blocked behind it. Before: `HANG: culprit ranks 2, 4, 6`, certain
    (two confident wrong culprits, found by a fresh case)."""
    truth, folder = corpus_case("stall_dataloader_tp1cp2pp2dp2_gloo_restart_t213_s04346", tmp_path)
    assert truth["culprits"] == [4]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {2: "suspect", 4: "suspect", 6: "suspect"}
    assert "may have stopped and the rest be blocked in one with it" in d.culprits[1].because


def test_waiters_alike_on_a_crash_are_no_second_faults(tmp_path: Path) -> None:
    """Rank 1 stalled before a TP all_reduce (nccl2 without states: every op retires when
    issued; only ranks whose own ops timed out dump). Ranks 0, 2 and 3 each wait on it only in
    their newest entry, that all_reduce, and the other ranks wait on them. For it to have
    finished, rank 1 joined it, and 0, 1, 2 and 3 then each stopped right after it on their
    own: one rank that never joined explains them all, and nccl2 records every send/recv, so
    no op ran after it that no buffer shows. Before: suspects 0, 2 and 3 beside rank 1."""
    truth, folder = corpus_case(
        "stall_dataloader_tp4pp1dp2_nccl2_eval_restart_t215_s04546", tmp_path
    )
    assert truth["culprits"] == [1]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "hang" and confidences(d) == {1: "likely"}


def test_waiters_alike_where_gloo_may_run_unrecorded_send_recv_stay_suspects(
    tmp_path: Path,
) -> None:
    """The same shape, but ranks 0, 2 and 4 wait on rank 6 in a DP gloo all_reduce: gloo
    records no send/recv and its counters stop at the newest recorded op, so they may have
    finished it and be blocked in one, held by a second fault among them. The doubt stays."""
    truth, folder = corpus_case(
        "stall_compute_tp2pp1dp4_nccl2_eval_cpu_snap_hookwrap_t215_s03460", tmp_path
    )
    assert truth["culprits"] == [6]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 2: "suspect", 4: "suspect", 6: "likely"}


def test_a_retired_wait_beside_gloo_ranks_idle_in_no_recorded_op_is_a_suspect(
    tmp_path: Path,
) -> None:
    """Rank 0 stalled and rank 1 crashed, both before a monitored_barrier (gloo 2.13). Rank
    0's file ends at the context-parallel all_gather with rank 1, retired; ranks 2 and 3 wait
    in the barrier, which gloo runs on send/recv it does not record, so their files end at an
    all_gather that ended and nobody waits on rank 0 in any recorded op. Rank 0 may have
    finished its all_gather and be the rank that holds them. Before: `suspect rank 1, or a
    rank with no dump`, without rank 0 (a wrong answer, pinned)."""
    truth, folder = corpus_case("two_faults_tp1cp2pp1dp2_gloo_mb_snap_copies_t213_s04159", tmp_path)
    assert sorted(truth["culprits"]) == [0, 1]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {0: "suspect", 1: "suspect"}
    because = reasons(d)
    assert "ranks 2, 3 wait on nobody in any recorded op" in because[0]


def test_a_retired_wait_beside_torchcomms_ranks_in_peerless_send_recv_is_a_suspect(
    tmp_path: Path,
) -> None:
    """Rank 1 crashed and rank 2 stalled before the pipeline's batch send/recv (TorchComms on
    CUDA: every op retired at issue, no completion; the send/recv on the world comm, whose
    peers it does not write). Rank 2's file ends at the world all_reduce before, where it
    reads as waiting on rank 1; ranks 0 and 3 are in send/recv in flight with no peer, so
    nobody waits on rank 2 in an op that names it. Rank 2 may have finished the all_reduce
    and be the rank rank 3 waits on. Before: `culprit rank 1` alone (a missed culprit)."""
    truth, folder = corpus_case(
        "two_faults_tp1cp2pp2dp1_torchcomms_eval_restart_cuda_mixed_t215_s04644", tmp_path
    )
    assert sorted(truth["culprits"]) == [1, 2]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {1: "likely", 2: "suspect"}
    because = reasons(d)
    assert "ranks 0, 3 wait on nobody in any recorded op that names its peer" in because[2]


def test_a_rank_in_flight_beside_waiters_doubted_on_an_older_rounds_rank_is_a_suspect(
    tmp_path: Path,
) -> None:
    """Rank 2 froze inside a world all_reduce (gloo 2.13, dumps in rounds, restarted). In the
    newest round rank 0 has no file (its only dump is an older round's), ranks 1 and 3 wait on
    it in the all_reduce, retired, and rank 2's entry of it is still in flight. Ranks 1 and 3
    are suspects for their retired wait; that doubt on rank 0 is no blame from a current file,
    so the ranks in flight in the same wait are suspects too. Before: `suspect ranks 0, 1, 3`
    without rank 2 (a wrong answer, found by a fresh case)."""
    truth, folder = corpus_case(
        "stuck_in_collective_tp1cp2pp2dp1_gloo_eval_restart_rounds_late_t213_s04347", tmp_path
    )
    assert truth["culprits"] == [2]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {0: "suspect", 1: "suspect", 2: "suspect", 3: "suspect"}


def test_the_only_dump_of_a_group_that_changed_size_is_a_suspect_desync(tmp_path: Path) -> None:
    """Rank 2 sent a larger world all_reduce (TorchComms on gloo, torch 2.15); only rank 2's
    own timeout wrote a file. Its newest all_reduce is [[12]] after [[8]] ones, and no other
    member's entry can show the mismatch: the odd rank is a suspect beside the seven ranks
    with no dump. Before: `suspect ranks 0, 1, 3-7`, without rank 2 (a wrong answer, found by
    a fresh case)."""
    truth, folder = corpus_case(
        "size_desync_tp2cp2pp2dp1_torchcomms_snap_copies_t215_s04733", tmp_path
    )
    assert truth["culprits"] == [2]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == dict.fromkeys(range(8), "suspect")
    because = reasons(d)
    assert because[2].startswith("a suspect desync: it changed size [[8]] -> [[12]]")
    assert "none of which wrote a dump to compare" in because[2]


def test_a_pair_whose_only_dump_differs_from_its_sibling_groups_is_a_suspect_desync(
    tmp_path: Path,
) -> None:
    """Rank 0 sent a larger eval all_reduce ([[12]]) to its only DATA_PARALLEL_GROUP peer,
    rank 2 (gloo 2.13), which gloo aborted: it wrote no dump. Rank 0's history in that group
    mixes coalesced [[4], [6]] and [[8]] all_reduces, so it shows no change; the other
    DATA_PARALLEL_GROUP group (ranks 1, 3) posted [[8]] at that seq. With the world size
    given, rank 2 read as the likely culprit (`HANG: culprit rank 2, suspect rank 0`, a
    confident wrong answer): now both are suspects, and the sibling groups are named."""
    truth, folder = corpus_case("size_desync_tp1pp2dp2_gloo_eval_t213_s04268", tmp_path)
    assert truth["culprits"] == [0] and truth["aborted_ranks"] == [2]
    for world in (None, truth["world"]):
        d = analyzer.analyze(folder, jobs=1, world_size=world).diagnosis
        assert d.verdict == "inconclusive"
        assert {0: "suspect", 2: "suspect"}.items() <= confidences(d).items()
    because = reasons(d)
    assert because[0].startswith("a suspect desync: it posted size [[12]]|[[12]] in all_reduce")
    assert "the other DATA_PARALLEL_GROUP groups posted [[8]]|[[8]]" in because[0]
    assert "a desync may have aborted it" in because[2]


def test_sibling_groups_that_differed_before_are_no_witness_of_a_desync(tmp_path: Path) -> None:
    """The same case, with the other DATA_PARALLEL_GROUP group's earlier all_reduces of
    [[8]] made [[16]] (another pipeline stage, other layers: sibling groups that differ by
    design): their [[8]] at seq 7 says nothing of rank 0's [[12]], and rank 2, which wrote no
    dump, is the likely culprit again with the world size given."""
    truth, folder = corpus_case("size_desync_tp1pp2dp2_gloo_eval_t213_s04268", tmp_path)
    for rank in (1, 3):
        path = folder / f"rank_{rank}.json"
        doc = json.loads(path.read_text())
        for e in doc["entries"]:
            if e["process_group"][1] == "DATA_PARALLEL_GROUP" and e["collective_seq_id"] in (3, 6):
                e["input_sizes"] = e["output_sizes"] = [[16]]
        path.write_text(json.dumps(doc))
    d = analyzer.analyze(folder, jobs=1, world_size=truth["world"]).diagnosis
    assert d.verdict == "hang"
    assert confidences(d)[2] == "likely"
    assert "desync" not in reasons(d)[0]


def test_a_torchcomms_desync_whose_receiver_died_is_held_against_its_sibling_comms(
    tmp_path: Path,
) -> None:
    """TorchComms on CUDA, 8 ranks: rank 6 posted a larger tensor-parallel all_reduce, the
    group's first op, and gloo aborted its peer, rank 7, which wrote no dump. Rank 6's own
    history says nothing (no earlier op there), but the other `tp` comms posted the usual
    size at that position: rank 6 is a suspect beside rank 7. TorchComms gives every group of a
    kind one comm name and no description, so the sibling groups were not found. Before:
    `HANG: culprit rank 7` (likely), a confident wrong culprit."""
    truth, folder = corpus_case(
        "size_desync_tp2cp2pp2dp1_torchcomms_restart_cuda_mixed_t215_s04874", tmp_path
    )
    assert truth["culprits"] == [6] and truth["aborted_ranks"] == [7]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d)[6] == "suspect" and confidences(d)[7] == "suspect"
    assert "where the other tp groups posted [[8]]|[[8]] at that seq" in reasons(d)[6]
