"""Ranks whose file is absent: what the files given cannot tell about them.

A rank that wrote no dump is blamed because others wait on it, and a dump policy that writes
only the ranks whose own ops timed out reads an absent file as a rank that never timed out.
Both hold only if every file written was collected; a user who copied one host's files, or
whose copy of another's failed, holds a part of them. Three readings keep that in view:

* **awaited together**: where every rank that waits
on it waits, in the same op, on another rank with no dump too (all the waiters of ranks 0-4
are in one all_reduce of the world), the files say that the job stopped at one or more of
them, not which: they may all have stopped (a host down), or only one, with the others'
files never written where they were looked for, or not copied. A dump policy that writes
only the ranks whose own ops timed out does not settle it: it explains a missing file only
if every file written was collected. Where no dump lists the members of the group of that op
nor the job's ranks (gloo 2.13), a rank that no file names at all may be one more of them
(:data:`UNSEEN`). A rank is told apart where some rank waits on it alone among them (the
only member with no dump of a smaller group whose members are known);
* **half the files absent**: where half the job's ranks or more have no dump, those given may
  be one host's, and no absent file shows that its rank stopped;
* **held between**: a rank with a dump that waits on such a rank in one group while another
  rank with a dump waits on it in another may be held in a deadlock through the absent one
  (the collectives of two groups in different orders), as well as waiting on a stopped rank;
* **beside a proven culprit**: a rank with no dump that is a member of the group of an op
  another rank's own files prove the job stopped in (or that such a deadlock cycle waits on)
  may be waiting there as the others do, its file written but not collected, rather than a
  second fault.

Each turns a rank the others' files blame (``likely``) into a suspect, with the fact missing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from analyzer.diagnosis.evidence import CycleEvidence
from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit, Finding, place_of
from analyzer.kinds import FindingKind
from analyzer.terms import plural, rank_runs

__all__ = [
    "MAX_SILENT",
    "UNSEEN",
    "absent_doubts",
    "awaited_together",
    "beside_proven",
    "unknown_member_groups",
]

#: Members with no dump named as suspects beside one culprit, at most (more are no second
#: fault but files that were not collected; the culprit's own doubt stays).
MAX_SILENT = 8


#: Stands, among the ranks awaited together, for a rank that no file names.
UNSEEN = -1


def unknown_member_groups(facts: Facts) -> set[str]:
    """Groups whose members no dump lists (from entries alone, or, for the default group,
    from the highest rank a file gives), where nothing declares the world."""
    if not facts.nothing_listed:
        return set()
    g = facts.tables.groups
    world = set(g.loc[g["source"] == "world", "pg_name"].astype(str))
    # A group the layout filled (source "inferred") is no list either: the layout fits a
    # larger job as well, whose other ranks' files are absent.
    inferred = set(g.loc[g["source"] == "inferred", "pg_name"].astype(str))
    return set(facts.unlisted_groups) | world | inferred


def awaited_together(facts: Facts, dead: set[int]) -> dict[int, tuple[int, ...]]:
    """For each rank of ``dead`` (blamed, with no dump) that is never awaited alone among
    ``dead``: the others awaited with it (:data:`UNSEEN` for a rank no file names)."""
    if not dead:
        return {}
    w = facts.waits
    w = w[w["holder"].isin(sorted(dead))]
    unknown = unknown_member_groups(facts)
    holders: dict[tuple[int, str, int, str], set[int]] = defaultdict(set)
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        key = (int(waiter), str(group), int(seq), str(op))
        holders[key].add(int(holder))
        if str(group) in unknown:
            holders[key].add(UNSEEN)
    alone = {next(iter(h)) for h in holders.values() if len(h) == 1}
    together: dict[int, set[int]] = defaultdict(set)
    for h in holders.values():
        for r in h - alone - {UNSEEN}:
            together[r] |= h - {r}
    return {r: tuple(sorted(others)) for r, others in together.items() if others}


def _awaited_with(rank: int, others: Sequence[int], layout: str | None = None) -> Culprit:
    """``rank``, with no dump, awaited only together with ``others`` (no dump either;
    :data:`UNSEEN` for a rank no file names); ``layout``: the group whose layout implies
    ``rank``, where no file names it."""
    ranks = sorted({rank, *others} - {UNSEEN})
    unseen = UNSEEN in others
    if len(ranks) == 1 and layout:
        return Culprit(
            rank,
            Confidence.SUSPECT,
            f"no file names it: the layout of {layout} implies a member with no dump, but no "
            "dump lists the groups' members nor the job's ranks: the layout fits a larger job "
            "as well, whose other ranks' files are absent, and one of them may be the one the "
            "others wait on (a world size given, --world-size N, settles it)",
        )
    if len(ranks) == 1:
        return Culprit(
            rank,
            Confidence.SUSPECT,
            "it wrote no dump and others wait on it, but no dump lists the members of the "
            "group they wait in nor the job's ranks: a rank that no file names may be the one "
            "they wait on as well (a world size given, --world-size N, settles it)",
        )
    return Culprit(
        rank,
        Confidence.SUSPECT,
        f"ranks {rank_runs(ranks)} wrote no dump and no rank waits on one of them alone "
        "(each waits on two or more in the same op"
        + (", and a rank that no file names may be one more" if unseen else "")
        + "): the files do not say which of them stopped (one, or all: a host down), nor "
        "whether some of their files were only not collected",
    )


#: Ranks blamed each for its own absent file from which the files given may be a part only.
_MANY_ABSENT = 3


def _among_absent(rank: int, absent: Sequence[int], world: int) -> Culprit:
    """``rank``, with no dump, where half the job's ranks or more (``absent``) have none, or
    :data:`_MANY_ABSENT` or more are blamed each for its own."""
    return Culprit(
        rank,
        Confidence.SUSPECT,
        f"ranks {rank_runs(absent)} ({len(absent)} of the job's {world}) have no dump: with "
        "that many files absent, those given may be only a part of the files written (one "
        "host's, say), and an absent file does not show that its rank stopped",
    )


def _held_between(facts: Facts, absent: set[int], named: set[int]) -> list[Culprit]:
    """Ranks with a dump, not named, that wait on a rank of ``absent`` in one group while
    another rank with a dump waits on them in another group."""
    w = facts.waits
    present = set(facts.tables.dumped_ranks)
    w = w[w["waiter"].isin(sorted(present))]
    on: dict[int, list[tuple[int, str]]] = defaultdict(list)  # holder -> (waiter, group)
    for waiter, holder, group in w[["waiter", "holder", "pg_name"]].itertuples(index=False):
        on[int(holder)].append((int(waiter), str(group)))
    out: dict[int, Culprit] = {}
    for a in sorted(absent):
        for r, group in on.get(a, ()):
            if r in out or r in named:
                continue
            them = sorted({x for x, g in on.get(r, ()) if g != group})
            if not them:
                continue
            out[r] = Culprit(
                r,
                Confidence.SUSPECT,
                f"it waits on rank {a} (no dump) while {plural(them)} {rank_runs(them)} "
                f"{'waits' if len(them) == 1 else 'wait'} on it in another group: where rank "
                f"{a} waits on it in turn, it is held in a deadlock (the collectives of two "
                "groups in different orders), and the absent file would show it",
            )
    return [out[r] for r in sorted(out)]


def absent_doubts(facts: Facts, dead: set[int], judged: Mapping[int, Culprit]) -> list[Culprit]:
    """The culprits of ``judged`` with no dump (``dead``) that the files given do not set
    apart, each a suspect with the reason, and the ranks held between them and others
    (module docstring). Only ``likely`` ones are doubted; others are kept."""
    out: dict[int, Culprit] = {}
    for r, others in awaited_together(facts, dead).items():
        if judged[r].confidence is Confidence.LIKELY:
            out[r] = _awaited_with(r, others, facts.inferred.get(r))
    absent = sorted(facts.unblamed_missing)
    world = facts.tables.world_size
    blamed = [r for r in sorted(dead) if r not in out and judged[r].confidence is Confidence.LIKELY]
    # Half the files absent, or three ranks or more blamed each for its absent file: files
    # not collected (a host's) is the likelier reading than as many faults at once.
    if len(absent) >= 2 and (2 * len(absent) >= world or len(blamed) >= _MANY_ABSENT):
        for r in blamed:
            out[r] = _among_absent(r, absent, world)
    if out:
        doubted = {r for r in dead if r in out or judged[r].confidence is Confidence.SUSPECT}
        out.update({c.rank: c for c in _held_between(facts, doubted, set(judged))})
    return [out[r] for r in sorted(out)]


def beside_proven(
    facts: Facts, findings: Sequence[Finding], dead: set[int], judged: Mapping[int, Culprit]
) -> dict[int, Culprit]:
    """The ``likely`` culprits of ``dead`` (no dump) beside a culprit the files prove
    (``certain``, from its own dump) in whose op's group they are members, or whose deadlock
    cycle waits on them: instead of stopping on their own, they may wait there as the others
    do, their file written but not collected. Each a suspect (a second fault is the other
    reading)."""
    proven = [
        f
        for f in findings
        if f.culprit
        and f.group
        and f.kind != FindingKind.MISSING_DUMP.value
        and all(judged.get(r) and judged[r].confidence is Confidence.CERTAIN for r in f.ranks)
    ]
    out: dict[int, Culprit] = {}
    for r in sorted(dead):
        if judged.get(r) is None or judged[r].confidence is not Confidence.LIKELY:
            continue
        for f in proven:
            if link := _linked_to(facts, f, r):
                out[r] = Culprit(
                    r,
                    Confidence.SUSPECT,
                    f"it wrote no dump, but {_shown_by(f.ranks)} where the job stopped, "
                    f"{place_of(f)}, {link}: it may wait there as the others do (its file "
                    "written but not collected), or have stopped as a second fault",
                )
                break
    return out


def _linked_to(facts: Facts, f: Finding, rank: int) -> str:
    """How ``rank`` may be held where ``f`` stopped the job: a member of its op's group, or a
    rank its deadlock cycle waits on; "" for neither."""
    if rank in facts.members.get(f.group, ()):
        return "in a group it is a member of"
    g = facts.graph
    ev = f.evidence
    if isinstance(ev, CycleEvidence) and rank in g and any(g.has_edge(c, rank) for c in ev.cycle):
        return "and that cycle's ranks wait on it"
    return ""


def _shown_by(ranks: Sequence[int]) -> str:
    """``rank 3's own dump shows`` / ``ranks 0, 1's own dumps show``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}'s own dump shows"
    return f"ranks {rank_runs(list(ranks))}'s own dumps show"
