"""A rank blamed for never joining an op may be held instead
(:mod:`analyzer.diagnosis.held`): in its last op, a rooted one (a broadcast) that gloo retired,
which completes for the others without every member; or in a send/recv whose peer the recorder
does not write, which a member with no dump of this round may hold. On real recorded cases."""

from __future__ import annotations

from pathlib import Path

import analyzer
from analyzer.render import to_json
from tests.conftest import confidences, corpus_case, reasons
from tools.corpus.check import classify, read_said
from tools.corpus.subsets import copy_kept

_CASE = "stall_compute_tp1cp2pp1dp4h_gloo_mb_snap_copies_t213_s04286"


def test_a_rank_behind_a_broadcast_with_half_the_files_is_a_suspect(tmp_path: Path) -> None:
    """Rank 5 stalled before a checkpoint's broadcast_object (gloo 2.13, eight ranks). With
    ranks 0-3's files only, rank 1's file ends at the first broadcast, retired, while 0, 2
    and 3 went on to the second: rank 1 reads as stalled right after it. But gloo relays a
    broadcast, and ended one that timed out as one that completed: rank 1 may have timed out
    there, held by a rank whose file is absent. Before: `HANG: culprit rank 1`, certain (a
    confident wrong culprit, `make accuracy-subsets`)."""
    truth, folder = corpus_case(_CASE, tmp_path / "case")
    assert truth["culprits"] == [5]
    kept = tmp_path / "kept_0_3"
    copy_kept(folder, kept, range(4))
    analysis = analyzer.analyze(kept, jobs=1)
    d = analysis.diagnosis
    assert d.verdict == "inconclusive" and confidences(d) == {1: "suspect"}
    assert "broadcast in default_pg seq 19" in d.culprits[0].because
    assert "completes for the other members without every member" in d.culprits[0].because
    assert d.unseen_suspect
    kept_truth = {**truth, "dumped_ranks": [0, 1, 2, 3]}  # as `make accuracy-subsets` scores it
    assert classify(kept_truth, read_said(to_json(analysis)))[0] == "unsure"


def test_with_every_file_the_rank_behind_is_named(tmp_path: Path) -> None:
    """The same case with all eight files: rank 5 is behind in the ops gloo did not record."""
    truth, folder = corpus_case(_CASE, tmp_path)
    assert truth["culprits"] == [5]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {5: "suspect"}


def test_a_stall_right_after_a_broadcast_is_certain_once_the_world_is_known(
    tmp_path: Path,
) -> None:
    """Rank 2 stalled right after a broadcast on the default group (gloo 2.13, which lists no
    member): a rank no file names may relay that broadcast to it, so rank 2 is a suspect (the
    cost of the rule: this answer was right). A world size given settles it."""
    truth, folder = corpus_case("stall_lock_tp2pp1dp2_gloo_t213_s00080", tmp_path)
    assert truth["culprits"] == [2]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive" and confidences(d) == {2: "suspect"}
    assert d.unseen_suspect
    d = analyzer.analyze(folder, jobs=1, world_size=4).diagnosis
    assert d.verdict == "hang" and confidences(d) == {2: "certain"}


def test_the_members_with_no_dump_of_a_peerless_recv_that_holds_a_rank_are_suspects(
    tmp_path: Path,
) -> None:
    """Pipeline stages 2 and 3 both receive first (TorchComms on CUDA, restarted, dumps in
    rounds): rank 2's newest entry is a recv on the world comm, whose peer TorchComms does not
    write, and ranks 1 and 3 have only an older round's file. Rank 2 is a suspect (it may be
    held there); now so is each member that may be its peer. Before: `suspect rank 2` alone,
    rank 3 left out (a wrong answer, found by a fresh case)."""
    truth, folder = corpus_case(
        "p2p_deadlock_tp1pp2dp2_torchcomms_restart_cuda_rounds_late_mixed_t213_s04351", tmp_path
    )
    assert sorted(truth["culprits"]) == [2, 3]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.verdict == "inconclusive"
    assert confidences(d) == {1: "suspect", 2: "suspect", 3: "suspect"}
    because = reasons(d)
    assert because[3].startswith("its only dump is an older round's, and it is a member of")
    assert "may be the peer that holds rank 2 there" in because[3]


def test_a_rank_whose_send_retired_at_issue_to_a_stalled_peer_is_a_suspect(
    tmp_path: Path,
) -> None:
    """Ranks 2 and 6 stalled before their pipeline recv (torch 2.15's hook over gloo, no
    completion states: every op retires when issued). Ranks 0 and 4 are held in their send to
    them, but that the send never finished is in no file: their dumps end at it, and they
    never joined the world all_reduce either. Ranks 2 and 6 recorded no side of it and stopped
    too: ranks 0 and 4 are suspects, 2 and 6 stay certain. Before: ranks 0, 2, 4, 6 certain (a
    confident wrong culprit). The twin with completion states says 2 and 6 alone."""
    name = "two_faults_tp2pp2dp2_nccl2_eval_cpu_snap_hookwrap_t215_s04784"
    truth, folder = corpus_case(name, tmp_path)
    assert truth["culprits"] == [2, 6]
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert confidences(d) == {0: "suspect", 2: "certain", 4: "suspect", 6: "certain"}
    assert "send to rank 6 in default_pg p2p seq 9, was retired when issued" in reasons(d)[4]
    _, twin = corpus_case(f"{name}_states", tmp_path / "states")
    assert confidences(analyzer.analyze(twin, jobs=1).diagnosis) == {2: "certain", 6: "certain"}
