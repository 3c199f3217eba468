"""normalize(release=True): the dumps hand their entry columns over to the entries table and
the tables are the same as when they keep them."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
from pathlib import Path

import pandas.testing as pdt
import pytest

from analyzer.analysis import analyze
from analyzer.errors import InputError
from analyzer.load.handover import is_released
from analyzer.load.loader import Loaded, load_dumps
from analyzer.normalize.tables import Tables, normalize
from analyzer.render.json_doc import to_json
from tests.conftest import FIXTURES, SAMPLES, dump, entry, write_pickle
from tools.simulate import simulate_job

TABLES = ("entries", "groups", "ranks", "status", "stacks", "skipped")


def assert_same_tables(a: Tables, b: Tables) -> None:
    for name in TABLES:
        pdt.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True, obj=name)
    for col in a.entries.select_dtypes("category").columns:
        assert list(a.entries[col].cat.categories) == list(b.entries[col].cat.categories), col
        assert a.entries[col].cat.codes.dtype == b.entries[col].cat.codes.dtype, col
    assert a.world_size == b.world_size


def both_ways(loaded: Loaded, **kw: object) -> tuple[Tables, Tables, Loaded]:
    """The tables of a kept and of a released copy of ``loaded``, and the released copy."""
    spare = copy.deepcopy(loaded)
    kept = normalize(loaded, **kw)  # type: ignore[arg-type]
    released = normalize(spare, release=True, **kw)  # type: ignore[arg-type]
    return kept, released, spare


def dump_sets() -> list[Path]:
    sets = sorted(p for p in SAMPLES.iterdir() if (p / "EXPECTED.json").is_file())
    if FIXTURES.is_dir():
        sets += sorted(p for p in FIXTURES.iterdir() if p.is_dir())
    return sets


@pytest.mark.parametrize("folder", dump_sets(), ids=lambda p: p.name)
def test_same_tables_on_every_sample_and_fixture(folder: Path) -> None:
    # Samples with several buffers per rank (nccl2_pp4_*), duplicates (the fixtures), gloo
    # without member lists (the world from the entries).
    kept, released, _ = both_ways(load_dumps([folder], jobs=1))
    assert_same_tables(kept, released)


@pytest.mark.parametrize(
    "options",
    [
        {"dialect": "mixed", "op_mix": True, "fault": "crash"},
        {"dialect": "nccl2", "batch_p2p": True, "timing": True, "fault": "pp_deadlock"},
        {"fmt": "json", "fault": "size_desync"},
        {"with_frames": False, "fault": "gpu_stuck"},
    ],
    ids=["mixed-opmix", "nccl2-batch-timing", "json", "no-frames"],
)
def test_same_tables_on_simulated_jobs(tmp_path: Path, options: dict[str, object]) -> None:
    simulate_job(tmp_path, tp=2, pp=2, dp=2, buffer_size=200, seed=3, **options)  # type: ignore[arg-type]
    kept, released, _ = both_ways(load_dumps([tmp_path], jobs=1), world_size=10)
    assert_same_tables(kept, released)


def test_world_from_an_all_gather_without_member_lists(tmp_path: Path) -> None:
    # No pg_config: the default group's all_gather of 6 shapes and a send to rank 4 tell the world.
    for rank in range(3):
        d = dump(
            [
                entry(0, op="all_gather", sizes=[[4]] * 6, backend="gloo"),
                entry(1, op="send", is_p2p=True, backend="gloo"),
            ],
            world=3,
            backend="gloo",
        )
        d["pg_config"] = {}
        d["entries"][1]["profiling_name"] = f"gloo:send {rank}->4"
        write_pickle(tmp_path / f"trace_rank_{rank}", d)
    kept, released, _ = both_ways(load_dumps([tmp_path], jobs=1))
    assert kept.world_size == 6
    assert_same_tables(kept, released)


def test_released_dumps_keep_their_notes_and_refuse_a_second_normalize() -> None:
    loaded = load_dumps(
        [
            FIXTURES / "nvrx-megatron-moe"
            if (FIXTURES / "nvrx-megatron-moe").is_dir()
            else SAMPLES / "nccl2_pp4_stall_w4"
        ],
        jobs=1,
    )
    before = pickle.loads(pickle.dumps(loaded))
    normalize(loaded, release=True)
    assert all(is_released(d) for d in loaded.dumps if d.n_entries)
    assert all(not (d.strings or d.ints or d.bools or d.floats) for d in loaded.dumps)
    for a, b in zip(loaded.dumps, before.dumps, strict=True):
        assert (
            a.rank,
            a.path,
            a.n_entries,
            a.pg_config,
            a.pg_status,
            a.warnings,
            a.suspect,
            a.reader,
            a.fmt,
            a.version,
        ) == (
            b.rank,
            b.path,
            b.n_entries,
            b.pg_config,
            b.pg_status,
            b.warnings,
            b.suspect,
            b.reader,
            b.fmt,
            b.version,
        )
    assert loaded.warnings == before.warnings
    assert loaded.suspect_ranks == before.suspect_ranks
    assert loaded.duplicates == before.duplicates
    with pytest.raises(InputError, match="load them again"):
        normalize(loaded)
    assert_same_tables(
        normalize(before), normalize(pickle.loads(pickle.dumps(before)), release=True)
    )


def test_analyze_releases_and_reports_the_same() -> None:
    folder = SAMPLES / "chain_tp_dp_w8"
    result = analyze(folder, jobs=1)
    assert result.loaded is not None
    assert all(is_released(d) for d in result.loaded.dumps if d.n_entries)
    kept = normalize(load_dumps([folder], jobs=1))
    assert_same_tables(result.tables, kept)
    doc = to_json(result)
    assert doc["entries"] == len(kept.entries) and doc["culprit_ranks"] == [3]


def test_a_dump_dropped_for_a_newer_one_of_its_rank_is_released_too() -> None:
    loaded = load_dumps([SAMPLES / "stall_w4"], jobs=1)
    older = copy.deepcopy(loaded.dumps[1])
    older.path += ".old"
    older.ints["time_created_ns"] = older.ints["time_created_ns"] - 1
    twice = dataclasses.replace(loaded, dumps=(*loaded.dumps, older))
    kept, released, spare = both_ways(twice)
    assert_same_tables(kept, released)
    assert "the newer one is kept" in " ".join(kept.skipped["reason"])
    assert all(is_released(d) for d in spare.dumps if d.n_entries)


def test_a_refused_world_size_releases_nothing() -> None:
    loaded = load_dumps([SAMPLES / "chain_tp_dp_w8"], jobs=1)
    with pytest.raises(InputError, match="below the highest dumped rank"):
        normalize(loaded, world_size=4, release=True)
    assert not any(is_released(d) for d in loaded.dumps)
    assert normalize(loaded, release=True).world_size == 8


@pytest.mark.parametrize("release", [False, True])
def test_blocks_of_dumps_give_the_tables_of_one_block(
    monkeypatch: pytest.MonkeyPatch, release: bool
) -> None:
    """normalize copies each column a block of dumps at a time: blocks of 3 over 8 dumps (a
    short last one; each dump with its own group names) give the tables of one block."""
    import analyzer.normalize.tables as tables_module

    folder = SAMPLES / "chain_tp_dp_w8"
    loaded = load_dumps([folder], jobs=1)
    spare = copy.deepcopy(loaded)
    whole = normalize(loaded, release=release)
    monkeypatch.setattr(tables_module._Columns, "BLOCK", 3)
    assert_same_tables(whole, normalize(spare, release=release))


@pytest.mark.parametrize("release", [False, True])
def test_columns_built_in_two_threads_are_those_built_in_one(
    monkeypatch: pytest.MonkeyPatch, release: bool
) -> None:
    """normalize builds its columns two at a time where there are two cores: on one core
    (one at a time) the tables are the same, released or not, in blocks of 2 dumps."""
    import analyzer.normalize.tables as tables_module

    folder = SAMPLES / "nccl2_pp4_stall_w4"  # two buffers per rank: record ids re-ordered
    loaded = load_dumps([folder], jobs=1)
    spare = copy.deepcopy(loaded)
    monkeypatch.setattr(tables_module._Columns, "BLOCK", 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # the cores default_jobs sees
    threaded = normalize(loaded, release=release)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert_same_tables(threaded, normalize(spare, release=release))
