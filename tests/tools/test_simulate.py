"""The NCCL job simulator writes dumps that look like torch's and tell the planted story."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tools.simulate import FAULTS, simulate_job

ROOT = Path(__file__).resolve().parents[2]

BASE_KEYS = {
    "record_id",
    "pg_id",
    "process_group",
    "thread_name",
    "thread_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "timeout_ms",
    "is_p2p",
}
P2P_RE = re.compile(r"^nccl:(send (\d+)->(\d+)|recv (\d+)<-(\d+))$")
COLL_NAMES = {"nccl:all_reduce", "nccl:_all_gather_base", "nccl:_reduce_scatter_base"}


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # pragma: no cover - must never be called
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load(out: Path, fmt: str = "pickle") -> dict[int, dict]:
    dumps = {}
    for f in out.iterdir():
        if fmt == "pickle" and f.name.startswith("nccl_trace_rank_"):
            with open(f, "rb") as fh:
                dumps[int(f.name.rsplit("_", 1)[1])] = SafeUnpickler(fh).load()
        elif fmt == "json" and re.fullmatch(r"rank_\d+\.json", f.name):
            dumps[int(f.name[5:-5])] = json.loads(f.read_text())
    return dumps


def run(tmp_path: Path, name: str = "out", **kw) -> tuple[dict, dict[int, dict]]:
    kw.setdefault("tp", 2)
    kw.setdefault("pp", 2)
    kw.setdefault("dp", 2)
    kw.setdefault("buffer_size", 200)
    out = tmp_path / name
    expected = simulate_job(out, **kw)
    assert json.loads((out / "EXPECTED.json").read_text()) == expected
    return expected, load(out, kw.get("fmt", "pickle"))


def seq_of(e: dict) -> int:
    return e["p2p_seq_id"] if e["is_p2p"] else e["collective_seq_id"]


def parse_ranks(s: str) -> list[int]:
    assert s.startswith("[") and s.endswith("]")
    return [int(x) for x in s[1:-1].split(", ")] if s != "[]" else []


def check_dump(
    rank: int, dump: dict, *, timing: bool, frames: bool, fmt: str, buffer_size: int
) -> None:
    """Format-level invariants every simulated dump must hold."""
    assert dump["version"] == "2.10"
    assert dump["comm_lib_version"] == "2.21.5"
    pg_config = dump["pg_config"]
    assert pg_config["0"]["desc"] == "default_pg"
    members = {}
    for name, cfg in pg_config.items():
        assert cfg["name"] == name
        ranks = parse_ranks(cfg["ranks"])
        assert rank in ranks and ranks == sorted(ranks)
        members[name] = ranks
    entries = dump.get("entries", [])
    assert 0 < len(entries) <= buffer_size
    ids = [e["record_id"] for e in entries]
    assert ids == list(range(ids[0], ids[0] + len(ids))), "record ids increase by one"
    pg_ids: dict[str, int] = {}
    last_seq: dict[tuple, int] = {}
    for e in entries:
        keys = set(e)
        want = set(BASE_KEYS)
        if frames:
            want.add("frames")
        if timing and e["state"] == "completed":
            want.add("duration_ms")
        assert keys == want, (rank, keys ^ want)
        pg = e["process_group"]
        assert isinstance(pg, tuple if fmt == "pickle" else list) and len(pg) == 2
        name, desc = pg
        assert name in pg_config and pg_config[name]["desc"] == desc
        assert pg_ids.setdefault(name, e["pg_id"]) == e["pg_id"], "one pg_id per group"
        assert isinstance(e["thread_id"], str) and e["thread_name"]
        assert e["op_id"] == e["collective_seq_id"] + e["p2p_seq_id"]
        assert e["timeout_ms"] > 0
        for key in ("input_sizes", "output_sizes"):
            assert all(isinstance(s, list) and all(isinstance(x, int) for x in s) for s in e[key])
        assert set(e["input_dtypes"]) | set(e["output_dtypes"]) <= {"BFloat16", "Float", "Double"}
        m = P2P_RE.match(e["profiling_name"])
        coalesced = e["profiling_name"] == "nccl:coalesced"
        assert e["is_p2p"] == bool(m or coalesced)
        if coalesced:
            # endCoalescing's work: no tensors, the group's p2p counter of the batch.
            assert e["input_sizes"] == e["output_sizes"] == [] == e["input_dtypes"]
        elif m:
            local, peer = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
            ranks = members[name]
            assert ranks[int(local)] == rank, "send/recv names this rank's group-local index"
            assert 0 <= int(peer) < len(ranks) and int(peer) != int(local)
        else:
            assert e["profiling_name"] in COLL_NAMES
        # Counters move by one per op of their kind inside a group (a contiguous window).
        k = (name, e["is_p2p"])
        if k in last_seq:
            step = 0 if coalesced else 1  # the work shares the seq of the ops it batches
            assert seq_of(e) == last_seq[k] + step, (rank, e["record_id"])
        last_seq[k] = seq_of(e)
        state = e["state"]
        none = None if fmt == "pickle" else 0
        assert state in ("scheduled", "started", "completed")
        if state == "completed":
            assert e["retired"] is True
            assert e["time_discovered_completed_ns"] >= e["time_created_ns"]
            if timing:
                assert isinstance(e["duration_ms"], float) and e["duration_ms"] > 0
                assert e["time_created_ns"] <= e["time_discovered_started_ns"]
                assert e["time_discovered_started_ns"] <= e["time_discovered_completed_ns"]
            else:
                assert e["time_discovered_started_ns"] == none
        else:
            assert e["retired"] is False
            assert e["time_discovered_completed_ns"] == none
            if state == "started":
                assert timing and e["time_discovered_started_ns"] > e["time_created_ns"]
            else:
                assert e["time_discovered_started_ns"] == none
        if frames:
            assert e["frames"] and all(set(f) == {"name", "filename", "line"} for f in e["frames"])
    # Time flows forward in record order.
    created = [e["time_created_ns"] for e in entries]
    assert created == sorted(created)
    check_pg_status(dump, entries, timing)


def check_pg_status(dump: dict, entries: list[dict], timing: bool) -> None:
    status = dump["pg_status"]
    conv = (
        int
        if all(isinstance(v, str) for s in status.values() for v in s.values())
        else (lambda x: x)
    )
    by_pg = defaultdict(list)
    for e in entries:
        by_pg[str(e["pg_id"])].append(e)
    for pg_id, es in by_pg.items():
        st = {k: conv(v) for k, v in status[pg_id].items()}
        assert st["last_enqueued_collective"] == seq_of(es[-1])
        done = [e for e in es if e["state"] == "completed"]
        if done:
            assert st["last_completed_collective"] == seq_of(done[-1])
        if timing:
            assert st["last_started_collective"] >= st["last_completed_collective"]
        else:
            assert st["last_started_collective"] == -1


def check_all(
    expected: dict,
    dumps: dict[int, dict],
    *,
    timing=False,
    frames=True,
    fmt="pickle",
    buffer_size=200,
) -> None:
    assert sorted(dumps) == expected["dumped_ranks"]
    for r, d in dumps.items():
        check_dump(
            r, d, timing=timing, frames=frames and fmt == "pickle", fmt=fmt, buffer_size=buffer_size
        )


def entries_of(dump: dict, group: str) -> list[dict]:
    return [e for e in dump["entries"] if e["process_group"][0] == group]


# --------------------------------------------------------------------------- tests


def test_healthy_job_every_op_completed_and_buffers_full(tmp_path):
    expected, dumps = run(tmp_path, fault="none")
    assert expected["hang"] is False and expected["culprits"] == [] and expected["world"] == 8
    assert expected["backend"] == "nccl" and expected["format"] == "pickle"
    check_all(expected, dumps)
    for d in dumps.values():
        assert len(d["entries"]) == 200, "history longer than the ring buffer"
        assert d["entries"][0]["record_id"] > 0, "older records scrolled out"
        assert {e["state"] for e in d["entries"]} == {"completed"}


def test_timing_adds_started_and_duration(tmp_path):
    expected, dumps = run(tmp_path, fault="none", timing=True)
    check_all(expected, dumps, timing=True)
    e = dumps[0]["entries"][-1]
    assert "duration_ms" in e and e["time_discovered_started_ns"] is not None


def test_p2p_pairs_balance_in_healthy_job(tmp_path):
    # A buffer larger than the whole history keeps every op.
    expected, dumps = run(
        tmp_path, fault="none", pp=3, tp=1, dp=2, buffer_size=5000, entries_per_rank=120
    )
    check_all(expected, dumps, buffer_size=5000)
    sends, recvs = Counter(), Counter()
    for d in dumps.values():
        assert d["entries"][0]["record_id"] == 0
        for e in d["entries"]:
            m = P2P_RE.match(e["profiling_name"])
            if not m:
                continue
            ranks = parse_ranks(d["pg_config"][e["process_group"][0]]["ranks"])
            if m.group(2):
                sends[(ranks[int(m.group(2))], ranks[int(m.group(3))])] += 1
            else:
                recvs[(ranks[int(m.group(5))], ranks[int(m.group(4))])] += 1
    assert sends and sends == recvs


def test_pg_ids_are_local_and_differ_between_stages(tmp_path):
    expected, dumps = run(tmp_path, fault="none", pp=3, tp=2, dp=1)
    check_all(expected, dumps)

    def tp_pg_id(d):
        return {
            e["pg_id"]
            for e in d["entries"]
            if e["process_group"][1] == "TENSOR_MODEL_PARALLEL_GROUP"
        }

    # Rank 2 is on the middle stage: no embedding group, so its later groups get lower ids.
    assert tp_pg_id(dumps[0]) != tp_pg_id(dumps[2])
    assert dumps[0]["pg_config"]["0"]["ranks"] == str(list(range(6)))


def test_stall_leaves_the_stalled_rank_behind(tmp_path):
    expected, dumps = run(tmp_path, fault="stall", fault_rank=5, timing=True)
    check_all(expected, dumps, timing=True)
    assert expected["culprits"] == [5] and expected["hang"] and not expected["deadlock"]
    det = expected["details"]
    group, n = det["group"], det["collective_seq_id"]
    assert det["group_desc"] == "TENSOR_MODEL_PARALLEL_GROUP" and 5 in det["group_ranks"]
    for r in det["group_ranks"]:
        seqs = {e["collective_seq_id"] for e in entries_of(dumps[r], group) if not e["is_p2p"]}
        if r == 5:
            assert max(seqs) == n - 1, "the stalled rank never enqueued collective n"
            assert all(e["state"] == "completed" for e in dumps[5]["entries"])
        else:
            assert n in seqs and max(seqs) > n, "peers enqueued n and ran ahead"
            (e,) = [
                e
                for e in entries_of(dumps[r], group)
                if e["collective_seq_id"] == n and not e["is_p2p"]
            ]
            assert e["state"] == "started", "the peer's kernel runs, waiting for rank 5"


def test_crashed_rank_writes_no_file(tmp_path):
    expected, dumps = run(tmp_path, fault="crash", fault_rank=3)
    check_all(expected, dumps)
    assert 3 not in dumps and expected["dumped_ranks"] == [0, 1, 2, 4, 5, 6, 7]
    assert expected["culprits"] == [3]
    assert not (tmp_path / "out" / "nccl_trace_rank_3").exists()


def test_gpu_stuck_every_member_started_none_completed(tmp_path):
    expected, dumps = run(tmp_path, fault="gpu_stuck", fault_rank=2, timing=True)
    check_all(expected, dumps, timing=True)
    det = expected["details"]
    assert expected["culprits"] == sorted(det["group_ranks"]) and 2 in det["group_ranks"]
    for r in det["group_ranks"]:
        (e,) = [
            e
            for e in entries_of(dumps[r], det["group"])
            if e["collective_seq_id"] == det["collective_seq_id"] and not e["is_p2p"]
        ]
        assert e["state"] == "started"
        st = dumps[r]["pg_status"][str(e["pg_id"])]
        assert st["last_started_collective"] == det["collective_seq_id"]
        assert st["last_completed_collective"] == det["collective_seq_id"] - 1


def test_pipeline_stall_sends_missing(tmp_path):
    # Rank 2 is stage 0 of the second pipeline; rank 3 its next stage.
    expected, dumps = run(
        tmp_path,
        fault="pipeline_stall",
        fault_rank=2,
        tp=1,
        pp=2,
        dp=2,
        buffer_size=5000,
        entries_per_rank=100,
    )
    check_all(expected, dumps, buffer_size=5000)
    assert expected["culprits"] == [2]
    sent = sum(1 for e in dumps[2]["entries"] if e["profiling_name"] == "nccl:send 0->1")
    recv = sum(1 for e in dumps[3]["entries"] if e["profiling_name"] == "nccl:recv 1<-0")
    assert recv > sent
    stuck = [e for e in dumps[3]["entries"] if e["state"] != "completed"]
    assert stuck[0]["profiling_name"] == "nccl:recv 1<-0", "the next stage waits for rank 2"


def test_pp_deadlock_both_wait_in_recv(tmp_path):
    expected, dumps = run(tmp_path, fault="pp_deadlock", fault_rank=4)
    check_all(expected, dumps)
    a, b = expected["culprits"]
    assert expected["deadlock"] and {a, b} == {4, 6}
    assert dumps[a]["entries"][-1]["profiling_name"] == "nccl:recv 0<-1"
    assert dumps[b]["entries"][-1]["profiling_name"] == "nccl:recv 1<-0"
    assert dumps[a]["entries"][-1]["state"] == dumps[b]["entries"][-1]["state"] == "scheduled"


def test_group_order_rank_runs_world_collective_first(tmp_path):
    expected, dumps = run(tmp_path, fault="group_order", fault_rank=5)
    check_all(expected, dumps)
    det = expected["details"]
    assert expected["culprits"] == [5] and expected["deadlock"]
    n = det["collective_seq_id"]
    last = dumps[5]["entries"][-1]
    assert last["process_group"][0] == "0", "rank 5 ends in the default group"
    assert n not in {e["collective_seq_id"] for e in entries_of(dumps[5], det["group"])}
    for r in det["group_ranks"]:
        if r != 5:
            names = {(e["process_group"][0], seq_of(e)) for e in dumps[r]["entries"]}
            # The peer waits in TP collective n (it reads its result) and never reached the
            # world collective rank 5 waits in: each waits for the other.
            assert (det["group"], n) in names
            assert ("0", last["collective_seq_id"]) not in names


def test_slow_gpu_completions_stop_early(tmp_path):
    expected, dumps = run(tmp_path, fault="slow_gpu", fault_rank=5)
    check_all(expected, dumps)
    det = expected["details"]
    me = dumps[5]["pg_status"]
    peer = next(r for r in det["group_ranks"] if r != 5)
    other = dumps[peer]["pg_status"]
    pg = str(entries_of(dumps[5], det["group"])[0]["pg_id"])
    pg_peer = str(entries_of(dumps[peer], det["group"])[0]["pg_id"])
    assert me[pg]["last_enqueued_collective"] == other[pg_peer]["last_enqueued_collective"]
    assert me[pg]["last_completed_collective"] < other[pg_peer]["last_completed_collective"]


@pytest.mark.parametrize(
    "fault,what", [("size_desync", "input_sizes"), ("dtype_desync", "input_dtypes")]
)
def test_desync_odd_one_out(tmp_path, fault, what):
    expected, dumps = run(tmp_path, fault=fault, fault_rank=6)
    check_all(expected, dumps)
    det = expected["details"]
    vals = {}
    for r in det["group_ranks"]:
        (e,) = [
            e
            for e in entries_of(dumps[r], det["group"])
            if e["collective_seq_id"] == det["collective_seq_id"] and not e["is_p2p"]
        ]
        assert e["state"] != "completed"
        vals[r] = e[what]
    assert all(vals[6] != v for r, v in vals.items() if r != 6)


@pytest.mark.parametrize("batch_p2p", [False, True])
@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_tells_its_story(tmp_path, fault, batch_p2p):
    expected, dumps = run(tmp_path, fault=fault, seed=3, batch_p2p=batch_p2p)
    check_all(expected, dumps)
    assert expected["scenario"] == expected["kind"] == fault
    assert expected["hang"] == (fault != "none")
    assert expected["deadlock"] == (fault in ("pp_deadlock", "group_order"))
    assert bool(expected["culprits"]) == (fault != "none")
    assert expected["description"]
    if expected["hang"]:
        assert any(e["state"] != "completed" for d in dumps.values() for e in d["entries"])
        # Every live rank dumps after the watchdog timeout of its oldest stuck op.
        for d in dumps.values():
            stuck = [e for e in d["entries"] if e["state"] != "completed"]
            if stuck:
                assert stuck[0]["timeout_ms"] == 600_000


def test_json_quirks(tmp_path):
    expected, dumps = run(tmp_path, fault="stall", fault_rank=1, fmt="json")
    assert expected["format"] == "json"
    check_all(expected, dumps, fmt="json")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("rank_*.json"))[0] == "rank_0.json"
    assert not list(out.glob("nccl_trace_rank_*"))
    d = dumps[0]
    assert all(isinstance(v, str) for s in d["pg_status"].values() for v in s.values())
    assert all(isinstance(e["process_group"], list) for e in d["entries"])
    assert all("frames" not in e for e in d["entries"])
    assert any(e["time_discovered_completed_ns"] == 0 for e in d["entries"])
    assert all(e["time_discovered_started_ns"] == 0 for e in d["entries"])


def test_deterministic_for_a_seed_and_parallel_writes_match(tmp_path):
    kw = dict(fault="slow_gpu", timing=True)
    run(tmp_path, "a", seed=7, **kw)
    run(tmp_path, "b", seed=7, jobs=2, **kw)
    run(tmp_path, "c", seed=8, **kw)

    def blobs(name):
        return {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()}

    assert blobs("a") == blobs("b")
    assert blobs("a") != blobs("c")


def test_batched_p2p_records_ops_without_events_plus_a_coalesced_work(tmp_path):
    expected, dumps = run(tmp_path, fault="none", batch_p2p=True, timing=True)
    check_all(expected, dumps, timing=True)
    for d in dumps.values():
        es = d["entries"]
        for i, e in enumerate(es):
            if P2P_RE.match(e["profiling_name"]):
                # batch_isend_irecv ops never get events: scheduled forever, never retired.
                assert e["state"] == "scheduled" and e["retired"] is False
                if i + 1 < len(es):
                    w = es[i + 1]
                    assert w["profiling_name"] == "nccl:coalesced"
                    assert (w["p2p_seq_id"], w["op_id"], w["process_group"]) == (
                        e["p2p_seq_id"],
                        e["op_id"],
                        e["process_group"],
                    )
                    assert w["state"] == "completed" and w["retired"] is True
        assert any(e["profiling_name"] == "nccl:coalesced" for e in es)


def test_batched_p2p_hang(tmp_path):
    expected, dumps = run(tmp_path, fault="pipeline_stall", fault_rank=0, batch_p2p=True)
    check_all(expected, dumps)
    nxt = dumps[2]["entries"]
    stuck = [
        e for e in nxt if e["profiling_name"] == "nccl:coalesced" and e["state"] != "completed"
    ]
    assert stuck, "the next stage's coalesced recv work never completes"


def test_without_frames(tmp_path):
    expected, dumps = run(tmp_path, fault="none", with_frames=False)
    check_all(expected, dumps, frames=False)


def test_frames_are_shared_per_site(tmp_path):
    _, dumps = run(tmp_path, fault="none")
    entries = dumps[0]["entries"]
    sites = {}
    for e in entries:
        sites.setdefault(
            (e["profiling_name"], str(e["input_sizes"]), e["thread_name"]), e["frames"]
        )
    assert len(sites) < 15
    assert entries[0]["frames"][-1]["name"] == "<module>" or entries[0]["thread_name"] != "python3"


def test_rejects_impossible_faults(tmp_path):
    with pytest.raises(ValueError):
        simulate_job(tmp_path, tp=2, pp=1, dp=2, fault="pipeline_stall")
    with pytest.raises(ValueError):
        simulate_job(tmp_path, tp=1, pp=1, dp=1, fault="stall")
    with pytest.raises(ValueError):
        simulate_job(tmp_path, tp=2, pp=2, dp=2, fault="nope")


def test_cli(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.simulate",
            "-o",
            str(out),
            "--tp",
            "1",
            "--pp",
            "2",
            "--dp",
            "2",
            "--fault",
            "pipeline_stall",
            "--rank",
            "0",
            "--json",
            "--buffer-size",
            "100",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["culprits"] == [0] and summary["dumps"] == 4
    assert (out / "rank_3.json").exists() and (out / "EXPECTED.json").exists()
