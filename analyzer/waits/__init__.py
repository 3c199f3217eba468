"""Layer 4, waits: who waits on whom, derived from the matching, as the wait-for graph; the
ranks everybody ends up waiting on, the chains that lead to them, and the cycles.
"""

from analyzer.waits.edges import waits
from analyzer.waits.graph import Roots, build_graph, chain, chain_length, root_ranks, waiters_of
from analyzer.waits.records import WAIT_COLUMNS, Wait

__all__ = [
    "WAIT_COLUMNS",
    "Roots",
    "Wait",
    "build_graph",
    "chain",
    "chain_length",
    "root_ranks",
    "waiters_of",
    "waits",
]
