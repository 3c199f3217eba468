"""Inside a collective every member joined and none completed: which member likely holds it.

Nothing in the program is missing, so the evidence is circumstantial; each signal is taken
only where it singles out one member of a group of three or more (in a pair, "the other one"
says nothing):

* **enqueued last**: one member enqueued the op (``time_created_ns``) clearly after all the
  others, which had arrived close together: it was slow to get there and is the first place
  to look (a host, driver or GPU that stalled around then);
* **never timed out**: every other member's entry of the op is retired without completing
  (their timeout fired: gloo retires timed-out ops) while this member's is not: it is still
  inside the op, or its process stopped before its own timeout could fire;
* **never started**: with NCCL timing on, every other member's entry is ``started`` and this
  one's is not: its GPU never reached the op;
* **completions lag**: its completed counter stops before its peers' (matching's
  ``stale_completers``): its GPU or link stopped completing work.

When the signals that fire name different members, or none fires, no member stands out and
the diagnosis says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.diagnosis.evidence import SuspectSignals
from analyzer.match import Matching
from analyzer.normalize import Tables

__all__ = ["LATE_MIN_NS", "LATE_RATIO", "Suspect", "stuck_suspect"]

#: The defaults of :attr:`AnalysisConfig.late_min_ns` and :attr:`AnalysisConfig.late_ratio`
#: (kept for readers of the old names; the thresholds come from the config).
LATE_MIN_NS = DEFAULT_CONFIG.late_min_ns
LATE_RATIO = DEFAULT_CONFIG.late_ratio


@dataclass(frozen=True, slots=True)
class Suspect:
    """The member of a stuck collective the evidence points at, if one stands out."""

    rank: int | None
    reasons: tuple[str, ...]
    """One sentence per signal that fired, about ``rank`` (or the conflicting ranks)."""
    evidence: SuspectSignals = field(default_factory=SuspectSignals)


def _single_late_enqueuer(
    rows: pd.DataFrame, config: AnalysisConfig
) -> tuple[int, str, SuspectSignals] | None:
    created = rows.groupby("rank")["time_created_ns"].min().sort_values()
    created = created[created > 0]
    if len(created) < 3:
        return None
    last, previous, first = int(created.iloc[-1]), int(created.iloc[-2]), int(created.iloc[0])
    gap, spread = last - previous, previous - first
    if gap < config.late_min_ns or gap < config.late_ratio * spread:
        return None
    rank = int(created.index.to_numpy()[-1])
    return (
        rank,
        (
            f"rank {rank} enqueued it last, {gap / 1e9:.3f} s after the other members, "
            f"which had all enqueued it within {spread / 1e9:.3f} s"
        ),
        SuspectSignals(
            enqueued_after_others_s=round(gap / 1e9, 6),
            others_spread_s=round(spread / 1e9, 6),
            enqueue_offsets_s={
                str(int(r)): round((int(t) - first) / 1e9, 6)
                for r, t in zip(created.index.tolist(), created.tolist())
            },
        ),
    )


def _single(rows: pd.DataFrame, mask: pd.Series) -> int | None:
    """The one member for which ``mask`` is false while it holds for every other member."""
    per_rank = mask.groupby(rows["rank"]).all()
    if len(per_rank) < 3 or int((~per_rank).sum()) != 1:
        return None
    return int(per_rank.index[~per_rank.to_numpy()][0])


def _entry_signals(
    rows: pd.DataFrame, named: dict[int, list[str]], config: AnalysisConfig
) -> SuspectSignals:
    """The signals of the members' own entries (groups of three or more)."""
    late = _single_late_enqueuer(rows, config)
    evidence = SuspectSignals()
    if late is not None:
        named.setdefault(late[0], []).append(late[1])
        evidence = late[2]
    state = rows["state"].astype(str)
    timed_out = rows["retired"] & (state != "completed")
    holder = _single(rows, timed_out)
    if holder is not None and not bool(rows.loc[rows["rank"] == holder, "retired"].any()):
        named.setdefault(holder, []).append(
            f"rank {holder}'s entry never timed out (not retired) while every other member's did"
        )
        evidence = dataclasses.replace(evidence, not_timed_out=holder)
    started = state.isin(["started", "completed"])
    slow = _single(rows, started)
    if slow is not None and started.any():
        named.setdefault(slow, []).append(
            f"rank {slow} never started it on its GPU while every other member did"
        )
        evidence = dataclasses.replace(evidence, not_started=slow)
    return evidence


def stuck_suspect(
    tables: Tables,
    matching: Matching,
    group: str,
    seq: int,
    members: tuple[int, ...],
    *,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> Suspect:
    """Weigh the evidence on the members of collective ``seq`` of ``group`` (the late-enqueue
    thresholds are ``config.late_min_ns`` and ``config.late_ratio``)."""
    e = tables.entries
    rows = e[(e["pg_name"] == group) & (e["seq"] == seq) & ~e["is_p2p"]]
    rows = rows[rows["rank"].isin(list(members))]
    named: dict[int, list[str]] = {}
    evidence = SuspectSignals()
    if len(set(rows["rank"])) >= 3 and len(members) >= 3:
        evidence = _entry_signals(rows, named, config)
    for rank, info in matching.stale_completers.items():
        if rank in members and info.get("group") == group:
            named.setdefault(int(rank), []).append(
                f"rank {rank}'s completions stopped first (completed {info['completed']} while "
                f"its peers completed {info['peers_completed']})"
            )
    if len(named) == 1:
        rank, mine = next(iter(named.items()))
        return Suspect(rank=rank, reasons=tuple(mine), evidence=evidence)
    if named:
        return Suspect(
            rank=None,
            reasons=tuple(r for rs in named.values() for r in rs),
            evidence=dataclasses.replace(evidence, conflicting=tuple(sorted(named))),
        )
    return Suspect(rank=None, reasons=(), evidence=evidence)
