"""The torch 2.15 recorder-hook samples (``tools/record_hook.py``): nccl2 and nccl-lazy
dumps recorded through torch's FlightRecorderHook over a Python backend that forwards to
gloo, each kept as recorded and with nccl2's completion states laid over the real entries
(``*_states``). ``tests/scenarios/test_recorded_samples.py`` checks every sample's verdict against its
``EXPECTED.json``; this file checks the samples themselves and what the analysis says of
what is particular to them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import analyzer
from tests.conftest import SAMPLES
from tools import record_gloo as rg
from tools.hook_backend import overlay_states

HOOK_DIRS = sorted(p.parent for p in SAMPLES.glob("nccl2_*/EXPECTED.json"))
RAW = [d for d in HOOK_DIRS if not d.name.endswith("_states")]
KEYS = {
    "scenario",
    "world",
    "torch",
    "backend",
    "recorded_with",
    "states",
    "format",
    "dumped_ranks",
    "files",
    "hang",
    "culprits",
    "kind",
    "deadlock",
    "description",
}
SCENARIOS = {
    "stall_w4",
    "anysource_stall_w4",
    "stall_nofile_w4",
    "crash_w4",
    "op_desync_w4",
    "size_desync_w4",
    "dtype_desync_w4",
    "chain_tp_dp_w8",
    "deadlock_p2p_w2",
    "pp4_stall_w4",
    "healthy_w4",
    "opmix_healthy_w4",
    "opmix_stall_w4",
    "opmix_stall_object_w4",
}
OPMIX = sorted(d for d in HOOK_DIRS if d.name.startswith("nccl2_opmix_"))


def _files(d: Path) -> dict[str, Path]:
    return {f.name: f for f in d.iterdir() if "_trace_rank_" in f.name}


def test_every_scenario_is_kept_in_both_forms() -> None:
    from tools.record_hook import SCENARIOS as RECORDED

    assert {d.name.removeprefix("nccl2_") for d in RAW} == SCENARIOS
    assert {d.name for d in RAW} == set(RECORDED)
    for d in RAW:
        assert (d.parent / f"{d.name}_states" / "EXPECTED.json").is_file(), d.name
        scen = RECORDED[d.name]
        for form in (d, d.parent / f"{d.name}_states"):
            exp = json.loads((form / "EXPECTED.json").read_text())
            assert exp["description"] == scen.description
            assert exp["culprits"] == scen.culprits and exp["kind"] == scen.kind
            assert exp["dumped_ranks"] == sorted(set(range(scen.world)) - set(scen.no_dump))


@pytest.mark.parametrize("d", HOOK_DIRS, ids=[d.name for d in HOOK_DIRS])
def test_sample_is_what_the_hook_wrote(d: Path) -> None:
    exp = json.loads((d / "EXPECTED.json").read_text())
    assert set(exp) - {"analyzer", "states_note"} == KEYS
    assert exp["scenario"] == d.name and exp["torch"].startswith("2.15")
    assert exp["states"] == ("overlaid" if d.name.endswith("_states") else "as_recorded")
    assert ("states_note" in exp) == (exp["states"] == "overlaid")
    files = _files(d)
    assert sorted(files) == exp["files"]
    assert sorted({int(n.rsplit("_", 1)[1]) for n in files}) == exp["dumped_ranks"]
    for name, f in files.items():
        backend = name.split("_trace_rank_")[0]
        assert backend in exp["backend"].split("+")
        data = f.read_bytes()
        assert b"/work/" not in data and b"/root/" not in data and b"/home/" not in data
        dump = rg.load_dump(f)  # refuses globals
        assert dump["version"] == "2.10" and dump["comm_lib_version"] == ""
        assert all(e["profiling_name"].startswith(f"{backend}:") for e in dump["entries"])
        states = {(e["state"], e["retired"]) for e in dump["entries"]}
        if exp["states"] == "as_recorded":  # a Python backend: retired at issue
            assert states == {("scheduled", True)}
        else:
            assert states <= {("completed", True), ("scheduled", False)}
        for e in dump["entries"]:  # one-sided send/recv shapes
            if e["profiling_name"].split(":")[1].startswith("send"):
                assert e["input_sizes"] and not e["output_sizes"]
            elif e["profiling_name"].split(":")[1].startswith("recv"):
                assert e["output_sizes"] and not e["input_sizes"]


@pytest.mark.parametrize("d", RAW, ids=[d.name for d in RAW])
def test_overlay_changes_only_states(d: Path) -> None:
    states = d.parent / f"{d.name}_states"
    for name, f in _files(d).items():
        raw, over = rg.load_dump(f), rg.load_dump(states / name)
        assert raw.keys() == over.keys()
        for a, b in zip(raw["entries"], over["entries"], strict=True):
            changed = {k for k in a if a[k] != b[k]}
            assert changed <= {"state", "retired", "time_discovered_completed_ns"}, changed
        for key, value in raw["pg_status"].items():
            other = over["pg_status"][key]
            assert {k for k in value if value[k] != other[k]} <= {"last_completed_collective"}


def test_overlay_refuses_entries_that_do_not_line_up() -> None:
    raw = rg.load_dump(SAMPLES / "nccl2_stall_w4" / "nccl2_trace_rank_0")
    ops = [
        {"record_id": i, "op": "send", "done": True, "failed": False, "time_ns": 1}
        for i in range(len(raw["entries"]))
    ]
    with pytest.raises(ValueError, match="backend served send"):
        overlay_states(raw, "nccl2", ops)


@pytest.mark.parametrize("d", HOOK_DIRS, ids=[d.name for d in HOOK_DIRS])
def test_dialect_and_no_false_mismatch(d: Path) -> None:
    exp = json.loads((d / "EXPECTED.json").read_text())
    a = analyzer.analyze(d)
    dialects = a.matching.dialects
    for r in exp["dumped_ranks"]:
        di = dialects.of(r)
        assert di is not None and "nccl2" in di.name and di.counter == "op_id" and di.one_sided_p2p
        assert di.completion == ("none" if exp["states"] == "as_recorded" else "hook")
    if exp["kind"] not in ("size_mismatch", "dtype_mismatch"):
        assert not any(f.kind in ("size_mismatch", "dtype_mismatch") for f in a.diagnosis.findings)
    assert a.matching.p2p_mismatches.empty


@pytest.mark.parametrize(
    "name",
    [
        "nccl2_stall_nofile_w4",
        "nccl2_crash_w4",
        "nccl2_pp4_stall_w4",
        "nccl2_chain_tp_dp_w8_states",
    ],
)
def test_missing_file_wording(name: str) -> None:
    d = analyzer.analyze(SAMPLES / name).diagnosis
    assert d.kind == "missing_dump"
    assert d.headline.split(": ", 1)[1].startswith(
        "no dump: stalled outside communication or crashed (this backend dumps only ranks whose "
        "own ops timed out)"
    )


def test_two_buffers_per_rank_are_merged() -> None:
    a = analyzer.analyze(SAMPLES / "nccl2_pp4_stall_w4_states")
    t = a.tables
    assert t.dumped_ranks == [0, 1, 3]
    ranks = t.ranks.set_index("rank")
    assert (
        "nccl-lazy_trace_rank_1" in ranks.loc[1, "path"]
        and "nccl2_trace_rank_1" in ranks.loc[1, "path"]
    )
    # One process order: record ids renumbered over both buffers, in enqueue-time order.
    r1 = t.entries[t.entries["rank"] == 1].sort_values("record_id")
    assert list(r1["record_id"]) == list(range(len(r1)))
    assert r1["time_created_ns"].is_monotonic_increasing
    assert set(r1["backend"].astype(str)) == {"nccl2", "nccl-lazy"}
    assert a.diagnosis.unrecorded_groups == {}


def test_a_missing_buffer_is_not_a_stalled_rank(tmp_path: Path) -> None:
    # Rank 1's nccl-lazy file is gone (its buffer was never dumped): the pipeline groups it
    # is in must read "not recorded" for it, and it must not be blamed for them.
    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "nccl2_pp4_stall_w4_states", job)
    (job / "nccl-lazy_trace_rank_1").unlink()
    a = analyzer.analyze(job)
    d = a.diagnosis
    assert d.culprit_ranks == (2,), d.headline
    assert {"1", "2"} <= set(d.unrecorded_groups)
    assert d.unrecorded_groups["1"]["members_without_buffer"] == [1]
    from analyzer.render.text import render_text

    assert (
        "groups not recorded in these dumps: 1 (nccl-lazy buffer missing for rank 1)"
        in render_text(a)
    )
    prog = a.matching.progress
    assert set(prog[(prog["rank"] == 1) & prog["pg_name"].isin(["1", "2"])]["source"]) == {
        "not_recorded"
    }


def test_groups_in_no_file_are_reported(tmp_path: Path) -> None:
    # Only rank 3's nccl-lazy buffer is left (nccl-lazy never dumps by itself): pipeline
    # groups 1 and 2 are in no file; the gap in the global group names says they exist.
    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "nccl2_pp4_stall_w4_states", job)
    for r in (0, 1):
        (job / f"nccl-lazy_trace_rank_{r}").unlink()
    d = analyzer.analyze(job).diagnosis
    assert {"1", "2"} <= set(d.unrecorded_groups)
    assert d.unrecorded_groups["1"]["evidence"] == "a gap in the group names"
    assert d.culprit_ranks == (2,), d.headline


def test_two_directories_of_buffers_with_the_same_names(tmp_path: Path) -> None:
    # The hook names every buffer's file after the same prefix; two directories, one per
    # backend, hold files of the same names: one job.
    src = SAMPLES / "nccl2_pp4_stall_w4_states"
    for backend in ("nccl2", "nccl-lazy"):
        (tmp_path / backend).mkdir()
        for f in src.glob(f"{backend}_trace_rank_*"):
            shutil.copy(f, tmp_path / backend / f"comm_lib_trace_rank_{f.name.rsplit('_', 1)[1]}")
    a = analyzer.analyze([tmp_path / "nccl2", tmp_path / "nccl-lazy"])
    assert a.tables.dumped_ranks == [0, 1, 3] and a.diagnosis.culprit_ranks == (2,)
    assert a.tables.skipped.empty
    assert a.diagnosis.unrecorded_groups == {}


def test_same_buffer_twice_keeps_the_newer(tmp_path: Path) -> None:
    src = SAMPLES / "nccl2_stall_w4_states"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    shutil.copy(src / "nccl2_trace_rank_2", job / "copy_of_rank_2")
    a = analyzer.analyze(job)
    assert a.diagnosis.culprit_ranks == (1,)
    assert len(a.tables.entries[a.tables.entries["rank"] == 2]) == len(
        rg.load_dump(src / "nccl2_trace_rank_2")["entries"]
    )
    # A byte-identical copy is merged with a note by the loader (not a skipped file).
    assert a.tables.skipped.empty
    assert a.loaded is not None
    assert [(d.rank, d.identical) for d in a.loaded.duplicates] == [(2, True)]


def test_store_keeps_the_dialects(tmp_path: Path) -> None:
    from analyzer.store.parquet import write_store

    a = analyzer.analyze(SAMPLES / "nccl2_pp4_stall_w4_states")
    write_store(a.tables, tmp_path / "store")
    b = analyzer.analyze(tmp_path / "store")
    assert b.matching.dialects.names() == a.matching.dialects.names()
    assert b.diagnosis.culprit_ranks == a.diagnosis.culprit_ranks


# ------------------------------------------------------------------------------ op mix


def test_opmix_samples_exist() -> None:
    assert [d.name for d in OPMIX] == [
        "nccl2_opmix_healthy_w4",
        "nccl2_opmix_healthy_w4_states",
        "nccl2_opmix_stall_object_w4",
        "nccl2_opmix_stall_object_w4_states",
        "nccl2_opmix_stall_w4",
        "nccl2_opmix_stall_w4_states",
    ]


@pytest.mark.parametrize("d", OPMIX, ids=[d.name for d in OPMIX])
def test_opmix_verdict_and_exit_code(d: Path) -> None:
    import subprocess
    import sys

    exp = json.loads((d / "EXPECTED.json").read_text())
    honest = exp.get("analyzer")  # where the dumps cannot show what happened
    a = analyzer.analyze(d)
    assert list(a.diagnosis.culprit_ranks) == (honest or exp)["culprits"], a.diagnosis.headline
    assert a.diagnosis.kind == (honest or exp)["kind"], a.diagnosis.headline
    verdict = honest["verdict"] if honest else "hang" if exp["hang"] else "no_hang"
    assert a.diagnosis.verdict.value == verdict
    assert not [f for f in a.diagnosis.findings if f.kind.endswith("_mismatch")], (
        a.diagnosis.headline
    )
    run = subprocess.run(
        [sys.executable, "-m", "analyzer", "analyze", str(d), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == {"hang": 1, "no_hang": 0, "inconclusive": 5}[verdict], run.stdout[
        -500:
    ]


def test_opmix_hook_sample_holds_the_ops_whose_sides_differ() -> None:
    # What torch 2.15's recorder hook writes for the op mix (monitored_barrier left out).
    e = analyzer.analyze(SAMPLES / "nccl2_opmix_healthy_w4").entries
    ops = set(e["op"].astype(str))
    assert {
        "gather",
        "scatter",
        "reduce",
        "broadcast",
        "all_to_all_single",
        "all_to_all",
        "reduce_scatter",
        "_reduce_scatter_base",
        "_all_gather_base",
        "all_gather",
        "barrier",
        "all_reduce",
    } == ops, ops
    gather = e[(e["op"] == "gather") & (e["input_dtypes"].astype(str) == '["Float"]')]
    assert set(gather["output_sizes"].astype(str)) == {"[]", "[[8], [8], [8], [8]]"}  # root only
    scatter = e[e["op"] == "scatter"]
    assert "[]" in set(scatter["input_sizes"].astype(str))  # only the source has inputs
    a2a = e[e["op"] == "all_to_all_single"]
    assert a2a.groupby("seq")["input_sizes"].nunique().max() == 4  # uneven splits per rank
    # Sequence numbers have no gaps: no monitored_barrier, and every rank's counters agree.
    for _, g in e.groupby("rank"):
        assert sorted(g["seq"]) == list(range(1, 44))  # a barrier, then two rounds of 21
