"""Simulated NCCL jobs (tools/simulate/): the culprit list is exactly the injected set.

Each fault of the simulator leaves the trace a real NCCL job leaves (asynchronous enqueue,
completions, pipeline send/recv, coalesced batches); the analyzer must name exactly the
ranks the simulator says it injected, with the right kind, with and without timing.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import analyzer
from tools.simulate import simulate_job

KIND = {
    "none": "no_hang",
    "stall": "not_joined",
    "crash": "missing_dump",
    "pipeline_stall": "not_joined",
    "pp_deadlock": "deadlock",
    "group_order": "deadlock",
    "gpu_stuck": "stuck_in_collective",
    "slow_gpu": "stuck_in_collective",
    "size_desync": "size_mismatch",
    "dtype_desync": "dtype_mismatch",
    "p2p_size_desync": "size_mismatch",
    "p2p_dtype_desync": "dtype_mismatch",
}


@pytest.mark.parametrize("timing", [False, True], ids=["untimed", "timing"])
@pytest.mark.parametrize("fault", sorted(KIND))
def test_simulated_fault(tmp_path: Path, fault: str, timing: bool) -> None:
    expected = simulate_job(
        tmp_path, tp=2, pp=2, dp=2, fault=fault, timing=timing, seed=3, buffer_size=400
    )
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    assert d.kind == KIND[fault], d.headline
    assert bool(d.deadlock_cycles) == bool(expected["deadlock"]), d.headline
    if fault == "crash":
        assert list(d.missing_dumps) == sorted(expected["culprits"])


@pytest.mark.parametrize(
    "fault", ["stall", "pipeline_stall", "group_order", "crash", "p2p_size_desync"]
)
def test_larger_simulated_job(tmp_path: Path, fault: str) -> None:
    # 4 pipeline stages (send/recv in groups of more than two), JSON dumps, batched p2p.
    expected = simulate_job(
        tmp_path, tp=2, pp=4, dp=2, fault=fault, seed=11, fmt="json", buffer_size=300
    )
    result = analyzer.analyze(tmp_path)
    d = result.diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    if fault != "p2p_size_desync":
        assert not [f for f in d.findings if f.kind == "size_mismatch"]  # no false p2p size errors


def test_chain_is_printed_for_a_simulated_stall(tmp_path: Path) -> None:
    expected = simulate_job(tmp_path, tp=2, pp=2, dp=2, fault="stall", seed=5, buffer_size=400)
    d = analyzer.analyze(tmp_path).diagnosis
    (culprit,) = expected["culprits"]
    steps = d.chains[culprit]
    assert steps and steps[-1]["holder"] == culprit


@pytest.mark.parametrize(
    ("fault", "rank", "seed"),
    [
        ("stall", 0, 0),
        ("stall", 9, 1),
        ("stall", 12, 0),
        ("pipeline_stall", None, 0),
        ("pipeline_stall", None, 3),
        ("pp_deadlock", None, 2),
        ("gpu_stuck", None, 0),
        ("gpu_stuck", None, 1),
        ("slow_gpu", None, 1),
        ("p2p_size_desync", 6, 0),
        ("p2p_dtype_desync", None, 2),
    ],
)
def test_eight_stage_pipeline(tmp_path: Path, fault: str, rank: int | None, seed: int) -> None:
    # Eight stages: a stage that stopped posting because its own stream is stuck behind an
    # earlier stage must not be named (its later send/recv waits are not what holds it).
    expected = simulate_job(
        tmp_path, tp=2, pp=8, dp=1, fault=fault, fault_rank=rank, seed=seed, buffer_size=600
    )
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    assert d.kind == KIND[fault], d.headline


def test_stuck_collective_behind_which_a_pipeline_backs_up(tmp_path: Path) -> None:
    # The TP pair of stage 0 is stuck inside a collective; later stages' collectives were
    # joined by all and never completed too, but only behind their blocked send/recv.
    expected = simulate_job(tmp_path, tp=4, pp=4, dp=1, fault="gpu_stuck", seed=2, buffer_size=600)
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    assert d.kind == "stuck_in_collective"


def test_slow_gpu_behind_which_a_pipeline_backs_up(tmp_path: Path) -> None:
    # Rank 11's GPU stopped completing; the stages behind it wait on it, not on each other.
    expected = simulate_job(tmp_path, tp=2, pp=4, dp=2, fault="slow_gpu", seed=0, buffer_size=600)
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]) == [11], d.headline
    assert d.kind == "stuck_in_collective"


def test_p2p_size_desync_names_the_sender_with_the_evidence(tmp_path: Path) -> None:
    expected = simulate_job(
        tmp_path, tp=2, pp=4, dp=1, fault="p2p_size_desync", fault_rank=2, seed=1, buffer_size=600
    )
    result = analyzer.analyze(tmp_path)
    d = result.diagnosis
    assert expected["culprits"] == [2] and list(d.culprit_ranks) == [2], d.headline
    lead = next(f for f in d.findings if f.culprit)
    assert lead.kind == "size_mismatch" and lead.op == "send"
    assert lead.evidence["sender"] == 2 and lead.evidence["receiver"] == 4
    values = lead.evidence["values"]
    assert values["2"] != values["4"] and values["4"] == lead.evidence["usual_recv_sizes"]
    assert "rank 2 sent" in d.headline and "rank 4" in d.headline
    # The JSON document carries the finding and its evidence.
    from analyzer.render.json_doc import to_json

    doc = to_json(result)
    assert doc["kind"] == "size_mismatch" and doc["culprit_ranks"] == [2]
    assert doc["findings"][0]["evidence"]["receiver"] == 4


def test_timeline_outlines_both_sides_of_a_p2p_desync(tmp_path: Path) -> None:
    from analyzer.render.figure_style import HIGHLIGHT

    simulate_job(
        tmp_path, tp=1, pp=2, dp=1, fault="p2p_size_desync", fault_rank=0, seed=1, buffer_size=300
    )
    fig = analyzer.analyze(tmp_path).timeline()
    outlined = [
        text
        for trace in fig.data
        if trace.type == "bar" and trace.hovertext is not None  # not the legend's entries
        for text, color in zip(trace.hovertext, trace.marker.line.color)
        if color == HIGHLIGHT
    ]
    assert any("send" in t for t in outlined), outlined
    assert any("recv" in t for t in outlined), outlined


def test_a_long_chain_keeps_the_waits_next_to_the_culprit(tmp_path: Path) -> None:
    """A 16-stage pipeline's chain is longer than the 8 waits shown: the first wait and the
    seven next to the culprit are kept, the middle is counted, and the chain ends in it."""
    from analyzer.render.sentences import chain_sentences

    expected = simulate_job(
        tmp_path, tp=2, pp=16, dp=2, fault="pipeline_stall", fault_rank=15, seed=1
    )
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]) == [15]
    steps = d.chains[15]
    assert len(steps) == 8 and steps[-1]["holder"] == 15
    assert all(a.holder == b.waiter for a, b in itertools.pairwise(steps[1:]))  # the tail meets
    assert steps[0].holder != steps[1].waiter and d.chain_waits[15] > 8
    (text,) = chain_sentences(d)
    assert f"... {d.chain_waits[15] - 8} more waits ..." in text
    assert text.endswith(
        "rank 17 waits on 15 in PIPELINE_MODEL_PARALLEL_GROUP p2p seq 989 (recv); 15 waits on nobody"
    )
