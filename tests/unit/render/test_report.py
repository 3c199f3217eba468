"""The incident report: figures, HTML (self-contained, escaped), CLI and notebook API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from typer.testing import CliRunner

from analyzer import render as figures
from analyzer.analysis import analyze
from analyzer.cli.commands import app
from analyzer.render.report import render_html, verdict_html
from analyzer.render.static_image import timeline_svg
from tests.conftest import entry, fixture_dir

XSS = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(2)>"
XSS_DIR = "<svg onload=alert(3)>"


def _stall_job(make_job, *, world=4, culprit=1, n=6, desc="default_pg", name="job"):
    """Every rank completes seq 1..n-1; all but ``culprit`` enqueue seq n and wait."""
    per_rank = {}
    for r in range(world):
        last = n - 1 if r == culprit else n
        per_rank[r] = [
            entry(
                s,
                pg=("0", desc),
                state="completed" if s < n else "scheduled",
                t=s * 10 + r,
                frames=[{"name": XSS_IMG, "filename": "/jobs/<b>train</b>.py", "line": 7}],
            )
            for s in range(1, last + 1)
        ]
    return make_job(per_rank, world=world, name=name)


@pytest.fixture
def stall(make_job):
    return analyze(_stall_job(make_job))


def test_figures_are_plotly_figures(stall):
    for fig in (figures.timeline(stall), figures.wait_graph(stall), figures.progress(stall)):
        assert isinstance(fig, go.Figure)
        assert "hangscope" in fig.layout.meta
    tl = figures.timeline(stall)
    labels = list(tl.layout.yaxis.ticktext)
    assert any("rank 1" in t and "★" in t for t in labels), labels
    names = {t.name for t in tl.data}
    assert "never joined (peers wait in it)" in names
    assert any(n.startswith("in flight") for n in names)


def test_timeline_clock_and_window(stall):
    fig = figures.timeline(stall, clock="rank", window_s=20e-6)  # the buffer spans 60 us
    assert fig.layout.xaxis.range[0] == pytest.approx(-20.8e-6, rel=0.01)
    assert fig.layout.meta["hangscope"]["whole"][0] < -40e-6
    with pytest.raises(ValueError):
        figures.timeline(stall, clock="utc")
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label.split(" (")[0] for b in buttons] == ["Hang window", "Whole buffer"]


def test_timeline_collapses_and_caps_lanes(make_job):
    a = analyze(_stall_job(make_job, world=48, culprit=17))
    fig = figures.timeline(a, max_lanes=64)
    labels = list(fig.layout.yaxis.ticktext)
    # 47 waiters behave identically: one lane with a count, and the culprit alone.
    assert len(labels) == 2
    assert any("×47" in t for t in labels)
    assert any("rank 17" in t for t in labels)
    notes = " ".join(fig.layout.meta["hangscope"]["notes"])
    assert "48 ranks in 2 lanes" in notes
    capped = figures.timeline(a, collapse=False, max_lanes=5)
    assert len(capped.layout.yaxis.ticktext) == 5
    assert any("rank 17" in t for t in capped.layout.yaxis.ticktext)
    assert "not drawn" in " ".join(capped.layout.meta["hangscope"]["notes"])


def test_wait_graph_merges_alike_waiters(make_job):
    a = analyze(_stall_job(make_job, world=40, culprit=3))
    fig = figures.wait_graph(a)
    nodes = [t for t in fig.data if t.mode == "markers+text"]
    texts = [x for t in nodes for x in t.text]
    assert "3" in texts
    assert any("×39" in x for x in texts)
    culprit = next(t for t in nodes if t.name == "culprit")
    assert list(culprit.text) == ["3"]


def test_progress_marks_the_lagging_rank(stall):
    fig = figures.progress(stall)
    z = fig.data[0].z
    row = list(z[0])
    assert row[1] > 0 and row[0] == 0 and row[2] == 0


def test_html_is_self_contained_and_escaped(make_job, tmp_path):
    job = _stall_job(make_job, desc=XSS, name=XSS_DIR)  # file names carry markup too
    a = analyze(job)
    page = render_html(a, plotlyjs="cdn")
    for raw in (XSS, XSS_IMG, XSS_DIR, "<b>train</b>"):
        assert raw not in page
    assert "&lt;svg onload=alert(3)&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Only the page's own scripts: the CDN loader, the figure data and the boot script.
    tags = re.findall(r"<script[^>]*>", page)
    assert all("nonce=" in t or "type='application/json'" in t for t in tags), tags
    nonce = re.search(r"'nonce-([^']+)'", page).group(1)
    assert sum(f'nonce="{nonce}"' in t for t in tags) == 2
    # Figure JSON parses back and carries the escaped desc, never the raw one.
    blobs = re.findall(
        r"<script type='application/json' data-plot='[^']+'>(.*?)</script>", page, re.S
    )
    assert len(blobs) == 4
    for blob in blobs:
        assert "<" not in blob
        json.loads(blob)
    # No external resource apart from the plotly CDN script in cdn mode.
    urls = set(re.findall(r"(?:src|href)=[\"']?(https?://[^\"' >]+)", page))
    assert len(urls) == 1 and next(iter(urls)).startswith("https://cdn.plot.ly/")


def test_html_inline_is_offline(stall):
    page = render_html(stall)
    assert "id='plotly-gz'" in page and "window.hangscopePlotly" in page
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert "default-src 'none'" in page
    order = [
        page.index(k)
        for k in (
            "id='verdict'",
            "id='timeline'",
            "id='waits'",
            "id='progress'",
            "id='findings'",
            "id='stack'",
            "id='skipped'",
            "id='input'",
        )
    ]
    assert order == sorted(order)
    banner = page[page.index("id='verdict'") : page.index("</header>")]
    assert "HANG: culprit rank 1" in banner


def test_repr_html_and_api(stall, tmp_path):
    frag = stall._repr_html_()
    assert "HANG: culprit rank 1" in frag and "<script" not in frag
    assert verdict_html(stall) == frag
    assert isinstance(stall.timeline(), go.Figure)
    assert isinstance(stall.wait_graph_figure(), go.Figure)
    assert isinstance(stall.progress_figure(), go.Figure)
    out = stall.save_report(tmp_path / "r.html", plotlyjs="cdn")
    assert Path(out).read_text().startswith("<!DOCTYPE html>")
    assert stall.report_html(plotlyjs="cdn").count("data-plot=") == 4


def test_svg_without_dependencies(stall):
    svg = timeline_svg(stall)
    assert svg.startswith("<svg") and "rank 1" in svg and "url(#hatch)" in svg
    assert "<img" not in svg


def test_cli_report(make_job, tmp_path):
    job = _stall_job(make_job)
    out = tmp_path / "report.html"
    svg = tmp_path / "timeline.svg"
    res = CliRunner().invoke(
        app, ["report", str(job), "-o", str(out), "--plotlyjs", "cdn", "--png", str(svg)]
    )
    assert res.exit_code == 0, res.output  # wrote what was asked (--exit-code: the verdict's)
    assert f"wrote {out}" in res.output and "HANG: culprit rank 1" in res.output
    assert out.stat().st_size < 1_000_000 and svg.read_text().startswith("<svg")
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nothing-here"), "-o", str(out), "-q"])
    assert res.exit_code == 2


def test_cli_report_no_hang(make_job, tmp_path):
    per_rank = {r: [entry(s, state="completed", t=s) for s in range(1, 4)] for r in range(2)}
    job = make_job(per_rank, world=2)
    res = CliRunner().invoke(
        app, ["report", str(job), "-o", str(tmp_path / "r.html"), "--plotlyjs", "cdn"]
    )
    assert res.exit_code == 0, res.output
    assert "NO HANG" in res.output


def test_real_fixtures_render():
    for name in ("gpu_error_2nd", "lock_gil_2nd"):
        a = analyze(fixture_dir("nvrx-megatron-moe", name))
        page = render_html(a, plotlyjs="cdn")
        assert "HANG: culprit rank" in page
        tl = figures.timeline(a)
        assert any("PP1" in t for t in tl.layout.yaxis.ticktext)


def _banner_items(banner: str, cls: str) -> list[str]:
    import html as _html

    return [
        _html.unescape(re.sub(r"<[^>]+>", "", m.replace("<br>", " ")))
        for m in re.findall(rf"<li class='{cls}'>(.*?)</li>", banner)
    ]


@pytest.mark.parametrize(
    "sample",
    sorted(
        p.name
        for p in (Path(__file__).resolve().parents[3] / "sample_dumps").iterdir()
        if p.is_dir()
    ),
)
def test_banner_says_what_the_text_says(sample):
    """The HTML banner's verdict, headline, chain sentences and cycles are the text's own lines."""
    import html as _html

    from analyzer.render.report import banner_html
    from analyzer.render.text import render_text

    a = analyze(Path(__file__).resolve().parents[3] / "sample_dumps" / sample, jobs=1)
    banner = banner_html(a)
    text = render_text(a, width=1 << 20).splitlines()
    head = _html.unescape(re.search(r"<p class='verdict'>(.*?)</p>", banner).group(1))
    detail = _html.unescape(re.search(r"<p class='kind'>(.*?)</p>", banner).group(1))
    assert text[0] in (f"{head} ({detail})", f"{head}: {detail}")
    assert (
        _html.unescape(re.search(r"<p class='headline'>(.*?)</p>", banner).group(1))
        == text[1].strip()
    )
    chains = [  # each chain: its arrow line and the detail line below it
        f"{line.strip()} {text[i + 1].strip()}"
        for i, line in enumerate(text)
        if line.startswith(("  chain to rank ", "  chains to ranks "))
    ]
    assert _banner_items(banner, "chain") == chains
    cycles = [line for line in text if line.startswith("deadlock cycle: ")]
    assert _banner_items(banner, "cycle") == cycles
    missing = [line for line in text if line.startswith("missing dumps: ")]
    assert _banner_items(banner, "missing") == missing


def test_deadlock_banner_names_the_cycle_like_the_text():
    """The chain to a rank inside a deadlock cycle ends in the cycle, in every output."""
    from analyzer.render.report import banner_html

    a = analyze(Path(__file__).resolve().parents[3] / "sample_dumps" / "deadlock_w4", jobs=1)
    banner = banner_html(a)
    assert "3 is in the deadlock cycle" in banner and "3 waits on nobody" not in banner


def test_where_each_rank_is_now_lists_every_captured_rank(tmp_path, make_job):
    """A context file beside the dumps: the notebook's table and the report's section."""
    from analyzer.render.where_now import where_each_rank_is_now, where_now_section

    job = {
        r: [entry(s, state="completed", retired=True, t=s) for s in range(1, 4)] + [entry(4, t=4)]
        for r in (0, 2, 3)
    }
    job[1] = [entry(s, state="completed", retired=True, t=s) for s in range(1, 4)]
    folder = make_job(job)
    for rank in (1, 2):
        (folder / f"hangscope_context_rank_{rank}.json").write_text(
            json.dumps(
                {
                    "schema": "hangscope.context/1",
                    "rank": rank,
                    "host": f"node<{rank}>",
                    "pid": 100 + rank,
                    "time": "2026-01-01T00:00:00Z",
                    "trigger": {"reason": "timeout"},
                    "threads": [
                        {
                            "name": "MainThread",
                            "main": True,
                            "frames": [
                                {"name": "load_batch", "filename": "/jobs/data.py", "line": 7}
                            ],
                        }
                    ],
                }
            )
        )
    a = analyze(folder)
    assert a.diagnosis.culprit_ranks == (1,)
    now = where_each_rank_is_now(a)
    assert list(now["rank"]) == [1, 2] and list(now["culprit"]) == [True, False]
    assert now["innermost frame"].iloc[0] == "/jobs/data.py:7 in load_batch"
    section = where_now_section(a)
    assert "node&lt;1&gt;" in section and "load_batch" in section


def test_group_wording_of_a_group_without_a_name():
    """A group the dump names neither by name nor desc reads as such, not "group  seq 4"."""
    from analyzer.terms import UNNAMED_GROUP, group_label, group_short

    assert (
        group_label("", "") == UNNAMED_GROUP
        and f"in {group_label('', '')} seq 4" == "in an unnamed group seq 4"
    )
    assert group_label("", "TP") == "TP" and group_label("3", "TP") == "TP (group 3)"
    assert group_label("3", "") == group_label("3", "3") == "group 3"
    assert group_short("", "") == UNNAMED_GROUP and group_short("3", "") == "3"


def test_long_group_names_are_short_on_the_progress_axis_and_whole_in_the_hover(make_job):
    long = "mesh_dim_0_tensor_parallel_group_of_a_long_<b>name</b>_indeed"
    fig = figures.progress(analyze(_stall_job(make_job, desc=long)))
    axes = [fig.layout[k] for k in fig.layout if k.startswith("yaxis")]
    assert axes and all(list(ax.tickvals) == [long] for ax in axes)
    for ax in axes:
        (text,) = ax.ticktext
        assert len(text.replace("&lt;", "<").replace("&gt;", ">")) <= 32 and "<b>" not in text
        assert text.startswith("mesh_dim_0_tensor") and text.endswith("…")
    hovers = {
        str(c[3]) for tr in fig.data if tr.type == "heatmap" for row in tr.customdata for c in row
    }
    assert any("mesh_dim_0_tensor_parallel_group_of_a_long_" in h and "indeed" in h for h in hovers)


def test_tick_labels_stay_distinct() -> None:
    from analyzer.render.figure_style import tick_labels

    a, b = "x" * 40 + "_first", "x" * 40 + "_second"
    assert tick_labels(["short", "also short"]) == ["short", "also short"]
    one, two = tick_labels([a, b], 20)
    assert one != two and len(one) == len(two) == 20 and one.endswith("_first")
    same_ends = ["x" * 20 + "a" + "x" * 20, "x" * 20 + "b" + "x" * 20]
    assert tick_labels(same_ends, 20) == same_ends  # no short form tells them apart


def test_notebook_figures_carry_a_static_rendering(stall, monkeypatch):
    """Displayed in a notebook, the Analysis figures add a rendering that needs no
    JavaScript beside plotly's own output; copies and pickles are plain figures."""
    import pickle

    import plotly.io as pio

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")
    shown = {
        "timeline": stall.timeline()._repr_mimebundle_(),
        "graph": stall.wait_graph_figure()._repr_mimebundle_(),
        "progress": stall.progress_figure()._repr_mimebundle_(),
    }
    assert all("application/vnd.plotly.v1+json" in b for b in shown.values())
    assert (
        shown["timeline"]["image/svg+xml"].startswith("<svg")
        and "rank 1" in (shown["timeline"]["image/svg+xml"])
    )
    assert "rank 1 [culprit] is waited on by:" in shown["graph"]["text/plain"]
    assert "default_pg: 1 seq behind (rank 1)" in shown["progress"]["text/plain"]
    fig = stall.timeline()
    assert isinstance(fig, go.Figure)
    assert type(pickle.loads(pickle.dumps(fig))) is go.Figure
    monkeypatch.setattr(pio.renderers, "default", "browser")  # no plotly output: as plotly has it
    assert stall.timeline()._repr_mimebundle_() == {}
