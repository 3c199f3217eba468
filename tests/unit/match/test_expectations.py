"""Per-op expectations of what members record alike (analyzer/match/expectations.py), the
monitored_barrier gaps of gloo, and the suspect of a collective stuck with every member in it
(analyzer/diagnosis/stuck_suspect.py): on synthetic dumps, on the recorded op-mix samples and on simulated
jobs with the op mix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import analyzer
from analyzer.match.expectations import EXPECTATIONS, expectation, monitored_barrier_gaps
from tests.conftest import SAMPLES, entry
from tools.simulate import simulate_job

REPO = Path(__file__).resolve().parents[3]


def _sided(seq: int, op: str, ins: list, outs: list, dtype: str = "Float", **kw: Any) -> dict:
    e = entry(seq, op=op, state="completed", retired=True, t=seq, **kw)
    e.update(
        input_sizes=ins,
        output_sizes=outs,
        input_dtypes=[dtype] * len(ins),
        output_dtypes=[dtype] * len(outs),
    )
    return e


# ----------------------------------------------------------------------------- the table


def test_every_line_says_why_and_where_it_was_checked() -> None:
    seen: set[str] = set()
    for line in EXPECTATIONS:
        assert line.ops and line.why and line.checked_on, line
        assert line.dtypes in ("both", "inputs", "outputs", "")
        assert line.sizes in ("both", "inputs", "outputs", "")
        assert not seen & set(line.ops), f"{line.ops} listed twice"
        seen |= set(line.ops)
        for path in line.checked_on.split(","):
            name = path.strip().split(" ")[0]
            if name.startswith("sample_dumps/"):
                assert (REPO / name).is_dir(), name
    for op in (
        "gather",
        "scatter",
        "reduce",
        "broadcast",
        "all_to_all",
        "all_gather",
        "reduce_scatter",
        "all_gather_into_tensor",
        "barrier",
        "monitored_barrier",
    ):
        assert op in seen


def test_coalesced_expectation_keeps_only_common_sides() -> None:
    both = expectation("all_reduce+all_reduce")
    assert (both.dtypes, both.sizes) == ("both", "both")
    mixed = expectation("all_reduce+all_to_all")
    assert (mixed.dtypes, mixed.sizes) == ("both", "")
    assert expectation("gather+broadcast").one_sided
    assert expectation("some_new_op").sizes == ""


def test_root_only_sides_are_no_desync(make_job: Callable[..., Path]) -> None:
    job = {}
    for r in range(4):
        root, src = r == 0, r == 3
        job[r] = [
            _sided(1, "gather", [[8]], [[4, 8]] if root else []),
            _sided(2, "scatter", [[4, 8]] if src else [], [[8]]),
            _sided(3, "all_to_all", [[(r + 1) * 4]], [[10]]),
            _sided(4, "all_gather", [[r + 1]], [[1], [2], [3], [4]]),
            _sided(5, "reduce_scatter", [[1], [2], [3], [4]], [[r + 1]]),
            _sided(6, "broadcast", [[8]], [[8]] if root else []),
        ]
    d = analyzer.analyze(make_job(job)).diagnosis
    assert d.verdict.value == "no_hang", d.headline


@pytest.mark.parametrize(
    "seq,op,kind",
    [
        (1, "gather", "dtype_mismatch"),  # the inputs every member sends
        (2, "scatter", "size_mismatch"),  # the output every member receives
        (3, "all_to_all", "dtype_mismatch"),  # splits may differ, dtypes may not
        (4, "all_gather", "size_mismatch"),  # the gathered outputs
    ],
)
def test_sides_that_must_agree_still_catch_the_odd_rank(
    make_job: Callable[..., Path], seq: int, op: str, kind: str
) -> None:
    def mix(r: int, odd: bool) -> list[dict]:
        return [
            _sided(
                1,
                "gather",
                [[8]],
                [[4, 8]] if r == 0 else [],
                "Long" if odd and seq == 1 else "Float",
            ),
            _sided(2, "scatter", [[4, 8]] if r == 3 else [], [[6 if odd and seq == 2 else 8]]),
            _sided(
                3, "all_to_all", [[(r + 1) * 4]], [[10]], "Half" if odd and seq == 3 else "Float"
            ),
            _sided(4, "all_gather", [[8]], [[4, 9 if odd and seq == 4 else 8]]),
        ][:seq]

    job = {r: mix(r, r == 2) for r in range(4)}
    d = analyzer.analyze(make_job(job)).diagnosis
    assert (d.culprit_ranks, d.kind) == ((2,), kind), d.headline
    assert d.findings[0].op == op


# ----------------------------------------------------------------- monitored_barrier gaps


def test_monitored_barrier_gaps_of_the_recorded_sample() -> None:
    result = analyzer.analyze(SAMPLES / "opmix_healthy_w4")
    gaps = result.matching.barrier_gaps
    # Each round runs two monitored barriers back to back: one gap of four seqs per round.
    assert list(gaps) == ["0"] and len(gaps["0"]) == 2
    e = result.entries
    first = e[(e["rank"] == 0)].sort_values("seq")
    other = e[(e["rank"] == 1)].sort_values("seq")
    # The first member's op_id runs ahead of the others' by 2 x (4 - 2) per barrier.
    assert int(first["op_id"].max()) - int(other["op_id"].max()) == 4 * 4
    # The gaps are no unrecorded work, but they show the job runs a barrier gloo does not
    # record: every op ended is no no-hang (a rank may never have reached the next one).
    assert result.diagnosis.verdict.value == "inconclusive"
    assert "runs gloo's monitored_barrier" in result.diagnosis.headline
    assert not [f for f in result.diagnosis.findings if f.kind == "unrecorded_ops"]


def test_gaps_of_send_recv_are_still_unrecorded_work() -> None:
    # gloo send/recv move op_id alone: no monitored barrier, the dumps stay inconclusive.
    result = analyzer.analyze(SAMPLES / "p2p_unrecorded_w2")
    assert result.matching.barrier_gaps == {}
    assert result.diagnosis.kind == "unrecorded_ops"


def test_a_gap_on_one_member_only_is_not_a_barrier() -> None:
    import pandas as pd

    rows = []
    for r in range(4):
        seqs = [1, 2, 5, 6] if r == 2 else [1, 2, 3, 4, 5, 6]
        rows += [{"pg_name": "0", "rank": r, "seq": s, "op_id": s, "is_p2p": False} for s in seqs]
    members = {"0": (0, 1, 2, 3)}
    assert monitored_barrier_gaps(pd.DataFrame(rows), members) == {}
    rows = [
        {
            "pg_name": "0",
            "rank": r,
            "seq": s,
            "op_id": s + (4 if r == 0 and s > 2 else 0),
            "is_p2p": False,
        }
        for r in range(4)
        for s in (1, 2, 5, 6)
    ]
    assert monitored_barrier_gaps(pd.DataFrame(rows), members) == {"0": [3]}


# ---------------------------------------------------------------------------- the suspect


def _stuck_job(created: dict[int, int], retired: dict[int, bool], backend: str = "gloo") -> dict:
    job = {}
    for r in range(4):
        done = [entry(s, t=s, retired=True, backend=backend) for s in (1, 2)]
        last = entry(3, t=3, retired=retired.get(r, False), backend=backend)
        last["time_created_ns"] = 5_000_000_000 + created.get(r, 0)
        job[r] = done + [last]
    return job


def test_the_member_that_enqueued_last_and_never_timed_out_is_named(
    make_job: Callable[..., Path],
) -> None:
    job = _stuck_job(
        {0: 1_000_000, 1: 0, 2: 2_000_000, 3: 600_000_000}, {0: True, 1: True, 2: True}
    )
    d = analyzer.analyze(make_job(job, backend="gloo")).diagnosis
    assert (d.kind, d.culprit_ranks) == ("stuck_in_collective", (3,)), d.headline
    lead = d.findings[0]
    assert lead.evidence["suspect"] == 3 and len(lead.evidence["suspect_reasons"]) == 2
    assert "enqueued it last" in d.headline and "never timed out" in d.headline


def test_no_member_stands_out_names_the_group(make_job: Callable[..., Path]) -> None:
    job = _stuck_job({0: 1_000_000, 1: 0, 2: 2_000_000, 3: 3_000_000}, {})
    d = analyzer.analyze(make_job(job, backend="gloo")).diagnosis
    assert (d.kind, d.culprit_ranks) == ("stuck_in_collective", (0, 1, 2, 3)), d.headline
    assert "no member stands out" in d.headline
    assert d.findings[0].evidence["suspect"] is None


def test_conflicting_evidence_is_said_plainly(make_job: Callable[..., Path]) -> None:
    # Rank 3 enqueued late, but rank 1 is the one whose op never timed out.
    job = _stuck_job(
        {0: 0, 1: 1_000_000, 2: 2_000_000, 3: 900_000_000}, {0: True, 2: True, 3: True}
    )
    d = analyzer.analyze(make_job(job, backend="gloo")).diagnosis
    assert d.culprit_ranks == (0, 1, 2, 3), d.headline
    assert "points at different members" in d.headline
    assert d.findings[0].evidence["conflicting"] == [1, 3]


def test_a_late_enqueue_within_the_noise_names_nobody(make_job: Callable[..., Path]) -> None:
    # 150 ms late, but the others were spread over 50 ms: not ten times the spread.
    job = _stuck_job({0: 0, 1: 50_000_000, 2: 20_000_000, 3: 200_000_000}, {})
    d = analyzer.analyze(make_job(job, backend="gloo")).diagnosis
    assert d.culprit_ranks == (0, 1, 2, 3), d.headline


# ------------------------------------------------------------------------ recorded samples

OPMIX = sorted(p.parent.name for p in SAMPLES.glob("opmix_*/EXPECTED.json"))


@pytest.mark.parametrize("name", OPMIX)
def test_opmix_sample(name: str) -> None:
    path = SAMPLES / name
    expected = json.loads((path / "EXPECTED.json").read_text())
    honest = expected.get("analyzer", expected)  # what the dumps can show, where it differs
    d = analyzer.analyze(path).diagnosis
    assert list(d.culprit_ranks) == honest["culprits"], d.headline
    assert d.kind == honest["kind"], d.headline
    assert not [f for f in d.findings if f.kind.endswith("_mismatch")], d.headline


def test_opmix_samples_hold_the_ops_whose_sides_differ() -> None:
    e = analyzer.analyze(SAMPLES / "opmix_healthy_w4").entries
    gather = e[e["op"] == "gather"]
    assert set(gather["output_sizes"].astype(str)) >= {"[]", "[[4, 8]]"}
    scatter = e[e["op"] == "scatter"]
    assert "[]" in set(scatter["input_sizes"].astype(str))
    a2a = e[e["op"] == "all_to_all"]
    assert a2a.groupby("seq")["input_sizes"].nunique().max() == 4  # uneven splits per rank
    assert {"barrier", "all_gather", "broadcast", "reduce", "all_reduce"} <= set(
        e["op"].astype(str)
    )


def test_cli_exit_codes_of_the_opmix_samples() -> None:
    import subprocess
    import sys

    for name in OPMIX:
        want = json.loads((SAMPLES / name / "EXPECTED.json").read_text())
        run = subprocess.run(
            [sys.executable, "-m", "analyzer", "analyze", str(SAMPLES / name), "-q"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        verdict = want.get("analyzer", {}).get("verdict") or ("hang" if want["hang"] else "")
        code = {"hang": 1, "inconclusive": 5}.get(verdict, 0)
        assert run.returncode == code, (name, run.stdout[-500:])


# ------------------------------------------------------------------ simulated op-mix jobs

MIX_KIND = {
    "none": "no_hang",
    "stall": "not_joined",
    "gpu_stuck": "stuck_in_collective",
    "size_desync": "size_mismatch",
    "crash": "missing_dump",
}


@pytest.mark.parametrize("fault", sorted(MIX_KIND))
def test_simulated_op_mix(tmp_path: Path, fault: str) -> None:
    expected = simulate_job(
        tmp_path, tp=2, pp=2, dp=2, fault=fault, seed=1, buffer_size=400, op_mix=True
    )
    assert expected["op_mix"]
    d = analyzer.analyze(tmp_path).diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    assert d.kind == MIX_KIND[fault], d.headline
    e = analyzer.analyze(tmp_path).entries
    assert {"gather", "scatter", "all_to_all", "reduce_scatter"} <= set(e["op"].astype(str))


def test_the_diagnosis_page_shows_the_table() -> None:
    page = (REPO / "docs" / "diagnosis.md").read_text()
    for line in EXPECTATIONS:
        assert line.why in page, line.ops
        assert all(f"`{op}`" in page for op in line.ops)


@pytest.mark.parametrize("name", ["opmix_healthy_w4", "opmix_healthy_w4_t215"])
def test_both_torch_versions_record_the_mix_alike(name: str) -> None:
    e = analyzer.analyze(SAMPLES / name).entries
    sig = e[e["rank"] == 1][["seq", "op", "input_sizes", "output_sizes"]].astype(str)
    ref = analyzer.analyze(SAMPLES / "opmix_healthy_w4").entries
    ref_sig = ref[ref["rank"] == 1][["seq", "op", "input_sizes", "output_sizes"]].astype(str)
    assert sig.reset_index(drop=True).equals(ref_sig.reset_index(drop=True))


@pytest.mark.parametrize("stalled", [0, 2])
def test_a_stall_after_monitored_barriers_names_the_stalled_rank(
    tmp_path: Path, stalled: int
) -> None:
    # gloo: seqs 3-4 are a monitored barrier (no entries; rank 0's op_id skips 2 x 3, the
    # others' 2), then `stalled` never enqueues seq 7. The first member's drift must not make
    # it look ahead of (or behind) the others in op_id units.
    from tests.conftest import dump, write_pickle

    for r in range(4):
        entries = []
        for i, s in enumerate([1, 2, 5, 6] + ([] if r == stalled else [7])):
            e = entry(s, t=s, retired=True, backend="gloo", record_id=i)
            e["op_id"] = s + (4 if r == 0 and s > 2 else 0)
            entries.append(e)
        top = max(e["op_id"] for e in entries)
        status = {
            "0": {
                "last_enqueued_collective": top,
                "last_started_collective": -1,
                "last_completed_collective": top,
            }
        }
        write_pickle(
            tmp_path / f"nccl_trace_rank_{r}", dump(entries, backend="gloo", status=status)
        )
    result = analyzer.analyze(tmp_path)
    assert result.matching.barrier_gaps == {"0": [3]}
    d = result.diagnosis
    assert (d.kind, d.culprit_ranks) == ("not_joined", (stalled,)), d.headline
    assert not [f for f in d.findings if f.kind == "unrecorded_ops"]


def test_sequence_gaps_are_no_monitored_barrier_where_send_recv_are_recorded(
    tmp_path: Path,
) -> None:
    # The same gaps in a hook-recorded dialect (it records every send/recv, so none of
    # monitored_barrier's ops could go unseen): no barrier gaps, no discount.
    from tests.conftest import dump, write_pickle

    for r in range(4):
        entries = []
        for i, s in enumerate([1, 2, 5, 6, 7]):
            e = entry(s, t=s, retired=True, backend="nccl2", record_id=i)
            e["op_id"] = s + (4 if r == 0 and s > 2 else 0)
            entries.append(e)
        write_pickle(tmp_path / f"nccl2_trace_rank_{r}", dump(entries, backend="nccl2"))
    result = analyzer.analyze(tmp_path)
    assert result.matching.dialects.p2p_unrecorded_ranks == frozenset()
    assert result.matching.barrier_gaps == {}
