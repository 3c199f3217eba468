"""The loader's parser processes and one process give the same dumps, with either reader."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer import fastreader
from analyzer.loader import Loaded, load_dumps
from tests.conftest import SAMPLES, assert_same_fields


def _same(a: Loaded, b: Loaded) -> None:
    assert [(d.rank, d.path) for d in a.dumps] == [(d.rank, d.path) for d in b.dumps]
    assert (a.skipped, a.ignored, a.duplicates) == (b.skipped, b.ignored, b.duplicates)
    for x, y in zip(a.dumps, b.dumps, strict=True):
        assert_same_fields(x, y)


def _job(tmp_path: Path) -> Path:
    """Sixteen ranks (a sample's dumps, renamed), a JSON dump, and junk beside them."""
    out = tmp_path / "job"
    out.mkdir()
    src = sorted((SAMPLES / "chain_tp_dp_w8").glob("nccl_trace_rank_*"))
    for r in range(16):
        shutil.copy(src[r % len(src)], out / f"nccl_trace_rank_{r}")
    (out / "nccl_trace_rank_16").write_bytes(b'{"version": "2.4", "entries": []}')
    (out / "README.md").write_text("notes")
    (out / "nccl_trace_rank_99").write_bytes(b"\x80\x04truncated")
    return out


@pytest.mark.parametrize("reader", ["auto", "python"])
def test_processes_and_one_process_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 reader: str) -> None:
    monkeypatch.setenv(fastreader.READER_ENV, reader)
    job = _job(tmp_path)
    one = load_dumps([job], jobs=1)
    assert len(one.dumps) == 17 and [s.rank for s in one.skipped] == [99]
    _same(one, load_dumps([job], jobs=2))
