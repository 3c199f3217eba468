"""Ranks whose dumps were not given: a file named like a rank's dump sits beside the files
the user named, but was not among them. Such a rank's missing dump is no evidence of a crash
(its file exists); it is never blamed, and the verdict says what was not read."""

from __future__ import annotations

import dataclasses

from analyzer.diagnosis.evidence import RootEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Finding
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

__all__ = ["not_given_roots"]


def not_given_roots(facts: Facts, found: list[Finding]) -> list[Finding]:
    """``missing_dump`` roots whose file was not given are not blamed: they wait to be read."""
    return [_not_given(f, facts) if _applies(f, facts) else f for f in found]


def _applies(f: Finding, facts: Facts) -> bool:
    return (
        f.kind == FindingKind.MISSING_DUMP
        and bool(f.ranks)
        and all(r in facts.not_given for r in f.ranks)
    )


def _not_given(f: Finding, facts: Facts) -> Finding:
    waits = f.evidence.waits_text if isinstance(f.evidence, RootEvidence) else ""
    path = facts.not_given[f.ranks[0]]
    summary = (
        f"{plural(f.ranks)} {rank_runs(f.ranks)}: the dump was not given ({path} sits beside "
        f"the files given); others wait on it{': ' + waits if waits else ''}. Analyze the "
        "whole folder to know why"
    )
    return dataclasses.replace(f, culprit=False, summary=summary)
