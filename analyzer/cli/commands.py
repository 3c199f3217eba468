"""The ``hangscope`` commands (see :mod:`analyzer.cli`; the options they share:
:mod:`~analyzer.cli.options`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.completion import completion
from analyzer.cli.conventions import (
    HELP_OPTIONS,
    INVOKED,
    HangscopeGroup,
    colour_verdict,
    text_width,
)
from analyzer.cli.diff_command import diff
from analyzer.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    verdict_code,
)
from analyzer.cli.exits import analyze_inputs as _analyze
from analyzer.cli.exits import fail as _fail
from analyzer.cli.exits import say as _say
from analyzer.cli.exits import write as _write
from analyzer.cli.options import (
    DEBUG,
    Clock,
    GraphFormat,
    IncidentOpt,
    JobsOpt,
    OutputFormat,
    OutputOpt,
    Paths,
    PlotlyJs,
    PrefixOpt,
    QuietOpt,
    SchedulerOpt,
    StrictOpt,
    VerboseOpt,
    WorldOpt,
    hangscope_version,
    version_callback,
)
from analyzer.cli.outputs import check_file_output
from analyzer.cli.progress import progress_phase
from analyzer.cli.report_options import (
    ClockOpt,
    ExitCodeOpt,
    MaxLanesOpt,
    PlotlyJsOpt,
    PngOpt,
    ReportOut,
    WindowOpt,
)
from analyzer.cli.table_commands import demo, entries, export

app = typer.Typer(
    name="hangscope",
    cls=HangscopeGroup,
    context_settings=HELP_OPTIONS,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Which rank stopped the job, and why: post-mortem analysis of PyTorch flight-recorder dumps.",
)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=version_callback,
            is_eager=True,
            help="Print the version and exit",
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="On an internal error, print the traceback (exit code 3 either way)"
        ),
    ] = False,
) -> None:
    """Which rank stopped the job, and why: post-mortem analysis of PyTorch flight-recorder dumps."""
    if debug:
        DEBUG["on"] = True


@app.command()
def analyze(
    paths: Paths,
    fmt: Annotated[
        OutputFormat,
        typer.Option(
            "--format", "-f", help="text, json, or markdown (a summary to paste into a ticket)"
        ),
    ] = OutputFormat.text,
    output: OutputOpt = None,
    prefix: PrefixOpt = None,
    incident: IncidentOpt = None,
    world_size: WorldOpt = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    strict: StrictOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Name the culprit rank(s) of a hang and explain why.

    Example: hangscope analyze ./dumps --format json
    """
    check_file_output(output)
    result = _analyze(paths, prefix, world_size, jobs, quiet, strict, scheduler, incident)
    from analyzer.render import (  # after: the files parse while it imports
        render_markdown,
        render_text,
        to_json,
    )

    if fmt is OutputFormat.json:
        text = json.dumps(to_json(result), indent=1) + "\n"
    elif fmt is OutputFormat.markdown:
        text = render_markdown(result, source=" ".join(paths), version=hangscope_version())
    else:
        text = render_text(result, verbose=verbose, width=text_width())
        if output is None:
            text = colour_verdict(text)
    _write(text, output)
    raise typer.Exit(code=verdict_code(result.diagnosis.verdict.value))


app.command()(entries)  # of cli/table_commands.py, in the order --help lists them
app.command()(export)


