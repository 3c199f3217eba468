"""Ranks known to be alive: a rank that wrote a context file but no dump did not crash.

A capture (:mod:`analyzer.capture`) writes each rank's context file beside its dumps. A rank
others wait on with such a file and no flight-recorder dump was running when the dumps were
taken: it is stalled outside communication, not crashed. This rule rewrites the roots the
rules before it blamed as ``missing_dump`` accordingly, from their evidence.
"""

from __future__ import annotations

import dataclasses

from analyzer.diagnosis.evidence import RootEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind

__all__ = ["alive_roots"]


def alive_roots(facts: Facts, found: list[Finding]) -> list[Finding]:
    """``missing_dump`` roots with a context file become ``not_joined``: alive, stalled."""
    return [_alive(f, facts) if _is_alive(f, facts) else f for f in found]


def _is_alive(f: Finding, facts: Facts) -> bool:
    return (
        f.kind == FindingKind.MISSING_DUMP
        and isinstance(f.evidence, RootEvidence)
        and any(r in facts.alive for r in f.ranks)
    )


def _alive(f: Finding, facts: Facts) -> Finding:
    rank = next(r for r in f.ranks if r in facts.alive)
    c = facts.alive[rank]
    assert isinstance(f.evidence, RootEvidence)
    where = f" on {c.host}" if c.host else ""
    pid = f" (pid {c.pid})" if c.pid is not None else ""
    summary = (
        f"rank {rank} wrote no flight-recorder dump but is alive: its threads were "
        f"captured{where}{pid} at {c.time or 'dump time'}; others wait on it: "
        f"{f.evidence.waits_text}. It did not crash: it is stalled outside communication"
    )
    evidence = dataclasses.replace(f.evidence, alive=True, context=c.path)
    return dataclasses.replace(
        f, kind=FindingKind.NOT_JOINED.value, summary=summary, evidence=evidence
    )
