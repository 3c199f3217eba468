"""Static images of the timeline, for ticket systems that strip HTML.

* :func:`timeline_png` renders the plotly timeline with kaleido (v1 drives a Chrome or
  Chromium it finds; ``BROWSER_PATH`` names one explicitly, and Debian's
  ``/usr/bin/chromium`` is used when nothing else is set). MathJax is off and plotly.js
  comes from the installed plotly package, so rendering makes no network request.
* :func:`timeline_svg` needs nothing: it draws the same figure (lanes, bars, never-joined
  markers, culprit bands) as plain SVG from the figure's own data.

:func:`write_timeline_image` picks by file suffix: ``.svg`` is dependency-free, ``.png``
(or ``.pdf``/``.jpeg``/``.webp``) uses kaleido.
"""

from __future__ import annotations

import html
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

#: Browsers tried when ``BROWSER_PATH`` is unset (Debian's package first).
BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


class StaticImageError(RuntimeError):
    """The image could not be produced (no browser, kaleido missing...)."""


def find_browser() -> str | None:
    """``BROWSER_PATH`` if set, else the first Chromium/Chrome found."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env
    for path in BROWSERS:
        if os.access(path, os.X_OK):
            return path
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _static_figure(analysis: Analysis, **kw: Any) -> Any:
    from analyzer.render.timeline_figure import timeline

    fig = timeline(analysis, **kw)
    fig.layout.updatemenus = ()  # buttons do nothing on paper
    return fig


def timeline_png(
    analysis: Analysis, *, width: int = 1400, scale: float = 1.0, fmt: str = "png", **kw: Any
) -> bytes:
    """The timeline as PNG bytes (kaleido + a local Chromium). Raises StaticImageError."""
    try:
        import kaleido
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StaticImageError(
            "kaleido is not installed (pip install kaleido); write an .svg instead"
        ) from exc
    fig = _static_figure(analysis, **kw)
    browser = find_browser()
    kopts: dict[str, Any] = {"mathjax": False}
    if browser:
        kopts["path"] = browser
    height = int(fig.layout.height or 600)
    try:
        data = kaleido.calc_fig_sync(
            fig.to_dict(),
            opts={"format": fmt, "width": width, "height": height, "scale": scale},
            kopts=kopts,
        )
    except Exception as exc:  # kaleido raises several types (ChromeNotFoundError, timeouts...)
        raise StaticImageError(
            f"kaleido could not render the image ({type(exc).__name__}: {exc}); install Chromium "
            "(apt-get install chromium) or set BROWSER_PATH, or write an .svg instead"
        ) from exc
    return bytes(data)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _strip_tags(text: str) -> str:
    """Plotly's pseudo-HTML label -> plain text (the parts were escaped when built)."""
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", text))


