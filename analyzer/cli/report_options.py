"""The options of ``hangscope report`` (its output, plotly.js, static image, clock, lanes,
window and exit code)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.options import Clock, PlotlyJs

__all__ = [
    "ClockOpt",
    "ExitCodeOpt",
    "MaxLanesOpt",
    "PlotlyJsOpt",
    "PngOpt",
    "ReportOut",
    "WindowOpt",
]

ReportOut = Annotated[
    Path, typer.Option("--output", "-o", metavar="FILE", help="HTML file to write")
]
PlotlyJsOpt = Annotated[
    PlotlyJs,
    typer.Option(
        "--plotlyjs",
        help="inline: offline, one file (default); cdn: small file, loads plotly.js from its CDN",
    ),
]
PngOpt = Annotated[
    Path | None,
    typer.Option(
        "--png",
        metavar="FILE",
        help="Also write the timeline as a static image (.png via kaleido + Chromium; "
        ".svg needs nothing)",
    ),
]
ClockOpt = Annotated[
    Clock,
    typer.Option(
        "--clock", help="Timeline times: job (one axis) or rank (each rank on its own clock)"
    ),
]
MaxLanesOpt = Annotated[
    int, typer.Option("--max-lanes", metavar="N", help="Most timeline lanes drawn")
]
WindowOpt = Annotated[
    float | None,
    typer.Option(
        "--window",
        metavar="SECONDS",
        help="Seconds before the hang shown by default (default: the last ops of every rank)",
    ),
]
ExitCodeOpt = Annotated[
    bool,
    typer.Option(
        "--exit-code",
        help="Exit as analyze does (1 hang, 5 inconclusive) instead of 0 once written",
    ),
]
