"""The ``hangscope`` commands (see :mod:`analyzer.cli`; the options they share:
:mod:`~analyzer.cli.options`)."""

from __future__ import annotations

import contextlib
import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.conventions import (
    HELP_OPTIONS,
    INVOKED,
    HangscopeGroup,
    colour_verdict,
    text_width,
)
from analyzer.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    verdict_code,
)
from analyzer.cli.exits import analyze_inputs as _analyze
from analyzer.cli.exits import export_tables as _export_tables
from analyzer.cli.exits import fail as _fail
from analyzer.cli.exits import output_failed as _output_failed
from analyzer.cli.exits import say as _say
from analyzer.cli.exits import write as _write
from analyzer.cli.options import (
    DEBUG,
    Clock,
    EntriesFormat,
    GraphFormat,
    IncidentOpt,
    JobsOpt,
    OutputFormat,
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
from analyzer.cli.outputs import check_file_output, check_same_job, check_store_output
from analyzer.cli.outputs import known_filter as _known
from analyzer.cli.outputs import refuse as _refuse_output
from analyzer.cli.outputs import write_blocks as _write_blocks
from analyzer.cli.process import exit_code_of
from analyzer.cli.progress import progress_phase
from analyzer.errors import AnalyzerError

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
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write here instead of stdout"),
    ] = None,
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


@app.command()
def entries(
    paths: Paths,
    rank: Annotated[
        list[int] | None,
        typer.Option("--rank", "-r", metavar="RANK", help="Only these ranks (repeat for several)"),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group", "-g", metavar="GROUP", help="Only these groups, by name or desc (repeat)"
        ),
    ] = None,
    last: Annotated[
        int,
        typer.Option(
            "--last", "-n", metavar="N", help="Only the newest N entries per rank (0: all)"
        ),
    ] = 0,
    fmt: Annotated[
        EntriesFormat,
        typer.Option("--format", "-f", help="text, csv, or jsonl (JSON Lines; json is the same)"),
    ] = EntriesFormat.text,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write here instead of stdout"),
    ] = None,
    prefix: PrefixOpt = None,
    incident: IncidentOpt = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    strict: StrictOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Show the per-rank entry table, filtered by rank and group; times relative to the hang.

    t_s is the enqueue time in seconds relative to the hang (the newest time in the dumps).

    Example: hangscope entries ./dumps -r 3 -n 20
    """
    check_file_output(output)
    result = _analyze(paths, prefix, None, jobs, quiet, strict, scheduler, incident)
    from analyzer.render import entry_rows

    e = result.tables.entries
    _known(result, rank, group)
    if rank:
        e = e[e["rank"].isin(rank)]
    if group:
        e = e[e["pg_name"].isin(group) | e["pg_desc"].isin(group)]
    e = e.sort_values(["rank", "record_id"], kind="stable")
    if last > 0:
        e = e.groupby("rank", sort=False).tail(last)
    if not len(e) and fmt is EntriesFormat.text:
        _write("no entries match\n", output)
        return
    kind = "jsonl" if fmt in (EntriesFormat.jsonl, EntriesFormat.json) else fmt.value
    _write_blocks(entry_rows(result.tables, e, kind), output)


@app.command()
def export(
    paths: Paths,
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FOLDER", help="Folder for the Parquet store")
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into a folder that holds other files, or over a store of another job",
        ),
    ] = False,
    prefix: PrefixOpt = None,
    world_size: WorldOpt = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    strict: StrictOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Write the normalized tables as Parquet; every command accepts the folder as input.

    The store holds just the dumps given (a shard, e.g. one node's files); several stores of
    one job given together are merged into one analysis.

    Example: hangscope export ./dumps -o incident/ && hangscope analyze incident/
    """
    import shutil

    from analyzer.store import ranges, write_store

    check_store_output(output, force)
    made = _export_tables(paths, prefix, world_size, jobs, quiet, strict, scheduler, output)
    t = (
        _analyze(paths, prefix, world_size, jobs, quiet, strict, scheduler).tables
        if made is None  # a store of the first format: its tables, as they are
        else made.tables
    )
    refused = check_same_job(output, t, force)
    if refused is not None:
        if made is not None and made.parsed_in is not None:  # take back what was staged
            shutil.rmtree(made.parsed_in, ignore_errors=True)
        raise _refuse_output(refused)
    try:  # built beside output and swapped in whole: a failure leaves output as it was
        if made is None:
            folder = write_store(t, output)
        else:
            folder = write_store(
                t,
                output,
                loaded=made.loaded,
                contexts=made.contexts,
                world_option=made.world_option,
                staged=made.parsed_in,
            )
    except OSError as exc:
        raise _output_failed(f"{output}: cannot write ({exc.strerror or exc})") from None
    except KeyboardInterrupt as exc:  # a signal while writing (write_store removed its files)
        raise typer.Exit(code=exit_code_of(exc)) from None
    except AnalyzerError as exc:
        raise _fail(str(exc)) from None
    held = t.dumped_ranks
    _say(
        f"wrote {folder}: {len(t.entries):,} entries of {len(held)} ranks "
        f"(ranks {ranges(held) or 'none'} of a world of {t.world_size}), "
        f"{t.stacks['stack_id'].nunique():,} distinct stacks"
    )


