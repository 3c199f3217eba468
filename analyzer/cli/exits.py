"""What the commands of :mod:`analyzer.cli.commands` share: the exit codes, and the steps that turn
the library's typed errors into one-line messages and exit codes (analyze the inputs, load
them for export, write the output)."""

from __future__ import annotations

import errno
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from analyzer.cli.process import exit_code_of
from analyzer.cli.progress import ProgressPrinter, erase_progress
from analyzer.errors import AnalyzerError, OutputError

if TYPE_CHECKING:  # pragma: no cover - the library is imported lazily
    import pandas as pd

    from analyzer.analysis import Analysis
    from analyzer.load import Loaded
    from analyzer.store import Exported

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_CLUSTER = 4
#: The verdict is inconclusive: the dumps do not single anyone out.
EXIT_INCONCLUSIVE = 5
#: The output could not be written: stdout closed or full, ``-o`` unwritable (a full disk).
EXIT_OUTPUT = 6
#: The reader of stdout's pipe went away (``| head``): its choice, not an error. The code a
#: shell reports for a process ended by SIGPIPE, as git and coreutils give it.
EXIT_PIPE = 128 + int(signal.SIGPIPE)


def verdict_code(verdict: str) -> int:
    """The exit code of a verdict: 1 hang, 5 inconclusive, 0 no hang."""
    return {"hang": EXIT_FOUND, "inconclusive": EXIT_INCONCLUSIVE}.get(verdict, EXIT_OK)


def fail(message: str) -> typer.Exit:
    erase_progress()
    typer.echo(f"hangscope: error: {message}", err=True)
    return typer.Exit(code=EXIT_BAD_INPUT)


def output_failed(message: str) -> typer.Exit:
    """Exit 6 with one line: the output could not be written."""
    erase_progress()
    typer.echo(f"hangscope: error: {message}", err=True)
    return typer.Exit(code=EXIT_OUTPUT)


def warn(message: str) -> None:
    typer.echo(f"hangscope: warning: {message}", err=True)


def inputs_check(
    paths: list[str], prefix: str | None, jobs: int | None, scheduler: str | None
) -> str | None:
    """The scheduler address to use (None: in-process); warns about options that do not
    apply to stores (their dumps were parsed when they were exported)."""
    from analyzer.load import is_store, scheduler_address

    address = scheduler_address(scheduler)
    if paths and all(is_store(p) for p in paths):
        unused = [
            name
            for name, given in (
                ("--prefix", prefix is not None),
                ("--jobs", jobs is not None),
                ("--scheduler", scheduler is not None),
            )
            if given
        ]
        if unused:
            warn(f"{', '.join(unused)} do(es) not apply to stores (already parsed): ignored")
        return None
    return address


def _check_counts(world: int | None, jobs: int | None) -> None:
    if world is not None and world < 1:
        raise fail(f"--world-size {world}: a job has at least one rank")
    if jobs is not None and jobs < 1:
        raise fail(f"--jobs {jobs}: give at least 1 parser process")


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """The library's typed errors as one line and their exit code: the cluster's 4, an
    output's 6, bad input's 2; a signal 128 plus its number (Ctrl-C 130)."""
    from analyzer.escape import clean
    from analyzer.load import ClusterError

    try:
        yield
    except ClusterError as exc:
        typer.echo(f"hangscope: error: {clean(str(exc))}", err=True)
        raise typer.Exit(code=EXIT_CLUSTER) from None
    except OutputError as exc:
        raise output_failed(clean(str(exc))) from None
    except AnalyzerError as exc:
        raise fail(clean(str(exc))) from None
    except KeyboardInterrupt as exc:
        raise typer.Exit(code=exit_code_of(exc)) from None


def _refuse_different_dumps(loaded: Loaded) -> None:
    """``--strict``: exit 2 when two different dumps claimed one rank."""
    different = [d for d in loaded.duplicates if not d.identical]
    if different:
        more = f" (and {len(different) - 1} more)" if len(different) > 1 else ""
        raise fail(f"--strict: {different[0].note}{more}")


def analyze_inputs(
    paths: list[str],
    prefix: str | None,
    world: int | None,
    jobs: int | None,
    quiet: bool,
    strict: bool = False,
    scheduler: str | None = None,
    incident: str | None = None,
) -> Analysis:
    from analyzer.load import is_store, start_loading

    _check_counts(world, jobs)
    with _one_line_errors():
        address = inputs_check(paths, prefix, jobs, scheduler)
        # Dumps (not stores) are handed to the parser processes first: they parse while this
        # process imports the analysis layers (pandas, pyarrow, networkx: about 0.45 s).
        loading = (
            None
            if any(is_store(p) for p in paths)
            else start_loading(paths, prefix=prefix, jobs=jobs, scheduler=address)
        )
        try:
            from analyzer.analysis import analyze

            result = analyze(
                paths,
                prefix=prefix,
                world_size=world,
                jobs=jobs,
                progress=ProgressPrinter(not quiet),
                scheduler=address,
                loading=loading,
                incident=incident,
            )
        except BaseException:  # an error or a signal: the parsers are ended, not waited for
            if loading is not None:
                loading.close(abort=True)
            raise
        if loading is not None:  # analyze let the parsers go; this covers a failure before
            loading.close()
    if strict and result.loaded is not None:
        _refuse_different_dumps(result.loaded)
    return result


