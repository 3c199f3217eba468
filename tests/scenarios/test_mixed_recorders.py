"""A rank with two recorders' buffers: gloo groups beside the recorder hook's nccl2 groups
(torch 2.15, real corpus cases). Each buffer's entries are read by that buffer's own
dialect: gloo retires an entry when its work ends (completed or timed out), the hook over a
backend without completion reports retires every op when issued, and completion states laid
over the hook's entries say nothing of the gloo ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import analyzer
from analyzer.match import is_retire_on_end
from tests.conftest import confidences, corpus_case


def test_each_buffer_of_a_rank_keeps_its_own_dialect(tmp_path: Path) -> None:
    _, folder = corpus_case("stuck_in_collective_tp1pp2dp2_nccl2_cpu_t215_s01404_states", tmp_path)
    result = analyzer.analyze(folder, jobs=1)
    d = result.matching.dialects
    e = result.tables.entries
    gloo = d.entries_where(e, is_retire_on_end)
    backend = e["backend"].astype(str).to_numpy()
    assert gloo.any() and np.array_equal(gloo, backend == "gloo")
    hook = {b.completion for (_, name), b in d.by_buffer.items() if name == "nccl2"}
    assert hook == {"hook"}  # the states laid over the hook's entries are read as such
    assert {b.completion for (_, name), b in d.by_buffer.items() if name == "gloo"} == {"none"}
    # Read as a whole, a rank reports completion only where every buffer does.
    assert all(not x.completion_observed for r, x in d.by_rank.items() if d.buffers_of(r)[1:])


def test_a_rank_frozen_in_a_gloo_collective_beside_hook_groups(tmp_path: Path) -> None:
    """Rank 3 froze inside the gloo DP all_reduce it shares with rank 1 (which timed out in
    it). Before: ranks 1 and 3 'stalled outside communication', certain (the gloo entries were
    read by the hook's dialect: the open one never taken for the op rank 3 is blocked in)."""
    for name in (
        "stuck_in_collective_tp1pp2dp2_nccl2_cpu_t215_s01404",
        "stuck_in_collective_tp1pp2dp2_nccl2_cpu_t215_s01404_states",
    ):
        truth, folder = corpus_case(name, tmp_path / name)
        d = analyzer.analyze(folder, jobs=1).diagnosis
        assert truth["culprits"] == [3]
        assert d.kind == "stuck_in_collective", d.headline
        assert confidences(d) == {1: "suspect", 3: "suspect"}


def test_a_finished_run_with_states_over_the_hook_is_no_false_alarm(tmp_path: Path) -> None:
    """Healthy, states laid over the hook's entries: the gloo entries never say completed.
    Before: 'stuck inside a collective' in the first gloo broadcast, every rank a suspect."""
    truth, folder = corpus_case("healthy_tp1pp2dp2_nccl2_cpu_t215_s01293_states", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert truth["hang"] is False
    assert d.verdict in ("no_hang", "inconclusive") and not d.culprits, d.headline


def test_a_rank_with_no_dump_may_be_a_member_of_a_gloo_group_no_file_lists(
    tmp_path: Path,
) -> None:
    """Rank 0 stalled before the gloo checkpoint broadcast, rank 3 crashed; the gloo buffer
    lists no group's members. Rank 3 may be a member that never joined: a suspect beside
    rank 0. Before: every rank a suspect 'stuck' in the first gloo broadcast (the gloo
    entries read by the states of the hook's); with the buffers read apart but without this
    rule, rank 0 alone (the crash left out)."""
    truth, folder = corpus_case("two_faults_tp1pp2dp2_nccl2_cpu_t215_s01231_states", tmp_path)
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert sorted(truth["culprits"]) == [0, 3]
    assert confidences(d) == {0: "certain", 3: "suspect"}
