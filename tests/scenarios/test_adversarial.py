"""Input nobody can trust: stray files, compressed and archived dumps, broken fields, bombs,
duplicates, escapes and exit codes. Each case starts from a recorded sample whose culprit is
known, and the verdict on the ranks left untouched must not change."""

from __future__ import annotations

import bz2
import copyreg
import gzip
import io
import json
import lzma
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import analyzer
from analyzer import cli
from analyzer.cli.commands import app
from analyzer.config import AnalysisConfig
from analyzer.errors import DumpFormatError, InputError, UnsafeDumpError
from analyzer.load import unpack as payload
from analyzer.load.decode import load_raw
from analyzer.load.loader import load_dumps
from analyzer.load.parse import parse_dump
from tests import hostile
from tests.conftest import ROOT, dump, entry, write_pickle
from tests.hostile import CHAIN, JSON8
from tests.hostile import copy_job as _copy
from tests.hostile import load as _load

runner = CliRunner()


def _doc(target: Path | str, *extra: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["analyze", str(target), "-q", "-f", "json", *extra])
    assert "Traceback" not in (res.stderr or ""), res.stderr
    return res.exit_code, json.loads(res.stdout)


# 1. recognised by content -----------------------------------------------------------------


def test_stray_files_are_ignored_not_ranks(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "core.12345").write_bytes(b"\x7fELF" + os.urandom(100_000))
    (job / "train_log_1700000000").write_text("step 1 loss 2.3\n" * 1000)
    (job / "zeros_9").write_bytes(bytes(1 << 20))
    (job / "hangscope_context_rank_2.json").write_text(
        json.dumps({"schema": "hangscope.context/1", "rank": 2, "version": "1"})
    )
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3]
    assert doc["world_size"] == 8 and doc["missing_dumps"] == [] and doc["skipped_files"] == []
    ignored = {Path(i["path"]).name for i in doc["ignored_files"]}
    assert {
        "core.12345",
        "train_log_1700000000",
        "zeros_9",
        "EXPECTED.json",
        "hangscope_context_rank_2.json",
    } - {"EXPECTED.json"} <= ignored
    text = runner.invoke(app, ["analyze", str(job), "-q"]).stdout
    assert "ignored files: 4 (not flight-recorder dumps; -v lists them)" in text
    verbose = runner.invoke(app, ["analyze", str(job), "-q", "-v"]).stdout
    assert "core.12345: not a flight-recorder dump" in verbose


def test_a_dump_with_an_odd_name_is_still_read(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "nccl_trace_rank_0").rename(job / "snapshot-host7.0")  # rank from the trailing number
    _, doc = _doc(job)
    assert doc["culprit_ranks"] == [3] and doc["dumped_ranks"] == 8


def test_directory_of_foreign_files_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "core.1").write_bytes(b"\x7fELF" + bytes(100))
    (tmp_path / "notes_3").write_text("hello")
    res = runner.invoke(app, ["analyze", str(tmp_path)])
    assert res.exit_code == 2 and "none of the 2 file(s) is a flight-recorder dump" in res.stderr


# 2. ranks and the world from evidence ------------------------------------------------------


def test_highest_rank_crashing_is_detected(tmp_path: Path) -> None:
    hostile.highest_rank_crashed(tmp_path)
    _, doc = _doc(tmp_path)
    assert doc["world_size"] == 4  # an all_gather of 4 shapes in the default group
    assert doc["culprit_ranks"] == [3] and doc["kind"] == "missing_dump"
    assert doc["missing_dumps"] == [3]


def test_unreadable_ranks_are_never_blamed_ahead_of_a_stalled_rank(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.unreadable_ranks(job)
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3]
    assert doc["world_size"] == 8 and doc["unreadable_ranks"] == [4, 5, 6, 7]
    assert len(doc["skipped_files"]) == 4
    assert all("not blamed" in f["summary"] for f in doc["findings"] if f["kind"] == "missing_dump")


