"""Open generated reports in a real headless Chromium (Debian's) and check what a reader sees.

Checks: the page loads with no console error, the figures render (plot SVGs with drawn
bars, markers and arrows), the banner names the culprit, dump text cannot run script, the
buttons and the on-demand timeline work, and no request leaves the page in offline mode
(only file: and data: URLs). Screenshots go to ``$HANGSCOPE_SCREENSHOTS`` when set.

Chromium comes from ``make browser`` (``apt-get install chromium``). Without it the tests
fail in CI and as root (who can install it), and skip otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzer.analysis import analyze
from tests.conftest import FIXTURES, ROOT, SAMPLES, entry

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
XSS = "<script>window.__xss=1;alert(1)</script>"


def _require(what: str, ok: bool) -> None:
    if ok:
        return
    msg = f"{what} is not installed (run `make browser` / `make test`)"
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(msg)
    pytest.skip(msg + "; not root, so it cannot be installed here")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _require(CHROMIUM, os.access(CHROMIUM, os.X_OK))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("the playwright Python package", False)
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        ctx.set_default_timeout(60_000)
        yield ctx
        ctx.close()


def _shots() -> Path | None:
    d = os.environ.get("HANGSCOPE_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return None


def _open(ctx, path: Path, name: str) -> dict:
    """Load a report; return what happened (errors, requests, timings, element counts)."""
    page = ctx.new_page()
    seen: dict[str, list[str]] = {"errors": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    t0 = time.perf_counter()
    page.goto(path.resolve().as_uri(), wait_until="load")
    # Selectors, not wait_for_function: the page's CSP forbids eval, which polling would use.
    page.wait_for_selector("body[data-ready='1'], body[data-ready='error']", state="attached")
    ready = time.perf_counter() - t0
    info = {
        "page": page,
        "ready_s": ready,
        "size": path.stat().st_size,
        **seen,
        "state": page.evaluate("document.body.getAttribute('data-ready')"),
        "svgs": page.locator(".js-plotly-plot .main-svg").count(),
        "bars": page.locator("#plot-timeline .barlayer .point path").count(),
        "graph_points": page.locator("#plot-waitgraph .scatterlayer .point").count(),
        "arrows": page.locator("#plot-waitgraph .annotation-arrow-g path").count(),
        "heatmaps": page.locator("#plot-progress .hm image").count(),
        "banner": page.locator("header.banner").inner_text(),
    }
    shots = _shots()
    if shots:
        page.screenshot(path=str(shots / f"{name}.png"))
        page.screenshot(path=str(shots / f"{name}-full.png"), full_page=True)
    return info


def _assert_rendered(info: dict, culprit: str) -> None:
    assert info["state"] == "1", info["errors"]
    assert info["errors"] == [], info["errors"]
    assert info["dialogs"] == []
    outside = [u for u in info["requests"] if not u.startswith(("file:", "data:"))]
    assert outside == [], outside
    assert info["svgs"] >= 3
    assert info["bars"] > 0 and info["graph_points"] > 0 and info["heatmaps"] >= 1
    assert culprit in info["banner"], info["banner"]


def _stall_job(make_job, desc="default_pg", name="job"):
    per_rank = {}
    for r in range(8):
        last = 5 if r == 6 else 6
        per_rank[r] = [
            entry(
                s,
                pg=("0", desc),
                state="completed" if s < 6 else "scheduled",
                t=s * 10 + r,
                frames=[{"name": XSS, "filename": "/jobs/train.py", "line": 3}],
            )
            for s in range(1, last + 1)
        ]
    return make_job(per_rank, world=8, name=name)


def test_report_renders_offline(browser, make_job, tmp_path):
    a = analyze(_stall_job(make_job))
    path = tmp_path / "stall.html"
    a.save_report(path, window_s=2e-8)  # a window shorter than the buffer: both buttons
    info = _open(browser, path, "stall8")
    _assert_rendered(info, "HANG: culprit rank 6")
    assert info["arrows"] >= 1
    page = info["page"]
    # The buttons switch the x range between the hang window and the whole buffer.
    before = page.evaluate("document.getElementById('plot-timeline').layout.xaxis.range")
    page.locator("#plot-timeline .updatemenu-button").nth(1).click()
    page.wait_for_timeout(300)
    after = page.evaluate("document.getElementById('plot-timeline').layout.xaxis.range")
    assert after[0] <= before[0]
    # Hovering the culprit's never-joined op shows its label.
    lane = page.locator("#plot-timeline .barlayer .trace").first.locator(".point path").first
    box = lane.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)
    assert "never joined" in (page.locator("#plot-timeline .hoverlayer").text_content() or "")
    # The per-rank-clock timeline renders when opened.
    page.locator("#timeline-other summary").click()
    page.wait_for_selector("#plot-timeline2 .main-svg", state="attached")
    assert page.locator("#plot-timeline2 .barlayer .point path").count() > 0
    page.close()


def test_dump_text_cannot_run_script(browser, make_job, tmp_path):
    a = analyze(_stall_job(make_job, desc=XSS, name="<svg onload=alert(3)>"))
    path = tmp_path / "xss.html"
    a.save_report(path)
    info = _open(browser, path, "xss")
    _assert_rendered(info, "HANG: culprit rank 6")
    page = info["page"]
    assert page.evaluate("window.__xss === undefined")
    assert XSS in page.locator("#findings").inner_text()  # shown as text, verbatim
    page.close()


def test_sample_and_real_dumps(browser, tmp_path):
    cases = [
        (SAMPLES / "chain_tp_dp_w8", "chain"),
        (FIXTURES / "nvrx-megatron-moe" / "gpu_error_2nd", "megatron16"),
    ]
    ran = 0
    for src, name in cases:
        if not src.is_dir():
            continue
        a = analyze(src)
        path = tmp_path / f"{name}.html"
        a.save_report(path)
        culprits = ", ".join(str(r) for r in a.culprit_ranks)
        info = _open(browser, path, name)
        _assert_rendered(info, culprits)
        print(f"\n{name}: {info['size'] / 1e6:.2f} MB, ready in {info['ready_s']:.2f} s")
        info["page"].close()
        ran += 1
    if not ran:
        pytest.skip("no sample or shared dumps present")


def test_nccl2_hook_sample_report(browser, tmp_path):
    """A torch 2.15 hook recording with two buffers per rank and a stalled rank that wrote no
    file: the report says how each rank was read and why the culprit has no file."""
    src = SAMPLES / "nccl2_pp4_stall_w4_states"
    a = analyze(src)
    path = tmp_path / "nccl2.html"
    a.save_report(path)
    info = _open(browser, path, "nccl2")
    _assert_rendered(info, "2")
    assert "no dump: stalled outside communication or crashed" in info["banner"]
    text = info["page"].locator("body").inner_text()
    assert "nccl-lazy+nccl2 (ranks 0-1, 3)" in text
    info["page"].close()


def test_large_synthetic_job(browser, tmp_path):
    """A 128-rank x 2,000-entry simulated job: the report stays small and opens quickly."""
    if not (ROOT / "tools" / "simulate" / "__init__.py").exists():
        pytest.skip("tools/simulate not present")
    out = tmp_path / "sim"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.simulate",
            "-o",
            str(out),
            "--tp",
            "4",
            "--pp",
            "4",
            "--dp",
            "8",
            "--fault",
            "stall",
            "--rank",
            "37",
            "--timing",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    a = analyze(out)
    path = tmp_path / "sim128.html"
    t0 = time.perf_counter()
    a.save_report(path)
    built = time.perf_counter() - t0
    info = _open(browser, path, "sim128")
    _assert_rendered(info, "37")
    print(
        f"\nsim128: {len(a.entries):,} entries, report {info['size'] / 1e6:.2f} MB built in "
        f"{built:.2f} s, ready in {info['ready_s']:.2f} s"
    )
    assert info["size"] < 20_000_000
    assert info["ready_s"] < 15
    info["page"].close()


def test_static_timeline_png(make_job, tmp_path):
    """kaleido renders the timeline with the same Chromium, for tickets that strip HTML."""
    _require(CHROMIUM, os.access(CHROMIUM, os.X_OK))
    from analyzer.render.static_image import write_timeline_image

    a = analyze(_stall_job(make_job))
    png = Path(write_timeline_image(a, tmp_path / "timeline.png"))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    shots = _shots()
    if shots:
        (shots / "timeline-kaleido.png").write_bytes(data)


def test_report_at_phone_width(browser, tmp_path):
    """390 px wide (a phone): no figure and no part of the page is wider than the viewport,
    the modebar does not cover the titles, the tables scroll inside their card; the header
    names the input, the command, the version and the time."""
    out = tmp_path / "phone.html"
    analyze(SAMPLES / "chain_tp_dp_w8", jobs=1).save_report(out)
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(out.resolve().as_uri(), wait_until="load")
    page.wait_for_selector("body[data-ready='1'], body[data-ready='error']", state="attached")
    assert page.evaluate("document.body.getAttribute('data-ready')") == "1"
    shots = _shots() or tmp_path
    page.screenshot(path=str(shots / "phone-390.png"), full_page=True)
    widths = page.evaluate(
        "Array.from(document.querySelectorAll('.js-plotly-plot .main-svg'))"
        ".filter(e => e.getBoundingClientRect().width > 0)"
        ".map(e => e.getBoundingClientRect().right)"
    )
    assert widths and max(widths) <= 390, widths
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.locator(".modebar-container .modebar").count() == 0
    made = page.locator("#made").inner_text()
    assert "hangscope" in made and "generated" in made
    labels = _cut_axis_labels(page)
    assert any(t.startswith("TENSOR_MODEL") for _, t, _ in labels), labels  # a long group name
    assert [c for c in labels if c[2]] == []
    titles = page.evaluate(_TITLES)
    assert titles and [t for t in titles if t[2]] == [], titles
    page.close()


#: Every figure title and note: (figure, text, whether it runs past the viewport's edges).
_TITLES = """
Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(function(plot){
  return Array.from(plot.querySelectorAll('.gtitle, .annotation-text, .xtitle')).map(function(t){
    var b=t.getBoundingClientRect();
    return [plot.id,t.textContent,b.width>0&&(b.left<-0.5||b.right>window.innerWidth+0.5)];});})
