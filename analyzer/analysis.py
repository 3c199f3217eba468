"""The pipeline in one function: load -> normalize -> match -> graph -> diagnose.

Rendering (text, JSON, figures, HTML) takes the :class:`Analysis` this returns and never
recomputes anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import pandas as pd

from analyzer.diagnosis import Diagnosis, diagnose
from analyzer.graph import build_graph, waits
from analyzer.loader import Progress, load_dumps
from analyzer.matching import Matching, match
from analyzer.store import is_store, read_store
from analyzer.tables import Tables, normalize

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Analysis:
    """Everything hangscope worked out about one dump set."""

    tables: Tables
    matching: Matching
    waits: pd.DataFrame
    graph: nx.DiGraph
    diagnosis: Diagnosis

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


def analyze(
    paths: PathLike | Sequence[PathLike],
    *,
    prefix: str | None = None,
    world_size: int | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Analysis:
    """Analyze the dumps at ``paths`` (a directory, glob, prefix, file, or a list of them).

    A folder written by ``hangscope export`` (:mod:`analyzer.store`) is re-opened directly.
    """
    inputs = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if len(inputs) == 1 and is_store(inputs[0]):
        tables = read_store(inputs[0])  # normalized tables exported earlier
    else:
        loaded = load_dumps(inputs, prefix=prefix, jobs=jobs, progress=progress)
        tables = normalize(loaded, world_size=world_size)
    matching = match(tables)
    wait_rows = waits(tables, matching)
    graph = build_graph(tables, wait_rows)
    diagnosis = diagnose(tables, matching, wait_rows, graph)
    return Analysis(tables=tables, matching=matching, waits=wait_rows, graph=graph, diagnosis=diagnosis)
