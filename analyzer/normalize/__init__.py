"""Layer 2, normalize: parsed dumps -> typed tables (:class:`Tables`: entries, groups,
ranks, peers), one row per entry, with the world, each group's members, and several dumps of
one rank merged by backend.
"""

from analyzer.normalize.groups import unseen_group_names
from analyzer.normalize.tables import Tables, normalize, without_hugepage_advice
from analyzer.normalize.world import check_world_option

__all__ = [
    "Tables",
    "check_world_option",
    "normalize",
    "unseen_group_names",
    "without_hugepage_advice",
]