@app.command()
def graph(
    paths: Paths,
    fmt: Annotated[
        GraphFormat, typer.Option("--format", "-f", help="text, json, graphml or dot")
    ] = GraphFormat.text,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write here instead of stdout"),
    ] = None,
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
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FILE", help="HTML file to write")
    ] = Path("report.html"),
    plotlyjs: Annotated[
        PlotlyJs,
        typer.Option(
            "--plotlyjs",
            help="inline: offline, one file (default); cdn: small file, loads plotly.js from its CDN",
        ),
    ] = PlotlyJs.inline,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="FILE",
            help="Also write the timeline as a static image (.png via kaleido + Chromium; "
            ".svg needs nothing)",
        ),
    ] = None,
    clock: Annotated[
        Clock,
        typer.Option(
            "--clock", help="Timeline times: job (one axis) or rank (each rank on its own clock)"
        ),
    ] = Clock.job,
    max_lanes: Annotated[
        int, typer.Option("--max-lanes", metavar="N", help="Most timeline lanes drawn")
    ] = 64,
    window: Annotated[
        float | None,
        typer.Option(
            "--window",
            metavar="SECONDS",
            help="Seconds before the hang shown by default (default: the last ops of every rank)",
        ),
    ] = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit as analyze does (1 hang, 5 inconclusive) instead of 0 once written",
        ),
    ] = False,
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
    _say(f"wrote {output}")
    if png is not None:
        from analyzer.render import StaticImageError, write_timeline_image

        progress_phase("drawing the static timeline")
        try:
            write_timeline_image(
                result, png, clock=clock.value, max_lanes=max_lanes, window_s=window
            )
        except (StaticImageError, OSError) as exc:
            raise _fail(f"{png}: {exc}") from None
        _say(f"wrote {png}")
    _say(colour_verdict(verdict_line(result.diagnosis)))
    if exit_code:
        raise typer.Exit(code=verdict_code(result.diagnosis.verdict.value))


@app.command()
def demo(
    sample: Annotated[
        str | None,
        typer.Argument(
            metavar="[SAMPLE]",
            help="A bundled sample (default: chain_tp_dp_w8); --list names them",
            show_default=False,
        ),
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the bundled samples")] = False,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="text, json, or markdown")
    ] = OutputFormat.text,
) -> None:
    """Analyze a sample dump set that comes with hangscope (no dumps of your own needed).

    Example: hangscope demo, then hangscope demo deadlock_w4 -f markdown
    """
    from analyzer.cli.demo import DEFAULT_SAMPLE, demo_samples

    samples = demo_samples()
    if list_:
        _say("\n".join(f"{name}  ({path})" for name, path in samples.items()))
        return
    name = sample or DEFAULT_SAMPLE
    if name not in samples:
        have = ", ".join(samples) or "none (this install has no samples)"
        raise _fail(f"no sample {name!r}; samples: {have}")
    path = str(samples[name])
    _say(
        f"$ hangscope analyze {path}" + (f" -f {fmt.value}" if fmt is not OutputFormat.text else "")
    )
    with contextlib.suppress(typer.Exit):
        analyze(
            [path],
            fmt=fmt,
            output=None,
            prefix=None,
            incident=None,
            world_size=None,
            jobs=1,
            quiet=True,
            verbose=False,
            strict=False,
            scheduler=None,
        )
    _say(f"\nnext: hangscope report {path} -o report.html   (the HTML incident report)")


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
