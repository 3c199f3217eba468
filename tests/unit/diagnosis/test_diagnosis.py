"""End-to-end diagnosis on synthetic dumps shaped like PyTorch's (one case per failure kind)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import analyzer
from tests.conftest import dump, entry, write_pickle


def _completed(n: int, **kw: object) -> list[dict]:
    return [entry(s, state="completed", retired=True, t=s, **kw) for s in range(1, n + 1)]  # type: ignore[arg-type]


def test_stalled_rank_is_the_only_culprit(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(4) + [entry(5, t=5)] for r in (0, 2, 3)}
    job[1] = _completed(4)
    result = analyzer.analyze(make_job(job))
    d = result.diagnosis
    assert d.verdict.value == "hang"
    assert d.culprit_ranks == (1,)
    assert d.kind == "not_joined"
    lead = d.findings[0]
    assert lead.group == "0" and lead.seq == 5 and lead.op == "all_reduce"
    assert lead.stack and lead.stack[0]["filename"] == "/jobs/train.py"


def test_rank_zero_as_odd_one_out_in_size(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(3) + [entry(4, t=4)] for r in range(4)}
    job[0][-1] = entry(4, t=4, sizes=[[16]])
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.culprit_ranks == (0,)
    assert d.kind == "size_mismatch"
    f = d.findings[0]
    assert f.evidence["values"] == {"0": "[[16]]|[[16]]"}
    assert f.evidence["agreeing_members"] == 3


def test_dtype_and_op_mismatch(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(2) + [entry(3, t=3)] for r in range(4)}
    job[3][-1] = entry(3, t=3, dtype="Long")
    d = analyzer.analyze(make_job(job, name="dt")).diagnosis
    assert (d.culprit_ranks, d.kind) == ((3,), "dtype_mismatch")
    job = {r: _completed(2) + [entry(3, t=3)] for r in range(4)}
    job[2][-1] = entry(3, t=3, op="broadcast")
    d = analyzer.analyze(make_job(job, name="op")).diagnosis
    assert (d.culprit_ranks, d.kind) == ((2,), "op_mismatch")


def test_all_to_all_with_different_splits_is_not_a_size_mismatch(
    make_job: Callable[..., Path],
) -> None:
    job = {
        r: [entry(1, op="all_to_all", sizes=[[100 + r, 8]], state="completed", retired=True)]
        for r in range(4)
    }
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.verdict.value == "no_hang"


def test_pair_without_majority_lists_both_sides(make_job: Callable[..., Path]) -> None:
    job = {0: [entry(1, sizes=[[8]])], 1: [entry(1, sizes=[[4]])]}
    d = analyzer.analyze(make_job(job, world=2)).diagnosis
    assert d.culprit_ranks == (0, 1)
    assert d.findings[0].evidence["ambiguous"] is True


def test_missing_dump_is_the_culprit(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(4) + [entry(5, t=5)] for r in (0, 1, 2)}
    d = analyzer.analyze(make_job(job)).diagnosis  # world 4 from pg_config: rank 3 wrote nothing
    assert d.culprit_ranks == (3,)
    assert d.kind == "missing_dump"
    assert d.missing_dumps == (3,)


def test_desync_outranks_the_crash_it_caused(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(2) + [entry(3, t=3)] for r in (0, 1, 2, 3)}
    job[0][-1] = entry(3, t=3, sizes=[[32]])
    del job[3]  # the victim crashed on the oversized message
    d = analyzer.analyze(make_job(job, world=5)).diagnosis
    assert d.culprit_ranks == (0,)
    assert 3 in d.missing_dumps and 4 in d.missing_dumps


def test_stuck_inside_collective(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(4) + [entry(5, t=5, state="started")] for r in range(4)}
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.kind == "stuck_in_collective"
    assert d.culprit_ranks == (0, 1, 2, 3)


def test_healthy_run(make_job: Callable[..., Path]) -> None:
    job = {r: _completed(6) for r in range(4)}
    result = analyzer.analyze(make_job(job))
    assert result.diagnosis.verdict.value == "no_hang"
    assert result.diagnosis.culprit_ranks == ()


def test_ring_buffer_window_is_respected(make_job: Callable[..., Path]) -> None:
    # Rank 2's buffer only holds seq 30..; rank 1 stalled before 35. The old seqs absent from
    # rank 2's buffer scrolled out: they are not missing, and rank 2 is not blamed.
    job = {r: _completed(34) + [entry(35, t=35)] for r in (0, 3)}
    job[2] = [e for e in _completed(34) if e["collective_seq_id"] >= 30] + [entry(35, t=35)]
    job[1] = _completed(34)
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.culprit_ranks == (1,)
    assert d.findings[0].seq == 35
    assert d.findings[0].evidence["waited_in"][0]["waiters"] == [0, 2, 3]


def test_wait_chain_across_groups(tmp_path: Path) -> None:
    # TP pairs {0,1},{2,3}; DP {0,2},{1,3}. Rank 3 stalls before TP seq 2; 2 waits in TP on 3;
    # 0 waits in DP on 2 (which never reached DP seq 2).
    tp = {0: ("1", "tp"), 1: ("1", "tp"), 2: ("2", "tp"), 3: ("2", "tp")}
    dp = {0: ("3", "dp"), 2: ("3", "dp"), 1: ("4", "dp"), 3: ("4", "dp")}
    cfg = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}
    plan = {
        0: [("tp", 1, True), ("dp", 1, True), ("tp", 2, True), ("dp", 2, False)],
        1: [("tp", 1, True), ("dp", 1, True), ("tp", 2, True), ("dp", 2, False)],
        2: [("tp", 1, True), ("dp", 1, True), ("tp", 2, False)],
        3: [("tp", 1, True), ("dp", 1, True)],
    }
    for rank, steps in plan.items():
        entries = []
        for i, (kind, seq, done) in enumerate(steps):
            pg = tp[rank] if kind == "tp" else dp[rank]
            entries.append(
                entry(
                    seq,
                    pg=pg,
                    pg_id=1 if kind == "tp" else 2,
                    record_id=i,
                    t=i,
                    state="completed" if done else "scheduled",
                    retired=done,
                )
            )
        obj = dump(entries)
        obj["pg_config"].update(
            {
                n: {"name": n, "desc": "tp" if n in "12" else "dp", "ranks": str(m)}
                for n, m in cfg.items()
            }
        )
        write_pickle(tmp_path / f"nccl_trace_rank_{rank}", obj)
    result = analyzer.analyze(tmp_path)
    d = result.diagnosis
    assert d.culprit_ranks == (3,)
    steps = d.chains[3]
    assert [(s["waiter"], s["holder"]) for s in steps] == [(0, 2), (2, 3)]
    assert result.graph.has_edge(1, 3)


def test_deadlock_from_group_order(tmp_path: Path) -> None:
    # Groups A (name 1) and B (name 2) with all 4 ranks; rank 3 runs B before A.
    cfg = {
        "1": {"name": "1", "desc": "A", "ranks": "[0, 1, 2, 3]"},
        "2": {"name": "2", "desc": "B", "ranks": "[0, 1, 2, 3]"},
    }
    for rank in range(4):
        pg = ("2", "B") if rank == 3 else ("1", "A")
        e = [entry(1, pg=pg, pg_id=2 if rank == 3 else 1, record_id=0)]
        obj = dump(e)
        obj["pg_config"].update(cfg)
        obj["pg_status"] = {
            "1": {
                "last_enqueued_collective": 0 if rank == 3 else 1,
                "last_started_collective": -1,
                "last_completed_collective": 0,
            },
            "2": {
                "last_enqueued_collective": 1 if rank == 3 else 0,
                "last_started_collective": -1,
                "last_completed_collective": 0,
            },
        }
        write_pickle(tmp_path / f"nccl_trace_rank_{rank}", obj)
    d = analyzer.analyze(tmp_path).diagnosis
    assert d.deadlock_cycles == ((0, 1, 2, 3),)
    assert d.culprit_ranks == (3,)
    assert d.kind == "deadlock"


def test_gloo_counters_ahead_of_entries(make_job: Callable[..., Path], tmp_path: Path) -> None:
    # gloo records no send/recv: rank 0 sent (counter 4), rank 1 never posted the recv (counter 3).
    for rank, counter in ((0, 4), (1, 3)):
        e = [entry(s, backend="gloo", retired=True, record_id=s, t=s) for s in (1, 2, 3)]
        obj = dump(
            e,
            world=2,
            backend="gloo",
            status={
                "0": {
                    "last_enqueued_collective": counter,
                    "last_started_collective": -1,
                    "last_completed_collective": counter,
                }
            },
        )
        obj["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}
        write_pickle(tmp_path / f"nccl_trace_rank_{rank}", obj)
    d = analyzer.analyze(tmp_path).diagnosis
    assert d.culprit_ranks == (1,)
    assert d.kind == "unrecorded_ops"


def test_rank_whose_completions_stopped_first_is_stuck_on_its_gpu(
    make_job: Callable[..., Path],
) -> None:
    # Everyone enqueued seq 1..5; ranks 0, 1, 3 completed up to 4, rank 2 only up to 2.
    job = {r: _completed(4) + [entry(5, t=5, state="started")] for r in (0, 1, 3)}
    job[2] = _completed(2) + [
        entry(s, t=s, state="started" if s == 3 else "scheduled") for s in (3, 4, 5)
    ]
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.kind == "stuck_in_collective"
    assert d.culprit_ranks == (2,)
    assert "stopped completing first" in d.headline


def _stall_job() -> dict[int, list[dict]]:
    job = {r: _completed(4) + [entry(5, t=5)] for r in (0, 2, 3)}
    job[1] = _completed(4)
    return job


def _rediagnose(result: analyzer.Analysis, **kw: object) -> analyzer.Diagnosis:
    from analyzer.diagnosis.engine import diagnose

    return diagnose(result.tables, result.matching, result.waits, result.graph, **kw)  # type: ignore[arg-type]


def test_the_rule_table_is_ordered_cause_before_consequence() -> None:
    from analyzer.diagnosis import KINDS
    from analyzer.diagnosis.rules import LEVELS, TAXONOMY

    assert [lv.name for lv in LEVELS] == ["desync", "waits", "stuck", "unrecorded"]
    assert all(rule.why for lv in LEVELS for rule in lv.rules) and all(lv.why for lv in LEVELS)
    assert tuple(row.kind.value for row in TAXONOMY) == KINDS and "inconclusive" in KINDS
    assert not LEVELS[-1].blames


def test_a_new_rule_is_one_function_and_one_row(make_job: Callable[..., Path]) -> None:
    """A rule added at the desync level leads: the roots become its consequences."""
    from analyzer.diagnosis.records import Finding
    from analyzer.diagnosis.rules import LEVELS, After, Level, Rule

    result = analyzer.analyze(make_job(_stall_job()))
    assert result.diagnosis.culprit_ranks == (1,)

    def blame_rank_3(facts: object) -> list[Finding]:
        return [Finding(kind="op_mismatch", ranks=(3,), summary="rank 3 did it", culprit=True)]

    first = LEVELS[0]
    levels = (
        Level(
            first.name,
            (*first.rules, Rule("test", blame_rank_3, After.LIST, "a test")),
            first.why,
            first.consequence,
        ),
        *LEVELS[1:],
    )
    d = _rediagnose(result, levels=levels)
    assert (d.culprit_ranks, d.kind, d.headline) == ((3,), "op_mismatch", "rank 3 did it")
    roots = [f for f in d.findings if f.kind == "not_joined"]
    assert (
        roots
        and not roots[0].culprit
        and roots[0].summary.endswith("(a consequence of the desync)")
    )
    # The same rule in the informing level blames nobody.
    info = (
        *LEVELS[:-1],
        Level("info", (Rule("test", blame_rank_3, After.LIST, "a test"),), "x", blames=False),
    )
    d = _rediagnose(result, levels=info)
    assert d.culprit_ranks == (1,) and any(f.summary == "rank 3 did it" for f in d.findings)


def test_late_enqueue_thresholds_come_from_the_config(make_job: Callable[..., Path]) -> None:
    """Every member joined, none completed; rank 2 enqueued 50 ms after the others."""
    from analyzer.config import AnalysisConfig

    ms = 1_000_000
    job = {r: _completed(2) + [entry(3, t=3)] for r in range(4)}
    for r, es in job.items():
        es[-1]["time_created_ns"] = 10**12 + (50 * ms if r == 2 else r * 10)
    result = analyzer.analyze(make_job(job))
    assert result.diagnosis.kind == "stuck_in_collective"
    assert result.diagnosis.findings[0].evidence["suspect"] is None  # 50 ms < the default 100 ms
    d = _rediagnose(result, config=AnalysisConfig(late_min_ns=10 * ms))
    assert d.culprit_ranks == (2,) and d.findings[0].evidence["suspect"] == 2


def test_evidence_and_chain_steps_are_frozen_records_read_as_their_json(
    make_job: Callable[..., Path],
) -> None:
    import dataclasses

    import pytest

    from analyzer.diagnosis.evidence import RootEvidence
    from analyzer.waits.records import Wait

    d = analyzer.analyze(make_job(_stall_job())).diagnosis
    ev = d.findings[0].evidence
    assert isinstance(ev, RootEvidence) and ev["waited_in"][0]["waiters"] == [0, 2, 3]
    assert dict(ev) == d.findings[0].to_dict()["evidence"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.wait_kind = "x"  # type: ignore[misc]
    for steps in d.chains.values():
        for s in steps:
            assert isinstance(s, Wait) and s["holder"] == s.holder and dict(s) == s.to_dict()
