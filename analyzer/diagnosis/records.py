"""The records the diagnosis hands on: the verdict, the findings and the diagnosis.

The evidence of each finding is a frozen record of :mod:`analyzer.diagnosis.evidence`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from analyzer.diagnosis.evidence import NO_EVIDENCE, Evidence
from analyzer.diagnosis.fingerprint import NO_FINGERPRINT, Fingerprint
from analyzer.waits import Wait

__all__ = ["Confidence", "Culprit", "Diagnosis", "Finding", "Verdict", "place_of"]


class Verdict(StrEnum):
    HANG = "hang"
    NO_HANG = "no_hang"
    INCONCLUSIVE = "inconclusive"


class Confidence(StrEnum):
    CERTAIN = "certain"
    LIKELY = "likely"
    SUSPECT = "suspect"


@dataclass(frozen=True, slots=True)
class Culprit:
    """One culprit, how sure the evidence makes it, and the one fact that decides it."""

    rank: int
    confidence: Confidence
    because: str

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "confidence": str(self.confidence), "because": self.because}


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One piece of evidence, JSON-safe through :meth:`to_dict`."""

    kind: str
    """A :class:`~analyzer.kinds.FindingKind` (members equal their strings)."""
    ranks: tuple[int, ...]
    summary: str
    group: str = ""
    group_desc: str = ""
    seq: int = -1
    op: str = ""
    culprit: bool = False
    evidence: Evidence = field(default_factory=lambda: NO_EVIDENCE)
    stack: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "ranks": list(self.ranks),
            "culprit": self.culprit,
            "summary": self.summary,
            "group": self.group,
            "group_desc": self.group_desc,
            "seq": self.seq,
            "op": self.op,
            "evidence": self.evidence.to_dict(),
            "stack": list(self.stack),
        }


def place_of(f: Finding) -> str:
    """Where ``f`` stopped the job, in words: ``all_reduce in TP seq 4``."""
    name = f.group_desc or f"group {f.group}"
    return f"{f.op or 'an op'} in {name} seq {f.seq}" if f.seq >= 0 else name


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """The answer: verdict, culprits, and the findings that explain them."""

    verdict: Verdict
    culprit_ranks: tuple[int, ...]
    kind: str
    """The kind of the leading finding (what stopped the job)."""
    headline: str
    findings: tuple[Finding, ...]
    missing_dumps: tuple[int, ...]
    deadlock_cycles: tuple[tuple[int, ...], ...]
    chains: dict[int, tuple[Wait, ...]]
    """For each culprit others wait on: the longest wait path that ends in it (its middle left
    out past 8 waits: the first wait and the 7 next to the culprit are kept)."""
    chain_waits: dict[int, int] = field(default_factory=dict)
    """For each chain: the number of waits on the whole path."""
    culprits: tuple[Culprit, ...] = ()
    """Each culprit (or, when the verdict is inconclusive, each suspect) with how sure the
    evidence makes it and the one fact that decides it (:mod:`analyzer.diagnosis.confidence`)."""
    unrecorded_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Groups other evidence names but no loaded dump recorded (for some or all members)."""
    also_possible: tuple[tuple[str, str], ...] = ()
    """Other kinds the dumps cannot rule out for these culprits, each with why: (kind, why)."""
    unseen_suspect: str = ""
    """Why a rank that wrote no file and that no dump names may be the culprit ("" when the
    dumps rule that out): the ranks named are then not all the suspects."""
    not_ruled_out: tuple[Culprit, ...] = ()
    """Dumped ranks the files cannot rule out as a second culprit, beside the culprits and
    suspects, and set apart by nothing in them (:mod:`analyzer.diagnosis.not_ruled_out`)."""
    fingerprint: Fingerprint = NO_FINGERPRINT
    """What makes this hang this hang, without ranks, times or sizes
    (:mod:`analyzer.diagnosis.fingerprint`): two diagnoses of one id are the same hang."""
