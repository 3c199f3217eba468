"""Plotly figures of an analysis: the timeline, the wait-for graph and group progress.

Every function takes an :class:`analyzer.analysis.Analysis` and returns a
``plotly.graph_objects.Figure`` (never shown). They only *lay out* what the analysis
found: states, waits, culprits and progress come from it, nothing is re-derived.

Text taken from dumps (group descs, op names, sizes, stack frames, file names) is
untrusted: it is HTML-escaped before it reaches any label or hover text.

Large jobs stay drawable:

* the timeline collapses ranks whose recorded ops look the same (same sequence of
  group, sequence number, op and state) into one lane, caps the number of lanes (culprits
  and the ranks that wait on them directly are kept first), and merges the oldest
  completed entries of each lane into summary bars past a bar budget;
* the wait graph merges ranks that wait the same way (same distance to a culprit, same
  kind of wait on the same set of holders) into one node;
* the progress view is one heatmap cell per (group role, rank).

What was merged or left out is recorded in ``fig.layout.meta["hangscope"]["notes"]`` and
shown under the figure title.
"""

from analyzer.render.figstyle import esc, is_p2p_op, ranks_text
from analyzer.render.progressmap import progress
from analyzer.render.timeline import timeline
from analyzer.render.waitgraph import wait_graph

__all__ = ["esc", "is_p2p_op", "progress", "ranks_text", "timeline", "wait_graph"]
