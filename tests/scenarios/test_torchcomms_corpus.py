"""TorchComms' recorder on cases of the real corpus (``corpus/cases``: hangs real torch jobs
recorded, the truth injected by construction): readings of its entries that hold as a class
(what a retired entry means, how its comms' positions line up, what a peerless send/recv
leaves open)."""

from __future__ import annotations

from pathlib import Path

import pytest

import analyzer
from analyzer.render import render_text
from tests.conftest import confidences, corpus_case, reasons


def test_a_retired_entry_on_cpu_returned_so_its_rank_waits_on_nobody_there(
    tmp_path: Path,
) -> None:
    """Rank 6 crashed and rank 5 stalled before the same dp all_reduce (TorchComms over gloo,
    tutorial flow). Rank 5's newest entry, a world all_reduce, is retired: on CPU that means
    its call returned, so every member joined it (rank 6 too) and rank 5 waits on nobody in
    it. Before: rank 6 alone, rank 5 'waiting' on it there."""
    truth, folder = corpus_case("two_faults_tp1pp2dp4h_torchcomms_t213_s01023", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [5, 6]
    assert d.verdict == "hang"
    assert confidences(d) == {5: "certain", 6: "likely"}


@pytest.mark.parametrize(
    "name",
    [
        "p2p_deadlock_tp1pp2dp2_torchcomms_t213_s01030",
        "p2p_deadlock_tp1pp2dp2_torchcomms_eval_t215_s01017",
    ],
)
def test_two_ranks_in_a_peerless_recv_may_be_a_send_recv_deadlock(
    tmp_path: Path, name: str
) -> None:
    """Two pipeline neighbours both receive first over the world comm (four members): the
    recvs are recorded, not retired, but TorchComms writes no peer in a comm of more than two,
    so they are not paired. The culprits are the ranks that never joined their dp op; the
    deadlock is not ruled out. Before: not_joined, nothing else possible."""
    truth, folder = corpus_case(name, tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [0, 1] and truth["kinds"] == ["deadlock"]
    assert sorted(confidences(d)) == [0, 1]
    also = {kind: because for kind, because in d.also_possible}
    assert "deadlock" in also and "whose peer its recorder does not write" in also["deadlock"]


def test_a_dtype_change_against_other_groups_when_the_partner_died(tmp_path: Path) -> None:
    """Rank 3 posted its first dp all_reduce (an eval pass) in int64, after float all_reduces
    in the world comm; its only dp peer, rank 1, wrote no dump (gloo aborts the receiver).
    The group holds no earlier op of that name, so the dtype is read against the rank's
    other groups: both are suspects. Before: rank 1 alone, likely."""
    truth, folder = corpus_case("dtype_desync_tp1pp2dp2_torchcomms_eval_t215_s01013", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [3]
    assert d.verdict == "inconclusive"
    assert confidences(d) == {1: "suspect", 3: "suspect"}
    because = reasons(d)
    assert '["Float"] -> ["Long"]' in because[3] and "other groups" in because[3]


def test_a_wrapped_buffer_is_lined_up_with_the_members_that_kept_their_start(
    tmp_path: Path,
) -> None:
    """A 16-entry ring buffer: ranks 0, 2, 4, 6 dropped their first entry (the first of two
    world splits), ranks 3, 5, 7 (which stopped earlier) kept it. Counted from each buffer's
    start, the world positions of the two sets stand one apart. Lined up by the shift under
    which their ops agree, rank 1 (no dump) is the one they wait on. Before: ranks 3, 5, 7 a
    certain op_mismatch (split against barrier)."""
    truth, folder = corpus_case(
        "stall_dataloader_tp1cp2pp2dp2_torchcomms_eval_t213_s01007", tmp_path
    )
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert truth["culprits"] == [1]
    assert d.verdict == "hang" and confidences(d) == {1: "likely"}
    text = render_text(result)
    assert "rank 0: its buffer starts at record 1" in text and "world[0-7] +1" in text


def test_buffers_that_all_wrapped_are_lined_up_with_the_earliest(tmp_path: Path) -> None:
    """Every rank's 12-entry TorchComms buffer wrapped; rank 3, one op behind (held in a recv
    from the crashed rank 2), keeps one older dp entry that rank 1 lost. Lined up with the
    member whose buffer starts earliest, the dp ops agree. Before: an op mismatch in dp[1,3]
    with ranks 1 and 3 as suspects, the crashed rank 2 left out."""
    truth, folder = corpus_case("crash_exit_tp1pp2dp2_torchcomms_restart_t215_s01521", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    d = result.diagnosis
    assert truth["culprits"] == [2]
    assert not [f for f in d.findings if f.kind == "op_mismatch"], d.headline
    assert result.loaded is not None
    assert any("dp[1,3] +1" in n for n in result.loaded.torchcomms.notes)
    # Rank 3 never joined dp seq 4 because it is held in a recv whose peer TorchComms does
    # not write, in a comm with rank 2 (no dump): a suspect, not a certain stall.
    assert confidences(d) == {2: "likely", 3: "suspect"}
    because = reasons(d)
    assert "recv in world[0-3]" in because[3] and "writes no peer" in because[3]


def test_a_rank_held_in_a_peerless_send_by_a_stalled_rank_is_a_suspect(tmp_path: Path) -> None:
    """Every rank dumped; rank 3 stalled before a pipeline recv on the world comm, and rank 2
    is held in its send to it (not retired: the call never returned; TorchComms writes no peer
    in a comm of four). Rank 3 is certain; rank 2 may be held by it: a suspect. Before: ranks
    2 and 3 both certain stalls."""
    truth, folder = corpus_case("stall_lock_tp1pp2dp2_torchcomms_t215_s02083", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["culprits"] == [3] and truth["dumped_ranks"] == [0, 1, 2, 3]
    assert confidences(d) == {2: "suspect", 3: "certain"}
    assert "send in world[0-3]" in reasons(d)[2]


def test_a_run_of_one_op_is_lined_up_by_record_ids(tmp_path: Path) -> None:
    """TorchComms on CUDA, 16-entry buffers: ranks 0 and 1 lost record 5 (a world
    all_reduce) that rank 3 kept. The world comm holds nothing but all_reduces, so shifts 0
    and 1 both fit its ops; the three processes hold the same comm and op at every record_id
    they share, so record 8 (a world all_reduce on each) decides: +1. Before: no shift, and
    rank 3, stalled before its dp all_to_all, read as waiting on ranks 0 and 1 in the world
    all_reduce they had all entered (a chain 1 -> 3 -> 0 -> 2, rank 3 left out)."""
    truth, folder = corpus_case(
        "two_faults_tp1cp2pp1dp2_torchcomms_cuda_periodic_t215_s02621", tmp_path
    )
    assert truth["culprits"] == [2, 3]
    result = analyzer.analyze(folder, jobs=1)
    assert result.loaded is not None
    notes = result.loaded.torchcomms.notes
    assert any(n.startswith("rank 0:") and "world[0-3] +1" in n for n in notes), notes
    assert any(n.startswith("rank 1:") and "world[0-3] +1" in n for n in notes), notes
    d = result.diagnosis
    assert d.verdict == "inconclusive"
    assert {2, 3} <= set(confidences(d))
    assert not [f for f in d.findings if f.kind == "deadlock"], d.headline
