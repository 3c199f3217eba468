"""The commands that read or write tables: ``entries`` (the entry table, streamed),
``export`` (the Parquet store) and ``demo`` (a bundled sample analyzed); registered on the
app by :mod:`analyzer.cli.commands`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.exits import analyze_inputs as _analyze
from analyzer.cli.exits import export_tables as _export_tables
from analyzer.cli.exits import fail as _fail
from analyzer.cli.exits import output_failed as _output_failed
from analyzer.cli.exits import say as _say
from analyzer.cli.exits import write as _write
from analyzer.cli.options import (
    EntriesFormat,
    IncidentOpt,
    JobsOpt,
    OutputFormat,
    OutputOpt,
    Paths,
    PrefixOpt,
    QuietOpt,
    SchedulerOpt,
    StrictOpt,
    WorldOpt,
)
from analyzer.cli.outputs import check_file_output, check_same_job, check_store_output
from analyzer.cli.outputs import known_filter as _known
from analyzer.cli.outputs import refuse as _refuse_output
from analyzer.cli.outputs import write_blocks as _write_blocks
from analyzer.cli.process import exit_code_of
from analyzer.errors import AnalyzerError

__all__ = ["demo", "entries", "export"]


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
    output: OutputOpt = None,
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


def export(
    paths: Paths,
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FOLDER", help="Folder for the Parquet store")
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a store of another job (a folder with other files is never written into)",
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
    if quiet:
        return
    held = t.dumped_ranks
    _say(
        f"wrote {folder}: {len(t.entries):,} entries of {len(held)} ranks "
        f"(ranks {ranges(held) or 'none'} of a world of {t.world_size}), "
        f"{t.stacks['stack_id'].nunique():,} distinct stacks"
    )


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
    from analyzer.cli.commands import analyze  # the command itself (commands imports this)
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
