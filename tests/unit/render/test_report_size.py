"""The offline report stays small: plotly.js comes in as the vendored partial bundle of the
traces the figures draw, gzip-compressed and base64-encoded, unpacked by the browser
(``tests/integration/test_browser.py`` opens such reports in Chromium)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from analyzer.analysis import analyze
from analyzer.cli.commands import app
from tests.conftest import ROOT, SAMPLES

VENDOR = ROOT / "analyzer" / "render" / "vendor"
BUNDLE = VENDOR / "plotly-cartesian.min.js.gz"
#: The trace types of the cartesian bundle (its README).
CARTESIAN = {
    "bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour",
    "image", "pie", "scatter", "scatterternary", "violin",
}  # fmt: skip
#: The 4-rank sample's report: the bundle (0.66 MB as base64) and about 0.1 MB of figures,
#: tables and text (the ``--plotlyjs cdn`` page of the same sample), with room for the
#: figures to grow by half; the full plotly.js (4.8 MB) or the uncompressed cartesian
#: bundle (1.5 MB) does not fit.
SMALL_REPORT_BYTES = 1_000_000


def test_the_vendored_bundle_is_the_one_notice_names() -> None:
    import plotly.offline

    js = gzip.decompress(BUNDLE.read_bytes())
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    assert hashlib.sha256(js).hexdigest() in notice.replace("\n  ", "")
    version = re.search(rb"plotly\.js \(cartesian - minified\) v(\d+\.\d+\.\d+)", js[:300])
    assert version, js[:300]
    vendored = version.group(1).decode()
    assert f"plotly.js {vendored}" in notice and f"version {vendored}" in notice
    bundled = plotly.offline.get_plotlyjs_version()
    assert vendored.split(".")[0] == bundled.split(".")[0], (vendored, bundled)
    assert "MIT License" in (VENDOR / "plotly.js-LICENSE").read_text(encoding="utf-8")


def test_the_figures_draw_only_traces_the_bundle_has() -> None:
    drawn: set[str] = set()
    for sample in ("stall_w4", "chain_tp_dp_w8", "deadlock_w4", "crash_w4"):
        a = analyze(SAMPLES / sample, jobs=1)
        for fig in (
            a.timeline(),
            a.timeline(clock="rank"),
            a.wait_graph_figure(),
            a.progress_figure(),
        ):
            drawn |= {tr.type for tr in fig.data}
    assert drawn and drawn <= CARTESIAN, sorted(drawn - CARTESIAN)


def test_the_4_rank_report_is_small_and_offline(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(SAMPLES / "stall_w4"), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size < SMALL_REPORT_BYTES, out.stat().st_size
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", page) and "https://" not in page.split("<body")[0]
    block = re.search(
        r"<script type='application/gzip;base64' id='plotly-gz'>([^<]*)</script>", page
    )
    assert block and base64.b64decode(block.group(1)) == BUNDLE.read_bytes()
    assert page.index("id='plotly-gz'") < page.index("window.hangscopePlotly")


def test_the_wheel_and_the_sdist_carry_the_bundle() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "render/vendor/*" in project["tool"]["setuptools"]["package-data"]["analyzer"]
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    assert "recursive-include analyzer/render/vendor *" in manifest
    assert "include NOTICE" in manifest
