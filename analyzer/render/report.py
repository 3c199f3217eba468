"""The incident report: one self-contained HTML file.

Order of the page: the verdict banner (culprit ranks, kind, the headline sentence and the
wait chains), then the timeline, the wait-for graph, the progress view, the findings table,
the culprit's stack, the skipped files and a summary of the input.

* Offline by default: plotly.js is embedded (``plotlyjs="inline"``: the partial bundle of
  the traces drawn, compressed, :mod:`~analyzer.render.report_assets`); ``"cdn"`` references
  the full bundle instead and gives a smaller file. No other external request of any kind (no web fonts,
  no images); a Content-Security-Policy in the page enforces it.
* Everything taken from dumps (file names, stacks, group descs, profiling names) is
  HTML-escaped; figure data is embedded as JSON with ``<``, ``>`` and ``&`` escaped, and only
  the page's own scripts (carrying a per-page nonce) may run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import TYPE_CHECKING, Any

from analyzer.render import sentences as wording
from analyzer.render.folding import chain_lines
from analyzer.render.report_assets import BOOT, CSS, inline_plotlyjs
from analyzer.render.report_sections import (
    findings_table,
    skipped_section,
    stacks_section,
    summary_section,
)
from analyzer.render.sentences import cycle_line, for_html, missing_text
from analyzer.terms import rank_runs

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis


def _json_for_html(obj: Any) -> str:
    """JSON that can sit inside a <script> element (no ``</script>``, no ``<!--``)."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def verdict_html(
    analysis: Analysis, *, max_findings: int = 5, standalone_styles: bool = True
) -> str:
    """A compact verdict summary as an HTML fragment (Jupyter's rich display uses it)."""
    d = analysis.diagnosis
    t = analysis.tables
    colors = {"hang": "#c0392b", "no_hang": "#1e8449", "inconclusive": "#b9770e"}
    bg = colors.get(d.verdict.value, "#555")
    rows = []
    for f in d.findings[:max_findings]:
        rows.append(
            "<tr>"
            f"<td style='padding:3px 8px;vertical-align:top'>{'★ ' if f.culprit else ''}{for_html(f.kind)}</td>"
            f"<td style='padding:3px 8px;vertical-align:top'>{for_html(rank_runs(f.ranks, 4))}</td>"
            f"<td style='padding:3px 8px;text-align:left;overflow-wrap:anywhere'>{for_html(f.summary)}</td></tr>"
        )
    more = len(d.findings) - max_findings
    table = (
        (
            "<table style='border-collapse:collapse;font-size:12.5px;margin-top:6px'>"
            "<tr><th style='text-align:left;padding:3px 8px'>kind</th><th style='text-align:left;padding:3px 8px'>ranks</th>"
            "<th style='text-align:left;padding:3px 8px'>finding</th></tr>"
            + "".join(rows)
            + "</table>"
            + (
                f"<div style='font-size:12px;color:#5d6d7e'>… {more} more findings</div>"
                if more > 0
                else ""
            )
        )
        if rows
        else ""
    )
    return (
        "<div class='hangscope-verdict' style='font-family:system-ui,sans-serif;max-width:1100px'>"
        f"<div style='background:{bg};color:white;padding:10px 14px;border-radius:6px'>"
        f"<div style='font-size:18px;font-weight:700'>{for_html(wording.verdict_head(d))}</div>"
        f"<div style='font-size:13px'>{for_html(wording.verdict_detail(d))}</div>"
        f"<div style='font-size:13px;margin-top:6px;overflow-wrap:anywhere'>{for_html(d.headline)}</div></div>"
        f"<div style='font-size:12px;color:#5d6d7e;margin-top:4px'>{len(t.dumped_ranks)} of {t.world_size} "
        f"ranks dumped · {len(t.entries):,} entries"
        + (f" · {for_html(missing_text(analysis))}" if d.missing_dumps else "")
        + f" · fingerprint {for_html(wording.fingerprint_text(d.fingerprint))}"
        + f"</div>{table}</div>"
    )


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _meta_line(analysis: Analysis, *, source: str, command: str, version: str) -> str:
    """The report's header line: what it was made from, how, by which version, when."""
    import datetime as dt

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    t = analysis.tables
    parts = [
        f"input <code>{for_html(source)}</code>" if source else "",
        f"{len(t.dumped_ranks)} of {t.world_size} ranks, {len(t.entries):,} entries",
        f"made by <code>{for_html(command)}</code>" if command else "",
        f"hangscope {for_html(version)}",
        f"generated {when}",
    ]
    return "<p class='meta' id='made'>" + " · ".join(p for p in parts if p) + "</p>"