"""


#: Every y-axis tick label of every figure: (figure, text, whether it is cut by the figure's
#: edge, i.e. its box starts left of the plot's SVG or ends right of it).
_AXIS_LABELS = """
Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(function(plot){
  var svg=plot.querySelector('.main-svg').getBoundingClientRect();
  return Array.from(plot.querySelectorAll('.yaxislayer-above text')).map(function(t){
    var b=t.getBoundingClientRect();
    return [plot.id,t.textContent,b.left<svg.left-0.5||b.right>svg.right+0.5];});})
"""


def _cut_axis_labels(page) -> list[list]:
    return page.evaluate(_AXIS_LABELS)


def test_long_group_names_are_not_cut_at_phone_width(browser, make_job, tmp_path):
    """A group desc of 60 characters, at 390 px: the progress view's axis shows its start,
    whole inside the figure; the hover has it whole."""
    long = "mesh_dim_0_tensor_parallel_group_of_a_rather_long_name_indeed"
    out = tmp_path / "long.html"
    analyze(_stall_job(make_job, desc=long)).save_report(out)
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(out.resolve().as_uri(), wait_until="load")
    page.wait_for_selector("body[data-ready='1'], body[data-ready='error']", state="attached")
    labels = _cut_axis_labels(page)
    progress = [t for plot, t, _ in labels if plot == "plot-progress"]
    assert progress and all(t.startswith("mesh_dim_0") and t.endswith("…") for t in progress)
    assert [c for c in labels if c[2]] == [], labels
    page.close()


def test_view_buttons_only_where_the_views_differ(browser, tmp_path):
    out = tmp_path / "small.html"
    analyze(SAMPLES / "stall_w4", jobs=1).save_report(out, plotlyjs="inline")
    info = _open(browser, out, "small-no-buttons")
    assert info["state"] == "1"
    assert info["page"].locator("#plot-timeline .updatemenu-button").count() == 0
    info["page"].close()


#: Every figure's title and note block against its plotting area and its view buttons:
#: (figure, how far the title's bottom runs into the plot, how far the buttons overlap it).
_OVERLAPS = """
Array.from(document.querySelectorAll('.js-plotly-plot')).map(function(plot){
  var title=plot.querySelector('.gtitle');
  var drags=Array.from(plot.querySelectorAll('.draglayer .nsewdrag'))
    .map(function(d){return d.getBoundingClientRect();}).filter(function(b){return b.height>0;});
  if(!title||!drags.length){return [plot.id,0,0];}
  var t=title.getBoundingClientRect();
  var top=Math.min.apply(null,drags.map(function(b){return b.top;}));
  var menus=Array.from(plot.querySelectorAll('.updatemenu-header-group, .updatemenu-button'))
    .map(function(m){return m.getBoundingClientRect();}).filter(function(b){return b.height>0;});
  var hit=menus.map(function(m){return Math.max(0,Math.min(t.bottom,m.bottom)-Math.max(t.top,m.top))*
    (Math.min(t.right,m.right)>Math.max(t.left,m.left)?1:0);});
  return [plot.id,Math.max(0,t.bottom-top),hit.length?Math.max.apply(null,hit):0];})
"""


@pytest.mark.parametrize("sample", ["chain_tp_dp_w8", "nccl2_pp4_stall_w4", "crash_tp_w8"])
def test_titles_and_notes_stay_above_the_plot_at_phone_width(browser, tmp_path, sample):
    """390 px: each figure's title and wrapped notes end above its plotting area, its view
    buttons (one dropdown) do not cover them, and no title, note or axis title runs off the
    page."""
    out = tmp_path / f"{sample}.html"
    analyze(SAMPLES / sample, jobs=1).save_report(out)
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(out.resolve().as_uri(), wait_until="load")
    page.wait_for_selector("body[data-ready='1'], body[data-ready='error']", state="attached")
    overlaps = page.evaluate(_OVERLAPS)
    titles = page.evaluate(_TITLES)
    page.close()
    assert overlaps and [o for o in overlaps if o[1] > 1 or o[2] > 1] == [], overlaps
    assert titles and [t for t in titles if t[2]] == [], titles  # nothing runs off the page
