"""The incident report: one self-contained HTML file.

Order of the page: the verdict banner (culprit ranks, kind, the headline sentence and the
wait chains), then the timeline, the wait-for graph, the progress view, the findings table,
the culprit's stack, the skipped files and a summary of the input.

* Offline by default: plotly.js is embedded (``plotlyjs="inline"``); ``"cdn"`` references
  it instead and gives a small file. No other external request of any kind (no web fonts,
  no images); a Content-Security-Policy in the page enforces it.
* Everything taken from dumps (file names, stacks, group descs, profiling names) is
  HTML-escaped; figure data is embedded as JSON with ``<``, ``>`` and ``&`` escaped, and only
  the page's own scripts (carrying a per-page nonce) may run.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import html as _html
import json
import secrets
from typing import TYPE_CHECKING, Any

from analyzer.diagnosis import unrecorded_text
from analyzer.render.figures import is_p2p_op, ranks_text
from analyzer.render.text import _KIND_TITLES, full_dialect_text, kind_title

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

_CSS = """
:root{--red:#c0392b;--amber:#b9770e;--green:#1e8449;--ink:#1c2833;--mute:#5d6d7e;--line:#e5e8eb}
*{box-sizing:border-box}
body{margin:0;font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;
color:var(--ink);background:#f7f8fa;line-height:1.45}
main{max-width:1500px;margin:0 auto;padding:0 18px 40px}
.banner{padding:18px 22px;border-radius:0 0 10px 10px;color:white;margin:0 -18px 14px}
.banner.hang{background:var(--red)}.banner.no_hang{background:var(--green)}
.banner.inconclusive{background:var(--amber)}
.banner .verdict{font-size:26px;font-weight:700;margin:0 0 4px}
.banner .kind{font-size:15px;opacity:.95;margin:0 0 10px}
.banner .headline{font-size:15px;background:rgba(255,255,255,.14);padding:10px 12px;border-radius:6px;
margin:0;overflow-wrap:anywhere}
.banner ul{margin:8px 0 0;padding-left:20px;font-size:13px}
nav{font-size:13px;margin:0 0 10px;color:var(--mute)}nav a{color:#2e6da4;margin-right:12px}
section{background:white;border:1px solid var(--line);border-radius:8px;margin:0 0 14px;padding:12px 16px}
section h2{font-size:17px;margin:2px 0 8px}
.note{color:var(--mute);font-size:12.5px;margin:4px 0}
.plot{width:100%;min-height:300px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f6;font-weight:600}
td.sum{overflow-wrap:anywhere;max-width:900px}
tr.culprit td:first-child{border-left:4px solid var(--red)}
.tag{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;background:#eef1f4}
.tag.culprit{background:#fadbd8;color:#922b21;font-weight:600}
pre{background:#f4f6f7;border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;
font-size:12.5px;line-height:1.35;margin:6px 0}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;font-size:13.5px;margin:0}
dl.summary dt{color:var(--mute)}dl.summary dd{margin:0;overflow-wrap:anywhere}
details summary{cursor:pointer;font-size:13px;color:#2e6da4}
footer{color:var(--mute);font-size:12px;text-align:center;margin-top:18px}
.noscript{color:var(--red);font-size:13px}
"""

_BOOT = """
(function(){
  var t0=performance.now();
  var cfg={responsive:true,displaylogo:false,scrollZoom:false,
           modeBarButtonsToRemove:['select2d','lasso2d'],toImageButtonOptions:{format:'png',scale:2}};
  function plot(el){
    var target=document.getElementById(el.getAttribute('data-plot'));
    try{var spec=JSON.parse(el.textContent);
        return Plotly.newPlot(target,spec.data,spec.layout,cfg);}
    catch(err){target.textContent='figure failed to render: '+err;console.error(err);return null;}
  }
  var jobs=[];
  document.querySelectorAll('script[type="application/json"][data-plot]').forEach(function(el){
    var lazy=el.closest('details[data-lazy]');
    if(!lazy){jobs.push(plot(el));return;}
    lazy.addEventListener('toggle',function(){
      if(lazy.open&&!el.hasAttribute('data-done')){el.setAttribute('data-done','1');plot(el);}
    });
  });
  Promise.all(jobs).then(function(){
      document.body.setAttribute('data-render-ms',String(Math.round(performance.now()-t0)));
      document.body.setAttribute('data-ready','1');},
                         function(err){document.body.setAttribute('data-ready','error');console.error(err);});
})();
"""


def esc(value: object) -> str:
    """HTML-escape anything that came from a dump (text and attribute values)."""
    return _html.escape(str(value), quote=True)


def _json_for_html(obj: Any) -> str:
    """JSON that can sit inside a <script> element (no ``</script>``, no ``<!--``)."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _kind_title(kind: str) -> str:
    return _KIND_TITLES.get(kind, kind)


def _verdict_line(analysis: Analysis) -> str:
    d = analysis.diagnosis
    if d.verdict.value == "hang":
        n = len(d.culprit_ranks)
        return f"HANG: culprit rank{'s' if n > 1 else ''} {ranks_text(d.culprit_ranks, 12)}"
    if d.verdict.value == "no_hang":
        return "NO HANG"
    return "INCONCLUSIVE"


def verdict_line(analysis: Analysis) -> str:
    """One line: verdict, culprits and kind (the CLI prints it)."""
    v = analysis.diagnosis.verdict.value
    if v == "no_hang":
        return "NO HANG: every recorded op completed and the counters agree"
    if v == "inconclusive":
        return "INCONCLUSIVE: ops are pending but no rank can be blamed from these dumps"
    return f"{_verdict_line(analysis)} ({kind_title(analysis)})"


def _chain_lines(analysis: Analysis) -> list[str]:
    out = []
    for rank, steps in analysis.diagnosis.chains.items():
        if not steps:
            continue
        parts = [
            f"rank {s['waiter']} waits on {s['holder']} in {esc(s['pg_desc'] or s['pg_name'])} "
            f"{'p2p seq' if is_p2p_op(s['op']) else 'seq'} {int(s['seq'])} ({esc(s['op'])})"
            for s in steps
        ]
        out.append(f"chain to rank {int(rank)}: " + "; ".join(parts) + f"; {int(rank)} waits on nobody")
    return out


def verdict_html(analysis: Analysis, *, max_findings: int = 5, standalone_styles: bool = True) -> str:
    """A compact verdict summary as an HTML fragment (Jupyter's rich display uses it)."""
    d = analysis.diagnosis
    t = analysis.tables
    colors = {"hang": "#c0392b", "no_hang": "#1e8449", "inconclusive": "#b9770e"}
    bg = colors.get(d.verdict.value, "#555")
    rows = []
    for f in d.findings[:max_findings]:
        rows.append(
            "<tr>"
            f"<td style='padding:3px 8px;vertical-align:top'>{'★ ' if f.culprit else ''}{esc(f.kind)}</td>"
            f"<td style='padding:3px 8px;vertical-align:top'>{esc(ranks_text(f.ranks, 4))}</td>"
            f"<td style='padding:3px 8px;text-align:left;overflow-wrap:anywhere'>{esc(f.summary)}</td></tr>")
    more = len(d.findings) - max_findings
    table = ("<table style='border-collapse:collapse;font-size:12.5px;margin-top:6px'>"
             "<tr><th style='text-align:left;padding:3px 8px'>kind</th><th style='text-align:left;padding:3px 8px'>ranks</th>"
             "<th style='text-align:left;padding:3px 8px'>finding</th></tr>" + "".join(rows) + "</table>"
             + (f"<div style='font-size:12px;color:#5d6d7e'>… {more} more findings</div>" if more > 0 else "")
             ) if rows else ""
    return (
        "<div class='hangscope-verdict' style='font-family:system-ui,sans-serif;max-width:1100px'>"
        f"<div style='background:{bg};color:white;padding:10px 14px;border-radius:6px'>"
        f"<div style='font-size:18px;font-weight:700'>{esc(_verdict_line(analysis))}</div>"
        f"<div style='font-size:13px'>{esc(kind_title(analysis))}</div>"
        f"<div style='font-size:13px;margin-top:6px;overflow-wrap:anywhere'>{esc(d.headline)}</div></div>"
        f"<div style='font-size:12px;color:#5d6d7e;margin-top:4px'>{len(t.dumped_ranks)} of {t.world_size} "
        f"ranks dumped · {len(t.entries):,} entries"
        + (f" · missing dumps: ranks {esc(ranks_text(d.missing_dumps))}" if d.missing_dumps else "")
        + f"</div>{table}</div>"
    )


def _findings_table(analysis: Analysis) -> str:
    d = analysis.diagnosis
    if not d.findings:
        return "<p class='note'>no findings</p>"
    rows = []
    for f in d.findings[:200]:
        where = esc(f.group_desc or f.group) + (f" (group {esc(f.group)})" if f.group_desc and f.group else "")
        rows.append(
            f"<tr class='{'culprit' if f.culprit else ''}'>"
            f"<td><span class='tag{' culprit' if f.culprit else ''}'>{esc(f.kind)}</span></td>"
            f"<td>{'culprit' if f.culprit else ''}</td>"
            f"<td>{esc(ranks_text(f.ranks, 6))}</td><td>{where}</td>"
            f"<td>{int(f.seq) if f.seq >= 0 else ''}</td><td>{esc(f.op)}</td>"
            f"<td class='sum'>{esc(f.summary)}</td></tr>")
    more = (f"<p class='note'>{len(d.findings) - 200} more findings not listed (see the JSON output)</p>"
            if len(d.findings) > 200 else "")
    return ("<table><thead><tr><th>kind</th><th>role</th><th>ranks</th><th>group</th><th>seq</th><th>op</th>"
            "<th>summary</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>" + more)


def _stack_block(frames: Any) -> str:
    lines = [f"{esc(fr.get('filename', ''))}:{int(fr.get('line', 0))} in {esc(fr.get('name', ''))}"
             for fr in frames]
    return "<pre>" + "\n".join(lines) + "</pre>" if lines else "<p class='note'>no frames recorded</p>"


def _stacks_section(analysis: Analysis) -> str:
    d = analysis.diagnosis
    parts = []
    shown = 0
    for f in d.findings:
        if not f.culprit or shown >= 4:
            continue
        ranks = esc(ranks_text(f.ranks, 6))
        if f.stack:
            parts.append(f"<h3 class='note'>[{esc(f.kind)}] ranks {ranks}: stack that issued "
                         f"{esc(f.op)} in {esc(f.group_desc or f.group)} seq {int(f.seq)} "
                         "(innermost frame first)</h3>" + _stack_block(f.stack))
        last = f.evidence.get("last_recorded_stack") if isinstance(f.evidence, dict) else None
        if last:
            op = f.evidence.get("last_recorded_op", {}) or {}
            parts.append(f"<h3 class='note'>rank {ranks}: stack of its last recorded op "
                         f"({esc(op.get('op', ''))} in {esc(op.get('group_desc', '') or op.get('group', ''))} "
                         f"seq {esc(op.get('seq', ''))}), where it stopped issuing</h3>" + _stack_block(last))
        shown += 1
    if not parts:
        return ("<p class='note'>no stack recorded for the culprit's ops (stacks need "
                "TORCH_NCCL_TRACE_CPP_STACK / python frames in the dump)</p>")
    return "".join(parts)


def _input_notes_html(analysis: Analysis) -> str:
    """Warnings (values dropped from dumps), duplicates, unreadable folders, ignored files."""
    from analyzer.render.inputs import input_notes

    n = input_notes(analysis)
    out = []
    if n.warnings:
        rows = "".join(f"<tr><td>{int(w['rank'])}</td><td>{esc(str(w['warning']))}</td>"  # type: ignore[call-overload]
                       f"<td>{esc(str(w['path']))}</td></tr>" for w in n.warnings[:500])
        out.append("<h3>Warnings: values dropped from dumps</h3><p class='note'>a dump with "
                   "dropped values is suspect and does not by itself make its rank a culprit"
                   "</p><table class='warnings'><thead><tr><th>rank</th><th>warning</th>"
                   f"<th>file</th></tr></thead><tbody>{rows}</tbody></table>")
    if n.duplicates:
        out.append("<h3>Duplicates</h3><ul>" + "".join(
            f"<li>{esc(str(d['note']))}</li>" for d in n.duplicates[:500]) + "</ul>")
    if n.unreadable_folders:
        out.append("<h3>Unreadable folders</h3><ul>" + "".join(
            f"<li>{esc(p)}: {esc(w)}</li>" for p, w in n.unreadable_folders[:500]) + "</ul>")
    if n.ignored:
        out.append(f"<details><summary>ignored files ({len(n.ignored)}, not flight-recorder "
                   "dumps)</summary><ul>" + "".join(
                       f"<li>{esc(p)}: {esc(w)}</li>" for p, w in n.ignored[:500]) + "</ul></details>")
    return "".join(out)


def _skipped_section(analysis: Analysis) -> str:
    sk = analysis.tables.skipped
    if not len(sk):
        return "<p class='note'>none: every file found was analyzed</p>" + _input_notes_html(analysis)
    rows = "".join(f"<tr><td>{esc(p)}</td><td>{int(r) if int(r) >= 0 else ''}</td><td>{esc(why)}</td></tr>"
                   for p, r, why in sk[["path", "rank", "reason"]].head(500).itertuples(index=False))
    more = f"<p class='note'>{len(sk) - 500} more not listed</p>" if len(sk) > 500 else ""
    return ("<table><thead><tr><th>file</th><th>rank</th><th>reason</th></tr></thead><tbody>"
            + rows + "</tbody></table>" + more + _input_notes_html(analysis))


def _summary_section(analysis: Analysis) -> str:
    t = analysis.tables
    d = analysis.diagnosis
    rk = t.ranks
    e = t.entries

    def uniq(series: Any) -> str:
        vals = sorted({str(v) for v in series if str(v)})
        return esc(", ".join(vals)) if vals else "—"

    times = e["time_created_ns"] if len(e) else None
    span = ""
    if times is not None and len(times):
        lo, hi = int(times.min()), int(times.max())
        fmt = "%Y-%m-%d %H:%M:%S"
        span = (f"{_dt.datetime.fromtimestamp(lo / 1e9, _dt.UTC).strftime(fmt)} to "
                f"{_dt.datetime.fromtimestamp(hi / 1e9, _dt.UTC).strftime(fmt)} UTC "
                f"({(hi - lo) / 1e9:.3f} s, enqueue times as the ranks' clocks recorded them)")
    items = [
        ("world size", str(int(t.world_size))),
        ("dumps read", f"{len(t.dumped_ranks)} rank(s)"),
        ("missing dumps", esc(ranks_text(d.missing_dumps)) if d.missing_dumps else "none"),
        ("entries", f"{len(e):,}"),
        ("groups", f"{len(t.groups):,}"),
        ("backends", uniq(rk["backend"])),
        ("read as", esc(full_dialect_text(analysis).removeprefix("read as: ")) or "—"),
        ("groups not recorded", esc(unrecorded_text(d.unrecorded_groups).split(": ", 1)[1])
         if d.unrecorded_groups else "none"),
        ("dump formats", uniq(rk["format"])),
        ("readers", uniq(rk["reader"])),
        ("format versions", uniq(rk["version"])),
        ("comm library", uniq(rk["comm_lib_version"])),
        ("recorded span", span or "—"),
        ("skipped files", str(len(t.skipped))),
    ]
    dl = "<dl class='summary'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"
    files = rk[rk["path"] != ""][["rank", "path", "format", "entries"]]
    cap = 256
    rows = "".join(f"<tr><td>{int(r)}</td><td>{esc(p)}</td><td>{esc(fm)}</td><td>{int(n):,}</td></tr>"
                   for r, p, fm, n in files.head(cap).itertuples(index=False))
    more = f"<p class='note'>{len(files) - cap} more files not listed</p>" if len(files) > cap else ""
    return (dl + f"<details><summary>input files ({len(files)})</summary><table><thead><tr><th>rank</th>"
            "<th>file</th><th>format</th><th>entries</th></tr></thead><tbody>" + rows + "</tbody></table>"
            + more + "</details>")


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _cdn_tag(nonce: str) -> tuple[str, str]:
    from plotly.io._utils import plotly_cdn_url

    url = plotly_cdn_url()
    digest = base64.b64encode(hashlib.sha256(_plotly_js().encode("utf-8")).digest()).decode()
    tag = (f'<script nonce="{nonce}" src="{esc(url)}" integrity="sha256-{digest}" '
           'crossorigin="anonymous" charset="utf-8"></script>')
    origin = "/".join(url.split("/")[:3])
    return tag, origin


def render_html(analysis: Analysis, *, plotlyjs: str = "inline", title: str | None = None,
                clock: str = "job", max_lanes: int = 64, window_s: float | None = None) -> str:
    """The incident report as one HTML document (a string).

    ``plotlyjs="inline"`` (default) embeds plotly.js: the file works offline and makes no
    request. ``"cdn"`` loads plotly.js from its CDN (a ~5 MB smaller file). ``clock``,
    ``max_lanes`` and ``window_s`` are passed to :func:`analyzer.render.figures.timeline`.
    """
    from analyzer.render import figures
    from analyzer.render.wherenow import where_now_section

    if plotlyjs not in ("inline", "cdn"):
        raise ValueError("plotlyjs must be 'inline' or 'cdn'")
    d = analysis.diagnosis
    nonce = secrets.token_urlsafe(16)
    other = "rank" if clock == "job" else "job"
    figs = {
        "timeline": figures.timeline(analysis, max_lanes=max_lanes, window_s=window_s, clock=clock),
        "timeline2": figures.timeline(analysis, max_lanes=max_lanes, window_s=window_s, clock=other),
        "waitgraph": figures.wait_graph(analysis),
        "progress": figures.progress(analysis),
    }
    blobs = {}
    notes = {}
    for name, fig in figs.items():
        meta = fig.layout.meta or {}
        notes[name] = list((meta.get("hangscope") or {}).get("notes", [])) if isinstance(meta, dict) else []
        blobs[name] = _json_for_html(fig.to_json(validate=False, pretty=False, engine="json"))

    if plotlyjs == "inline":
        js_tag = f'<script nonce="{nonce}">{_plotly_js()}</script>'
        script_src = f"'nonce-{nonce}'"
    else:
        js_tag, origin = _cdn_tag(nonce)
        script_src = f"'nonce-{nonce}' {origin}"
    csp = (f"default-src 'none'; script-src {script_src}; style-src 'unsafe-inline'; img-src data: blob:; "
           "font-src data:; connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'; "
           "form-action 'none'")

    verdict = d.verdict.value
    chains = "".join(f"<li>{c}</li>" for c in _chain_lines(analysis))
    missing = (f"<li>missing dumps: ranks {esc(ranks_text(d.missing_dumps))}</li>" if d.missing_dumps else "")
    cycles = "".join(f"<li>deadlock cycle: ranks {esc(ranks_text(c))}</li>" for c in d.deadlock_cycles)
    page_title = title or f"hangscope: {_verdict_line(analysis)}"

    def fig_section(key: str, heading: str, anchor: str, intro: str, extra: str = "") -> str:
        note_html = "".join(f"<p class='note'>{n}</p>" for n in notes[key])  # already escaped
        return (f"<section id='{anchor}'><h2>{heading}</h2><p class='note'>{intro}</p>"
                f"<div class='plot' id='plot-{key}'></div>"
                f"<script type='application/json' data-plot='plot-{key}'>{blobs[key]}</script>"
                f"<details><summary>what was merged or left out</summary>{note_html}</details>{extra}</section>")

    other_clock = ("each rank's own clock (aligns hosts whose clocks are offset; hides which rank "
                   "stopped first)" if other == "rank" else "the job clock (one time axis for all ranks)")
    lazy_timeline = (
        f"<details data-lazy='1' id='timeline-other'><summary>the same timeline on {other_clock}</summary>"
        "<div class='plot' id='plot-timeline2'></div>"
        f"<script type='application/json' data-plot='plot-timeline2'>{blobs['timeline2']}</script></details>")

    body = [
        f"<header class='banner {esc(verdict)}' id='verdict'>",
        f"<p class='verdict'>{esc(_verdict_line(analysis))}</p>",
        f"<p class='kind'>{esc(kind_title(analysis))}</p>",
        f"<p class='headline'>{esc(d.headline)}</p>",
        f"<ul>{chains}{missing}{cycles}</ul>" if (chains or missing or cycles) else "",
        "</header>",
        where_now_section(analysis),
        "<nav><a href='#timeline'>timeline</a><a href='#waits'>wait graph</a><a href='#progress'>progress</a>"
        "<a href='#findings'>findings</a><a href='#stack'>culprit stack</a><a href='#skipped'>skipped files</a>"
        "<a href='#input'>input</a></nav>",
        "<noscript><p class='noscript'>JavaScript is off: the figures need it; the tables below do not.</p></noscript>",
        fig_section("timeline", "Timeline", "timeline",
                    "One lane per rank, one bar per recorded op from enqueue to completion. Orange never "
                    "completed; hatched red: the op the culprit never joined while its peers wait in it; "
                    "outlined: the op the finding is about. Hover a bar for group, seq, sizes, dtypes and "
                    "the issuing stack; the buttons switch between the hang window and the whole buffer.",
                    lazy_timeline),
        fig_section("waitgraph", "Wait-for graph", "waits",
                    "An arrow A → B: A is blocked in an op B has not joined. Culprits are on the right; "
                    "the red path is the wait chain to the culprit. Hover the middle of an arrow for the "
                    "group, sequence number and op."),
        fig_section("progress", "Progress per group", "progress",
                    "How many sequence numbers each rank is behind its group's newest enqueued op."),
        f"<section id='findings'><h2>Findings</h2>{_findings_table(analysis)}</section>",
        f"<section id='stack'><h2>Culprit stack</h2>{_stacks_section(analysis)}</section>",
        f"<section id='skipped'><h2>Skipped files</h2>{_skipped_section(analysis)}</section>",
        f"<section id='input'><h2>Input</h2>{_summary_section(analysis)}</section>",
    ]
    from analyzer import __version__ as version

    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='referrer' content='no-referrer'>"
        f"<title>{esc(page_title)}</title><style>{_CSS}</style></head>"
        f"<body data-ready='0' data-verdict='{esc(verdict)}'><main>" + "".join(body)
        + f"<footer>hangscope {esc(version)} · post-mortem report of PyTorch flight-recorder dumps</footer>"
        + f"</main>{js_tag}<script nonce=\"{nonce}\">{_BOOT}</script></body></html>\n"
    )


def write_html(analysis: Analysis, path: Any, **kw: Any) -> str:
    """Write :func:`render_html` to ``path`` (UTF-8); returns the path as a string."""
    from pathlib import Path

    out = Path(path)
    out.write_text(render_html(analysis, **kw), encoding="utf-8")
    return str(out)


__all__ = ["render_html", "verdict_html", "verdict_line", "write_html"]
