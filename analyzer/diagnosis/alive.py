"""Ranks known to be alive: a rank that wrote a context file but no dump did not crash."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from analyzer.diagnosis.evidence import RootEvidence
from analyzer.load import Contexts

_NO_DUMP = re.compile(r"^rank (\d+) wrote no dump and others wait on it: ")
_CRASHED = "; it crashed, was killed, or hung before dumping"


def apply_contexts(diagnosis: Any, contexts: Contexts) -> Any:
    """The diagnosis, with ranks known to be alive no longer taken for crashed: a
    ``missing_dump`` culprit that wrote a context file is stalled outside communication
    (``not_joined``)."""
    if not contexts:
        return diagnosis
    changed = False
    findings = []
    for f in diagnosis.findings:
        alive = [r for r in f.ranks if r in contexts.by_rank]
        if f.kind == "missing_dump" and alive:
            c = contexts.by_rank[alive[0]]
            where = f" on {c.host}" if c.host else ""
            pid = f" (pid {c.pid})" if c.pid is not None else ""
            rest = _NO_DUMP.sub("", f.summary).replace(_CRASHED, "")
            summary = (
                f"rank {alive[0]} wrote no flight-recorder dump but is alive: its threads "
                f"were captured{where}{pid} at {c.time or 'dump time'}; others wait on it: "
                f"{rest}. It did not crash: it is stalled outside communication"
            )
            evidence = (
                dataclasses.replace(f.evidence, alive=True, context=c.path)
                if isinstance(f.evidence, RootEvidence)
                else f.evidence
            )
            f = dataclasses.replace(f, kind="not_joined", summary=summary, evidence=evidence)
            changed = True
        findings.append(f)
    if not changed:
        return diagnosis
    renamed = {old.summary: new for old, new in zip(diagnosis.findings, findings, strict=True)}
    lead = renamed.get(diagnosis.headline)
    kind, headline = diagnosis.kind, diagnosis.headline
    if lead is not None:
        headline = lead.summary
        if diagnosis.kind == "missing_dump":
            kind = lead.kind
    return dataclasses.replace(diagnosis, findings=tuple(findings), kind=kind, headline=headline)


__all__ = ["apply_contexts"]
