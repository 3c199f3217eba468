"""The group table: each group's name, desc, members and where they came from (``pg_config``
where it is real, the entries where gloo left it empty or wrong)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import pandas as pd

from analyzer import schema

__all__ = ["group_table", "unseen_group_names", "with_world"]


def _sort_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def group_table(
    world: int,
    config_votes: dict[str, list[tuple[tuple[str, tuple[int, ...]], int]]],
    seen_members: dict[str, set[int]],
    seen_desc: dict[str, str],
) -> pd.DataFrame:

    group_rows: dict[str, list[object]] = defaultdict(list)
    all_names = sorted(set(config_votes) | set(seen_members) | {"0"}, key=_sort_key)
    for name in all_names:
        votes = config_votes.get(name)
        recorded = seen_members.get(name, set())
        if votes:
            (desc, members), _ = votes[0]
            source = "pg_config"
            if not recorded <= set(members):
                members = tuple(sorted(set(members) | recorded))
                source = "entries"
            desc = seen_desc.get(name) or desc
        elif name == "0":
            members, desc, source = tuple(range(world)), seen_desc.get(name, "default_pg"), "world"
        else:
            members, desc, source = tuple(sorted(recorded)), seen_desc.get(name, ""), "entries"
        group_rows["pg_name"].append(name)
        group_rows["pg_desc"].append(desc)
        group_rows["ranks"].append(tuple(int(m) for m in members))
        group_rows["size"].append(len(members))
        group_rows["source"].append(source)
    groups = schema.frame(schema.GROUPS, group_rows)

    return groups


def with_world(groups: pd.DataFrame, world: int) -> pd.DataFrame:
    """``groups`` with the default group's members set to the whole ``world`` where they were
    taken from the world (no member list of it was read)."""
    default = (groups["pg_name"] == "0") & (groups["source"] == "world")
    ranks = [tuple(range(world)) if d else m for d, m in zip(default, groups["ranks"], strict=True)]
    return groups.assign(
        ranks=pd.Series(ranks, index=groups.index, dtype=object),
        size=pd.Series([len(m) for m in ranks], index=groups.index, dtype="int32"),
    )


def unseen_group_names(names: Iterable[str]) -> list[str]:
    """The global group names below the highest that ``names`` lack. Names are given out in
    creation order (0, 1, 2, ...) on every rank, so a gap is a group no dump shows; names that
    are not numbers (torch 2.15's hashes) tell nothing."""
    known = {str(n) for n in names}
    numbers = [int(n) for n in known if n.isdigit()]
    return [str(n) for n in range(max(numbers) + 1) if str(n) not in known] if numbers else []
