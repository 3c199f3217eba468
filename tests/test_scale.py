"""Scale safeguards: no quadratic wait lists, and the vectorized helpers agree with the naive
definitions they replace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import analyzer
import analyzer.waits as graph_module
from analyzer.matching import _count_at_least
from tests.conftest import entry


def _many_laggards(world: int, behind: set[int]) -> dict[int, list[dict[str, Any]]]:
    """Everybody completed seq 1; the ``behind`` ranks never enqueued seq 2."""
    jobs: dict[int, list[dict[str, Any]]] = {}
    for r in range(world):
        entries = [entry(1, state="completed", retired=True, t=1)]
        if r not in behind:
            entries.append(entry(2, t=2))
        jobs[r] = entries
    return jobs


def _verdict(result: analyzer.Analysis) -> tuple[object, ...]:
    d = result.diagnosis
    return (d.verdict, d.kind, d.culprit_ranks, d.deadlock_cycles, d.missing_dumps,
            tuple((f.kind, f.ranks, f.culprit) for f in d.findings))


def test_huge_wait_blocks_are_linear_and_keep_the_answer(
        make_job: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    world, behind = 60, set(range(20, 50))
    job = make_job(_many_laggards(world, behind), world=world)
    full = analyzer.analyze(job)
    assert len(full.waits) == len(behind) * (world - len(behind))  # 30 x 30 pairs
    monkeypatch.setattr(graph_module, "MAX_BLOCK_EDGES", 100)
    compact = analyzer.analyze(job)
    assert len(compact.waits) <= world * 2
    assert _verdict(compact) == _verdict(full)
    assert set(compact.culprit_ranks) == behind
    # Every waiter still waits on someone and every laggard is still waited on.
    assert set(compact.waits["waiter"]) == set(full.waits["waiter"])
    assert set(compact.waits["holder"]) == set(full.waits["holder"])


def test_compacting_every_wait_keeps_the_answer_on_the_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = sorted(p for p in (Path(__file__).resolve().parents[1] / "sample_dumps").iterdir()
                     if p.is_dir())
    full = {p.name: _verdict(analyzer.analyze(p)) for p in samples}
    monkeypatch.setattr(graph_module, "MAX_BLOCK_EDGES", 0)
    for p in samples:
        assert _verdict(analyzer.analyze(p)) == full[p.name], p.name


def test_count_at_least_matches_the_naive_count() -> None:
    rng = np.random.default_rng(7)
    group = rng.integers(0, 6, 300)
    value = rng.integers(-3, 40, 300)
    q_group = rng.integers(-1, 8, 200)
    q_value = rng.integers(-5, 45, 200)
    got = _count_at_least(group, value, q_group, q_value)
    want = [int(((group == g) & (value >= v)).sum()) if g >= 0 else 0
            for g, v in zip(q_group, q_value, strict=True)]
    assert got.tolist() == want
