"""Ranks the debug server stopped reaching: their process ended or froze.

torch 2.15's debug server asks every rank's worker for its stacks at each interval, and a
rank it cannot reach is listed under ``PARTIAL DATA``. A rank that waits in a collective
still answers (its server thread runs beside the blocked one); a rank whose process exited
or was killed, or is frozen, or holds the interpreter does not. For a culprit with no dump
that is a fact worth its reason, but not a verdict: a rank that waited, timed out, wrote its
file and then exited (as ranks torn down on a timeout do) leaves the same silence once that
file is not collected, and the debug server's rounds are too far apart to order its exit
before the others' timeouts. So the reason says it, and the confidence stays.
"""

from __future__ import annotations

from analyzer.context_file import NoAnswer
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Culprit

__all__ = ["gone_culprits"]


def gone_culprits(facts: Facts, judged: dict[int, Culprit]) -> dict[int, Culprit]:
    """``judged`` with the reason of each culprit that wrote no dump and that the debug
    server stopped reaching saying so."""
    out = dict(judged)
    for rank, c in judged.items():
        g = facts.no_answer.get(rank)
        if g is not None and rank in facts.unblamed_missing:
            out[rank] = Culprit(rank, c.confidence, f"{c.because}; {_gone(g)}")
    return out


def _gone(g: NoAnswer) -> str:
    how = f" ({g.error})" if g.error else ""
    return (
        f"the debug server stopped reaching it{how}: it answered {g.answered}, then not "
        f"{g.since} nor any after, while other ranks did: its process ended or froze (a "
        "crash, or an exit after a timeout of its own whose file was not collected)"
    )
