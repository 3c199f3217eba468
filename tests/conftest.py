"""Builders for small synthetic dumps, and paths to the real ones."""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_dumps"
FIXTURES = ROOT.parent / "shared" / "fixtures"
CORPUS_CASES = ROOT / "corpus" / "cases"


def assert_same_value(a: Any, b: Any, where: str = "") -> None:
    """Equal values of equal types, arrays of equal dtype (NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (where, a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
        return
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), (where, list(a), list(b))
        for key in a:
            assert_same_value(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_value(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, (where, a, b)


def assert_same_fields(a: Any, b: Any, skip: tuple[str, ...] = ()) -> None:
    """Two dataclass records (parsed dumps, say) equal field by field, as :func:`assert_same_value`."""
    for f in dataclasses.fields(a):
        if f.name not in skip:
            assert_same_value(
                getattr(a, f.name), getattr(b, f.name), f"{getattr(a, 'path', '')}:{f.name}"
            )


def entry(
    seq: int,
    *,
    op: str = "all_reduce",
    pg: tuple[str, str] = ("0", "default_pg"),
    pg_id: int = 0,
    record_id: int = 0,
    sizes: list[list[int]] | None = None,
    dtype: str = "Float",
    state: str = "scheduled",
    retired: bool = False,
    backend: str = "nccl",
    p2p_seq: int = 0,
    is_p2p: bool = False,
    t: int = 0,
    frames: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One flight-recorder entry in the shape PyTorch writes (format 2.10)."""
    sizes = [[8]] if sizes is None else sizes
    return {
        "record_id": record_id,
        "pg_id": pg_id,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": seq,
        "profiling_name": f"{backend}:{op}",
        "time_created_ns": 1_000_000 + t * 1000,
        "input_sizes": sizes,
        "output_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes),
        "output_dtypes": [dtype] * len(sizes),
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": retired,
        "timeout_ms": 600000,
        "is_p2p": is_p2p,
        "thread_id": "1",
        "thread_name": "python",
        "frames": frames
        if frames is not None
        else [{"name": "train_step", "filename": "/jobs/train.py", "line": 40 + seq % 3}],
    }


def dump(
    entries: list[dict[str, Any]],
    *,
    world: int = 4,
    backend: str = "nccl",
    status: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    if status is None:
        last = max((e["collective_seq_id"] for e in entries), default=-1)
        done = max(
            (e["collective_seq_id"] for e in entries if e["state"] == "completed"), default=-1
        )
        status = {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": -1,
                "last_completed_collective": done,
            }
        }
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": status,
        "comm_lib_version": "2.21.5" if backend == "nccl" else "",
        "entries": entries,
    }


def write_pickle(path: Path, obj: Any) -> Path:
    path.write_bytes(pickle.dumps(obj))
    return path


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


@pytest.fixture
def make_job(tmp_path: Path) -> Callable[..., Path]:
    """Write one dump per rank: ``make_job({rank: [entries]}, world=4)`` -> directory."""

    def _make(
        per_rank: dict[int, list[dict[str, Any]]],
        *,
        world: int = 4,
        backend: str = "nccl",
        fmt: str = "pickle",
        name: str = "job",
    ) -> Path:
        out = tmp_path / name
        out.mkdir()
        for rank, entries in per_rank.items():
            for i, e in enumerate(entries):
                e["record_id"] = i
            obj = dump(entries, world=world, backend=backend)
            if fmt == "json":
                write_json(out / f"rank_{rank}.json", json.loads(json.dumps(obj)))
            else:
                write_pickle(out / f"nccl_trace_rank_{rank}", obj)
        return out

    return _make


def fixture_dir(*parts: str) -> Path:
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared fixtures not present at {FIXTURES}")
    return path


def corpus_case(name: str, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The truth of the real corpus case ``name`` and its files unpacked under ``tmp_path``
    (skipped where the case is not in the corpus)."""
    from tools.corpus.check import read_case

    path = CORPUS_CASES / f"{name}.tar.xz"
    if not path.is_file():
        pytest.skip(f"{name} is not in the corpus")
    truth, folder = read_case(path, tmp_path)
    assert folder is not None
    return truth, folder


def confidences(d: Any) -> dict[int, str]:
    """Each culprit of a diagnosis and how sure it is: rank -> certain, likely or suspect."""
    return {c.rank: str(c.confidence) for c in d.culprits}


def reasons(d: Any) -> dict[int, str]:
    """Each culprit of a diagnosis and the fact that decides how sure it is: rank -> because."""
    return {c.rank: c.because for c in d.culprits}


def undecided_torchcomms_job(folder: Path) -> Path:
    """Two ranks of a TorchComms job (its recorder, ``tools/torchcomms_fr.py``) where rank
    1's 8-entry buffer wrapped and no line-up of it is decided: its 7 ``world`` all_reduces
    fit 6 positions among rank 0's, and rank 1 also issued one op on a comm of its own, so
    neither the two streams nor the record ids of ``world`` agree under any of them. Rank 0
    waits in one more all_reduce."""
    from tools.torchcomms_fr import FlightRecorder

    class Tensor:
        shape, dtype = (4,), "float32"

    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        fr = FlightRecorder(max_entries=8 if rank else 64)
        world = fr.register("world", "gloo", [0, 1])
        solo = fr.register("solo", "gloo", [1])
        op_id = 0
        for i in range(12 if rank else 13):
            if rank and i == 8:
                fr.record(solo, ("solo", "gloo"), op_id, "gloo:all_reduce", [Tensor()], [Tensor()])
                fr.retire(op_id)
                op_id += 1
            fr.record(world, ("world", "gloo"), op_id, "gloo:all_reduce", [Tensor()], [Tensor()])
            if i < 12:
                fr.retire(op_id)
            op_id += 1
        (folder / f"comm_lib_trace_rank_{rank}").write_bytes(fr.dump())
    return folder


#: The slowest test files (each runs the analyzer over the whole corpus, or its gloo cases).
_SLOWEST_FIRST = ("test_accuracy_real.py", "test_accuracy_world.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first, so that ``pytest -n`` hands one to each worker at the start
    instead of ending on them: ``make test`` passes ``--dist loadfile --no-loadscope-reorder``,
    which deals files out in collection order (without it, files with the most tests go
    first, and these single tests last)."""
    items.sort(key=lambda item: item.path.name not in _SLOWEST_FIRST)