def test_a_lone_unreadable_high_rank_does_not_extend_the_world(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "nccl_trace_rank_4000").write_bytes(b"\x80\x04garbage")
    _, doc = _doc(job)
    assert doc["world_size"] == 8 and doc["culprit_ranks"] == [3]
    assert [s["rank"] for s in doc["skipped_files"]] == [4000]


# 3. compressed and archived dumps ----------------------------------------------------------


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize(
    ("ext", "pack"),
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress), (".zst", _zstd)],
)
def test_compressed_dumps_are_read(tmp_path: Path, ext: str, pack: Any) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    for r in (0, 3):
        p = job / f"nccl_trace_rank_{r}"
        (job / (p.name + ext)).write_bytes(pack(p.read_bytes()))
        p.unlink()
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3] and doc["dumped_ranks"] == 8


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tgz", "tar.xz", "zip"])
def test_archives_of_dumps_are_read_without_writing_to_disk(tmp_path: Path, kind: str) -> None:
    archive = tmp_path / f"dumps.{kind}"
    names = sorted(CHAIN.glob("nccl_trace_rank_*"))
    if kind == "zip":
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in names:
                zf.write(p, arcname=f"job/{p.name}")
            zf.writestr("../../escaped_rank_9", b"x")  # a path that would leave the folder
    else:
        mode = {"tar": "w", "tar.gz": "w:gz", "tgz": "w:gz", "tar.xz": "w:xz"}[kind]
        with tarfile.open(archive, mode) as tf:
            for p in names:
                tf.add(p, arcname=f"job/{p.name}")
            info = tarfile.TarInfo("../../escaped_rank_9")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    before = set(tmp_path.parent.rglob("*"))
    code, doc = _doc(archive)
    assert code == 1 and doc["culprit_ranks"] == [3] and doc["dumped_ranks"] == 8
    assert set(tmp_path.parent.rglob("*")) == before  # nothing extracted
    assert [s["rank"] for s in doc["skipped_files"]] == [9]


