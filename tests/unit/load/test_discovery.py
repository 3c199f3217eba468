from pathlib import Path

import pytest

from analyzer.errors import InputError
from analyzer.load.discover import discover, is_dump_name, rank_from_name


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("nccl_trace_rank_12", 12),
        ("_dump_12", 12),
        ("rank_12.json", 12),
        ("trace_rank12", 12),
        ("nccl_trace_rank_node02_5", 5),
        ("comm_lib_trace_rank_0", 0),
        ("host-a17.cluster_rank_301.pkl", 301),
        ("README.md", None),
        ("EXPECTED.json", None),
        # Copies kept under suffixed names: the rank is the number before the suffix.
        ("nccl2_trace_rank_0.1", 0),
        ("nccl2_trace_rank_2.20261207-015536", 2),
        ("rank_3.json.2", 3),
        ("nccl_trace_rank_3.tmp", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_suffixed_copies_are_named_like_dumps() -> None:
    assert is_dump_name("nccl2_trace_rank_0.1") and is_dump_name("nccl_trace_rank_7.20261207-0155")
    assert not is_dump_name("nccl_trace_rank_3.part") and not is_dump_name("core.12345")


def test_prefix_override() -> None:
    assert rank_from_name("job7_rank_3", prefix="job7_rank_") == 3
    assert rank_from_name("other_3", prefix="job7_rank_") is None


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_directory_is_searched_recursively_and_non_dumps_ignored(tmp_path: Path) -> None:
    _touch(tmp_path / "a" / "nccl_trace_rank_0")
    _touch(tmp_path / "b" / "nccl_trace_rank_1")
    _touch(tmp_path / "EXPECTED.json")
    _touch(tmp_path / "fault_injection.log")
    files = discover([tmp_path])
    assert [f.rank for f in files] == [0, 1]


def test_path_prefix_and_glob(tmp_path: Path) -> None:
    for r in range(3):
        _touch(tmp_path / f"nccl_trace_rank_{r}")
    _touch(tmp_path / "other_9")
    assert [f.rank for f in discover([str(tmp_path / "nccl_trace_rank_")])] == [0, 1, 2]
    assert [f.rank for f in discover([str(tmp_path / "nccl_trace_rank_*")])] == [0, 1, 2]


def test_list_of_files(tmp_path: Path) -> None:
    a = _touch(tmp_path / "rank_4.json")
    b = _touch(tmp_path / "rank_2.json")
    assert [f.rank for f in discover([a, b])] == [2, 4]


def test_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        discover([tmp_path / "nope"])


def test_directory_of_unrelated_files(tmp_path: Path) -> None:
    _touch(tmp_path / "notes.txt")
    _touch(tmp_path / "model.ckpt")
    with pytest.raises(InputError, match="named like a per-rank dump"):
        discover([tmp_path])


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no files found"):
        discover([tmp_path])


def test_two_files_for_one_rank_are_both_returned(tmp_path: Path) -> None:
    # Which one counts is decided by the loader, from their content (duplicates, backends).
    _touch(tmp_path / "nccl_trace_rank_1")
    _touch(tmp_path / "rank_1.json")
    assert [(f.rank, f.path.name) for f in discover([tmp_path])] == [
        (1, "nccl_trace_rank_1"),
        (1, "rank_1.json"),
    ]


def test_two_files_for_one_rank(tmp_path: Path) -> None:
    # One buffer per backend: a process can leave several files; all are returned.
    _touch(tmp_path / "nccl2_trace_rank_1")
    _touch(tmp_path / "nccl-lazy_trace_rank_1")
    found = discover([tmp_path])
    assert [(f.rank, f.path.name) for f in found] == [
        (1, "nccl-lazy_trace_rank_1"),
        (1, "nccl2_trace_rank_1"),
    ]
