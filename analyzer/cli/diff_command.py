"""``hangscope diff A B``: are two incidents the same hang? Registered on the app by
:mod:`analyzer.cli.commands`.

Each side is what ``analyze`` accepts (a dump folder, files, a glob, a store) or, when it is a
file whose name ends in ``.json``, the JSON ``hangscope analyze -f json`` wrote (last week's
ticket attachment, compared without its dumps). Exit 0: the same hang (the same fingerprint
id); 1: different; 2: bad input, as every command.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.cli.exits import EXIT_FOUND, EXIT_OK, fail
from analyzer.cli.exits import analyze_inputs as _analyze
from analyzer.cli.exits import write as _write
from analyzer.cli.options import DiffFormat, OutputOpt, QuietOpt
from analyzer.cli.outputs import check_file_output
from analyzer.errors import AnalyzerError

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.diagnosis import HangSide

__all__ = ["diff"]

Side = Annotated[
    str,
    typer.Argument(
        help="A dump folder (or anything analyze accepts), or a .json file written by "
        "hangscope analyze -f json",
        show_default=False,
    ),
]


def is_saved_analysis(path: str) -> bool:
    """A side is a saved analysis when it is a file whose name ends in ``.json``."""
    return path.lower().endswith(".json") and os.path.isfile(path)


def _side(path: str, quiet: bool) -> HangSide:
    from analyzer.diagnosis import read_saved, side_of
    from analyzer.escape import clean

    if is_saved_analysis(path):
        try:
            return read_saved(path)
        except AnalyzerError as exc:
            raise fail(clean(str(exc))) from None
    result = _analyze([path], None, None, None, quiet)
    return side_of(result.diagnosis, int(result.tables.world_size), path)


def diff(
    a: Side,
    b: Side,
    fmt: Annotated[
        DiffFormat, typer.Option("--format", "-f", help="text or json")
    ] = DiffFormat.text,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Say whether two incidents are the same hang (the same fingerprint), and what differs.

    Exit 0: the same hang; 1: different hangs; 2: bad input.

    Example: hangscope diff ./dumps last_week.json
    """
    check_file_output(output)
    left = _side(a, quiet)
    right = _side(b, quiet)
    from analyzer.diagnosis import compare
    from analyzer.render import render_diff

    result = compare(left, right)
    if fmt is DiffFormat.json:
        text = json.dumps(result.to_dict(), indent=1) + "\n"
    else:
        text = render_diff(result)
    _write(text, output)
    raise typer.Exit(code=EXIT_OK if result.same else EXIT_FOUND)
