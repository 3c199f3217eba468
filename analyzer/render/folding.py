"""The answer stays on one screen at scale: what repeats per rank is said once.

- Wait chains that take the same path (the same groups, sequence numbers and ops, hop by
  hop) and differ only in their ranks fold into one: ``chains to ranks 1496-1503: ranks
  56-63 → 1528-1535 → … → 1496-1503``, the path's detail once below it.
- Every chain is one arrow line, its hops' detail on the next line.
- Findings whose sentence is the same but for their own rank fold into one, counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyzer.kinds import WaitKind
from analyzer.render.culprit_view import chain_hops
from analyzer.terms import group_short, plural, rank_runs, seq_word

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.diagnosis import Diagnosis, Finding
    from analyzer.waits import Wait

__all__ = ["ChainLine", "FoldedFinding", "chain_lines", "fold_findings"]


@dataclass(frozen=True, slots=True)
class ChainLine:
    """One chain, or several that take the same path: ``arrow`` then ``detail``."""

    culprits: tuple[int, ...]
    arrow: str
    detail: str

    def text(self) -> str:
        return f"{self.arrow} {self.detail}"


def _hop_words(s: Wait) -> str:
    queued = ", queued behind a blocked op" if s.kind == WaitKind.QUEUED else ""
    return f"{group_short(s.pg_name, s.pg_desc)} {seq_word(s.op)} {s.seq} ({s.op}{queued})"


def _runs_of_hops(words: Sequence[str]) -> str:
    """Hop descriptions in order, a run of equal ones once with its count (``... ×3``)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        j = i
        while j + 1 < len(words) and words[j + 1] == words[i]:
            j += 1
        out.append(words[i] + (f" ×{j - i + 1}" if j > i else ""))
        i = j + 1
    return "; ".join(out)


def _signature(steps: Sequence[Wait], total: int) -> tuple[object, ...]:
    # By the group's desc: the same role (PIPELINE_MODEL_PARALLEL_GROUP) is one group per
    # tensor-parallel rank, each with its own name.
    return (total, *((group_short(s.pg_name, s.pg_desc), s.seq, s.op, s.kind) for s in steps))


def chain_lines(d: Diagnosis) -> list[ChainLine]:
    """The wait chains of ``d``, those that take the same path folded into one."""
    cycles = [set(c) for c in d.deadlock_cycles]
    groups: dict[tuple[object, ...], list[int]] = {}
    for rank, steps in d.chains.items():
        if steps:
            groups.setdefault(_signature(steps, d.chain_waits.get(rank, 0)), []).append(rank)
    out = []
    for ranks in groups.values():
        ranks = sorted(ranks)
        first = d.chains[ranks[0]]
        total = d.chain_waits.get(ranks[0], 0)
        in_cycle = all(any(r in c for c in cycles) for r in ranks)
        hops = [chain_hops(d.chains[r], total) for r in ranks]
        words = _runs_of_hops([_hop_words(s) for s in first])
        left = [h for h in hops[0] if isinstance(h, str)]
        gap = f" ({left[0].strip('… ')} left out)" if left and left[0] != "…" else ""
        if len(ranks) == 1:
            arrow = f"chain to rank {ranks[0]}: rank " + " → ".join(str(h) for h in hops[0])
            end = (
                f"{ranks[0]} is in the deadlock cycle"
                if in_cycle
                else f"{ranks[0]} waits on nobody"
            )
            detail = f"waits in {words}{gap}; {end}"
        else:
            columns = []
            for i, h in enumerate(hops[0]):
                if isinstance(h, str):
                    columns.append(h)
                else:
                    at = [int(x[i]) for x in hops if i < len(x) and isinstance(x[i], int)]
                    columns.append(rank_runs(at, 4))
            arrow = f"chains to ranks {rank_runs(ranks, 4)}: ranks " + " → ".join(columns)
            end = "they are in the deadlock cycle" if in_cycle else "they wait on nobody"
            detail = f"the same path for each of the {len(ranks)}: waits in {words}{gap}; {end}"
        out.append(ChainLine(tuple(ranks), arrow, detail))
    return out


@dataclass(frozen=True, slots=True)
class FoldedFinding:
    """A finding, and the ranks of the findings it stands for (itself included)."""

    finding: Finding
    ranks: tuple[int, ...]

    def text(self) -> str:
        f = self.finding
        mark = "*" if f.culprit else "-"
        several = (
            f"{plural(self.ranks)} {rank_runs(self.ranks, 6)}, each alike; shown for rank "
            f"{f.ranks[0]}: "
            if len(self.ranks) > 1
            else ""
        )
        return f"{mark} [{f.kind}] {several}{f.summary}"


def _template(f: Finding) -> str:
    if len(f.ranks) != 1:
        return f.summary
    return re.sub(rf"(?<=\brank ){f.ranks[0]}(?!\d)", "#", f.summary)


def fold_findings(findings: Iterable[Finding]) -> list[FoldedFinding]:
    """Findings of one rank each whose sentences are the same but for that rank: one, with
    their ranks; the others as they are. The order is kept (a fold sits where its first was)."""
    out: list[tuple[Finding, list[int]]] = []
    seen: dict[tuple[object, ...], int] = {}
    for f in findings:
        key = (f.kind, f.culprit, f.group, f.seq, f.op, _template(f))
        if len(f.ranks) == 1 and key in seen:
            out[seen[key]][1].append(f.ranks[0])
            continue
        if len(f.ranks) == 1:
            seen[key] = len(out)
        out.append((f, list(f.ranks)))
    return [FoldedFinding(f, tuple(ranks)) for f, ranks in out]
