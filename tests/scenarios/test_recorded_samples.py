"""The analyzer against dumps written by real PyTorch jobs.

* ``sample_dumps/*``: recorded by ``tools/record_gloo.py`` (gloo on loopback) and, the
  ``nccl2_*`` ones, by ``tools/record_hook.py`` (torch 2.15's recorder hook over a Python
  backend forwarding to gloo), each with ``EXPECTED.json`` saying what was injected;
* ``../shared/fixtures/torch2.15-gloo``: gloo dumps recorded on torch 2.15;
* ``../shared/fixtures/nvrx-megatron-moe``: NCCL dumps of a 16-GPU Megatron MoE job with
  faults injected on the ranks ``fault_injection.log`` names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import analyzer
from tests.conftest import FIXTURES, SAMPLES, fixture_dir

SAMPLE_DIRS = sorted(p.parent for p in SAMPLES.glob("*/EXPECTED.json"))


def _check(path: Path, expected: dict) -> None:
    # Where the dumps cannot show what was injected, EXPECTED.json says what an honest
    # analysis concludes instead (``analyzer``), and why.
    if "analyzer" in expected:
        honest = expected["analyzer"]
        result = analyzer.analyze(path)
        assert result.diagnosis.verdict.value == honest["verdict"], result.diagnosis.headline
        assert list(result.diagnosis.culprit_ranks) == honest["culprits"]
        assert result.diagnosis.kind == honest["kind"]
        return
    result = analyzer.analyze(path)
    d = result.diagnosis
    assert list(d.culprit_ranks) == sorted(expected["culprits"]), d.headline
    assert (d.verdict.value == "hang") == bool(expected["hang"]), d.headline
    if expected.get("kind"):
        assert d.kind == expected["kind"], d.headline
    if expected.get("deadlock"):
        assert d.deadlock_cycles, d.headline
    if "dumped_ranks" in expected:
        assert result.tables.dumped_ranks == sorted(expected["dumped_ranks"])
        if "world" in expected:  # every rank without a dump is reported as missing
            missing = sorted(set(range(expected["world"])) - set(expected["dumped_ranks"]))
            assert list(d.missing_dumps) == missing


@pytest.mark.parametrize("path", SAMPLE_DIRS, ids=[p.name for p in SAMPLE_DIRS])
def test_sample(path: Path) -> None:
    _check(path, json.loads((path / "EXPECTED.json").read_text()))


def test_samples_exist() -> None:
    assert len(SAMPLE_DIRS) >= 6, "sample_dumps/ should hold the recorded scenarios"


@pytest.mark.parametrize("name", ["stall_w4", "json_tp_dp_w8"])
def test_torch215_gloo_fixture(name: str) -> None:
    path = fixture_dir("torch2.15-gloo", name)
    _check(path, json.loads((path / "EXPECTED.json").read_text()))


@pytest.mark.parametrize("name", ["gpu_error_2nd", "lock_gil_2nd"])
def test_megatron_fixture_names_the_injected_ranks(name: str) -> None:
    path = fixture_dir("nvrx-megatron-moe", name)
    log = (path / "fault_injection.log").read_text()
    injected = sorted(int(r) for r in re.findall(r"Rank (\d+), fault_type", log))
    result = analyzer.analyze(path)
    assert list(result.diagnosis.culprit_ranks) == injected
    assert result.diagnosis.verdict.value == "hang"
    # No rank other than the injected ones is blamed anywhere.
    blamed = {r for f in result.diagnosis.findings if f.culprit for r in f.ranks}
    assert blamed == set(injected)


def test_megatron_pg_ids_of_silent_ranks_are_mapped() -> None:
    # lock_gil: ranks 10 and 15 recorded no entry; their pg_status ids still map to groups.
    result = analyzer.analyze(fixture_dir("nvrx-megatron-moe", "lock_gil_2nd"))
    status = result.tables.status
    silent = status[status["rank"].isin([10, 15])]
    assert (silent["pg_name"] != "").all()
    tp = result.matching.progress
    row = tp[(tp["pg_name"] == "40") & (tp["rank"] == 10)].iloc[0]
    assert row["source"] == "pg_status" and row["enqueued"] == 31442


def test_gloo_empty_pg_config_groups_are_inferred() -> None:
    result = analyzer.analyze(fixture_dir("torch2.15-gloo", "json_tp_dp_w8"))
    groups = result.tables.groups.set_index("pg_name")
    # pg_config's nameless list is [0, 1, 2, 3] in this 8-rank job: the size of the last
    # group each process created (dp, 4 ranks), not the world. It declares nothing.
    assert groups.loc["0", "source"] == "world"
    assert groups.loc["0", "ranks"] == tuple(range(8))
    assert groups.loc["4", "ranks"] == (6, 7)
    assert groups.loc["4", "source"] == "entries"


def test_fixtures_root_documented() -> None:
    assert FIXTURES.name == "fixtures"


@pytest.mark.parametrize(
    ("given", "not_given"),
    [
        (["nccl_trace_rank_0"], [1, 2, 3]),
        (["nccl_trace_rank_0", "nccl_trace_rank_1", "nccl_trace_rank_2"], [3]),
    ],
)
def test_ranks_whose_files_were_not_given_are_never_blamed(
    given: list[str], not_given: list[int]
) -> None:
    """A subset of a real job's files: the ranks whose files sit beside them are 'not given',
    never 'crashed'. With rank 0 alone nothing can be blamed (rank 0's file shows only that it
    waits); with ranks 0-2, rank 1 is blamed: ranks 0 and 2 went past the op its newest entry
    retired, so it finished that op and never enqueued the next, whatever rank 3 did."""
    folder = SAMPLES / "stall_w4"
    result = analyzer.analyze([folder / name for name in given], jobs=1)
    d = result.diagnosis
    assert result.loaded is not None and sorted(result.loaded.not_given) == not_given
    if len(given) == 1:
        assert d.verdict == "inconclusive" and not d.culprit_ranks, d.headline
        assert "were not given" in d.headline and "analyze the whole folder" in d.headline
    else:
        assert d.verdict == "hang" and d.culprit_ranks == (1,), d.headline
        assert 3 not in {c.rank for c in d.culprits}
    from analyzer.render.sentences import missing_text

    assert "not given:" in missing_text(result)
    whole = analyzer.analyze(folder, jobs=1)  # the folder itself: nothing is "not given"
    assert whole.diagnosis.culprit_ranks == (1,) and whole.loaded is not None
    assert not whole.loaded.not_given
