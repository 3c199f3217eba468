"""The ``hangscope`` process (the console script is :func:`run`): the commands run, an
unexpected error turned into exit code 3 and one line, the process ended at once."""

from __future__ import annotations

import os
import sys

import typer

from analyzer.cli.commands import app
from analyzer.cli.exits import EXIT_BAD_INPUT, EXIT_INTERNAL
from analyzer.cli.options import DEBUG
from analyzer.errors import AnalyzerError

__all__ = ["main", "run"]


def main() -> None:
    """Console-script entry point. An unexpected exception is an internal error: exit 3 with
    one line (never 1, which means "hang found"); ``--debug`` adds the traceback."""
    from analyzer.escape import clean

    try:
        app(standalone_mode=True)
    except AnalyzerError as exc:  # pragma: no cover - commands already convert these
        typer.echo(f"hangscope: error: {clean(str(exc))}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - any bug becomes exit 3 with one line
        if DEBUG["on"] or "--debug" in sys.argv[1:]:
            import traceback

            traceback.print_exc()
        typer.echo(
            f"hangscope: internal error: {type(exc).__name__}: {clean(str(exc))[:300]} "
            "(please report it; run with --debug for the traceback)",
            err=True,
        )
        raise SystemExit(EXIT_INTERNAL) from None


def run() -> None:
    """The ``hangscope`` command: :func:`main`, then the process ends at once with its exit
    code, without taking apart what the analysis built (millions of objects freed one by
    one at scale). Output is flushed first; nothing of hangscope's
    needs to run at exit. A flush that fails (the reader of a pipe went away) ends it with
    120, as Python's own exit would."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # a message: Python prints it and exits with 1
            print(exc.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code)
