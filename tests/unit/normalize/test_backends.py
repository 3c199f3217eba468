"""Several dumps of one rank, and the alignment of a rank's unrecorded pg_ids with its groups."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import analyzer
from analyzer.normalize.scan import map_pg_ids
from tests.conftest import SAMPLES, write_pickle
from tools import record_gloo as rg


def _dump(pg_status: dict[int, Any]) -> Any:
    return SimpleNamespace(pg_status=pg_status)


def test_pg_ids_all_known_are_kept_as_they_are() -> None:
    known = {0: "0", 2: "5"}
    assert map_pg_ids(_dump({0: (), 2: ()}), known, ["0", "1", "5"]) == known


def test_unknown_pg_ids_between_known_ones_take_the_names_between() -> None:
    got = map_pg_ids(
        _dump({0: (), 1: (), 2: (), 3: ()}), {0: "0", 3: "3"}, ["3", "0", "2", "1", "default_pg"]
    )
    assert got == {0: "0", 1: "1", 2: "2", 3: "3"}


def test_unknown_pg_ids_are_left_unnamed_when_the_counts_differ() -> None:
    got = map_pg_ids(_dump({0: (), 1: (), 2: (), 3: ()}), {0: "0", 3: "3"}, ["0", "1", "3"])
    assert got == {0: "0", 3: "3"}


def test_same_buffer_twice_not_identical_keeps_the_newer(tmp_path: Path) -> None:
    # A second, older dump of rank 2's nccl2 buffer (its newest entry missing) in a folder
    # beside: dropped with a note naming the kept file; the analysis is the one without it.
    src = SAMPLES / "nccl2_stall_w4_states"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    older = rg.load_dump(src / "nccl2_trace_rank_2")
    full = len(older["entries"])
    older["entries"] = older["entries"][:-1]
    (job / "older").mkdir()
    write_pickle(job / "older" / "nccl2_trace_rank_2", older)
    a = analyzer.analyze(job)
    assert a.diagnosis.culprit_ranks == analyzer.analyze(src).diagnosis.culprit_ranks
    assert int((a.tables.entries["rank"] == 2).sum()) == full
    assert a.loaded is not None
    assert [(d.rank, d.kept, d.dropped, d.identical) for d in a.loaded.duplicates] == [
        (2, str(job / "nccl2_trace_rank_2"), str(job / "older" / "nccl2_trace_rank_2"), False)
    ]


@pytest.mark.parametrize("identical", [True, False])
def test_a_dump_whose_name_carries_no_rank_is_skipped(tmp_path: Path, identical: bool) -> None:
    # A backup copy beside the dumps, under a name without a rank: not a rank of its own
    # (it was analysed as rank -1 and the analysis stopped with an internal error).
    src = SAMPLES / "nccl2_stall_w4_states"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    copy = rg.load_dump(src / "nccl2_trace_rank_2")
    if not identical:
        copy["entries"] = copy["entries"][:-1]
    write_pickle(job / "nccl2_trace_rank_2.old", copy)
    a, b = analyzer.analyze(job), analyzer.analyze(src)
    assert a.diagnosis.culprit_ranks == b.diagnosis.culprit_ranks
    assert a.diagnosis.headline == b.diagnosis.headline
    assert a.tables.dumped_ranks == b.tables.dumped_ranks
    assert len(a.tables.entries) == len(b.tables.entries)
    skipped = a.tables.skipped
    assert list(skipped["rank"]) == [-1]
    assert skipped["path"].iloc[0].endswith("nccl2_trace_rank_2.old")
    assert skipped["reason"].iloc[0].startswith("a dump, but its name carries no rank number")