def test_decompression_bomb_is_one_line(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.gzip_bomb(job / "nccl_trace_rank_8.gz", 64)
    small = AnalysisConfig(max_dump_bytes=8 << 20)
    for jobs in (1, 2):  # in this process, and in the parser processes (fork pool)
        loaded = load_dumps([job], jobs=jobs, config=small)
        assert sorted(d.rank for d in loaded.dumps) == list(range(8))
        (skip,) = loaded.skipped
        assert "over 8 MB" in skip.reason and "decompression bomb" in skip.reason, jobs
    _, doc = _doc(job)  # the default caps read it through: a truncated pickle
    assert doc["culprit_ranks"] == [3] and len(doc["skipped_files"]) == 1


def test_the_environment_sets_the_caps(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.gzip_bomb(job / "nccl_trace_rank_8.gz", 64)
    env = {**os.environ, "HANGSCOPE_MAX_DUMP_MB": "8"}
    res = subprocess.run(
        [sys.executable, "-m", "analyzer", "analyze", str(job), "-q", "-f", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["culprit_ranks"] == [3]
    (skip,) = doc["skipped_files"]
    assert "over 8 MB" in skip["reason"] and "decompression bomb" in skip["reason"]
    assert AnalysisConfig.from_env({"HANGSCOPE_MAX_ARCHIVE_MB": "3"}).max_archive_bytes == 3 << 20
    assert AnalysisConfig.from_env({"HANGSCOPE_MAX_DUMP_MB": "lots"}) == AnalysisConfig()


def test_oversized_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    p = tmp_path / "nccl_trace_rank_0"
    with open(p, "wb") as f:
        f.write(b"\x80\x04}X\x07\x00\x00\x00version")
        f.truncate(1 << 40)  # 1 TB, sparse: reading it would never end
    with pytest.raises(DumpFormatError, match="over the 1 MB"):
        parse_dump(0, p, config=AnalysisConfig(max_dump_bytes=1 << 20))
    p.unlink()


def test_archive_caps_come_from_the_config(tmp_path: Path) -> None:
    archive = tmp_path / "dumps.tar"
    with tarfile.open(archive, "w") as tf:
        for p in sorted(CHAIN.glob("nccl_trace_rank_*")):
            tf.add(p, arcname=f"job/{p.name}")
    loaded = load_dumps([archive], config=AnalysisConfig(max_archive_members=5))
    assert len(loaded.dumps) == 5
    (skip,) = loaded.skipped
    assert skip.reason == "more than 5 members: the rest is not read"
    size = (CHAIN / "nccl_trace_rank_0").stat().st_size
    loaded = load_dumps([archive], config=AnalysisConfig(max_archive_bytes=size * 3))
    assert len(loaded.dumps) < 8
    assert any("decompressed-size budget" in s.reason for s in loaded.skipped)


# 4. malformed values are dropped with a counted reason ------------------------------------


def test_wrong_types_drop_entries_with_reasons(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.wrong_types(job / "nccl_trace_rank_5")
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3]
    warnings = {w["warning"] for w in doc["warnings"] if w["rank"] == 5}
    assert "1 entry dropped: profiling_name is not a string" in warnings
    assert "1 entry dropped: process_group is missing or not (name, desc) strings" in warnings
    assert "1 value ignored: frames is not a list of frames" in warnings
    assert doc["suspect_ranks"] == [5]
    text = runner.invoke(app, ["analyze", str(job), "-q"]).stdout
    assert "rank 5: 1 entry dropped: profiling_name is not a string" in text
    html = analyzer.analyze(job).report_html(plotlyjs="cdn")
    assert "profiling_name is not a string" in html


def test_corrupt_values_in_a_waiting_rank_do_not_move_the_blame(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.corrupt_values(job / "nccl_trace_rank_2")  # rank 2 waits on rank 3
    _, doc = _doc(job)
    assert doc["culprit_ranks"] == [3] and doc["kind"] == "not_joined"
    assert doc["suspect_ranks"] == [2]
    assert sum(int(w["warning"].split()[0]) for w in doc["warnings"]) == 4


def test_a_suspect_dump_alone_does_not_blame_its_rank(make_job: Any) -> None:
    # Rank 1 stalled before seq 3; rank 2's dump lost its seq 3 entry to a broken field, so
    # it looks as stalled as rank 1 from the others' side: it is not blamed ahead of rank 1.
    def done(seq: int) -> dict[str, Any]:
        return entry(seq, state="completed", retired=True)

    job = make_job(
        {r: [done(1), done(2), entry(3)] if r != 1 else [done(1), done(2)] for r in range(4)}
    )
    assert _doc(job)[1]["culprit_ranks"] == [1]
    p = job / "nccl_trace_rank_2"
    obj = _load(p)
    obj["entries"][2]["process_group"] = 5
    obj["pg_status"]["0"]["last_enqueued_collective"] = 2
    p.write_bytes(pickle.dumps(obj))
    _, doc = _doc(job)
    assert doc["culprit_ranks"] == [1]
    assert any(
        2 in f["ranks"] and not f["culprit"] and "not blamed" in f["summary"]
        for f in doc["findings"]
    )


# 5. bounded cost per bad file --------------------------------------------------------------


@pytest.mark.parametrize("case", ["deep_json", "deep_pickle", "laughs", "huge_length", "member"])
def test_bombs_cost_one_line(tmp_path: Path, case: str) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    if case == "deep_json":
        (job / "rank_100.json").write_text(hostile.deep_json(100_000))
    elif case == "deep_pickle":
        (job / "nccl_trace_rank_100").write_bytes(hostile.deep_pickle(200_000))
    elif case == "laughs":
        (job / "nccl_trace_rank_100").write_bytes(hostile.laughs())
    elif case == "huge_length":
        (job / "nccl_trace_rank_100").write_bytes(hostile.huge_length())
    else:
        hostile.absurd_member(job / "nccl_trace_rank_6")
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3] and doc["world_size"] == 8
    if case == "member":
        assert any("pg_config ranks" in w["warning"] for w in doc["warnings"])
    elif case == "laughs":
        # Its only entry's sizes are refused by a bounded walk, never expanded: nothing usable.
        (skip,) = doc["skipped_files"]
        assert skip["rank"] == 100 and "input_sizes is not a list of shapes" in skip["reason"]
    else:
        assert [s["rank"] for s in doc["skipped_files"]] == [100]


# 6. nothing from a dump reaches the terminal raw -------------------------------------------


def test_control_characters_are_escaped_in_text_csv_and_dot(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.escapes(job / "nccl_trace_rank_2")
    bad = ("\x1b", "\x07", "\r", "\u202e")
    for argv in (
        ["analyze", str(job), "-q"],
        ["entries", str(job), "-q", "-f", "csv"],
        ["entries", str(job), "-q"],
        ["graph", str(job), "-q", "-f", "dot"],
        ["graph", str(job), "-q"],
    ):
        out = runner.invoke(app, argv).stdout
        assert not any(ch in out for ch in bad), argv
    text = runner.invoke(app, ["analyze", str(job), "-q"]).stdout
    assert "NO HANG" not in text.splitlines()[0]
    csv = runner.invoke(app, ["entries", str(job), "-q", "-f", "csv"]).stdout
    assert "\\x1b[2J\\x1b[HNO HANG\\n" in csv


def test_file_names_are_escaped(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "nccl_trace_rank_8\x1b[31m").write_bytes(b"")
    res = runner.invoke(app, ["analyze", str(job), "-q", "-v"])
    assert "\x1b" not in res.stdout and "\\x1b[31m" in res.stdout


# 7. duplicates -------------------------------------------------------------------------------


def test_identical_copy_is_merged_with_a_note(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "sub").mkdir()
    shutil.copy(job / "nccl_trace_rank_0", job / "sub" / "nccl_trace_rank_0")
    (job / "nccl_trace_rank_1.gz").write_bytes(
        gzip.compress((job / "nccl_trace_rank_1").read_bytes())
    )
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3] and doc["dumped_ranks"] == 8
    assert sorted((d["rank"], d["identical"]) for d in doc["duplicates"]) == [(0, True), (1, True)]
    text = runner.invoke(app, ["analyze", str(job), "-q"]).stdout
    assert "is a byte-identical copy of" in text
    assert runner.invoke(app, ["analyze", str(job), "-q", "--strict"]).exit_code == 1


def test_two_different_dumps_keep_the_newer_and_strict_is_exit_2(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.older_copy(job / "nccl_trace_rank_0", job / "old" / "nccl_trace_rank_0")
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3]
    (dup,) = doc["duplicates"]
    assert not dup["identical"] and dup["kept"].endswith("job/nccl_trace_rank_0")
    assert dup["dropped"].endswith("old/nccl_trace_rank_0")
    res = runner.invoke(app, ["analyze", str(job), "-q", "--strict"])
    assert res.exit_code == 2 and "--strict: rank 0: two different dumps" in res.stderr


def test_an_earlier_attempts_dump_of_a_rank_is_another_incident(tmp_path: Path) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    hostile.older_copy(job / "nccl_trace_rank_0", job / "old" / "nccl_trace_rank_0", shift_s=1000)
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [3] and doc["duplicates"] == []
    assert [(i["name"], i["analyzed"]) for i in doc["incidents"]] == [(".", True), ("old", False)]


def test_different_backends_of_one_rank_are_both_kept(tmp_path: Path) -> None:
    write_pickle(tmp_path / "nccl2_trace_rank_0", dump([entry(1, backend="nccl2")]))
    write_pickle(tmp_path / "gloo_trace_rank_0", dump([entry(1, backend="gloo")]))
    loaded = load_dumps([tmp_path])
    assert sorted(d.path.rsplit("/", 1)[-1] for d in loaded.dumps) == [
        "gloo_trace_rank_0",
        "nccl2_trace_rank_0",
    ]
    assert loaded.duplicates == ()


# 8. BOM, UTF-16, folders -------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"])
def test_json_with_bom_or_utf16_is_read(tmp_path: Path, encoding: str) -> None:
    job = _copy(JSON8, tmp_path / "job")
    p = job / "rank_0.json"
    p.write_bytes(p.read_text().encode(encoding))
    code, doc = _doc(job)
    assert code == 1 and doc["culprit_ranks"] == [5] and doc["dumped_ranks"] == 8
    assert doc["skipped_files"] == []


def test_unreadable_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _copy(CHAIN, tmp_path / "job")
    (job / "locked").mkdir()
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if str(path).endswith("locked") or str(path) == str(tmp_path / "top"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    _, doc = _doc(job)
    assert doc["culprit_ranks"] == [3]
    assert doc["unreadable_folders"] == [
        {"path": str(job / "locked"), "reason": "Permission denied"}
    ]
    (tmp_path / "top").mkdir()
    res = runner.invoke(app, ["analyze", str(tmp_path / "top")])
    assert res.exit_code == 2 and "cannot read folder (Permission denied)" in res.stderr


# 9. extension codes ----------------------------------------------------------------------------


def test_extension_codes_are_refused_even_when_registered(tmp_path: Path) -> None:
    copyreg.add_extension("os", "getcwd", 0x7FF0)
    try:
        pickle.loads(b"\x80\x02\x83\xf0\x7f.")  # fills the C unpickler's extension cache
        p = tmp_path / "nccl_trace_rank_0"
        p.write_bytes(
            b"\x80\x02}(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10"
            b"X\x07\x00\x00\x00entries]\x83\xf0\x7f)R\x85u."
        )
        with pytest.raises(UnsafeDumpError, match="extension code"):
            load_raw(p)
        good = tmp_path / "nccl_trace_rank_1"
        good.write_bytes((CHAIN / "nccl_trace_rank_1").read_bytes())
        assert parse_dump(1, good).n_entries > 0  # the slower path still reads real dumps
    finally:
        copyreg.remove_extension("os", "getcwd", 0x7FF0)


# 10. exit codes and options -------------------------------------------------------------------


def test_internal_error_is_exit_3_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("something broke")

    monkeypatch.setattr("analyzer.analysis.analyze", boom)
    for argv, traceback in (
        (["analyze", str(CHAIN)], False),
        (["--debug", "analyze", str(CHAIN)], True),
    ):
        monkeypatch.setattr(sys, "argv", ["hangscope", *argv])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code == 3
        err = capsys.readouterr().err
        assert "hangscope: internal error: RuntimeError: something broke" in err
        assert ("Traceback" in err) is traceback
        if not traceback:
            assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--world-size", "-3"], "--world-size -3: a job has at least one rank"),
        (["--world-size", "0"], "--world-size 0"),
        (["--world-size", "4"], "world size 4 is below the highest dumped rank + 1 (8)"),
        (["--jobs", "0"], "--jobs 0: give at least 1 parser process"),
    ],
)
def test_options_are_validated(argv: list[str], message: str) -> None:
    res = runner.invoke(app, ["analyze", str(CHAIN), *argv])
    assert res.exit_code == 2 and message in res.stderr


def test_library_rejects_a_bad_world_size() -> None:
    with pytest.raises(InputError):
        analyzer.analyze(CHAIN, world_size=-3)


def test_version() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.startswith("hangscope ")


def test_payload_sniffing() -> None:
    assert payload.sniff(b"") == "empty"
    assert payload.sniff(bytes(100)) == "foreign"
    assert payload.sniff(b"\x1f\x8b\x08") == "gzip"
    assert payload.sniff('{"version": "2.10"}'.encode("utf-16")) == "json"
    assert payload.sniff(b'\xef\xbb\xbf {"entries": []}') == "json"
    assert payload.sniff(b'{"schema": "hangscope.context/1"}') == "context"
    assert payload.sniff(b"\x80\x04}X\x07\x00\x00\x00version") == "pickle"
    assert payload.sniff(b"\x80\x04}X\x05\x00\x00\x00model") == "foreign-pickle"
    assert ROOT.exists()
