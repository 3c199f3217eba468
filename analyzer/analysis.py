"""The pipeline in one function: load -> normalize -> match -> graph -> diagnose.

Rendering (text, JSON, figures, HTML) takes the :class:`Analysis` this returns and never
recomputes anything.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd

from analyzer.context import Contexts, apply_contexts, find_contexts
from analyzer.diagnosis import Diagnosis, diagnose
from analyzer.errors import InputError
from analyzer.graph import build_graph
from analyzer.loader import Loaded, Progress, load_dumps
from analyzer.matching import Matching, match
from analyzer.store import open_stores, read_store, store_inputs
from analyzer.tables import Tables, normalize
from analyzer.waits import waits

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Analysis:
    """Everything hangscope worked out about one dump set."""

    tables: Tables
    matching: Matching
    waits: pd.DataFrame
    graph: nx.DiGraph
    diagnosis: Diagnosis
    #: Context files captured beside the dumps (:mod:`analyzer.capture`), by rank.
    contexts: Contexts = field(default_factory=Contexts)
    loaded: Loaded | None = None
    """What the loader read (None for a re-opened store): ignored files, duplicates, warnings."""

    # Convenience views for notebooks.
    @property
    def entries(self) -> pd.DataFrame:
        return self.tables.entries

    @property
    def groups(self) -> pd.DataFrame:
        return self.tables.groups

    @property
    def collectives(self) -> pd.DataFrame:
        return self.matching.collectives

    @property
    def findings(self) -> pd.DataFrame:
        rows = [f.to_dict() for f in self.diagnosis.findings]
        cols = ["kind", "culprit", "ranks", "group", "group_desc", "seq", "op", "summary"]
        return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)

    @property
    def culprit_ranks(self) -> list[int]:
        return list(self.diagnosis.culprit_ranks)

    @property
    def verdict(self) -> str:
        return self.diagnosis.verdict.value

    # Figures and the HTML report (render modules are imported lazily: plotly stays out of
    # the analysis layers).
    def timeline(self, **kw: Any) -> Any:
        """The timeline figure (``max_lanes``, ``window_s``, ``clock="job"|"rank"``, ``collapse``)."""
        from analyzer.render.figures import timeline

        return timeline(self, **kw)

    def wait_graph_figure(self, **kw: Any) -> Any:
        """The wait-for graph figure."""
        from analyzer.render.figures import wait_graph

        return wait_graph(self, **kw)

    def progress_figure(self) -> Any:
        """Per group and rank: lag behind the group's frontier."""
        from analyzer.render.figures import progress

        return progress(self)

    def report_html(self, **kw: Any) -> str:
        """The self-contained HTML incident report (``plotlyjs="inline"|"cdn"``, timeline options)."""
        from analyzer.render.html import render_html

        return render_html(self, **kw)

    def save_report(self, path: PathLike, **kw: Any) -> str:
        """Write the HTML incident report to ``path``; returns the path."""
        from analyzer.render.html import write_html

        return write_html(self, path, **kw)

    def _repr_html_(self) -> str:
        from analyzer.render.html import verdict_html

        return verdict_html(self)


def analyze(
    paths: PathLike | Sequence[PathLike],
    *,
    prefix: str | None = None,
    world_size: int | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    scheduler: str | None = None,
) -> Analysis:
    """Analyze the dumps at ``paths`` (a directory, glob, prefix, file, or a list of them).

    A folder written by ``hangscope export`` (:mod:`analyzer.store`), or several (shards of
    one job), is re-opened without parsing. ``scheduler``: a Dask scheduler's address whose
    workers parse the files (:mod:`analyzer.cluster`).
    """
    inputs = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if world_size is not None and world_size < 1:
        raise InputError(f"world size {world_size}: a job has at least one rank")
    loaded: Loaded | None = None
    with _cyclic_gc_paused():
        contexts = Contexts()
        stores = store_inputs(inputs)
        if stores == "tables":
            tables = read_store(inputs[0], world_size=world_size)  # normalized tables only
        elif stores:
            opened = open_stores(inputs)  # the parsed dumps of one or several stores
            loaded, contexts = opened.loaded, opened.contexts
            world = (world_size or opened.world_option
                     or contexts.world_hint(d.rank for d in loaded.dumps))
            tables = normalize(loaded, world_size=world)
        else:
            loaded = load_dumps(inputs, prefix=prefix, jobs=jobs, progress=progress,
                                scheduler=scheduler)
            # Captured context files beside the dumps: where each rank is now, who is alive.
            contexts = find_contexts(inputs, [Path(d.path) for d in loaded.dumps])
            world = world_size or contexts.world_hint(d.rank for d in loaded.dumps)
            tables = normalize(loaded, world_size=world)
        matching = match(tables)
        wait_rows = waits(tables, matching)
        graph = build_graph(tables, wait_rows)
        diagnosis = apply_contexts(diagnose(tables, matching, wait_rows, graph, unsure=_unsure(loaded)),
                                   contexts)
    return Analysis(tables=tables, matching=matching, waits=wait_rows, graph=graph,
                    diagnosis=diagnosis, contexts=contexts, loaded=loaded)


def _unsure(loaded: Loaded | None) -> dict[int, str]:
    """Ranks whose evidence is doubtful, and why (see :func:`analyzer.diagnosis.diagnose`)."""
    if loaded is None:
        return {}
    out = {r: "its file could not be read" for r in loaded.unreadable_ranks}
    out.update({r: "its dump had malformed entries or values (dropped)" for r in loaded.suspect_ranks})
    return out


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (parser processes forked meanwhile inherit the
    pause). The analysis holds millions of long-lived containers and makes no garbage
    cycles to speak of; each collection would walk them all: 16% of the load time at 4,096
    ranks. Freed memory is still freed at once by reference counting."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