def export_tables(
    paths: list[str],
    prefix: str | None,
    world: int | None,
    jobs: int | None,
    quiet: bool,
    strict: bool,
    scheduler: str | None,
    output: Path,
) -> Exported | None:
    """Load and normalize for ``export`` (no diagnosis), the parsed dumps staged first in a
    folder beside ``output`` (``made.parsed_in.parent``: the store is built there and
    swapped in whole); None for a first-format store. ``output`` may not be an input."""
    import shutil

    from analyzer.store import begin_store, prepare_export, store_inputs

    _check_counts(world, jobs)
    _refuse_output_among_inputs(paths, output)
    with _one_line_errors():
        address = inputs_check(paths, prefix, jobs, scheduler)
        if store_inputs(list(paths)) == "tables":
            return None
        try:
            build = begin_store(output)
        except OSError as exc:
            raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from None
        try:
            return prepare_export(
                list(paths),
                prefix=prefix,
                world_size=world,
                jobs=jobs,
                progress=ProgressPrinter(not quiet),
                scheduler=address,
                parsed_to=build,
                check=_refuse_different_dumps if strict else None,
            )
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise


def _refuse_output_among_inputs(paths: list[str], output: Path) -> None:
    """``export DIR -o DIR``: the store would sit among the dumps it was made of, and a
    later analysis of the folder would read the store and not the dumps."""
    import os

    target = os.path.realpath(output)
    for p in paths:
        real = os.path.realpath(p)
        if real == target or real.startswith(target + os.sep):
            raise fail(f"-o {output}: holds the input {p}: write the store to another folder")


def escaped(frame: pd.DataFrame) -> pd.DataFrame:
    """String and categorical columns with control characters escaped (CSV and text)."""
    import pandas as pd

    from analyzer.escape import clean

    out = frame.copy()
    for col in out.columns:
        values = out[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            cats = [clean(str(c)) for c in values.cat.categories]
            if len(set(cats)) == len(cats):
                out[col] = values.cat.rename_categories(cats)
            else:
                out[col] = values.astype(str).map(clean)
        elif values.dtype == object:
            out[col] = values.map(lambda v: clean(v) if isinstance(v, str) else v)
    return out


def write(text: str, output: Path | None) -> None:
    """Write ``text`` to stdout or to the file ``output``. Files are always UTF-8, whatever
    the locale; on a terminal whose encoding cannot show a character (an ASCII locale), the
    character is written as a backslash escape instead of failing. Output that cannot be
    written (stdout closed or full, a full disk) is exit 6 with one line."""
    erase_progress()  # the output is the first line on the screen
    if output is None:
        try:
            try:
                sys.stdout.write(text)
            except UnicodeEncodeError:
                encoding = getattr(sys.stdout, "encoding", None) or "ascii"
                sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))
            sys.stdout.flush()
        except (OSError, ValueError) as exc:
            raise _stdout_failed(exc) from None
        return
    from analyzer.store import write_text

    try:
        write_text(output, text)  # whole or not at all: never a half-written file
    except OSError as exc:
        raise output_failed(f"{output}: cannot write ({exc.strerror or exc})") from None


def say(line: str) -> None:
    """One line of what a command tells on stdout (``wrote report.html``): exit 6 when it
    cannot be written."""
    write(line + "\n", None)


def reader_gone(exc: BaseException) -> bool:
    """``exc`` says the reader of stdout's pipe (or socket) went away: EPIPE."""
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def _stdout_failed(exc: BaseException) -> typer.Exit:
    """Exit 6: stdout cannot be written; what is still buffered for it is dropped. Exit 141
    and nothing said when its reader went away (``hangscope entries DIR | head``)."""
    from analyzer.cli.process import drop_stdout

    drop_stdout()
    if reader_gone(exc):
        erase_progress()
        return typer.Exit(code=EXIT_PIPE)
    return output_failed(f"stdout: cannot write ({getattr(exc, 'strerror', None) or exc})")


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_FOUND",
    "EXIT_INCONCLUSIVE",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_PIPE",
    "analyze_inputs",
    "escaped",
    "export_tables",
    "fail",
    "inputs_check",
    "output_failed",
    "reader_gone",
    "say",
    "verdict_code",
    "warn",
    "write",
]
