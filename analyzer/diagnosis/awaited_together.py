"""Ranks with no dump that the waits never tell apart.

A rank that wrote no dump is blamed because others wait on it. Where several such ranks are
blamed and every rank that waits on one of them waits, in the same op, on another too (all
the waiters of ranks 0-4 are in one all_reduce of the world), the files say that the job
stopped at one or more of them, not which: they may all have stopped (a host down), or
only one, with the others' files never written where they were looked for, or not copied.
A dump policy that writes only the ranks whose own ops timed out does not settle it: it
explains a missing file only if every file written was collected. A rank is told apart
where some rank waits on it alone among them (the only member with no dump of a smaller
group whose other members wait there).
"""

from __future__ import annotations

from collections import defaultdict

from analyzer.diagnosis.facts import Facts

__all__ = ["awaited_together"]


def awaited_together(facts: Facts, dead: set[int]) -> dict[int, tuple[int, ...]]:
    """For each rank of ``dead`` (blamed, with no dump) that is never awaited alone among
    ``dead``: the other ranks of ``dead`` awaited with it. Empty when fewer than two."""
    if len(dead) < 2:
        return {}
    w = facts.waits
    w = w[w["holder"].isin(sorted(dead))]
    holders: dict[tuple[int, str, int, str], set[int]] = defaultdict(set)
    for waiter, holder, group, seq, op in w[
        ["waiter", "holder", "pg_name", "seq", "op"]
    ].itertuples(index=False):
        holders[(int(waiter), str(group), int(seq), str(op))].add(int(holder))
    alone = {next(iter(h)) for h in holders.values() if len(h) == 1}
    together: dict[int, set[int]] = defaultdict(set)
    for h in holders.values():
        for r in h - alone:
            together[r] |= h - {r}
    return {r: tuple(sorted(others)) for r, others in together.items() if others}
