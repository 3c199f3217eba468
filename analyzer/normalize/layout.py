"""Members nobody's file names, inferred from the layout of the groups.

gloo 2.13 writes an empty ``pg_config``: a group's members are then only the ranks whose
entries name it. A rank that died before writing a file leaves no trace of its existence: its
tensor-parallel peer looks like the only member of its group, and the world ends one rank
early. The groups of one kind (the same description, such as ``TENSOR_MODEL_PARALLEL_GROUP``)
still show the layout: when the others all have ``k`` members in the same pattern (a block of
consecutive ranks, or ranks a stride apart) and together they partition ``k`` times their
number of ranks, the ranks none of them holds are the members the short groups lack. Such a
member is inferred ("most likely rank N"), never read: the groups get source ``inferred`` and
:func:`inferred_ranks` reads back which ranks were inferred and why, so the diagnosis can say
how sure it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import pandas as pd

from analyzer import schema
from analyzer.normalize.groups import unseen_group_names

__all__ = ["Layout", "infer_members", "inferred_ranks"]

#: Group descriptions that name no layout (every group of the job may carry them).
_NO_FAMILY = frozenset({"", "default_pg", "undefined"})


@dataclass(frozen=True)
class Layout:
    """The groups with the members the layout implies, and the world they span."""

    groups: pd.DataFrame
    world: int
    declared: int = 0
    """The world the layout declares (its groups of one kind partition it), 0 for none."""


def _pattern(members: Sequence[int]) -> int | None:
    """The stride of an arithmetic run of ranks (1 for a block), or None."""
    if len(members) < 2:
        return None
    steps = {b - a for a, b in pairwise(members)}
    return steps.pop() if len(steps) == 1 else None


def _fill(known: Sequence[int], k: int, stride: int, free: set[int]) -> tuple[int, ...] | None:
    """The one run of ``k`` ranks ``stride`` apart that holds ``known`` and otherwise only
    ranks of ``free``; None when there is none or several."""
    fits = []
    for first in range(known[0] - (k - 1) * stride, known[0] + 1, stride):
        run = set(range(first, first + k * stride, stride))
        if first >= 0 and set(known) <= run and run - set(known) <= free:
            fits.append(tuple(sorted(run - set(known))))
    return fits[0] if len(fits) == 1 else None


def _family_gaps(
    family: list[tuple[str, tuple[int, ...]]], dumped: set[int]
) -> tuple[int, dict[str, tuple[int, ...]]] | None:
    """For groups of one kind: the world they partition and the members each short group
    lacks, when the layout decides them; None otherwise."""
    sizes = [len(m) for _, m in family]
    k = max(sizes)
    short = [(n, m) for n, m in family if len(m) < k]
    full = [m for _, m in family if len(m) == k]
    union = {r for _, m in family for r in m}
    if len(full) < len(short) or sum(sizes) != len(union):
        return None  # mostly short, or overlapping: no partition to read
    strides = {_pattern(m) for m in full}
    total = k * len(family)
    free = set(range(total)) - union
    if not short:  # complete: it declares the world if it covers every rank below it
        return (total, {}) if not free and None not in strides else None
    if len(strides) != 1 or None in strides or max(union) >= total or free & dumped:
        return None
    if len(free) != sum(k - len(m) for _, m in short):
        return None
    (stride,) = strides
    assert stride is not None
    gaps: dict[str, tuple[int, ...]] = {}
    for name, members in short:
        got = _fill(members, k, stride, free)
        if got is None:
            return None
        free -= set(got)
        gaps[name] = got
    return total, gaps


def infer_members(groups: pd.DataFrame, world: int, dumped: set[int]) -> Layout:
    """``groups`` with the members their layout implies added (see the module's text), the
    world extended to hold them, and why each added rank was inferred."""
    families: dict[str, list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    for name, desc, members, source in zip(
        groups["pg_name"], groups["pg_desc"], groups["ranks"], groups["source"], strict=True
    ):
        if source == "entries" and name != "0" and desc not in _NO_FAMILY and members:
            families[str(desc)].append((str(name), tuple(members)))
    added: dict[str, tuple[int, ...]] = {}
    declared = 0
    names = [str(n) for n in groups["pg_name"]]
    every_name = all(n.isdigit() for n in names) and not unseen_group_names(names)
    for family in families.values():
        got = _family_gaps(family, dumped) if len(family) >= 2 else None
        if got is not None:
            total, gaps = got
            # A complete-looking layout declares the world only where no group is unseen:
            # with no member list in the dumps (gloo 2.13), the groups of ranks with no
            # readable dump are missing from it, and only the gaps in the global group
            # names (given out in order, 0, 1, 2, ...) show that they exist.
            if gaps or every_name:
                declared = max(declared, total)
            added.update(gaps)
    new_world = max(world, declared)
    if not added:
        return Layout(groups, world, declared)
    ranks_col: list[tuple[int, ...]] = []
    sources: list[str] = []
    for name, members, source in zip(
        groups["pg_name"], groups["ranks"], groups["source"], strict=True
    ):
        if name in added:
            members, source = tuple(sorted((*members, *added[name]))), "inferred"
        ranks_col.append(tuple(members))
        sources.append(str(source))
    rows = groups.assign(
        ranks=pd.Series(ranks_col, index=groups.index, dtype=object),
        size=pd.Series([len(m) for m in ranks_col], index=groups.index, dtype="int32"),
        source=pd.Series(sources, index=groups.index, dtype="string"),
    )
    return Layout(schema.validate(rows, schema.GROUPS, "groups"), new_world, declared)


def inferred_ranks(groups: pd.DataFrame, dumped: set[int]) -> dict[int, str]:
    """The ranks :func:`infer_members` added (members of groups of source ``inferred`` that no
    dump and no read member list names): rank -> the groups that imply it."""
    known = set(dumped)
    for members, source in zip(groups["ranks"], groups["source"], strict=True):
        if source in ("entries", "pg_config"):
            known.update(members)
    why: dict[int, list[str]] = defaultdict(list)
    for name, desc, members, source in zip(
        groups["pg_name"], groups["pg_desc"], groups["ranks"], groups["source"], strict=True
    ):
        for r in members if source == "inferred" else ():
            if r not in known:
                why[int(r)].append(f"{desc} (group {name})")
    return {r: ", ".join(v) for r, v in sorted(why.items())}
