"""The pipeline in one function: load -> normalize -> match -> graph -> diagnose.

Rendering (text, JSON, figures, HTML) takes the :class:`Analysis` this returns and never
recomputes anything.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import networkx as nx
import pandas as pd

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.diagnosis import Diagnosis, Verdict, diagnose
from analyzer.load import (
    Contexts,
    Loaded,
    Loading,
    Progress,
    find_contexts,
    load_dumps,
    unordered_rounds,
)
from analyzer.match import Matching, match
from analyzer.normalize import Tables, check_world_option, normalize, without_hugepage_advice
from analyzer.runtime import freed_memory_reused
from analyzer.store import open_stores, read_store, store_inputs
from analyzer.waits import build_graph, waits

if TYPE_CHECKING:  # pragma: no cover - plotly is imported by the render modules only
    import plotly.graph_objects as go

PathLike = str | os.PathLike[str]


Clock = Literal["job", "rank"]
PlotlyJs = Literal["inline", "cdn"]


@dataclass(frozen=True, repr=False)
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
    """What the loader read (None for a store of tables only): ignored files, duplicates,
    warnings, and each dump's notes (rank, path, counts, group tables). Its entries are in
    :attr:`tables` (``normalize(..., release=True)`` moved them there): it cannot be
    normalized or written to a store again (``analyzer.store.merge.prepare_export`` keeps
    the dumps whole for that)."""
    config: AnalysisConfig = DEFAULT_CONFIG
    """The thresholds and caps given to :func:`analyze` (the defaults when none was given)."""

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
    def culprit_ranks(self) -> tuple[int, ...]:
        """The culprit ranks, sorted (``diagnosis.culprit_ranks``)."""
        return self.diagnosis.culprit_ranks

    @property
    def verdict(self) -> Verdict:
        """``hang``, ``no_hang`` or ``inconclusive`` (a str Enum: ``== "hang"`` holds)."""
        return self.diagnosis.verdict

    def __repr__(self) -> str:
        """One line: ranks, verdict, kind, culprits and counts (the full record is in the
        fields; a notebook shows the verdict summary, :meth:`_repr_html_`)."""
        d = self.diagnosis
        t = self.tables
        parts = [
            f"ranks={len(t.dumped_ranks)}/{t.world_size}",
            f"verdict={d.verdict.value!r}",
            f"kind={d.kind!r}",
            f"culprits={_short_ranks(d.culprit_ranks)}",
            f"entries={len(t.entries)}",
            f"findings={len(d.findings)}",
        ]
        if d.missing_dumps:
            parts.append(f"missing_dumps={_short_ranks(d.missing_dumps)}")
        if d.deadlock_cycles:
            parts.append(f"deadlock_cycles={len(d.deadlock_cycles)}")
        if len(t.skipped):
            parts.append(f"skipped_files={len(t.skipped)}")
        return f"Analysis({', '.join(parts)})"

    # Figures and the HTML report (render modules are imported lazily: plotly stays out of
    # the analysis layers). Defaults are those of the render functions (checked by a test).
    def timeline(
        self,
        *,
        max_lanes: int = 64,
        window_s: float | None = None,
        clock: Clock = "job",
        collapse: bool | None = None,
        bar_budget: int = 8_000,
    ) -> go.Figure:
        """The timeline figure: one lane per rank (or per set of ranks that behave alike), one
        bar per recorded op (:func:`analyzer.render.timeline_figure.timeline`).

        ``max_lanes``: most lanes drawn (culprits and their direct waiters first).
        ``window_s``: seconds before the hang shown by default (None: the last ops of every
        rank); the buttons above the plot switch to the whole buffer.
        ``clock``: ``"job"``, one time axis for all ranks, or ``"rank"``, each rank on its own
        clock (removes clock offsets between hosts, hides which rank stopped first).
        ``collapse``: merge ranks that behave identically into one lane (None: only when there
        are more ranks than ``min(max_lanes, 32)``).
        ``bar_budget``: past this many bars, the oldest completed entries of each lane are
        merged into summary bars.
        """
        from analyzer.render import for_notebook, timeline

        fig = timeline(
            self,
            max_lanes=max_lanes,
            window_s=window_s,
            clock=clock,
            collapse=collapse,
            bar_budget=bar_budget,
        )
        return for_notebook(fig, "timeline", self)

    def wait_graph_figure(self, *, max_nodes: int = 80, merge: bool | None = None) -> go.Figure:
        """The wait-for graph figure: culprits on the right, waiters further left by distance
        (:func:`analyzer.render.wait_graph_figure.wait_graph`).

        ``max_nodes``: most nodes drawn. ``merge``: merge ranks that wait the same way (same
        distance, same kind of wait on the same holders) into one node (None: when more than
        24 ranks are involved).
        """
        from analyzer.render import for_notebook, wait_graph

        return for_notebook(wait_graph(self, max_nodes=max_nodes, merge=merge), "wait_graph", self)

    def progress_figure(self) -> go.Figure:
        """Per group and rank: lag behind the group's frontier."""
        from analyzer.render import for_notebook, progress

        return for_notebook(progress(self), "progress", self)

    def report_html(
        self,
        *,
        plotlyjs: PlotlyJs = "inline",
        title: str | None = None,
        clock: Clock = "job",
        max_lanes: int = 64,
        window_s: float | None = None,
        source: str = "",
        command: str = "",
    ) -> str:
        """The self-contained HTML incident report, as a string
        (:func:`analyzer.render.report.render_html`).

        ``plotlyjs``: ``"inline"`` embeds plotly.js (works offline, makes no request);
        ``"cdn"`` loads it from its CDN (a file about 0.66 MB smaller). ``title``: the page title
        (default: the verdict line). ``clock``, ``max_lanes`` and ``window_s``: as for
        :meth:`timeline`. ``source`` (the input) and ``command`` (the command line that made
        it) are named in the report's header, with the version and the time.
        """
        from analyzer.render import render_html

        return render_html(
            self,
            plotlyjs=plotlyjs,
            title=title,
            clock=clock,
            max_lanes=max_lanes,
            window_s=window_s,
            source=source,
            command=command,
        )

    def save_report(
        self,
        path: PathLike,
        *,
        plotlyjs: PlotlyJs = "inline",
        title: str | None = None,
        clock: Clock = "job",
        max_lanes: int = 64,
        window_s: float | None = None,
        source: str = "",
        command: str = "",
    ) -> str:
        """Write the HTML incident report (:meth:`report_html`, same options) to ``path`` in
        UTF-8; returns the path as a string."""
        from analyzer.render import write_html

        return write_html(
            self,
            path,
            plotlyjs=plotlyjs,
            title=title,
            clock=clock,
            max_lanes=max_lanes,
            window_s=window_s,
            source=source,
            command=command,
        )

    def summary_markdown(self, source: str = "") -> str:
        """The ticket summary (``hangscope analyze -f markdown``); ``source``: the input to name."""
        from analyzer import __version__
        from analyzer.render import render_markdown

        return render_markdown(self, source=source, version=__version__)

    def where_now(self) -> pd.DataFrame:
        """Where each rank is now: one row per rank whose context was captured
        (:mod:`analyzer.capture`), its main thread's stack at capture time."""
        from analyzer.render import where_each_rank_is_now

        return where_each_rank_is_now(self)

    def _repr_html_(self) -> str:
        from analyzer.render import verdict_html

        return verdict_html(self)


