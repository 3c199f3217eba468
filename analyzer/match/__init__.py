"""Layer 3, match: line up every rank's entries across ranks. Collectives per (group,
sequence number), send/recv per stream, what members must agree on (op, sizes, dtypes), how
far each member of each group got, and how to read each backend's dump (its dialect).
"""

from analyzer.match.blocked import blocked_in, stuck_collectives
from analyzer.match.dialect import is_retire_on_end, is_retired_done
from analyzer.match.dialect_defaults import Dialect
from analyzer.match.expectations import barrier_op_gap, completes_without_every_member
from analyzer.match.matching import Matching, match
from analyzer.match.mismatches import NO_MAJORITY, odd_against_siblings, sibling_family

__all__ = [
    "NO_MAJORITY",
    "Dialect",
    "Matching",
    "barrier_op_gap",
    "blocked_in",
    "completes_without_every_member",
    "is_retire_on_end",
    "is_retired_done",
    "match",
    "odd_against_siblings",
    "sibling_family",
    "stuck_collectives",
]
