"""The ``hangscope`` process (the console script is :func:`run`): the commands run, an
unexpected error turned into exit code 3 and one line, a signal into 128 plus its number,
output that cannot be written into 6 (:mod:`~analyzer.cli.process`), the process ended at
once."""

from __future__ import annotations

import contextlib
import os
import sys

import typer

from analyzer.cli.commands import app
from analyzer.cli.completion import COMPLETE_VAR, prepare_completion
from analyzer.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_INTERNAL,
    EXIT_OUTPUT,
    EXIT_PIPE,
    reader_gone,
)
from analyzer.cli.options import DEBUG
from analyzer.cli.process import exit_code_of, guard_streams, install_signal_handlers, received
from analyzer.errors import AnalyzerError

__all__ = ["main", "run"]


def main() -> None:
    """Console-script entry point. An unexpected exception is an internal error: exit 3 with
    one line (never 1, which means "hang found"); ``--debug`` adds the traceback."""
    from analyzer.escape import clean

    prepare_completion()
    try:
        app(standalone_mode=True, complete_var=COMPLETE_VAR)
    except AnalyzerError as exc:  # pragma: no cover - commands already convert these
        typer.echo(f"hangscope: error: {clean(str(exc))}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:  # a signal (analyzer.cli.process): 128 + its number
        raise SystemExit(exit_code_of(exc)) from None
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
    one at scale). Output is flushed first; nothing of hangscope's needs to run at exit. A
    flush of stdout that fails (closed, full) ends it with 6, or with 141 when the reader of
    its pipe went away; a signal that stopped the run, with 128 plus its number."""
    guard_streams()
    install_signal_handlers()
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # a message: Python prints it and exits with 1
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as exc:  # stopped outside the commands' own handling
        code = exit_code_of(exc)
    signum = received()
    if signum is not None:  # whatever the unwinding made of it (click's "Aborted!": 1)
        code = 128 + signum
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        if code not in (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_CLUSTER, EXIT_OUTPUT) and code < 128:
            # the verdict (or what was asked) could not be told; its reader's choice when
            # the reader of the pipe went away (| head): 141, nothing said
            if reader_gone(exc):
                code = EXIT_PIPE
            else:
                _say_lost(exc)
                code = EXIT_OUTPUT
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)


def _say_lost(exc: BaseException) -> None:
    from analyzer.escape import clean

    why = getattr(exc, "strerror", None) or str(exc)
    sys.stderr.write(f"hangscope: error: stdout: cannot write ({clean(why)})\n")