def ticket_block(analysis: Analysis, *, source: str = "", version: str = "") -> str:
    """The Markdown summary (:func:`~analyzer.render.markdown.render_markdown`), folded, with a
    button that copies it (the text can also be selected by hand)."""
    from analyzer.render.markdown import render_markdown

    text = render_markdown(analysis, source=source, version=version)
    return (
        "<details id='ticket'><summary>Summary for a ticket (Markdown)</summary>"
        "<button type='button' class='copy' data-copy='ticket-md'>copy</button>"
        f"<pre id='ticket-md'>{for_html(text)}</pre></details>"
    )


def _cdn_tag(nonce: str) -> tuple[str, str]:
    from plotly.io._utils import plotly_cdn_url

    url = plotly_cdn_url()
    digest = base64.b64encode(hashlib.sha256(_plotly_js().encode("utf-8")).digest()).decode()
    tag = (
        f'<script nonce="{nonce}" src="{for_html(url)}" integrity="sha256-{digest}" '
        'crossorigin="anonymous" charset="utf-8"></script>'
    )
    origin = "/".join(url.split("/")[:3])
    return tag, origin


def banner_html(analysis: Analysis) -> str:
    """The verdict banner: the same verdict, kind, headline and chain sentences as the text."""
    d = analysis.diagnosis
    chains = "".join(
        f"<li class='chain'>{for_html(c.arrow)}<br><span class='detail'>{for_html(c.detail)}</span></li>"
        for c in chain_lines(d)
    )
    missing = (
        f"<li class='missing'>{for_html(missing_text(analysis))}</li>" if d.missing_dumps else ""
    )
    cycles = "".join(f"<li class='cycle'>{for_html(cycle_line(c))}</li>" for c in d.deadlock_cycles)
    unruled = "".join(
        f"<li class='unruled'>{for_html(line)}</li>" for line in wording.not_ruled_out_lines(d)
    )
    return "".join(
        [
            f"<header class='banner {for_html(d.verdict.value)}' id='verdict'>",
            f"<p class='verdict'>{for_html(wording.verdict_head(d))}</p>",
            f"<p class='kind'>{for_html(wording.verdict_detail(d))}</p>",
            f"<p class='headline'>{for_html(d.headline)}</p>",
            f"<p class='fingerprint'>fingerprint: "
            f"<code>{for_html(wording.fingerprint_text(d.fingerprint))}</code></p>",
            f"<ul>{chains}{missing}{cycles}{unruled}</ul>"
            if (chains or missing or cycles or unruled)
            else "",
            "</header>",
        ]
    )


_FIGURE_INTROS = {
    "timeline": (
        "Timeline",
        "timeline",
        "One lane per rank, one bar per recorded op from enqueue to completion. Orange never "
        "completed; hatched red: the op the culprit never joined while its peers wait in it; "
        "outlined: the op the finding is about. Hover a bar for group, seq, sizes, dtypes and "
        "the issuing stack; the buttons switch between the hang window and the whole buffer.",
    ),
    "waitgraph": (
        "Wait-for graph",
        "waits",
        "An arrow A → B: A is blocked in an op B has not joined. Culprits are on the right; "
        "the red path is the wait chain to the culprit. Hover the middle of an arrow for the "
        "group, sequence number and op.",
    ),
    "progress": (
        "Progress per group",
        "progress",
        "How many sequence numbers each rank is behind its group's newest enqueued op.",
    ),
}