def _short_ranks(ranks: Sequence[int], limit: int = 8) -> str:
    """``(3,)`` or ``(0, 1, 2, ... 16 ranks)``: a rank tuple cut short for a repr."""
    if len(ranks) <= limit:
        return repr(tuple(ranks))
    return "(" + ", ".join(str(r) for r in ranks[:limit]) + f", ... {len(ranks)} ranks)"


def analyze(
    paths: PathLike | Sequence[PathLike],
    *,
    prefix: str | None = None,
    world_size: int | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    scheduler: str | None = None,
    config: AnalysisConfig | None = None,
    loading: Loading | None = None,
    incident: str | None = None,
) -> Analysis:
    """Analyze the dumps at ``paths`` (a directory, glob, prefix, file, or a list of them).

    A folder written by ``hangscope export`` (:mod:`analyzer.store.parquet`), or several (shards of
    one job), is re-opened without parsing.

    ``prefix``: the file-name prefix before the rank number, for unusual names.
    ``world_size``: the number of ranks of the job (to count missing dumps of the last ranks).
    ``jobs``: parser processes (default: all cores). ``progress``: called as files are read.
    ``scheduler``: a Dask scheduler's address whose workers parse the files
    (:mod:`analyzer.load.dask_workers`; None: parse in this process and its pool).
    ``config``: the thresholds and caps of the analysis (:class:`analyzer.config.AnalysisConfig`;
    None: :data:`analyzer.config.DEFAULT_CONFIG`, the defaults and the environment's caps),
    passed to every layer and kept as :attr:`Analysis.config`.
    ``loading``: the dumps of ``paths`` already handed to the parsers
    (:func:`analyzer.load.loader.start_loading`, with the same ``prefix``, ``jobs``, ``scheduler``
    and ``config``); None: they are loaded here. Its parsers are let go in any case.
    ``incident``: where the folders hold several incidents (restarts), the one to analyze
    (by the name :attr:`Loaded.incidents` gives it); None: the newest.
    """
    if config is None:
        config = DEFAULT_CONFIG
    inputs = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    with loading or nullcontext(), _cyclic_gc_paused(), without_hugepage_advice():
        check_world_option(world_size, config.max_rank)
        tables, loaded, contexts = _open(
            inputs, _Load(prefix, jobs, progress, scheduler, loading, incident), world_size, config
        )
        with freed_memory_reused():  # matching's temporaries reuse each other's pages
            matching = match(tables, config=config)
            wait_rows = waits(tables, matching, config=config)
            graph = build_graph(tables, wait_rows)
            diagnosis = diagnose(
                tables,
                matching,
                wait_rows,
                graph,
                unsure=_unsure(loaded),
                stale=[r for r, _ in loaded.stale] if loaded is not None else (),
                alive=contexts.by_rank,
                not_given=loaded.not_given if loaded is not None else {},
                no_answer=contexts.no_answer,
                config=config,
            )
    return Analysis(
        tables=tables,
        matching=matching,
        waits=wait_rows,
        graph=graph,
        diagnosis=diagnosis,
        contexts=contexts,
        loaded=loaded,
        config=config,
    )


