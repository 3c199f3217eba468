"""Diagnosis: from matching and the wait-for graph to culprits, findings and a verdict.

The taxonomy (``Finding.kind``, :class:`analyzer.kinds.FindingKind`) is stable and
documented in docs/output.md; :data:`~analyzer.diagnosis.rules.TAXONOMY` lists it with a line
on each kind.

The diagnosis is a list of rules (:mod:`analyzer.diagnosis.rules`), each a function from
the analysed tables to findings, in levels ordered cause before consequence: a desync
outranks the waits it causes (a rank that crashed on a desynchronised message is a victim,
listed in ``missing_dumps``), and among waits only the roots of the graph are culprits.

* :mod:`~analyzer.diagnosis.desync`: op, size and dtype mismatches, collective and p2p;
* :mod:`~analyzer.diagnosis.roots`: ranks everybody waits on (not joined, no dump, behind
  in unrecorded ops), and roots whose evidence is doubtful;
* :mod:`~analyzer.diagnosis.deadlock`: wait cycles and who started them;
* :mod:`~analyzer.diagnosis.stuck`: inside a collective nobody completed, with its suspect;
  completions that stopped first;
* :mod:`~analyzer.diagnosis.unrecorded`: ops the buffers never saw;
* :mod:`~analyzer.diagnosis.confidence`, :mod:`~analyzer.diagnosis.beside` and
  :mod:`~analyzer.diagnosis.alternatives`: how sure each culprit is, the ranks beside it the
  dumps cannot rule out, and the other kinds they cannot rule out;
* :mod:`~analyzer.diagnosis.engine`: runs the levels and decides the verdict;
* :mod:`~analyzer.diagnosis.fingerprint`: what makes this hang this hang, whatever the job's
  size (two diagnoses of one fingerprint id are the same hang);
* :mod:`~analyzer.diagnosis.hang_diff`: two incidents compared (``hangscope diff``).
"""

from __future__ import annotations

from analyzer.diagnosis.engine import UNKNOWN_WORLD, UNSEEN_BARRIER_HEAD, diagnose
from analyzer.diagnosis.fingerprint import Fingerprint, fingerprint_id, make_fingerprint
from analyzer.diagnosis.hang_diff import (
    DIFF_SCHEMA,
    MAX_SAVED_BYTES,
    FieldDiff,
    HangDiff,
    HangSide,
    compare,
    read_saved,
    side_of,
)
from analyzer.diagnosis.records import Confidence, Culprit, Diagnosis, Finding, Verdict
from analyzer.diagnosis.roots import NO_DUMP_OWN_TIMEOUT
from analyzer.diagnosis.rules import LEVELS, TAXONOMY, VERDICTS
from analyzer.diagnosis.unrecorded import unrecorded_text

SCHEMA_VERSION = "hangscope.diagnosis/1.5"

#: Every finding kind, in the order findings are listed.
KINDS: tuple[str, ...] = tuple(row.kind.value for row in TAXONOMY)

__all__ = [
    "DIFF_SCHEMA",
    "KINDS",
    "LEVELS",
    "MAX_SAVED_BYTES",
    "NO_DUMP_OWN_TIMEOUT",
    "SCHEMA_VERSION",
    "TAXONOMY",
    "UNKNOWN_WORLD",
    "UNSEEN_BARRIER_HEAD",
    "VERDICTS",
    "Confidence",
    "Culprit",
    "Diagnosis",
    "FieldDiff",
    "Finding",
    "Fingerprint",
    "HangDiff",
    "HangSide",
    "Verdict",
    "compare",
    "diagnose",
    "fingerprint_id",
    "make_fingerprint",
    "read_saved",
    "side_of",
    "unrecorded_text",
]
