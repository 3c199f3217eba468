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
from tests.conftest import SAMPLES

GLOO = SAMPLES / "torchcomms_gloo_mesh_stall_w4"
JSON = SAMPLES / "torchcomms_gloo_mesh_stall_w4_json"
CUDA = SAMPLES / "torchcomms_cuda_mesh_stall_w4"
HEALTH = SAMPLES / "torchcomms_gloo_health_check_w4"
#: The same job under torch 2.15.0.
T215 = sorted(SAMPLES.glob("torchcomms_*_t215"))


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
    assert a.diagnosis.culprit_ranks == (3,)
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
        assert a.diagnosis.culprit_ranks == (3,)
        assert "unrecorded_ops" not in {f.kind for f in a.diagnosis.findings}


def test_expected_marks_the_writer() -> None:
    for path in (GLOO, JSON, CUDA, HEALTH, *T215):
        exp = json.loads((path / "EXPECTED.json").read_text())
        assert exp["recorded_with"].startswith("tools/torchcomms_fr.py")
