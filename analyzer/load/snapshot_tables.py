"""The debug server's trace tables as evidence, where no rank's own dump was given.

A ``dump_dir`` may hold only snapshots: ``torchcomms_fr_trace_<ts>.txt`` (or c10d's
``fr_trace_<ts>.txt``) is then the only record of who enqueued what. Its tables (Groups,
Memberships, NCCL Calls) are read into one JSON dump per rank
(:func:`analyzer.load.debug_server.table_dumps`) and parsed like any dump, from the newest
snapshot every worker answered.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import DumpFormatError
from analyzer.load.debug_server import (
    TORCHCOMMS_MEMBER,
    chosen,
    prefer_files,
    snapshot_only,
    snapshots,
    table_dumps,
)
from analyzer.load.parse import parse_payload
from analyzer.load.parsed_dump import ParsedDump
from analyzer.load.unpack import Payload

__all__ = ["NO_TABLES", "read_as_written", "tables_as_dumps"]


class Ignorable(Protocol):
    """A file left out (the loader's ``Ignored``): its path is all that is read here."""

    @property
    def path(self) -> str: ...


#: Why a folder of the debug server's snapshots without trace tables cannot be analyzed.
NO_TABLES = (
    "the debug server's snapshots hold no trace table (*fr_trace_<ts>.txt) and no rank's "
    "dump: give its per_rank/ folder, or the /torchcomms_fr_trace_json (or /fr_trace_json) "
    "page saved from the browser"
)


def tables_as_dumps(
    inputs: Sequence[str | os.PathLike[str]], config: AnalysisConfig = DEFAULT_CONFIG
) -> tuple[list[ParsedDump], str]:
    """Each rank's dump as the newest complete trace tables give it, and a note saying which
    file (and the PARTIAL DATA after it); nothing when there are no tables."""
    for kind in ("torchcomms_fr_trace", "fr_trace"):
        pick, newer = chosen(snapshots(inputs, kind))
        if pick is None:
            continue
        try:
            with open(pick.path, "rb") as fh:
                text = fh.read(config.max_dump_bytes).decode("utf-8", "replace")
        except OSError:
            continue
        member = TORCHCOMMS_MEMBER if kind.startswith("torchcomms") else ""
        dumps = []
        for rank, data in table_dumps(text, config.max_rank).items():
            label = f"{pick.path}:{member}rank_{rank}.json"
            try:
                dumps.append(
                    parse_payload(
                        rank, Payload(label, label.rsplit(":", 1)[1], "json", data), config=config
                    )
                )
            except DumpFormatError:
                continue
        if dumps:
            note = (
                f"no rank's dump given: who enqueued what is read from the tables of "
                f"{pick.path.name}"
                + (f" ({pick.partial})" if pick.partial else "")
                + (f"; newer: {newer[-1].partial}" if newer else "")
                + " (each comm's order only, no dtypes)"
            )
            return dumps, note
    return [], ""


def read_as_written(
    dumps: list[ParsedDump],
    inputs: Sequence[str | os.PathLike[str]],
    skipped: Sequence[object],
    ignored: Sequence[Ignorable],
) -> tuple[list[ParsedDump], list[tuple[str, str]], str]:
    """The dumps to read: a rank's own file before its page sections (those left out come
    back as (path, why)), and the trace tables where only the debug server's snapshots were
    given (with a note that says which file)."""
    dumps, pages = prefer_files(dumps)
    note = ""
    if not dumps and not skipped and snapshot_only(i.path for i in ignored):
        dumps, note = tables_as_dumps(inputs)
    return dumps, pages, note
