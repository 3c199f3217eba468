"""A desync whose partner died: gloo aborts the receiver of a size mismatch, so in a group
where no member but the odd rank wrote a dump, no other entry can show the mismatch. The odd
rank's own entry is the only witness: its op differs from every earlier op of that name it
posted in that group, or from what the sibling groups (same description) issued at that seq.
The rank with no dump and the odd rank are then both suspects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analyzer.diagnosis.facts import Facts
from analyzer.diagnosis.records import Confidence, Culprit
from analyzer.match import odd_against_siblings, sibling_family
from analyzer.terms import rank_runs

__all__ = ["Change", "desync_beside_death", "partners_changed"]


@dataclass(frozen=True)
class Change:
    """How a rank's op differs: ``word`` (size, dtype) ``usual`` -> ``value``; ``siblings``:
    the description of the sibling groups that posted ``usual`` at that seq ("" where the
    rank's own history did), ``where``: a note on that history ("" or why other groups)."""

    word: str
    usual: str
    value: str
    siblings: str = ""
    where: str = ""

    def said(self) -> str:
        """``changed size [[8]] -> [[12]]`` / ``posted size [[12]]``."""
        if self.siblings:
            return f"posted {self.word} {self.value}"
        return f"changed {self.word} {self.usual} -> {self.value}{self.where}"

    def against(self) -> str:
        """What it differs from: ``from what it posted before`` / the sibling groups'."""
        if self.siblings:
            return f"where the other {self.siblings} groups posted {self.usual} at that seq"
        return "from what it posted before"


def _changed(facts: Facts, rank: int, group: str, seq: int, desc: str) -> Change | None:
    """How ``rank``'s op at ``seq`` of ``group`` differs in size or dtype from what it posted
    for every earlier op of that name in that group (two at least), else None. Where that
    group holds fewer, its dtype against every earlier op of that name in any of its groups
    (two at least; sizes differ between groups by design). Where its history says nothing,
    what the sibling groups of ``desc`` posted at that seq."""
    e = facts.tables.entries
    coll = e[(e["rank"] == rank) & ~e["is_p2p"].to_numpy(bool)]
    mine = coll[coll["pg_name"] == group]
    now = mine[mine["seq"] == seq]
    if len(now) != 1:
        return None
    op = now["op"].iat[0]
    before = mine[(mine["seq"] < seq) & (mine["op"] == op)]
    checks: tuple[tuple[str, str, str], ...] = (
        ("input_sizes", "size", ""),
        ("input_dtypes", "dtype", ""),
    )
    if len(before) < 2:
        before = coll[(coll["record_id"] < now["record_id"].iat[0]) & (coll["op"] == op)]
        checks = (("input_dtypes", "dtype", f" (its earlier {op} ops were in other groups)"),)
    for col, word, where in checks if len(before) >= 2 else ():
        usual = set(before[col].astype(str))
        if len(usual) == 1 and (value := str(now[col].iat[0])) not in usual:
            return Change(word, usual.pop(), value, where=where)
    if odd := odd_against_siblings(e, rank, group, desc, seq):
        return Change(*odd, siblings=sibling_family(group, desc))
    return None


#: Pairs checked for a desync whose partner died (each check scans the entries once).
_MAX_PAIR_CHECKS = 64


def partners_changed(
    facts: Facts, dead: set[int]
) -> dict[int, list[tuple[int, str, Change, list[int]]]]:
    """For culprits with no dump (``dead``): rank -> (waiter, where, change, others) for each
    member that waits on it in a group where no other member wrote a dump (``others``: its
    only other member, or every one of them) and whose op there differs in size or dtype
    (:func:`_changed`; gloo aborts the receiver of a size mismatch): no other member's entry
    can show the mismatch, so the odd rank's own entry is the only witness."""
    w = facts.waits
    w = w[w["holder"].isin(sorted(dead))]
    members = facts.members
    dumped = set(facts.tables.dumped_ranks) - set(facts.stale)
    pairs = [
        (int(holder), int(waiter), str(group), int(seq), str(op))
        for holder, waiter, group, seq, op in w[
            ["holder", "waiter", "pg_name", "seq", "op"]
        ].itertuples(index=False)
        if int(holder) in members.get(group, ())
        and not (set(members.get(group, ())) - {int(waiter)}) & dumped
    ]
    out: dict[int, list[tuple[int, str, Change, list[int]]]] = {}
    descs = facts.group_descs
    seen: dict[tuple[int, str, int], Change | None] = {}  # one check per waiter's op
    for holder, waiter, group, seq, op in pairs:
        key = (waiter, group, seq)
        if key not in seen:
            if len(seen) >= _MAX_PAIR_CHECKS:
                continue
            seen[key] = _changed(facts, waiter, group, seq, str(descs.get(group) or ""))
        if change := seen[key]:
            where = f"{op} in {descs.get(group) or group} seq {seq}"
            others = sorted(int(m) for m in members.get(group, ()) if int(m) != waiter)
            out.setdefault(holder, []).append((waiter, where, change, others))
    return out


def desync_beside_death(
    r: int, peer: int, where: str, change: Change, others: Sequence[int]
) -> tuple[Culprit, Culprit]:
    """Rank ``r`` (no dump) and ``peer``, the only member with a dump of the group of
    ``where``, whose op there differs by ``change``: both suspects (:func:`partners_changed`)."""
    pair = len(others) == 1
    there = "there" if not change.siblings else f"there, {change.against()}"
    dead = Culprit(
        r,
        Confidence.SUSPECT,
        f"it wrote no dump and {'its only peer' if pair else 'the only member with a dump'}"
        f" in {where}, rank {peer}, {change.said()} {there}: a desync may have aborted "
        "it (gloo aborts the receiver of a size mismatch), or it crashed on its own",
    )
    odd = Culprit(
        peer,
        Confidence.SUSPECT,
        f"a suspect desync: it {change.said()} in {where} {change.against()}"
        + (
            f", and its peer rank {r} died in that op"
            if pair
            else f", and its peers {rank_runs(others)}, none of which wrote "
            "a dump to compare, may have died in that op"
        ),
    )
    return dead, odd
