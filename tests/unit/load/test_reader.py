"""Safe loading: bad files are reported, crafted pickles never run."""

import json
import os
import pickle
from pathlib import Path

import pytest

from analyzer.config import AnalysisConfig
from analyzer.errors import DumpFormatError, UnsafeDumpError
from analyzer.load.decode import load_raw
from analyzer.load.field_checks import split_profiling_name
from analyzer.load.members import parse_ranks
from analyzer.load.parse import parse_dump
from tests.conftest import dump, entry, write_json, write_pickle


class _Evil:
    """Pickles to a call of os.system that would create a file."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.target}",))


def test_malicious_pickle_is_refused_and_not_executed(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Evil(target)]}))
    with pytest.raises(UnsafeDumpError, match="unsafe pickle"):
        load_raw(path)
    assert not target.exists()


def test_builtins_eval_is_refused(tmp_path: Path) -> None:
    # GLOBAL builtins.eval + REDUCE, hand-written protocol 2.
    payload = b"\x80\x02cbuiltins\neval\nX\x0b\x00\x00\x00open('x','w')\x85R."
    path = tmp_path / "_dump_0"
    path.write_bytes(payload)
    with pytest.raises(UnsafeDumpError):
        load_raw(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"")
    with pytest.raises(DumpFormatError, match="empty file"):
        load_raw(path)


def test_truncated_pickle(tmp_path: Path) -> None:
    data = pickle.dumps(dump([entry(1)]))
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DumpFormatError, match="truncated"):
        load_raw(path)


def test_truncated_json(tmp_path: Path) -> None:
    text = json.dumps(dump([entry(1)]))
    path = tmp_path / "rank_0.json"
    path.write_text(text[:-20])
    with pytest.raises(DumpFormatError, match="JSON"):
        load_raw(path)


def test_foreign_files(tmp_path: Path) -> None:
    p1 = write_pickle(tmp_path / "a_1", {"model": [1, 2, 3]})
    p2 = tmp_path / "b_1"
    p2.write_text("hello world")
    p3 = write_json(tmp_path / "c_1.json", [1, 2])
    for p in (p1, p2, p3):
        with pytest.raises(DumpFormatError, match="not a flight-recorder dump"):
            load_raw(p)


def test_json_quirks_are_normalized(tmp_path: Path) -> None:
    raw = dump([entry(1, state="completed"), entry(2)])
    as_json = json.loads(json.dumps(raw))
    for e in as_json["entries"]:
        e["time_discovered_started_ns"] = 0
        e["time_discovered_completed_ns"] = 0
    as_json["pg_status"] = {"0": {k: str(v) for k, v in raw["pg_status"]["0"].items()}}
    as_json["nccl_version"] = as_json.pop("comm_lib_version")
    p_json = write_json(tmp_path / "rank_0.json", as_json)
    p_pkl = write_pickle(tmp_path / "nccl_trace_rank_0", raw)
    a, b = parse_dump(0, p_json), parse_dump(0, p_pkl)
    assert a.fmt == "json" and b.fmt == "pickle"
    assert a.pg_status == b.pg_status == {0: (2, -1, 1)}
    assert a.comm_lib_version == b.comm_lib_version == "2.21.5"
    assert list(a.ints["time_started_ns"]) == list(b.ints["time_started_ns"]) == [0, 0]
    for key in a.vocab:
        assert [a.vocab[key][c] for c in a.strings[key]] == [
            b.vocab[key][c] for c in b.strings[key]
        ]


def test_parse_ranks_forms() -> None:
    assert parse_ranks("[0, 1, 2]") == (0, 1, 2)
    assert parse_ranks([3, 4]) == (3, 4)
    assert parse_ranks("[]") == ()
    assert parse_ranks("garbage") is None


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("nccl:all_reduce", ("nccl", "all_reduce", -1, -1)),
        ("gloo:barrier", ("gloo", "barrier", -1, -1)),
        ("nccl:send 3->0", ("nccl", "send", 3, 0)),
        ("nccl:recv 3<-2", ("nccl", "recv", 3, 2)),
        ("ncclx:recv", ("ncclx", "recv", -1, -1)),
        ("nccl:ALLGATHER_coalesced", ("nccl", "allgather_coalesced", -1, -1)),
        ("xccl:_reduce_scatter_base", ("xccl", "_reduce_scatter_base", -1, -1)),
    ],
)
def test_split_profiling_name(name: str, parts: tuple[str, str, int, int]) -> None:
    assert split_profiling_name(name) == parts


def test_stacks_are_stored_once(tmp_path: Path) -> None:
    frames = [{"name": "f", "filename": "/x.py", "line": 1}]
    p = write_pickle(
        tmp_path / "nccl_trace_rank_0", dump([entry(i, frames=frames) for i in range(1, 50)])
    )
    parsed = parse_dump(0, p)
    assert len(parsed.stacks) == 1
    assert set(parsed.ints["stack"]) == {0}


def test_numbers_out_of_range_do_not_stop_the_parse(tmp_path: Path) -> None:
    # JSON allows Infinity, NaN and huge numbers; none of them is an int64 counter. A
    # sequence number out of range drops its entry (it cannot be matched); any other counter
    # reads as 'not observed'. Each is counted in the warnings and the dump is suspect.
    raw = dump([entry(1), entry(2), entry(3), entry(4)])
    raw["entries"][1]["record_id"] = float("inf")
    raw["entries"][2]["collective_seq_id"] = 1e30
    raw["entries"][3]["time_created_ns"] = float("nan")
    raw["pg_status"]["0"]["last_enqueued_collective"] = float("inf")
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps(raw))  # writes Infinity / NaN, as Python's json reads them
    parsed = parse_dump(0, path)
    assert parsed.n_entries == 3
    assert parsed.ints["record_id"].tolist()[1] == -1
    assert parsed.ints["seq"].tolist() == [1, 2, 4]
    assert parsed.ints["time_created_ns"].tolist()[2] == 0
    assert parsed.pg_status[0][0] == -1
    assert parsed.suspect
    assert "1 entry dropped: collective_seq_id is not a sequence number" in parsed.warnings
    assert "1 value ignored: record_id is not an integer in range" in parsed.warnings
    assert parsed.pg_status[0][0] == -1
    # A plain-int column takes the fast path and keeps every value.
    assert parsed.ints["record_id"].tolist()[0] == raw["entries"][0]["record_id"]


def test_the_caps_of_a_config_bound_every_value(tmp_path: Path) -> None:
    # Counters, member ranks, stacks and sizes are checked against the config's caps, not
    # against module globals: a config read by the Python reader and the loader alike.
    frames = [{"name": "f", "filename": "/x.py", "line": i} for i in range(5)]
    raw = dump([entry(1, frames=frames), entry(2), entry(300), entry(4, sizes=[[1]] * 9)], world=6)
    raw["entries"][1]["profiling_name"] = "nccl:send 0->9"
    raw["pg_status"]["0"]["last_enqueued_collective"] = 500
    path = write_pickle(tmp_path / "nccl_trace_rank_0", raw)
    assert parse_dump(0, path).warnings == []
    tight = AnalysisConfig(max_counter=256, max_rank=4, max_frames=4, max_shape_values=8)
    parsed = parse_dump(0, path, config=tight)
    assert parsed.ints["seq"].tolist() == [1, 2]
    assert parsed.ints["peer_local"].tolist() == [-1, -1]  # local rank 9 >= max_rank
    assert all(len(stack) <= 4 for stack in parsed.stacks)
    assert parsed.ints["stack"].tolist()[0] == -1  # 5 frames > max_frames
    assert parsed.pg_status[0][0] == -1
    assert parsed.pg_config["0"][1] is None  # ranks 0 to 5: 4 and 5 are >= max_rank
    assert set(parsed.warnings) == {
        "1 entry dropped: input_sizes is not a list of shapes",  # 9 shapes > max_shape_values
        "1 entry dropped: output_sizes is not a list of shapes",
        "1 entry dropped: input_dtypes is not a list of dtype names",
        "1 entry dropped: output_dtypes is not a list of dtype names",
        "1 entry dropped: collective_seq_id is not a sequence number",
        "1 value ignored: frames is not a list of frames",
        "1 value ignored: op_id is not an integer in range",
        "1 value ignored: pg_config ranks are not a list of plausible ranks",
        "1 value ignored: pg_status counter is not an integer in range",
    }
    with pytest.raises(ValueError, match="max_rank must be a non-negative int"):
        AnalysisConfig(max_rank=-1)


def test_parsed_dumps_travel_between_processes_whole_with_member_lists_packed() -> None:
    from analyzer.load.parsed_dump import ParsedDump
    from tests.conftest import SAMPLES, assert_same_fields

    a = parse_dump(0, SAMPLES / "chain_tp_dp_w8" / "nccl_trace_rank_0")
    world = tuple(range(1000))
    a.pg_config["big"] = ("default_pg", world)
    a.pg_config["none"] = ("x", None)
    blob = pickle.dumps(a, protocol=5)
    assert len(blob) < len(pickle.dumps(world)) + 40_000  # 4 bytes a member, not a pickled int
    b, c = pickle.loads(blob), pickle.loads(blob)
    assert isinstance(b, ParsedDump)
    assert_same_fields(a, b)
    assert b.pg_config["big"][1] == world and b.pg_config["big"][1] is c.pg_config["big"][1]