def _figure_blobs(
    analysis: Analysis, *, clock: str, max_lanes: int, window_s: float | None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each figure as JSON that can sit in a script element, and its notes (escaped)."""
    from analyzer.render.progress_map import progress
    from analyzer.render.timeline_figure import timeline
    from analyzer.render.wait_graph_figure import wait_graph

    other = "rank" if clock == "job" else "job"
    figs = {
        "timeline": timeline(analysis, max_lanes=max_lanes, window_s=window_s, clock=clock),
        "timeline2": timeline(analysis, max_lanes=max_lanes, window_s=window_s, clock=other),
        "waitgraph": wait_graph(analysis),
        "progress": progress(analysis),
    }
    blobs: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    for name, fig in figs.items():
        meta = fig.layout.meta or {}
        notes[name] = (
            list((meta.get("hangscope") or {}).get("notes", [])) if isinstance(meta, dict) else []
        )
        blobs[name] = _json_for_html(fig.to_json(validate=False, pretty=False, engine="json"))
    return blobs, notes


def _figure_sections(blobs: dict[str, str], notes: dict[str, list[str]], clock: str) -> list[str]:
    other = "rank" if clock == "job" else "job"
    other_clock = (
        "each rank's own clock (aligns hosts whose clocks are offset; hides which rank "
        "stopped first)"
        if other == "rank"
        else "the job clock (one time axis for all ranks)"
    )
    extra = {
        "timeline": (
            f"<details data-lazy='1' id='timeline-other'><summary>the same timeline on {other_clock}</summary>"
            "<div class='plot' id='plot-timeline2'></div>"
            f"<script type='application/json' data-plot='plot-timeline2'>{blobs['timeline2']}</script></details>"
        )
    }
    out = []
    for key, (heading, anchor, intro) in _FIGURE_INTROS.items():
        note_html = "".join(f"<p class='note'>{n}</p>" for n in notes[key])  # already escaped
        out.append(
            f"<section id='{anchor}'><h2>{heading}</h2><p class='note'>{intro}</p>"
            f"<div class='plot' id='plot-{key}'></div>"
            f"<script type='application/json' data-plot='plot-{key}'>{blobs[key]}</script>"
            f"<details><summary>what was merged or left out</summary>{note_html}</details>"
            f"{extra.get(key, '')}</section>"
        )
    return out


def _script_policy(plotlyjs: str, nonce: str) -> tuple[str, str]:
    """The plotly.js tag and the page's Content-Security-Policy."""
    if plotlyjs == "inline":
        js_tag = inline_plotlyjs(nonce)
        script_src = f"'nonce-{nonce}'"
    else:
        js_tag, origin = _cdn_tag(nonce)
        script_src = f"'nonce-{nonce}' {origin}"
    csp = (
        f"default-src 'none'; script-src {script_src}; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:; connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'; "
        "form-action 'none'"
    )
    return js_tag, csp


_NAV = (
    "<nav><a href='#timeline'>timeline</a><a href='#waits'>wait graph</a><a href='#progress'>progress</a>"
    "<a href='#findings'>findings</a><a href='#stack'>culprit stack</a><a href='#skipped'>skipped files</a>"
    "<a href='#input'>input</a></nav>"
    "<noscript><p class='noscript'>JavaScript is off: the figures need it; the tables below do not."
    "</p></noscript>"
)


def render_html(
    analysis: Analysis,
    *,
    plotlyjs: str = "inline",
    title: str | None = None,
    clock: str = "job",
    max_lanes: int = 64,
    window_s: float | None = None,
    source: str = "",
    command: str = "",
) -> str:
    """The incident report as one HTML document (a string).

    ``plotlyjs="inline"`` (default) embeds plotly.js: the file works offline and makes no
    request. ``"cdn"`` loads plotly.js from its CDN (a file ~0.66 MB smaller). ``clock``,
    ``max_lanes`` and ``window_s`` are passed to :func:`analyzer.render.timeline_figure.timeline`.
    ``source`` is the input as given and ``command`` the command line that made the report,
    both named in its header with the version and the time it was made.
    """
    from analyzer import __version__ as version
    from analyzer.render.where_now import where_now_section

    if plotlyjs not in ("inline", "cdn"):
        raise ValueError("plotlyjs must be 'inline' or 'cdn'")
    d = analysis.diagnosis
    nonce = secrets.token_urlsafe(16)
    blobs, notes = _figure_blobs(analysis, clock=clock, max_lanes=max_lanes, window_s=window_s)
    js_tag, csp = _script_policy(plotlyjs, nonce)
    page_title = title or f"hangscope: {wording.verdict_head(d)}"
    body = [
        banner_html(analysis),
        _meta_line(analysis, source=source, command=command, version=version),
        where_now_section(analysis),
        ticket_block(analysis, source=source, version=version),
        _NAV,
        *_figure_sections(blobs, notes, clock),
        f"<section id='findings'><h2>Findings</h2>{findings_table(analysis)}</section>",
        f"<section id='stack'><h2>Culprit stack</h2>{stacks_section(analysis)}</section>",
        f"<section id='skipped'><h2>Skipped files</h2>{skipped_section(analysis)}</section>",
        f"<section id='input'><h2>Input</h2>{summary_section(analysis)}</section>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='referrer' content='no-referrer'>"
        f"<title>{for_html(page_title)}</title><style>{CSS}</style></head>"
        f"<body data-ready='0' data-verdict='{for_html(d.verdict.value)}'><main>"
        + "".join(body)
        + f"<footer>hangscope {for_html(version)} · post-mortem report of PyTorch flight-recorder dumps</footer>"
        + f'</main>{js_tag}<script nonce="{nonce}">{BOOT}</script></body></html>\n'
    )


def write_html(analysis: Analysis, path: Any, **kw: Any) -> str:
    """Write :func:`render_html` to ``path`` (UTF-8); returns the path as a string."""
    from pathlib import Path

    out = Path(path)
    out.write_text(render_html(analysis, **kw), encoding="utf-8")
    return str(out)


__all__ = ["banner_html", "render_html", "ticket_block", "verdict_html", "write_html"]
