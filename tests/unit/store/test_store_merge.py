"""Stores of shards of one job merge into the analysis of the whole job's files.

Each job (every sample, the shared fixtures, simulated jobs) is split by rank into 2 to 4
shards, each shard is exported on its own (as one node would export its local dumps), and
the stores given together must give exactly the tables, the verdict and the JSON document
the raw files of the whole job give. Stores that do not belong together are refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas.testing as pdt
import pytest

from analyzer.analysis import Analysis, analyze
from analyzer.load.discover import rank_from_name
from analyzer.render.json_doc import to_json
from analyzer.store.layout import MARKER
from analyzer.store.merge import open_stores, prepare_export
from analyzer.store.parquet import write_store
from tests.conftest import FIXTURES, SAMPLES, corpus_case, entry, undecided_torchcomms_job
from tools.simulate import simulate_job

TABLES = ("entries", "groups", "ranks", "status", "stacks", "skipped")
# A debug server's dump_dir is no set of rank files: one saved page holds every rank, and a
# rank's own dump outranks its page section, so shards by file name do not add up to it.
SAMPLE_DIRS = sorted(
    p
    for p in SAMPLES.iterdir()
    if (p / "EXPECTED.json").is_file() and not p.name.startswith("debug_server_")
)


def export(
    files: list[Path], out: Path, world_size: int | None = None, staged: bool = True
) -> Path:
    """What ``hangscope export FILES -o OUT`` writes: the parsed dumps staged in OUT before
    normalize takes their columns over (``staged``, as the CLI does), or written after it
    from dumps that kept their columns (the library's other way)."""
    made = prepare_export(
        list(files), world_size=world_size, jobs=1, parsed_to=out if staged else None
    )
    assert (made.parsed_in is not None) == staged
    return write_store(
        made.tables,
        out,
        loaded=made.loaded,
        contexts=made.contexts,
        world_option=made.world_option,
        staged=made.parsed_in,
    )


def shards(job: Path, k: int, contiguous: bool) -> list[list[Path]]:
    """The files of ``job`` in ``k`` shards by rank; files without a rank go to the first."""
    files = sorted(p for p in job.rglob("*") if p.is_file())
    ranked = sorted({r for p in files if (r := rank_from_name(p.name)) is not None})
    k = min(k, len(ranked))
    if contiguous:
        size = -(-len(ranked) // k)
        home = {r: i // size for i, r in enumerate(ranked)}
    else:
        home = {r: i % k for i, r in enumerate(ranked)}
    out: list[list[Path]] = [[] for _ in range(k)]
    for p in files:
        r = rank_from_name(p.name)
        out[home[r] if r is not None else 0].append(p)
    return [s for s in out if s]


def assert_same(merged: Analysis, raw: Analysis) -> None:
    for name in TABLES:
        pdt.assert_frame_equal(getattr(merged.tables, name), getattr(raw.tables, name), obj=name)
    assert merged.tables.world_size == raw.tables.world_size
    assert merged.verdict == raw.verdict
    assert merged.culprit_ranks == raw.culprit_ranks
    assert to_json(merged) == to_json(raw)


def merge_check(job: Path, k: int, tmp_path: Path, contiguous: bool = True) -> Analysis:
    raw = analyze(job, jobs=1)
    stores = [
        export(files, tmp_path / f"store{i}", staged=i % 2 == 0)
        for i, files in enumerate(shards(job, k, contiguous))
    ]
    for store in stores:
        assert sorted(p.name for p in store.iterdir() if p.name.startswith(".")) == []
    merged = analyze(stores)
    assert_same(merged, raw)
    return merged


@pytest.mark.parametrize("sample", SAMPLE_DIRS, ids=lambda p: p.name)
def test_shards_of_every_sample_merge_into_the_whole_job(sample: Path, tmp_path: Path) -> None:
    k = 2 + len(sample.name) % 3  # 2, 3 or 4 stores, varied over the samples
    merge_check(sample, k, tmp_path, contiguous=len(sample.name) % 2 == 0)


@pytest.mark.parametrize(
    "job",
    [
        "nvrx-megatron-moe/gpu_error_2nd",
        "nvrx-megatron-moe/lock_gil_2nd",
        "torch2.15-gloo/stall_w4",
        "torch2.15-gloo/json_tp_dp_w8",
    ],
)
def test_shards_of_the_real_fixtures_merge(job: str, tmp_path: Path) -> None:
    path = FIXTURES / job
    if not path.is_dir():
        pytest.skip(f"shared fixtures not present at {FIXTURES}")
    merge_check(path, 4, tmp_path)


@pytest.mark.parametrize(
    ("fault", "k", "fmt"),
    [
        ("stall", 2, "pickle"),
        ("crash", 3, "pickle"),
        ("pipeline_stall", 4, "json"),
        ("none", 3, "pickle"),
    ],
)
def test_shards_of_simulated_jobs_merge(fault: str, k: int, fmt: str, tmp_path: Path) -> None:
    job = tmp_path / "job"
    expected = simulate_job(job, tp=2, pp=2, dp=4, fault=fault, seed=7, fmt=fmt, buffer_size=300)
    merged = merge_check(job, k, tmp_path, contiguous=k != 3)
    assert list(merged.culprit_ranks) == expected["culprits"]


def test_a_shard_store_records_its_ranks_and_the_world_it_saw(tmp_path: Path) -> None:
    job = SAMPLES / "chain_tp_dp_w8"
    first, second = shards(job, 2, contiguous=True)
    store = export(first, tmp_path / "a")
    meta = json.loads((store / MARKER).read_text())
    assert meta["format"] == "hangscope.store/3"
    assert meta["ranks"] == "0-3"
    alone = analyze(store)
    assert alone.tables.dumped_ranks == [0, 1, 2, 3]
    assert meta["world_size"] == alone.tables.world_size
    store_b = export(second, tmp_path / "b")
    assert json.loads((store_b / MARKER).read_text())["ranks"] == "4-7"


def test_world_size_is_applied_to_stores_as_to_the_files(tmp_path: Path) -> None:
    job = SAMPLES / "stall_w4"
    raw = analyze(job, world_size=6, jobs=1)
    stores = [export(files, tmp_path / f"s{i}") for i, files in enumerate(shards(job, 2, True))]
    merged = analyze(stores, world_size=6)
    assert merged.tables.missing_ranks == raw.tables.missing_ranks == [4, 5]
    assert_same(merged, raw)
    # Given at export, the world size travels with the stores.
    given = [
        export(files, tmp_path / f"w{i}", world_size=6)
        for i, files in enumerate(shards(job, 2, True))
    ]
    assert_same(analyze(given), raw)


def test_a_rank_in_two_stores_same_dump_is_merged(tmp_path: Path) -> None:
    job = SAMPLES / "crash_w4"
    first, second = shards(job, 2, contiguous=True)
    a = export(first, tmp_path / "a")
    b = export(second + [p for p in first if rank_from_name(p.name) == 0], tmp_path / "b")
    merged = analyze([a, b])
    raw = analyze(job, jobs=1)
    for name in ("entries", "groups", "ranks", "status"):
        pdt.assert_frame_equal(getattr(merged.tables, name), getattr(raw.tables, name))
    assert merged.culprit_ranks == raw.culprit_ranks
    notes = [d for d in merged.loaded.duplicates if d.rank == 0]
    assert len(notes) == 1 and notes[0].identical


def test_a_rank_in_two_stores_with_different_dumps_keeps_the_newer(
    make_job: Callable[..., Path], tmp_path: Path
) -> None:
    # Rank 1 was dumped twice: once after seq 2 (older), once after seq 3 (newer).
    older = make_job(
        {r: [entry(s, t=s) for s in range(3 if r == 1 else 4)] for r in range(4)}, name="older"
    )
    newer = make_job({1: [entry(s, t=s) for s in range(4)]}, name="newer")
    a = export(sorted(older.iterdir()), tmp_path / "a")
    b = export(sorted(newer.iterdir()), tmp_path / "b")
    opened = open_stores([a, b])
    notes = [d for d in opened.loaded.duplicates if d.rank == 1]
    assert len(notes) == 1 and not notes[0].identical
    assert notes[0].kept == str(newer / "nccl_trace_rank_1")
    assert {d.path for d in opened.loaded.dumps if d.rank == 1} == {notes[0].kept}
    # The loader's rule for two files of one rank, and its notes.
    raw = analyze([older, newer / "nccl_trace_rank_1"], jobs=1)
    merged = analyze([a, b])
    pdt.assert_frame_equal(merged.tables.entries, raw.tables.entries)
    assert merged.loaded is not None and raw.loaded is not None
    assert [d.note for d in merged.loaded.duplicates] == [d.note for d in raw.loaded.duplicates]
    run = _cli("analyze", str(a), str(b), "--strict")
    assert run.returncode == 2
    assert run.stderr.startswith("hangscope: error: --strict: rank 1: two different dumps")
    assert len(run.stderr.strip().splitlines()) == 1
    # export --strict refuses them before writing anything
    run = _cli("export", str(a), str(b), "--strict", "-o", str(tmp_path / "c"), "-q")
    assert run.returncode == 2 and "--strict: rank 1: two different dumps" in run.stderr
    assert not (tmp_path / "c").exists()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analyzer", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_stores_of_different_jobs_are_refused(tmp_path: Path) -> None:
    a = export(shards(SAMPLES / "chain_tp_dp_w8", 2, True)[0], tmp_path / "a")
    b = export(shards(SAMPLES / "crash_w4", 2, True)[1], tmp_path / "b")
    run = _cli("analyze", str(a), str(b))
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("hangscope: error: stores of different jobs: the newest entries")
    assert len(run.stderr.strip().splitlines()) == 1
    # Recorded within seconds of each other, but with other member lists for group 0.
    e = export(shards(SAMPLES / "nccl2_chain_tp_dp_w8", 2, True)[0], tmp_path / "e")
    f = export(shards(SAMPLES / "nccl2_crash_w4", 2, True)[1], tmp_path / "f")
    run = _cli("analyze", str(e), str(f))
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("hangscope: error: stores of different jobs:"), run.stderr
    c = export(shards(SAMPLES / "stall_w4", 2, True)[0], tmp_path / "c", world_size=4)
    d = export(shards(SAMPLES / "stall_w4", 2, True)[1], tmp_path / "d", world_size=8)
    run = _cli("graph", str(c), str(d))
    assert run.returncode == 2
    assert "stores of different jobs: exported with different world sizes" in run.stderr


def test_stores_and_dumps_are_not_mixed(tmp_path: Path) -> None:
    job = SAMPLES / "stall_w4"
    first, second = shards(job, 2, True)
    a = export(first, tmp_path / "a")
    run = _cli("analyze", str(a), *map(str, second))
    assert run.returncode == 2
    assert run.stderr.startswith("hangscope: error: cannot mix stores and dumps")
    assert len(run.stderr.strip().splitlines()) == 1


def test_every_command_takes_several_stores(tmp_path: Path) -> None:
    job = SAMPLES / "deadlock_w4"
    first, second = shards(job, 2, True)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for files, out in ((first, a), (second, b)):
        run = _cli("export", *map(str, files), "-o", out, "-q")
        assert run.returncode == 0, run.stderr
    assert "ranks 0-1 of a world of" in _cli("export", *map(str, first), "-o", a).stdout
    for command in (["analyze", "-f", "json"], ["graph"], ["entries", "-f", "csv"]):
        whole = _cli(*command, str(job), "-q")
        merged = _cli(*command, a, b, "-q")
        assert (merged.returncode, merged.stdout) == (whole.returncode, whole.stdout), command
    report = _cli("report", a, b, "-o", str(tmp_path / "r.html"), "--exit-code")
    assert report.returncode == _cli("analyze", str(job)).returncode
    assert (
        report.stdout.splitlines()[-1]
        == _cli("report", str(job), "-o", str(tmp_path / "w.html")).stdout.splitlines()[-1]
    )
    # A merged set exports as one store, and re-opens to the same analysis.
    run = _cli("export", a, b, "-o", str(tmp_path / "ab"))
    assert run.returncode == 0 and "ranks 0-3" in run.stdout
    assert (
        _cli("analyze", str(tmp_path / "ab"), "-f", "json").stdout
        == _cli("analyze", str(job), "-f", "json").stdout
    )
    warned = _cli("analyze", a, b, "--prefix", "x_", "--jobs", "2")
    assert "hangscope: warning: --prefix, --jobs do(es) not apply to stores" in warned.stderr


def test_a_tables_only_store_opens_alone_and_refuses_what_it_cannot_apply(tmp_path: Path) -> None:
    job = SAMPLES / "stall_w4"
    result = analyze(job, jobs=1)
    old = write_store(result.tables, tmp_path / "old")  # no parsed dumps: format 1
    assert json.loads((old / MARKER).read_text())["format"] == "hangscope.store/1"
    again = analyze(old)
    pdt.assert_frame_equal(again.tables.entries, result.tables.entries)
    assert again.culprit_ranks == result.culprit_ranks
    run = _cli("analyze", str(old), "--world-size", "8")
    assert run.returncode == 2 and "--world-size 8 cannot be applied" in run.stderr
    new = export(shards(job, 2, True)[1], tmp_path / "new")
    run = _cli("analyze", str(old), str(new))
    assert run.returncode == 2 and "holds no parsed dumps" in run.stderr


def redigest(store: Path) -> Path:
    """The marker's digests made those of the files as they are now: a store made up or
    changed by someone who knows the format (the digests tie files written together; what
    they hold is still checked field by field)."""
    from analyzer.store.layout import digest_of

    meta = json.loads((store / MARKER).read_text())
    meta["digests"] = {p.name: digest_of(p) for p in sorted(store.iterdir()) if p.name != MARKER}
    (store / MARKER).write_text(json.dumps(meta))
    return store


def test_a_damaged_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = export(sorted((SAMPLES / "stall_w4").iterdir()), tmp_path / "s")
    table = pq.read_table(store / "parsed.parquet")
    bad = table.set_column(
        table.column_names.index("op"), "op", pa.array([99] * table.num_rows, pa.int32())
    )
    pq.write_table(bad, store / "parsed.parquet")
    run = _cli("analyze", str(store))
    assert run.returncode == 2 and "not the file written with this store" in run.stderr
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2, run.stderr
    assert "dumps.parquet is malformed (ValueError: op codes outside" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    (store / "dumps.parquet").write_bytes(b"not parquet")
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2 and "cannot read its parsed dumps" in run.stderr


def _as_format_2(store: Path) -> None:
    """Rewrite a store as the previous format wrote it: member lists inline in every dump's
    pg_config, no members.json."""
    import pandas as pd

    lists = json.loads((store / "members.json").read_text())["members"]
    dumps = pd.read_parquet(store / "dumps.parquet")
    dumps["pg_config"] = [
        json.dumps(
            {
                name: [desc, None if i is None else lists[i]]
                for name, (desc, i) in json.loads(text).items()
            }
        )
        for text in dumps["pg_config"]
    ]
    dumps.to_parquet(store / "dumps.parquet", index=False)
    (store / "members.json").unlink()
    meta = json.loads((store / MARKER).read_text())
    meta["format"] = "hangscope.store/2"
    meta.pop("digests", None)  # the format wrote none
    (store / MARKER).write_text(json.dumps(meta))


def test_member_lists_are_stored_once_and_format_2_stores_still_open(tmp_path: Path) -> None:
    job = tmp_path / "job"
    simulate_job(job, tp=2, pp=2, dp=2, fault="stall", buffer_size=50, seed=3)
    raw = analyze(job, jobs=1)
    first, second = shards(job, 2, contiguous=True)
    a, b = export(first, tmp_path / "a"), export(second, tmp_path / "b")
    lists = json.loads((a / "members.json").read_text())["members"]
    assert len(lists) == len({tuple(m) for m in lists})  # each distinct list once
    assert list(range(8)) in lists  # the default group's
    assert_same(analyze([a, b]), raw)
    _as_format_2(a)
    assert_same(analyze([a, b]), raw)  # an old store merges with a new one
    assert_same(analyze(a), analyze(first, jobs=1))


def test_a_damaged_member_list_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = export(sorted((SAMPLES / "stall_w4").iterdir()), tmp_path / "s")
    (store / "members.json").write_text('{"members": [[0, "x"]]}')
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2, run.stderr
    assert (
        "cannot read members.json (ValueError: a member rank that is not an integer)" in run.stderr
    )
    (store / "members.json").write_text('{"members": []}')
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2 and "a member list index outside members.json" in run.stderr, (
        run.stderr
    )
    assert len(run.stderr.strip().splitlines()) == 1


def test_parsed_columns_are_narrow_and_int64_stores_still_open(tmp_path: Path) -> None:
    """parsed.parquet holds each integer column in the width its values need; a store whose
    columns are all int64 (as earlier versions wrote them) re-opens to the same analysis."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    job = tmp_path / "job"
    simulate_job(job, tp=2, pp=2, dp=2, fault="stall", buffer_size=300, seed=5)
    store = export(sorted(job.iterdir()), tmp_path / "s")
    schema = pq.read_schema(store / "parsed.parquet")
    assert schema.field("record_id").type == pa.int16()  # 300 entries per rank
    assert schema.field("op").type == pa.int8()  # a handful of ops
    assert schema.field("time_created_ns").type == pa.int64()
    before = analyze(store)
    assert_same(before, analyze(job, jobs=1))
    table = pq.read_table(store / "parsed.parquet")
    wide = pa.table(
        {
            name: table.column(name).cast(pa.int64())
            if pa.types.is_integer(table.column(name).type) and name != "dump"
            else table.column(name)
            for name in table.column_names
        }
    )
    pq.write_table(wide, store / "parsed.parquet", row_group_size=1000)
    assert_same(analyze(redigest(store)), before)


@pytest.mark.parametrize(
    ("column", "values", "says"),
    [
        ("seq", ["x"], "parsed.parquet column seq holds object, not integer values"),
        ("retired", [1.5], "parsed.parquet column retired holds float64, not bool values"),
        ("duration_ms", ["x"], "parsed.parquet column duration_ms holds object, not float values"),
        ("seq", [1, None], "parsed.parquet column seq holds float64, not integer values"),
    ],
)
def test_a_parsed_column_of_another_kind_is_one_line_and_exit_2(
    column: str, values: list[object], says: str, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = export(sorted((SAMPLES / "stall_w4").iterdir()), tmp_path / "s")
    table = pq.read_table(store / "parsed.parquet")
    bad = table.set_column(
        table.column_names.index(column),
        column,
        pa.array((values * table.num_rows)[: table.num_rows]),
    )
    pq.write_table(bad, store / "parsed.parquet")
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2, run.stderr
    assert says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_an_export_that_fails_leaves_no_store_and_nothing_staged(tmp_path: Path) -> None:
    """The parsed dumps are staged before normalize: when normalize refuses the dumps
    (--world-size smaller than a rank), nothing of the export is left in the folder."""
    out = tmp_path / "out"
    out.mkdir()  # empty: a folder of other files is refused before anything is read
    run = _cli("export", str(SAMPLES / "stall_w4"), "-o", str(out), "--world-size", "2", "-q")
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert sorted(p.name for p in out.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no build folder beside it


def test_released_dumps_are_not_written_to_a_store(tmp_path: Path) -> None:
    from analyzer.errors import InputError
    from analyzer.load.loader import load_dumps
    from analyzer.normalize.tables import normalize
    from analyzer.store.parsed_dumps import write_parsed

    loaded = load_dumps([SAMPLES / "stall_w4"], jobs=1)
    normalize(loaded, release=True)
    with pytest.raises(InputError, match="handed their entries over"):
        write_parsed(loaded, tmp_path / "s")


def test_one_store_keeps_the_ranks_whose_only_dump_was_an_older_rounds(tmp_path: Path) -> None:
    """A periodic dump's two rounds, exported into one store: the store holds the newer
    round's dumps only, and says which ranks had only an older round's (``inputs.json``).
    Reopened alone, it is analyzed as the files were: ranks 0 and 3 still count in the
    world and are still doubted. Before: a world of 2 ranks with one fewer suspect."""
    _, folder = corpus_case("two_faults_tp1cp2pp1dp2_gloo_mb_periodic_t213_s02659", tmp_path)
    raw = analyze(folder, jobs=1)
    assert raw.loaded is not None and [r for r, _ in raw.loaded.stale] == [0, 3]
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    store = export(files, tmp_path / "store")
    assert [r for r, _ in json.loads((store / "inputs.json").read_text())["stale"]] == [0, 3]
    merged = analyze(store)
    assert merged.loaded is not None and merged.loaded.stale == raw.loaded.stale
    assert_same(merged, raw)


def test_a_store_keeps_the_ranks_the_debug_server_stopped_reaching(tmp_path: Path) -> None:
    """A store answers as the folder it was exported from: the ranks the debug server
    stopped reaching travel in contexts.json, checked on the way back like the rest."""
    _, folder = corpus_case("two_faults_tp1pp1dp8_torchcomms_debugsrv_t215_s04203", tmp_path)
    store = export([folder], tmp_path / "s")
    got, want = analyze(store, jobs=1), analyze(folder, jobs=1)
    assert list(want.contexts.no_answer) == [6]
    assert got.contexts.no_answer == want.contexts.no_answer
    assert got.diagnosis.culprits == want.diagnosis.culprits
    doc = json.loads((store / "contexts.json").read_text())
    doc["no_answer"][0]["rank"] = 10**9
    (store / "contexts.json").write_text(json.dumps(doc))
    run = _cli("analyze", str(redigest(store)))
    assert run.returncode == 2, run.stderr
    assert "contexts.json is malformed (ValueError: a rank beyond any job's" in run.stderr


def test_a_store_keeps_the_ranks_whose_wrapped_buffer_did_not_line_up(tmp_path: Path) -> None:
    """Their evidence is doubtful from a store as from the files (inputs.json)."""
    folder = undecided_torchcomms_job(tmp_path / "job")
    store = export([folder], tmp_path / "s")
    got, want = analyze(store, jobs=1), analyze(folder, jobs=1)
    assert got.loaded is not None and want.loaded is not None
    assert sorted(want.loaded.torchcomms.unaligned) == [1]
    assert got.loaded.torchcomms.unaligned == want.loaded.torchcomms.unaligned
    assert got.diagnosis.culprits == want.diagnosis.culprits
