"""The dashboards run top to bottom on a real Jupyter kernel, without an error."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.notebook

DASHBOARDS = ROOT / "dashboards"


def _run(name: str, params: dict[str, object] | None = None):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(DASHBOARDS / name, as_version=4)
    if params:
        cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
        cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    # Run from the notebook's folder, as Jupyter would, on this checkout's analyzer (as the
    # tests import it), whatever else the kernel's environment has installed.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), before) if p)
    try:
        NotebookClient(
            nb,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(DASHBOARDS)}},
        ).execute()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    return nb


def _outputs(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"])


def _plotly_outputs(nb) -> list[dict]:
    """The outputs that hold a plotly figure (their data: mime type to content)."""
    return [
        o["data"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "application/vnd.plotly.v1+json" in o.get("data", {})
    ]


def test_triage_notebook(tmp_path):
    report = tmp_path / "report.html"
    nb = _run("triage.ipynb", {"REPORT": str(report)})
    out = _outputs(nb)
    assert "hangscope-verdict" in out  # the rich verdict display
    assert "application/vnd.plotly.v1+json" in out  # the figures
    # Each figure's output also carries a static rendering, which a viewer without
    # JavaScript (GitHub's preview) shows: the timelines as SVG, the others as text.
    figures = _plotly_outputs(nb)
    assert len(figures) == 4, [sorted(f) for f in figures]
    svgs = [f["image/svg+xml"] for f in figures if "image/svg+xml" in f]
    assert len(svgs) == 2 and all("<svg" in "".join(s) and "rank 3" in "".join(s) for s in svgs)
    texts = ["".join(f.get("text/plain", "")) for f in figures]
    assert any("rank 3 [culprit] is waited on by:" in t for t in texts), texts
    assert any(t.startswith("Progress per group") and "(rank 3)" in t for t in texts), texts
    assert "culprits:" in out
    assert "Chain to rank " in out and "where each rank is now: no context captured" in out
    assert report.read_text().startswith("<!DOCTYPE html>")


def test_triage_notebook_on_another_dump_set():
    nb = _run("triage.ipynb", {"DUMPS": "sample_dumps/crash_w4"})
    assert "missing_dump" in _outputs(nb)


def test_multi_incident_notebook(tmp_path):
    nb = _run("multi_incident.ipynb", {"REPORTS": str(tmp_path)})
    out = _outputs(nb)
    assert "verdict" in out and "application/vnd.plotly.v1+json" in out
    # The chart's counts also as an HTML table, in the same cell: what GitHub shows.
    chart = next(c for c in nb.cells if "Incidents by verdict and kind" in c.source)
    kinds = [sorted(o.get("data", {})) for o in chart.outputs]
    assert ["application/vnd.plotly.v1+json"] in kinds, kinds
    table = next(o for o in chart.outputs if "text/html" in o.get("data", {}))
    assert "<table" in table["data"]["text/html"] and "incidents" in table["data"]["text/html"]
    assert len(list(tmp_path.glob("*.html"))) >= 2
