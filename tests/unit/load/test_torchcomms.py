"""TorchComms' recorder recognised from content and read into the pipeline's keys, on the
samples written by ``tools/torchcomms_fr.py`` inside real gloo jobs
(``tools/record_torchcomms.py``) and on edits of them."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import analyzer
from analyzer.load import comm_key, load_dumps
from analyzer.load.torchcomms_names import comm_keys
from tests.conftest import SAMPLES

GLOO = SAMPLES / "torchcomms_gloo_mesh_stall_w4"
JSON = SAMPLES / "torchcomms_gloo_mesh_stall_w4_json"
CUDA = SAMPLES / "torchcomms_cuda_mesh_stall_w4"
HEALTH = SAMPLES / "torchcomms_gloo_health_check_w4"
#: The same job under torch 2.15.0.
T215 = sorted(SAMPLES.glob("torchcomms_*_t215"))
#: A 4-stage pipeline whose middle stage stalls (tools/record_torchcomms_pipeline.py).
PIPE_DIRS = sorted(SAMPLES.glob("torchcomms_*_pipeline_stall_*"))


def test_comm_key_names_the_member_set() -> None:
    assert comm_key("tp", (1, 0)) == "tp[0,1]"
    assert comm_key("world", range(8)) == "world[0-7]"
    assert comm_key("pp", (0, 1, 2, 5)) == "pp[0-2,5]"
    assert comm_key("x", None) == "x"


@pytest.mark.parametrize("path", [GLOO, JSON, CUDA, HEALTH, *T215], ids=lambda p: p.name)
def test_recognised_from_content(path: Path) -> None:
    loaded = load_dumps([path], jobs=1)
    read = loaded.torchcomms
    assert read.ranks == tuple(d.rank for d in loaded.dumps)
    assert "empty pg_status" in read.signs
    assert "send/recv without a peer" in read.signs
    backend = "torchcomms-nccl" if "cuda" in path.name else "torchcomms-gloo"
    for d in loaded.dumps:
        assert d.vocab["backend"] == [backend]
        tp = "tp[0,1]" if d.rank < 2 else "tp[2,3]"
        dp = "dp[0,2]" if d.rank % 2 == 0 else "dp[1,3]"
        assert set(d.pg_config) == {"world[0-3]", tp, dp}


def test_same_names_of_disjoint_comms_stay_apart() -> None:
    t = analyzer.analyze(GLOO, jobs=1).tables
    groups = {str(k): v for k, v in t.members().items()}
    recorded = {"dp[0,2]", "dp[1,3]", "tp[0,1]", "tp[2,3]", "world[0-3]"}
    assert recorded <= set(groups) and not {"tp", "dp", "world"} & set(groups)
    assert list(groups["tp[2,3]"]) == [2, 3]


def test_collectives_numbered_within_their_comm() -> None:
    loaded = load_dumps([GLOO], jobs=1)
    for d in loaded.dumps:
        names = np.array(d.vocab["pg_name"], dtype=object)[d.strings["pg_name"]]
        ops = np.array(d.vocab["op"], dtype=object)[d.strings["op"]]
        seq = np.asarray(d.ints["seq"])
        for name in set(names.tolist()):
            coll = (names == name) & ~np.isin(ops, ["send", "recv"])
            assert seq[coll].tolist() == list(range(int(coll.sum())))


def test_no_false_unrecorded_ops_and_peers_paired() -> None:
    a = analyzer.analyze(GLOO, jobs=1)
    kinds = {f.kind for f in a.diagnosis.findings}
    assert "unrecorded_ops" not in kinds
    p2p = a.matching.p2p
    assert len(p2p) and set(p2p["peer"]) <= {0, 1, 2, 3}
    # Every send/recv that returned is paired: only the stall is waited on.
    assert set(a.waits["holder"]) <= {2, 3}


@pytest.mark.parametrize(
    ("path", "flow", "culprit_kind"),
    [
        (GLOO, "tutorial", "missing_dump"),
        (JSON, "tutorial", "missing_dump"),
        (CUDA, "tutorial", "missing_dump"),
        (HEALTH, "health check", "not_joined"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else str(v),
)
def test_flow_said_and_stalled_rank_blamed(path: Path, flow: str, culprit_kind: str) -> None:
    a = analyzer.analyze(path, jobs=1)
    # On CUDA every op retires when issued: rank 2, whose only wait on rank 3 is its last op,
    # may have finished it and stopped after it (a second fault): a suspect beside rank 3.
    suspects = {c.rank for c in a.diagnosis.culprits if c.confidence == "suspect"}
    assert suspects == ({2} if path == CUDA else set())
    assert set(a.diagnosis.culprit_ranks) - suspects == {3}
    assert a.diagnosis.kind == culprit_kind
    names = set(a.matching.dialects.names().values())
    assert names == {f"{'torchcomms-nccl' if path == CUDA else 'torchcomms-gloo'} ({flow} flow)"}
    if flow == "tutorial":
        lead = a.diagnosis.findings[0]
        assert "stalled outside communication or crashed" in lead.summary
        assert "crashed, was killed" not in lead.summary


def test_cuda_reads_no_completion() -> None:
    a = analyzer.analyze(CUDA, jobs=1)
    assert a.matching.dialects.completion_unobserved
    # Never "every member stuck inside": only enqueues are evidence.
    assert all(f.kind != "stuck_collective" for f in a.diagnosis.findings)


def _edit(src: Path, dst: Path, change: object) -> Path:
    shutil.copytree(src, dst)
    for f in dst.glob("comm_lib_trace_rank_*"):
        obj = pickle.loads(f.read_bytes())
        change(obj)  # type: ignore[operator]
        f.write_bytes(pickle.dumps(obj, protocol=2))
    return dst


def test_prefix_alone_never_decides(tmp_path: Path) -> None:
    # A pg_status written (as c10d's recorders do) makes the same entries plain gloo dumps.
    def with_status(obj: dict) -> None:
        obj["pg_status"] = {
            "0": {
                "last_enqueued_collective": 1,
                "last_started_collective": -1,
                "last_completed_collective": -1,
            }
        }

    d = _edit(GLOO, tmp_path / "c10d", with_status)
    loaded = load_dumps([d], jobs=1)
    assert loaded.torchcomms.ranks == ()
    assert all("torchcomms" not in b for x in loaded.dumps for b in x.vocab["backend"])


def test_desc_not_a_backend_is_not_torchcomms(tmp_path: Path) -> None:
    def desc(obj: dict) -> None:
        for v in obj["pg_config"].values():
            v["desc"] = "TENSOR_MODEL_PARALLEL_GROUP"

    d = _edit(GLOO, tmp_path / "desc", desc)
    assert load_dumps([d], jobs=1).torchcomms.ranks == ()


def test_json_and_pickle_read_alike() -> None:
    a = analyzer.analyze(GLOO, jobs=1)
    b = analyzer.analyze(JSON, jobs=1)
    assert a.diagnosis.headline == b.diagnosis.headline
    cols = ["rank", "pg_name", "seq", "op", "peer"]
    assert (
        a.entries[cols].astype(str).values.tolist() == b.entries[cols].astype(str).values.tolist()
    )


def test_torch215_runs_read_alike() -> None:
    assert len(T215) == 4
    for path in T215:
        a = analyzer.analyze(path, jobs=1)
        sure = {c.rank for c in a.diagnosis.culprits if c.confidence != "suspect"}
        assert sure == {3}  # on CUDA rank 2 is a suspect beside it (see above)
        assert "unrecorded_ops" not in {f.kind for f in a.diagnosis.findings}


def test_expected_marks_the_writer() -> None:
    for path in (GLOO, JSON, CUDA, HEALTH, *T215, *PIPE_DIRS):
        exp = json.loads((path / "EXPECTED.json").read_text())
        assert exp["recorded_with"].startswith("tools/torchcomms_fr.py")


PIPE = {
    (kind, flow): SAMPLES / f"torchcomms_{kind}_pipeline_stall_w4{suffix}"
    for kind in ("gloo", "cuda")
    for flow, suffix in (("tutorial", ""), ("health check", "_health_check"))
}


def test_two_comms_of_one_name_told_apart_by_pg_id() -> None:
    # Stages 1 and 2 hold two comms named pp; their pg_config keeps only the last one (pp
    # [1,2]), their entries carry distinct pg_ids (FlightRecorder.cpp record_pg_ranks).
    raw = pickle.loads((PIPE[("gloo", "health check")] / "comm_lib_trace_rank_1").read_bytes())
    assert raw["pg_config"]["pp"]["ranks"] == "[1,2]"
    assert {e["pg_id"] for e in raw["entries"] if e["process_group"][0] == "pp"} == {1, 2}
    loaded = load_dumps([PIPE[("gloo", "health check")]], jobs=1)
    by_rank = {d.rank: d for d in loaded.dumps}
    assert set(by_rank[1].pg_config) == {"world[0-3]", "pp[0,1]", "pp[1,2]"}
    assert set(by_rank[2].pg_config) == {"world[0-3]", "pp[1,2]", "pp[2,3]"}
    assert any("2 comms named 'pp'" in n for n in loaded.torchcomms.notes)
    for d in loaded.dumps:  # every send/recv paired with the other member of its own comm
        names = np.array(d.vocab["pg_name"], dtype=object)[d.strings["pg_name"]]
        ops = np.array(d.vocab["op"], dtype=object)[d.strings["op"]]
        p2p = np.isin(ops, ["send", "recv"])
        assert all(str(n).startswith("pp[") for n in names[p2p])
        assert (np.asarray(d.ints["peer_local"])[p2p] >= 0).all()


def test_split_outside_the_new_comm_is_read_as_returned() -> None:
    # Ranks 0 and 3 are outside pp {1,2}: their split never reaches the post-hook.
    raw = pickle.loads((PIPE[("gloo", "tutorial")] / "comm_lib_trace_rank_0").read_bytes())
    splits = [e for e in raw["entries"] if e["profiling_name"].endswith(":split")]
    assert [e["retired"] for e in splits] == [True, False]
    a = analyzer.analyze(PIPE[("gloo", "tutorial")], jobs=1)
    assert "split" not in set(a.waits["op"].astype(str))


@pytest.mark.parametrize("key", sorted(PIPE), ids=lambda k: "-".join(k))
def test_pipeline_stall_names_the_middle_stage(key: tuple[str, str]) -> None:
    a = analyzer.analyze(PIPE[key], jobs=1)
    d = a.diagnosis
    assert d.culprit_ranks == (1,)
    assert d.kind == ("not_joined" if key[1] == "health check" else "missing_dump")
    assert not d.deadlock_cycles
    w = a.waits
    # Stage 3 waits on stage 2, which waits on stage 1; stage 0 waits on stage 1.
    edges = set(zip(w["waiter"].astype(int), w["holder"].astype(int), w["pg_name"].astype(str)))
    assert {(0, 1, "pp[0,1]"), (2, 1, "pp[1,2]"), (3, 2, "pp[2,3]")} <= edges
    assert set(w["holder"].astype(int)) <= {1, 2}


@pytest.mark.parametrize("path", [CUDA, PIPE[("cuda", "tutorial")]], ids=lambda p: p.name)
def test_cuda_old_send_recv_the_waiter_got_past_are_not_awaited(path: Path) -> None:
    # No completion is reported: a send/recv to a rank without a dump counts as awaited
    # only while the waiter enqueued nothing later in that comm.
    a = analyzer.analyze(path, jobs=1)
    w = a.waits
    p2p = w[w["op"].astype(str).isin(["send", "recv"])]
    e = a.entries
    for waiter, group, seq in zip(p2p["waiter"], p2p["pg_name"].astype(str), p2p["seq"]):
        mine = e[(e["rank"] == waiter) & (e["pg_name"].astype(str) == group)]
        newest = mine.loc[mine["record_id"].idxmax()]
        assert int(newest["p2p_seq"]) == int(seq)
    if path == CUDA:
        assert p2p.empty  # rank 1 waits in the dp all_reduce, not in old exchanges


def test_comm_keys_guess_no_members() -> None:
    config = {"pp": ("gloo", (1, 2)), "world": ("gloo", (0, 1, 2, 3))}
    names = np.array(["world", "pp", "pp", "pp"], dtype=object)
    # One earlier comm and one other member set of its name holding rank 1: that set.
    known = {"pp": {(0, 1), (1, 2), (2, 3)}, "world": {(0, 1, 2, 3)}}
    found = comm_keys(1, config, names[:3], np.array([0, 1, 2]), known)
    assert found.entries == (("world", (0, 1, 2, 3)), ("pp", (0, 1)), ("pp", (1, 2)))
    # Two earlier comms and two other sets: which is which is unknown, neither is guessed.
    known["pp"].add((1, 3))
    found = comm_keys(1, config, names, np.array([0, 1, 2, 3]), known)
    assert [k for k, _ in found.entries] == ["world", "pp#1", "pp#2", "pp"]
    assert found.entries[1][1] is None and found.entries[3] == ("pp", (1, 2))
    assert "members are unknown" in found.notes[0]
