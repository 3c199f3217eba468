"""What the ``hangscope`` commands share of their options: the paths argument and the
loading options, the output formats and clocks, the ``--version`` callback and the state of
``--debug`` (also set by ``$HANGSCOPE_DEBUG``)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.exits import EXIT_OK

__all__ = [
    "DEBUG",
    "Clock",
    "DiffFormat",
    "EntriesFormat",
    "GraphFormat",
    "JobsOpt",
    "OutputFormat",
    "OutputOpt",
    "Paths",
    "PlotlyJs",
    "PrefixOpt",
    "QuietOpt",
    "SchedulerOpt",
    "StrictOpt",
    "VerboseOpt",
    "WorldOpt",
    "hangscope_version",
    "version_callback",
]

#: ``--debug`` given (or ``$HANGSCOPE_DEBUG`` set): an internal error prints its traceback.
DEBUG = {"on": bool(os.environ.get("HANGSCOPE_DEBUG"))}


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"


class EntriesFormat(StrEnum):
    text = "text"
    csv = "csv"
    jsonl = "jsonl"
    json = "json"


class GraphFormat(StrEnum):
    text = "text"
    json = "json"
    graphml = "graphml"
    dot = "dot"


class PlotlyJs(StrEnum):
    inline = "inline"
    cdn = "cdn"


class DiffFormat(StrEnum):
    text = "text"
    json = "json"


class Clock(StrEnum):
    job = "job"
    rank = "rank"


Paths = Annotated[
    list[str],
    typer.Argument(
        metavar="PATH...",
        help="Dump directory, files, a glob, or a path prefix such as /tmp/nccl_trace_rank_",
        show_default=False,
    ),
]
PrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--prefix",
        metavar="PREFIX",
        help="File-name prefix before the rank number (when names are unusual)",
    ),
]
IncidentOpt = Annotated[
    str | None,
    typer.Option(
        "--incident",
        metavar="NAME",
        help="Where the folder holds several incidents (restarts): the one to analyze, by the "
        "name the output lists (default: the newest)",
    ),
]
WorldOpt = Annotated[
    int | None,
    typer.Option(
        "--world-size",
        metavar="N",
        help="Number of ranks of the job (to spot missing dumps of the last ranks)",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        metavar="N",
        help="Parser processes, at least 1 (default: all cores)",
        show_default=False,
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Nothing but the output and errors: no progress, no 'wrote' line"
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write here instead of stdout"),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Also list the ignored files")]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict", help="Exit 2 when two different dumps claim one rank (default: keep the newer)"
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Parse on the workers of this Dask scheduler (e.g. tcp://host:8786; "
        "default: $HANGSCOPE_SCHEDULER, else in this process); the paths must be readable there",
        show_default=False,
    ),
]


def hangscope_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hangscope")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def version_callback(value: bool) -> None:
    """``--version``: print the version and exit."""
    if value:
        typer.echo(f"hangscope {hangscope_version()}")
        raise typer.Exit(code=EXIT_OK)
