"""The dashboards run top to bottom on a real Jupyter kernel, without an error."""

from __future__ import annotations

import json

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
    # Run from the notebook's folder, as Jupyter would.
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(DASHBOARDS)}}
    ).execute()
    return nb


def _outputs(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"])


def test_triage_notebook(tmp_path):
    report = tmp_path / "report.html"
    nb = _run("triage.ipynb", {"REPORT": str(report)})
    out = _outputs(nb)
    assert "hangscope-verdict" in out  # the rich verdict display
    assert "application/vnd.plotly.v1+json" in out  # the figures
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
    assert len(list(tmp_path.glob("*.html"))) >= 2