@dataclass(frozen=True)
class _Load:
    """How to load dumps that are not in a store (the options of :func:`analyze`)."""

    prefix: str | None
    jobs: int | None
    progress: Progress | None
    scheduler: str | None
    loading: Loading | None
    incident: str | None = None


def _open(
    inputs: list[PathLike], how: _Load, world_size: int | None, config: AnalysisConfig
) -> tuple[Tables, Loaded | None, Contexts]:
    """The normalized tables of ``inputs``: a store of normalized tables read back, the
    parsed dumps of one or several stores, or the dumps themselves (with the context files
    a capture left beside them); and what was loaded, when dumps were."""
    stores = store_inputs(inputs)
    if stores == "tables":
        return read_store(inputs[0], world_size=world_size), None, Contexts()
    if stores:
        opened = open_stores(inputs)  # the parsed dumps of one or several stores
        loaded, contexts = opened.loaded, opened.contexts
        hint = opened.world_option or contexts.world_hint(d.rank for d in loaded.dumps)
    else:
        loaded = (
            how.loading.finish(how.progress, how.incident)
            if how.loading is not None
            else load_dumps(
                inputs,
                prefix=how.prefix,
                jobs=how.jobs,
                progress=how.progress,
                scheduler=how.scheduler,
                config=config,
                incident=how.incident,
            )
        )
        # Captured context files beside the dumps: where each rank is now, who is alive.
        contexts = find_contexts(inputs, [Path(d.path) for d in loaded.dumps], config=config)
        hint = contexts.world_hint(d.rank for d in loaded.dumps)
    tables = normalize(loaded, world_size=world_size or hint, config=config, release=True)
    return tables, loaded, contexts


def _unsure(loaded: Loaded | None) -> dict[int, str]:
    """Ranks whose evidence is doubtful, and why (see :func:`analyzer.diagnosis.diagnose`)."""
    if loaded is None:
        return {}
    out = {r: "its file could not be read" for r in loaded.unreadable_ranks}
    out.update(
        {r: "its dump had malformed entries or values (dropped)" for r in loaded.suspect_ranks}
    )
    unordered = unordered_rounds(loaded.dumps, loaded.duplicates)
    for r, why in [*loaded.stale, *loaded.torchcomms.unaligned.items(), *unordered.items()]:
        out.setdefault(r, why)
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
