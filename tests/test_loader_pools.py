"""The loader's parallel parsers: threads for plain pickles the compiled reader reads,
processes otherwise, one process for ``jobs=1``. All three give the same dumps."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

import analyzer.loader as loader
from analyzer import fastreader
from analyzer.loader import Loaded, load_dumps
from tests.conftest import SAMPLES


def _same(a: Loaded, b: Loaded) -> None:
    assert [(d.rank, d.path) for d in a.dumps] == [(d.rank, d.path) for d in b.dumps]
    assert (a.skipped, a.ignored, a.duplicates) == (b.skipped, b.ignored, b.duplicates)
    for x, y in zip(a.dumps, b.dumps, strict=True):
        for f in dataclasses.fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if isinstance(u, dict) and u and isinstance(next(iter(u.values())), np.ndarray):
                assert u.keys() == v.keys()
                for k in u:
                    assert u[k].dtype == v[k].dtype and np.array_equal(u[k], v[k], equal_nan=u[k].dtype.kind == "f")
            else:
                assert u == v, (x.path, f.name)


def _job(tmp_path: Path) -> Path:
    """Sixteen ranks of plain pickles (a sample's four dumps, renamed), and junk beside them."""
    out = tmp_path / "job"
    out.mkdir()
    src = sorted((SAMPLES / "chain_tp_dp_w8").glob("nccl_trace_rank_*"))
    for r in range(16):
        shutil.copy(src[r % len(src)], out / f"nccl_trace_rank_{r}")
    (out / "README.md").write_text("notes")
    (out / "nccl_trace_rank_99").write_bytes(b"\x80\x04truncated")
    return out


@pytest.mark.skipif(not fastreader.native_available(), reason="the compiled reader is not built")
def test_threads_processes_and_one_process_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path)
    assert loader._native_pickles([(0, str(job / "README.md"), False, False, None),
                                   (0, str(job / "nccl_trace_rank_0"), True, False, None)])
    one = load_dumps([job], jobs=1)
    threads = load_dumps([job], jobs=2)
    assert len(one.dumps) == 16 and [s.rank for s in one.skipped] == [99]
    _same(one, threads)
    monkeypatch.setattr(loader, "_native_pickles", lambda items, probe=4: False)
    _same(one, load_dumps([job], jobs=2))


def test_processes_read_what_the_compiled_reader_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path)
    monkeypatch.setenv(fastreader.READER_ENV, "python")
    items = [(0, str(job / "nccl_trace_rank_0"), True, False, None)]
    assert not loader._native_pickles(items)
    monkeypatch.delenv(fastreader.READER_ENV)
    (job / "nccl_trace_rank_0").write_bytes(b'{"version": "2.4", "entries": []}')
    assert not loader._native_pickles(items)  # a JSON dump first: processes
    _same(load_dumps([job], jobs=1), load_dumps([job], jobs=2))
