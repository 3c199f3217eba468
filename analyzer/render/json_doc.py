"""The versioned JSON document of an analysis (``hangscope analyze --format json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyzer.diagnosis import SCHEMA_VERSION
from analyzer.load import alive_without_dump, where_now
from analyzer.render.input_notes import input_notes

if TYPE_CHECKING:
    from analyzer.analysis import Analysis


def graph_dict(analysis: Analysis) -> dict[str, Any]:
    """Nodes and labelled edges of the wait-for graph."""
    g = analysis.graph
    culprits = set(analysis.diagnosis.culprit_ranks)
    nodes = [
        {
            "rank": int(n),
            "dumped": bool(d.get("dumped", False)),
            "culprit": int(n) in culprits,
            "waits_on": g.out_degree(n),
            "waited_on_by": g.in_degree(n),
        }
        for n, d in sorted(g.nodes(data=True))
        if g.degree(n) or int(n) in culprits or not d.get("dumped", False)
    ]
    edges = [
        {
            "waiter": int(a),
            "holder": int(b),
            **{k: d[k] for k in ("pg_name", "pg_desc", "seq", "op", "kind", "count")},
        }
        for a, b, d in sorted(g.edges(data=True))
    ]
    return {"nodes": nodes, "edges": edges}


def to_json(analysis: Analysis) -> dict[str, Any]:
    """A JSON-safe dict; keys are documented in docs/output.md (schema ``SCHEMA_VERSION``)."""
    d = analysis.diagnosis
    t = analysis.tables
    notes = input_notes(analysis)
    return {
        "schema": SCHEMA_VERSION,
        "verdict": d.verdict.value,
        "kind": d.kind,
        "headline": d.headline,
        "fingerprint": d.fingerprint.to_dict(),
        "culprit_ranks": [int(r) for r in d.culprit_ranks],
        "culprits": [c.to_dict() for c in d.culprits],
        "also_possible": [{"kind": k, "because": why} for k, why in d.also_possible],
        "unseen_suspect": d.unseen_suspect or None,
        "not_ruled_out": [{"rank": c.rank, "because": c.because} for c in d.not_ruled_out],
        "incidents": [i.to_dict() for i in analysis.loaded.incidents]
        if analysis.loaded is not None
        else [],
        "missing_dumps": [int(r) for r in d.missing_dumps],
        "deadlock_cycles": [[int(r) for r in c] for c in d.deadlock_cycles],
        "chains": {str(r): [s.to_dict() for s in steps] for r, steps in d.chains.items()},
        "where_now": where_now(d.culprit_ranks, analysis.contexts),
        "findings": [f.to_dict() for f in d.findings],
        "skipped_files": [
            {"path": str(p), "rank": int(r), "reason": str(why)}
            for p, r, why in t.skipped[["path", "rank", "reason"]].itertuples(index=False)
        ],
        "warnings": list(notes.warnings),
        "ignored_files": [{"path": p, "reason": why} for p, why in notes.ignored],
        "duplicates": list(notes.duplicates),
        "unreadable_folders": [{"path": p, "reason": why} for p, why in notes.unreadable_folders],
        "suspect_ranks": list(notes.suspect_ranks),
        "unreadable_ranks": list(notes.unreadable_ranks),
        "world_size": int(t.world_size),
        "dumped_ranks": len(t.dumped_ranks),
        "entries": len(t.entries),
        "backends": sorted(str(b) for b in t.entries["backend"].unique() if str(b)),
        "formats": sorted(str(f) for f in t.ranks["format"].unique() if str(f)),
        "versions": sorted(str(v) for v in t.ranks["version"].unique() if str(v)),
        "dialects": analysis.matching.dialects.to_dict(),
        "unrecorded_groups": d.unrecorded_groups,
        "readers": {
            str(k): int(v)
            for k, v in t.ranks.loc[t.ranks["reader"] != "", "reader"]
            .value_counts()
            .sort_index()
            .items()
        },
        "graph": graph_dict(analysis),
        "contexts": {
            "ranks": sorted(int(r) for r in analysis.contexts.by_rank),
            "alive_without_dump": alive_without_dump(t.dumped_ranks, analysis.contexts),
            "hosts": {str(r): h for r, h in sorted(analysis.contexts.hosts().items())},
            "skipped": [{"path": p, "reason": why} for p, why in analysis.contexts.skipped],
        },
    }
