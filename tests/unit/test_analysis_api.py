"""The Python API of an analysis: its repr, the types of verdict and culprits, the figure and
report options it spells out, and the configuration it keeps."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import pytest

import analyzer
from analyzer.analysis import Analysis
from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.diagnosis.records import Verdict
from analyzer.errors import InputError
from tests.conftest import FIXTURES, SAMPLES


@pytest.fixture(scope="module")
def deadlock() -> Analysis:
    return analyzer.analyze(SAMPLES / "deadlock_w4", jobs=1)


@pytest.fixture(scope="module")
def healthy() -> Analysis:
    return analyzer.analyze(SAMPLES / "healthy_w4", jobs=1)


def test_repr_is_one_short_line(deadlock: Analysis, healthy: Analysis) -> None:
    assert repr(deadlock) == (
        "Analysis(ranks=4/4, verdict='hang', kind='deadlock', culprits=(3,), "
        "entries=32, findings=1, deadlock_cycles=1)"
    )
    assert repr(healthy) == (
        "Analysis(ranks=4/4, verdict='no_hang', kind='no_hang', culprits=(), "
        "entries=40, findings=1)"
    )
    assert "<div" in deadlock._repr_html_() and "HANG: culprit rank 3" in deadlock._repr_html_()


def test_repr_of_a_large_job_stays_short() -> None:
    path = FIXTURES / "nvrx-megatron-moe" / "gpu_error_2nd"
    if not path.is_dir():
        pytest.skip(f"shared fixtures not present at {FIXTURES}")
    text = repr(analyzer.analyze(path, jobs=1))
    assert text.startswith(
        "Analysis(ranks=16/16, verdict='hang', kind='stuck_in_collective', culprits=(9, 14)"
    )
    assert len(text) < 200 and "\n" not in text


def test_verdict_is_the_diagnosis_enum(deadlock: Analysis, healthy: Analysis) -> None:
    assert deadlock.verdict is deadlock.diagnosis.verdict is Verdict.HANG
    assert healthy.verdict is Verdict.NO_HANG
    assert (
        isinstance(deadlock.verdict, str)
        and deadlock.verdict == "hang"
        and healthy.verdict != "hang"
    )
    # Printed or formatted, it reads as its value (notebooks print it).
    assert str(deadlock.verdict) == f"{deadlock.verdict}" == "hang"
    assert {"hang": 1}[deadlock.verdict] == 1


def test_culprit_ranks_is_a_tuple_everywhere(deadlock: Analysis, healthy: Analysis) -> None:
    assert deadlock.culprit_ranks == deadlock.diagnosis.culprit_ranks == (3,)
    assert type(deadlock.culprit_ranks) is tuple and type(deadlock.diagnosis.culprit_ranks) is tuple
    assert healthy.culprit_ranks == ()


def _params(func: Callable[..., object], skip: int) -> list[tuple[str, object]]:
    sig = inspect.signature(func)
    return [(p.name, p.default) for p in list(sig.parameters.values())[skip:]]


def test_figure_and_report_methods_spell_out_the_render_options() -> None:
    """Same names and defaults as the render functions they call (no ``**kw``)."""
    from analyzer.render.report import render_html, write_html
    from analyzer.render.timeline_figure import timeline
    from analyzer.render.wait_graph_figure import wait_graph

    pairs: list[tuple[Callable[..., object], Callable[..., object], int]] = [
        (Analysis.timeline, timeline, 0),
        (Analysis.wait_graph_figure, wait_graph, 0),
        (Analysis.report_html, render_html, 0),
        (Analysis.save_report, write_html, 1),
    ]
    for method, render, extra in pairs:
        assert all(
            p.kind != inspect.Parameter.VAR_KEYWORD
            for p in inspect.signature(method).parameters.values()
        ), method
        mine = _params(method, 1 + extra)
        # write_html passes its options on to render_html.
        assert mine == _params(render_html if extra else render, 1), (method, mine)
        if not extra:
            missing = [name for name, _ in mine if f"``{name}``" not in (method.__doc__ or "")]
            assert not missing, (method, "docstring does not explain", missing)


def test_figure_options_reach_the_figures(deadlock: Analysis) -> None:
    import plotly.graph_objects as go

    fig = deadlock.timeline(clock="rank", max_lanes=2)
    assert isinstance(fig, go.Figure)
    assert isinstance(deadlock.wait_graph_figure(merge=False), go.Figure)
    with pytest.raises(ValueError, match="clock"):
        deadlock.timeline(clock="wall")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        deadlock.timeline(max_lane=2)  # type: ignore[call-arg]
    page = deadlock.report_html(plotlyjs="cdn", title="incident 42")
    assert "<title>incident 42</title>" in page


def test_config_is_kept(deadlock: Analysis, healthy: Analysis) -> None:
    assert deadlock.config is DEFAULT_CONFIG
    assert inspect.signature(analyzer.analyze).parameters["config"].default is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = analyzer.analyze(SAMPLES / "healthy_w4", jobs=1, config=AnalysisConfig.from_env())
    assert same.config == DEFAULT_CONFIG


def test_a_config_reaches_the_loader() -> None:
    # Every dump of the set is over the cap, so nothing is left to analyze. (The waits' and
    # the suspect's thresholds are tested at their layers: tests/unit/waits/test_wait_scale.py, test_diagnosis.py.)
    small = AnalysisConfig(max_dump_bytes=1024)
    with pytest.raises(InputError, match="bytes is over the 1,024 bytes a dump may have"):
        analyzer.analyze(SAMPLES / "stall_w4", jobs=1, config=small)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a config is applied, not warned about
        result = analyzer.analyze(SAMPLES / "stall_w4", jobs=1, config=AnalysisConfig(late_ratio=5))
    assert result.config.late_ratio == 5 and result.culprit_ranks == (1,)
