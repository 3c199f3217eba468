"""The simulator's dumps are pinned byte for byte: a change to ``tools/simulate/`` that alters
any file of these jobs (a dump, its name, or EXPECTED.json) fails here. When a change means to
alter the dumps, say so in its commit and update the digests (and ``make accuracy``'s figures).

Each digest is sha256 over the sorted file names, each followed by a NUL byte and the
sha256 of the file's content. The jobs cover a pipeline with the op mix in the mixed dialect,
torch 2.15's hook form as JSON with timing and batched send/recv, and legacy pickles with
timing, several writer processes and a deadlock.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.simulate import simulate_job

REPO = Path(__file__).resolve().parents[2]

PINNED: list[tuple[dict[str, Any], int, str]] = [
    (
        dict(
            tp=1,
            pp=8,
            dp=2,
            fault="pipeline_stall",
            seed=3,
            op_mix=True,
            buffer_size=300,
            dialect="mixed",
        ),
        17,
        "a155f2244b524b0fe47db15ab0324c4960bbae47a47d490b656411dac570663b",
    ),
    (
        dict(
            tp=2,
            pp=2,
            dp=2,
            fault="slow_gpu",
            seed=1,
            timing=True,
            batch_p2p=True,
            buffer_size=150,
            dialect="nccl2",
            fmt="json",
        ),
        9,
        "366f1d0bd76d82c6df102fdf5e90d60132438a9d35ebb38b92b03fde65e62b02",
    ),
    (
        dict(tp=2, pp=2, dp=2, fault="pp_deadlock", seed=2, timing=True, buffer_size=150),
        9,
        "f323cadb1b1cbb55d77b14d9acb78b9dffee0dede590ebc8b39c37362c861768",
    ),
]


def _digest(d: Path) -> tuple[int, str]:
    files = sorted(f for f in d.iterdir() if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return len(files), h.hexdigest()


@pytest.mark.parametrize(
    ("kw", "n_files", "digest"),
    PINNED,
    ids=[f"{kw['fault']}-{kw.get('dialect', 'nccl')}" for kw, _, _ in PINNED],
)
def test_simulated_job_is_pinned(
    tmp_path: Path, kw: dict[str, Any], n_files: int, digest: str
) -> None:
    simulate_job(tmp_path, **kw)
    assert _digest(tmp_path) == (n_files, digest)


def test_the_command_line_writes_the_same_job(tmp_path: Path) -> None:
    # python -m tools.simulate runs the package's __main__ with the same options, in two
    # writer processes.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.simulate",
            "-o",
            str(tmp_path),
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "2",
            "--fault",
            "pp_deadlock",
            "--seed",
            "2",
            "--timing",
            "--buffer-size",
            "150",
            "--jobs",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-1000:]
    assert _digest(tmp_path) == PINNED[2][1:]