def _svg_ticks(
    lo: float, hi: float, X: Callable[[float], float], top: float, axis_y: float
) -> list[str]:
    """Grid lines and labels of the x axis, at 1, 2 or 5 times a power of ten."""
    import numpy as np

    out = []
    span = hi - lo
    step = 10 ** np.floor(np.log10(span / 6)) if span > 0 else 1
    for mult in (1, 2, 5, 10):
        if span / (step * mult) <= 8:
            step *= mult
            break
    for k in range(int(np.ceil(lo / step)), int(np.floor(hi / step)) + 1):
        t = k * step
        x = X(float(t))
        out.append(f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{axis_y}' stroke='#eee'/>")
        out.append(
            f"<text x='{x:.1f}' y='{axis_y + 16}' text-anchor='middle' fill='#444'>"
            f"{'0' if k == 0 else f'{t:+.4g}'}</text>"
        )
    return out


def _svg_traces(
    fig: Any, X: Callable[[float], float], lo: float, hi: float, top: float, lane_h: float
) -> tuple[list[str], list[tuple[str, str]]]:
    """The bars and markers of the figure's traces, and the legend entries of the bars."""
    import numpy as np

    out: list[str] = []
    legend: list[tuple[str, str]] = []
    for tr in fig.data:
        if tr.type == "bar" and tr.base is None:  # a legend entry only (the outline's)
            continue
        if tr.type == "bar":
            base = np.asarray(tr.base, dtype=float)
            xs = np.asarray(tr.x, dtype=float)
            ys = np.asarray(tr.y, dtype=float)
            color = tr.marker.color
            hatch = tr.marker.pattern is not None and tr.marker.pattern.shape
            fill = "url(#hatch)" if hatch else color
            lw = tr.marker.line.width
            lws = list(lw) if isinstance(lw, (list, tuple)) else [lw or 0] * len(xs)
            for b, w, y, line in zip(base, xs, ys, lws):
                if b + w < lo or b > hi:
                    continue
                x0, x1 = X(b), X(b + w)
                cy = top + y * lane_h + lane_h * 0.14
                stroke = (
                    " stroke='#d62728' stroke-width='1.5'"
                    if hatch
                    else " stroke='#111' stroke-width='1.5'"
                    if (line or 0) >= 2
                    else " stroke='white' stroke-width='0.5'"
                )
                out.append(
                    f"<rect x='{x0:.1f}' y='{cy:.1f}' width='{max(x1 - x0, 0.8):.1f}' "
                    f"height='{lane_h * 0.72:.1f}' fill='{fill}'{stroke}/>"
                )
            legend.append((tr.name, fill))
        elif tr.type == "scatter" and tr.x is not None:
            for x, y in zip(tr.x, tr.y):
                if lo <= float(x) <= hi:
                    cx, cy = X(float(x)), top + float(y) * lane_h + lane_h / 2
                    out.append(
                        f"<path d='M{cx - 5:.1f},{cy - 5:.1f}L{cx + 5:.1f},{cy + 5:.1f}M{cx - 5:.1f},"
                        f"{cy + 5:.1f}L{cx + 5:.1f},{cy - 5:.1f}' stroke='{tr.marker.color}' stroke-width='2.5'/>"
                    )
    return out, legend


def timeline_svg(analysis: Analysis, *, width: int = 1400, **kw: Any) -> str:
    """The timeline as a standalone SVG document, without any browser or extra package."""
    return timeline_figure_svg(_static_figure(analysis, **kw), width=width)


def timeline_figure_svg(fig: Any, *, width: int = 1400) -> str:
    """A timeline figure (:func:`~analyzer.render.timeline_figure.timeline`) drawn as SVG
    from its own data (its buttons left out)."""
    lay = fig.layout
    lo, hi = (float(v) for v in lay.xaxis.range)
    ticks = list(lay.yaxis.tickvals or [])
    labels = [_strip_tags(str(t)) for t in (lay.yaxis.ticktext or [])]
    culprit_lane = ["★" in t for t in labels]
    n = max(1, len(ticks))
    lane_h = 22
    left = min(320, 16 + 7 * max((len(t) for t in labels), default=8))
    notes = list(((lay.meta or {}).get("hangscope") or {}).get("notes", []))
    top = 70 + 16 * len(notes)
    plot_w = width - left - 20
    height = top + n * lane_h + 60

    def X(v: float) -> float:
        return left + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' font-family='DejaVu Sans, Arial, sans-serif' font-size='12'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        "<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
        "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f6d5d5'/>"
        "<line x1='0' y1='0' x2='0' y2='6' stroke='#d62728' stroke-width='2'/></pattern></defs>",
        f"<text x='12' y='24' font-size='16' font-weight='bold'>{_e(_strip_tags(lay.title.text.split('<br>')[0]))}</text>",
    ]
    for i, note in enumerate(notes):
        out.append(
            f"<text x='12' y='{44 + 16 * i}' fill='#555' font-size='11.5'>{_e(_strip_tags(note))}</text>"
        )
    for y, label, hot in zip(ticks, labels, culprit_lane):
        cy = top + float(y) * lane_h
        if hot:
            out.append(
                f"<rect x='{left}' y='{cy:.1f}' width='{plot_w}' height='{lane_h}' fill='rgba(214,39,40,0.10)'/>"
            )
        out.append(
            f"<text x='{left - 6}' y='{cy + lane_h * 0.68:.1f}' text-anchor='end' "
            f"fill='{'#d62728' if hot else '#222'}' font-weight='{'bold' if hot else 'normal'}'>{_e(label)}</text>"
        )
    axis_y = top + n * lane_h
    out.extend(_svg_ticks(lo, hi, X, top, axis_y))
    out.append(
        f"<text x='{left + plot_w / 2:.0f}' y='{axis_y + 36}' text-anchor='middle' fill='#444'>"
        f"{_e(lay.xaxis.title.text or '')}</text>"
    )
    shapes, legend = _svg_traces(fig, X, lo, hi, top, lane_h)
    out.extend(shapes)
    lx = width - 20
    for name, fill in reversed(legend):
        w = 24 + 7 * len(name)
        lx -= w
        out.append(
            f"<rect x='{lx}' y='12' width='12' height='12' fill='{fill}'/>"
            f"<text x='{lx + 16}' y='22' fill='#333'>{_e(name)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_timeline_image(analysis: Analysis, path: str | os.PathLike[str], **kw: Any) -> str:
    """Write the timeline to ``path``: ``.svg`` without dependencies, else via kaleido."""
    out = Path(path)
    suffix = out.suffix.lower().lstrip(".")
    if suffix == "svg":
        out.write_text(timeline_svg(analysis, **kw), encoding="utf-8")
    else:
        fmt = {"jpg": "jpeg"}.get(suffix, suffix or "png")
        if fmt not in ("png", "jpeg", "webp", "pdf"):
            raise StaticImageError(f"{out.name}: use .png, .svg, .pdf, .jpeg or .webp")
        out.write_bytes(timeline_png(analysis, fmt=fmt, **kw))
    return str(out)


__all__ = [
    "StaticImageError",
    "find_browser",
    "timeline_figure_svg",
    "timeline_png",
    "timeline_svg",
    "write_timeline_image",
]
