"""Scale safeguards: no quadratic wait lists, and the vectorized helpers agree with the naive
definitions they replace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import analyzer
from analyzer.config import AnalysisConfig
from analyzer.diagnosis.engine import diagnose
from analyzer.kernels.group_by import group_ids
from analyzer.kinds import WaitKind
from analyzer.load.loader import load_dumps
from analyzer.match.matching import _count_at_least, match
from analyzer.normalize.tables import normalize
from analyzer.waits.edges import edges, waits
from analyzer.waits.graph import build_graph
from analyzer.waits.records import WAIT_COLUMNS, Wait
from tests.conftest import entry


def _analyze(path: Path, config: AnalysisConfig) -> tuple[Any, Any]:
    """The pipeline of :func:`analyzer.analyze` with ``config`` (waits and diagnosis)."""
    tables = normalize(load_dumps([path], jobs=1))
    matching = match(tables, config=config)
    wait_rows = waits(tables, matching, config=config)
    graph = build_graph(tables, wait_rows)
    return wait_rows, diagnose(tables, matching, wait_rows, graph)


def _many_laggards(world: int, behind: set[int]) -> dict[int, list[dict[str, Any]]]:
    """Everybody completed seq 1; the ``behind`` ranks never enqueued seq 2."""
    jobs: dict[int, list[dict[str, Any]]] = {}
    for r in range(world):
        entries = [entry(1, state="completed", retired=True, t=1)]
        if r not in behind:
            entries.append(entry(2, t=2))
        jobs[r] = entries
    return jobs


def _verdict(d: Any) -> tuple[object, ...]:
    return (
        d.verdict,
        d.kind,
        d.culprit_ranks,
        d.deadlock_cycles,
        d.missing_dumps,
        tuple((f.kind, f.ranks, f.culprit) for f in d.findings),
    )


def test_huge_wait_blocks_are_linear_and_keep_the_answer(make_job: Callable[..., Path]) -> None:
    world, behind = 60, set(range(20, 50))
    job = make_job(_many_laggards(world, behind), world=world)
    full = analyzer.analyze(job)
    assert len(full.waits) == len(behind) * (world - len(behind))  # 30 x 30 pairs
    compact_waits, compact = _analyze(job, AnalysisConfig(max_block_edges=100))
    assert len(compact_waits) <= world * 2
    assert _verdict(compact) == _verdict(full.diagnosis)
    assert set(compact.culprit_ranks) == behind
    # Every waiter still waits on someone and every laggard is still waited on.
    assert set(compact_waits["waiter"]) == set(full.waits["waiter"])
    assert set(compact_waits["holder"]) == set(full.waits["holder"])


def test_compacting_every_wait_keeps_the_answer_on_the_samples() -> None:
    samples = sorted(
        p for p in (Path(__file__).resolve().parents[3] / "sample_dumps").iterdir() if p.is_dir()
    )
    for p in samples:
        _, compact = _analyze(p, AnalysisConfig(max_block_edges=0))
        assert _verdict(compact) == _verdict(analyzer.analyze(p, jobs=1).diagnosis), p.name


def test_wait_edges_are_the_wait_table_rows(make_job: Callable[..., Path]) -> None:
    job = make_job(_many_laggards(6, {2}), world=6)
    table = analyzer.analyze(job).waits
    got = list(edges(table))
    assert got and all(isinstance(e, Wait) and isinstance(e.kind, WaitKind) for e in got)
    assert [tuple(getattr(e, c) for c in WAIT_COLUMNS) for e in got] == [
        tuple(r) for r in table[list(WAIT_COLUMNS)].itertuples(index=False)
    ]
    assert {e.holder for e in got} == {2}


def test_group_ids_number_pairs_in_sorted_order_by_counting_or_sorting() -> None:
    rng = np.random.default_rng(3)
    for spread in (5, 1 << 35):  # dense values (counted) and sparse ones (sorted)
        major = rng.integers(0, 7, 500)
        minor = rng.integers(-spread, spread, 500)
        ids, n = group_ids(major, minor)
        uniq = sorted(set(zip(major.tolist(), minor.tolist(), strict=True)))
        assert n == len(uniq)
        assert ids.tolist() == [
            uniq.index(p) for p in zip(major.tolist(), minor.tolist(), strict=True)
        ]


def test_count_at_least_matches_the_naive_count() -> None:
    rng = np.random.default_rng(7)
    group = rng.integers(0, 6, 300)
    value = rng.integers(-3, 40, 300)
    q_group = rng.integers(-1, 8, 200)
    q_value = rng.integers(-5, 45, 200)
    got = _count_at_least(group, value, q_group, q_value)
    want = [
        int(((group == g) & (value >= v)).sum()) if g >= 0 else 0
        for g, v in zip(q_group, q_value, strict=True)
    ]
    assert got.tolist() == want
