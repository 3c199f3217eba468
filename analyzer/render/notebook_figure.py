"""Figures for notebooks that also show where JavaScript does not run.

A notebook saved with its outputs keeps each plotly figure as
``application/vnd.plotly.v1+json``, which JupyterLab, Notebook 7 and VS Code draw and a
viewer without JavaScript (GitHub's notebook preview, nbviewer, a terminal) does not. The
figures :class:`~analyzer.analysis.Analysis` returns add a static rendering to that same
output, which such a viewer shows instead of nothing:

* the timeline: ``image/svg+xml``, drawn from the figure's own data without a browser
  (:func:`~analyzer.render.static_image.timeline_figure_svg`), and its title as text;
* the wait-for graph: ``text/plain``, the graph as ``hangscope graph`` prints it;
* the progress view: ``text/plain``, per group the ranks furthest behind.

Frontends that draw plotly figures keep drawing them: they prefer plotly's own type. A
PNG would need kaleido and a Chromium (``report --png``), too heavy to ask of every
notebook. Where plotly's renderer makes no plotly output (a browser, Colab's HTML), the
figure shows as plotly shows it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from analyzer.render.figure_style import clip

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis

__all__ = ["PLOTLY_MIME", "for_notebook", "progress_text", "with_static_fallback"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
Fallback = Callable[[Any], dict[str, str]]


@functools.cache
def _figure_class() -> type:
    """A ``go.Figure`` whose notebook output carries a static rendering (made on first use:
    plotly is not imported by the analysis)."""
    import plotly.graph_objects as go

    class FigureWithFallback(go.Figure):
        _static: Fallback | None = None

        def _repr_mimebundle_(
            self, include: Any = None, exclude: Any = None, **kw: Any
        ) -> dict[str, Any]:
            bundle = dict(super()._repr_mimebundle_(include, exclude, **kw))
            if PLOTLY_MIME in bundle and self._static is not None:
                for mime, text in self._static(self).items():
                    bundle.setdefault(mime, text)
            return bundle

        def __reduce__(self) -> Any:  # a copy or a pickle is a plain go.Figure
            return (go.Figure, super().__reduce__()[1])

        def _ipython_display_(self) -> None:
            import plotly.io as pio

            bundle = self._repr_mimebundle_() if pio.renderers.render_on_display else {}
            if PLOTLY_MIME not in bundle:
                super()._ipython_display_()
                return
            from IPython.display import display

            display(bundle, raw=True)

    return FigureWithFallback


def with_static_fallback(fig: go.Figure, static: Fallback) -> go.Figure:
    """``fig`` itself, displayed in a notebook with ``static(fig)`` (a dict of mime type to
    text) beside its plotly output. It stays a ``go.Figure`` in every other respect."""
    fig.__class__ = _figure_class()  # same object and data: nothing is copied
    fig._static = static
    return fig


def for_notebook(fig: go.Figure, kind: str, analysis: Analysis) -> go.Figure:
    """``fig`` (``kind``: ``"timeline"``, ``"wait_graph"`` or ``"progress"``) with the
    static rendering of its kind (see the module's doc)."""
    static: Fallback = {
        "timeline": _timeline_fallback,
        "wait_graph": _graph_fallback(analysis),
        "progress": _progress_fallback,
    }[kind]
    return with_static_fallback(fig, static)


def _timeline_fallback(fig: Any) -> dict[str, str]:
    from analyzer.render.static_image import _strip_tags, timeline_figure_svg

    title = _strip_tags(str(fig.layout.title.text or "").split("<br>")[0])
    return {"image/svg+xml": timeline_figure_svg(fig), "text/plain": title}


def _graph_fallback(analysis: Analysis) -> Fallback:
    from analyzer.render.graph_formats import graph_text

    return lambda fig: {"text/plain": graph_text(analysis)}


def progress_text(fig: Any) -> str:
    """Per group of the progress figure's first heatmap, the ranks furthest behind."""
    heat = next((tr for tr in fig.data if tr.type == "heatmap"), None)
    lines = ["Progress per group: the ranks furthest behind the group's newest enqueued seq"]
    if heat is None or heat.customdata is None:
        return lines[0] + "\n(no group of two or more ranks)\n"
    custom = np.asarray(heat.customdata, dtype=object)
    for i, role in enumerate(heat.y):
        enq = np.asarray(custom[i, :, 0], dtype=float)
        front = np.asarray(custom[i, :, 2], dtype=float)
        lag = front - enq
        if np.isnan(lag).all():
            continue
        top = np.nanmax(lag)
        ranks = [str(heat.x[j]) for j in np.flatnonzero(lag == top)]
        who = ", ".join(ranks[:16]) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 16 else "")
        behind = f"{int(top)} seq behind" if top > 0 else "none behind"
        lines.append(f"  {clip(str(role), 60)}: {behind}" + (f" (rank {who})" if top > 0 else ""))
    return "\n".join(lines) + "\n"


def _progress_fallback(fig: Any) -> dict[str, str]:
    return {"text/plain": progress_text(fig)}
