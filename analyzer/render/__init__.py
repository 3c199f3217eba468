"""Renderers: they read an :class:`analyzer.analysis.Analysis` and never recompute it.

Figures (:mod:`~analyzer.render.timeline_figure`, :mod:`~analyzer.render.wait_graph_figure`,
:mod:`~analyzer.render.progress_map`, styled by :mod:`~analyzer.render.figure_style`):
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

The figures :class:`~analyzer.analysis.Analysis` returns carry a static rendering for
notebook viewers without JavaScript (:mod:`~analyzer.render.notebook_figure`).
"""

from analyzer.render.entry_rows import entry_rows
from analyzer.render.graph_formats import graph_dot, graph_graphml, graph_text
from analyzer.render.hang_diff import render_diff
from analyzer.render.json_doc import graph_dict, to_json
from analyzer.render.markdown import render_markdown
from analyzer.render.notebook_figure import for_notebook
from analyzer.render.progress_map import progress
from analyzer.render.report import render_html, verdict_html, write_html
from analyzer.render.sentences import verdict_line
from analyzer.render.static_image import StaticImageError, write_timeline_image
from analyzer.render.text import render_text
from analyzer.render.timeline_figure import timeline
from analyzer.render.wait_graph_figure import wait_graph
from analyzer.render.where_now import where_each_rank_is_now

__all__ = [
    "StaticImageError",
    "entry_rows",
    "for_notebook",
    "graph_dict",
    "graph_dot",
    "graph_graphml",
    "graph_text",
    "progress",
    "render_diff",
    "render_html",
    "render_markdown",
    "render_text",
    "timeline",
    "to_json",
    "verdict_html",
    "verdict_line",
    "wait_graph",
    "where_each_rank_is_now",
    "write_html",
    "write_timeline_image",
]
