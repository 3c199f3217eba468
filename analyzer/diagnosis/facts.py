"""What every rule reads: the analysed tables, the wait-for graph and what follows from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import pandas as pd

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.context_file import NoAnswer, RankContext
from analyzer.diagnosis.lookup import last_entry
from analyzer.match import Matching, stuck_collectives
from analyzer.normalize import Tables
from analyzer.waits import Roots, root_ranks

__all__ = ["Facts"]

#: Group sources that list members (a dump's ``pg_config``, a declared world, ``--world-size``);
#: ``entries`` only names those that recorded an op.
_LISTS = ("pg_config", "declared", "option")


@dataclass(frozen=True, kw_only=True)
class Facts:
    """The input of the rules; the derived views are computed once, when first read."""

    tables: Tables
    matching: Matching
    waits: pd.DataFrame
    graph: nx.DiGraph
    unsure: Mapping[int, str] = field(default_factory=dict)
    """Ranks whose evidence cannot be trusted (an unreadable file, dropped entries), and why."""
    stale: frozenset[int] = frozenset()
    """Of those, ranks whose only dump was an older round's (set aside: no dump of this one)."""
    config: AnalysisConfig = DEFAULT_CONFIG
    alive: Mapping[int, RankContext] = field(default_factory=dict)
    """Ranks a capture's context file shows alive when the dumps were taken."""
    not_given: Mapping[int, str] = field(default_factory=dict)
    """Ranks whose dump file sits beside the files given but was not given: rank -> path."""
    no_answer: Mapping[int, NoAnswer] = field(default_factory=dict)
    """Ranks the debug server stopped reaching while others answered (gone or frozen)."""

    @cached_property
    def roots(self) -> Roots:
        return root_ranks(self.graph)

    @cached_property
    def members(self) -> dict[str, tuple[int, ...]]:
        return self.tables.members()

    @cached_property
    def group_descs(self) -> dict[str, str]:
        """Each group's name -> its description (``pg_desc``), as the group table has it."""
        g = self.tables.groups
        return dict(zip(g["pg_name"].astype(str), g["pg_desc"].astype(str), strict=True))

    @cached_property
    def _newest(self) -> dict[int, pd.Series | None]:
        return {}

    def last_entry(self, rank: int) -> pd.Series | None:
        """The newest entry ``rank`` recorded, looked up once per rank and diagnosis (the
        roots, the confidence and the other readings all read it)."""
        memo = self._newest
        if rank not in memo:
            memo[rank] = last_entry(self.tables, rank)
        return memo[rank]

    @cached_property
    def unlisted_groups(self) -> frozenset[str]:
        """Groups whose members come from the entries alone: no dump lists them (gloo 2.13's
        empty ``pg_config``), so a member that recorded nothing of the group is unknown."""
        g = self.tables.groups
        return frozenset(g.loc[g["source"] == "entries", "pg_name"].astype(str))

    @cached_property
    def nothing_listed(self) -> bool:
        """No dump lists any group's members nor the world, and no world size was given:
        ranks that wrote no file at all may exist (group ``source`` pg_config, declared or
        option is such a list)."""
        listed = self.tables.groups["source"].isin(_LISTS)
        return not bool(listed.any())

    @cached_property
    def every_rank_seen(self) -> bool:
        """Every rank of a listed world (a dump's list, or the world size given) wrote a dump
        that holds its process's first entry (no buffer wrapped, no entry dropped): an op of
        theirs can be in no file only because they never issued it, and a member that no file
        names does not exist."""
        t = self.tables
        listed = t.groups.loc[t.groups["source"].isin(_LISTS)]
        world = set(range(t.world_size))
        if t.missing_ranks or self.unsure or not any(world <= set(r) for r in listed["ranks"]):
            return False
        first = t.entries.groupby("rank")["record_id"].min()
        return set(first.index) >= world and bool((first == 0).all())

    @cached_property
    def unblamed_missing(self) -> frozenset[int]:
        """Ranks with no dump that are neither not given (their files sit beside) nor unsure
        (an unreadable file): whether they joined an op is in no file. A rank whose only dump
        was an older round's is one of them (that file is set aside)."""
        doubted = set(self.unsure) - self.stale
        return frozenset(set(self.tables.missing_ranks) - set(self.not_given) - doubted)

    @cached_property
    def inferred(self) -> dict[int, str]:
        """Ranks no file names, inferred from the group layout (read once per diagnosis)."""
        return self.tables.inferred

    @cached_property
    def held(self) -> list[tuple[str, int]]:
        """Collectives every member joined and is blocked in, none completed."""
        return stuck_collectives(self.tables, self.matching)

    @cached_property
    def in_stuck(self) -> set[int]:
        """Members of the collectives of :attr:`held`."""
        return {int(m) for grp, _ in self.held for m in self.members.get(grp, ())}

    @cached_property
    def stuck_roots(self) -> list[int]:
        """Roots blocked inside such a collective: it holds the others up from inside."""
        return [r for r in self.roots.roots if r in self.in_stuck]

    @cached_property
    def stuck_held(self) -> list[tuple[str, int]]:
        """The held collectives a stuck root is a member of."""
        stuck = set(self.stuck_roots)
        return [(grp, q) for grp, q in self.held if stuck & set(self.members.get(grp, ()))]

    @cached_property
    def slow_roots(self) -> list[int]:
        """Roots whose GPU stopped completing what their peers completed."""
        return [
            r
            for r in self.roots.roots
            if r in self.matching.stale_completers and r not in self.in_stuck
        ]

    @cached_property
    def plain_roots(self) -> list[int]:
        """Roots that are neither: they stopped before joining (or left no dump)."""
        slow = set(self.slow_roots)
        return [r for r in self.roots.roots if r not in self.in_stuck and r not in slow]