@app.command()
def graph(
    paths: Paths,
    fmt: Annotated[
        GraphFormat, typer.Option("--format", "-f", help="text, json, graphml or dot")
    ] = GraphFormat.text,
    output: OutputOpt = None,
    prefix: PrefixOpt = None,
    incident: IncidentOpt = None,
    world_size: WorldOpt = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    strict: StrictOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Print or export the wait-for graph (who waits on whom, in which group and op).

    Example: hangscope graph ./dumps -f dot -o waits.dot
    """
    check_file_output(output)
    result = _analyze(paths, prefix, world_size, jobs, quiet, strict, scheduler, incident)
    from analyzer.render import graph_dict, graph_dot, graph_graphml, graph_text

    if fmt is GraphFormat.json:
        text = json.dumps(graph_dict(result), indent=1) + "\n"
    elif fmt is GraphFormat.graphml:
        text = graph_graphml(result)
    elif fmt is GraphFormat.dot:
        text = graph_dot(result)
    else:
        text = graph_text(result)
    _write(text, output)


@app.command()
def report(
    paths: Paths,
    output: ReportOut = Path("report.html"),
    plotlyjs: PlotlyJsOpt = PlotlyJs.inline,
    png: PngOpt = None,
    clock: ClockOpt = Clock.job,
    max_lanes: MaxLanesOpt = 64,
    window: WindowOpt = None,
    exit_code: ExitCodeOpt = False,
    prefix: PrefixOpt = None,
    incident: IncidentOpt = None,
    world_size: WorldOpt = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    strict: StrictOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Write the HTML incident report: verdict first, then timeline, wait graph and evidence.

    Example: hangscope report ./dumps -o report.html --png timeline.png
    """
    check_file_output(output)
    check_file_output(png, "--png")
    result = _analyze(paths, prefix, world_size, jobs, quiet, strict, scheduler, incident)
    from analyzer.render import render_html, verdict_line

    progress_phase(f"building the report of {len(result.tables.entries):,} entries")
    _write(
        render_html(
            result,
            plotlyjs=plotlyjs.value,
            clock=clock.value,
            max_lanes=max_lanes,
            window_s=window,
            source=" ".join(paths),
            command=shlex.join(["hangscope", *INVOKED["argv"]]),
        ),
        output,
    )
    if not quiet:
        _say(f"wrote {output}")
    if png is not None:
        from analyzer.render import StaticImageError, write_timeline_image

        progress_phase("drawing the static timeline")
        try:
            from analyzer.store import write_atomically

            write_atomically(  # whole or not at all, as every file hangscope writes
                png,
                lambda tmp: write_timeline_image(
                    result, tmp, clock=clock.value, max_lanes=max_lanes, window_s=window
                ),
            )
        except (StaticImageError, OSError) as exc:
            raise _fail(f"{png}: {exc}") from None
        if not quiet:
            _say(f"wrote {png}")
    if not quiet:
        _say(colour_verdict(verdict_line(result.diagnosis)))
    if exit_code:
        raise typer.Exit(code=verdict_code(result.diagnosis.verdict.value))


app.command()(diff)
app.command()(demo)
app.command()(completion)


@app.command()
def capture(
    pids: Annotated[
        list[int],
        typer.Argument(
            metavar="PID...",
            help="Process ids of ranks (e.g. from nvidia-smi or ps)",
            show_default=False,
        ),
    ],
    signal_: Annotated[
        bool,
        typer.Option(
            "--signal",
            help="Send SIGUSR1: each rank that runs "
            "analyzer.capture.hook asks every rank to write its dumps and context",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Signal a process even where it cannot be checked that it handles SIGUSR1 "
            "(no /proc); one that does not handle it dies",
        ),
    ] = False,
) -> None:
    """Ask a running job to capture its dumps now (the ranks must have analyzer.capture.hook installed)."""
    import os
    import signal

    from analyzer.cli.sigcaught import catches

    if not signal_:
        raise _fail("say how to reach the job: hangscope capture --signal PID...")
    failed = 0
    for pid in pids:
        if pid <= 0:
            typer.echo(f"hangscope: error: {pid}: not a process id", err=True)
            failed += 1
            continue
        caught = catches(pid, signal.SIGUSR1)
        if caught is False or (caught is None and not force and os.path.isdir("/proc")):
            why = (
                "it does not handle SIGUSR1 (no analyzer.capture.hook in it), which would end it"
                if caught is False
                else "no such process, or its /proc/PID/status cannot be read"
            )
            typer.echo(f"hangscope: error: {pid}: not signalled: {why}", err=True)
            failed += 1
            continue
        if caught is None and not force:
            typer.echo(
                f"hangscope: error: {pid}: not signalled: cannot check that it handles "
                "SIGUSR1 here (no /proc); --force sends it anyway",
                err=True,
            )
            failed += 1
            continue
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            typer.echo(f"hangscope: error: {pid}: no such process", err=True)
            failed += 1
        except PermissionError:
            typer.echo(f"hangscope: error: {pid}: not permitted to signal it", err=True)
            failed += 1
        else:
            _say(f"sent SIGUSR1 to {pid}")
    raise typer.Exit(code=EXIT_BAD_INPUT if failed else EXIT_OK)
