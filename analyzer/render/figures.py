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

from __future__ import annotations

import html
import math
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis

#: Colours of op states (also used by the HTML legend).
COLORS = {
    "completed": "#8fb3d9",
    "history": "#d3dce6",
    "in flight": "#f39c12",
    "mismatched": "#8e44ad",
    "never joined": "#d62728",
    "no dump": "#555555",
}
CULPRIT = "#d62728"
CULPRIT_BAND = "rgba(214,39,40,0.10)"
HIGHLIGHT = "#111111"

#: Bars the timeline draws in all, and at most per lane (older completed entries are merged).
BAR_BUDGET = 8_000
LANE_BUDGET = 600
#: Newest entries of each lane whose hover carries the issuing stack (plus pending ones).
STACK_HOVERS = 48
#: Frames of an issuing stack shown in a hover.
HOVER_FRAMES = 6
#: Nodes the wait graph draws before it merges by distance only.
MAX_GRAPH_NODES = 80

_ST_DONE, _ST_FLIGHT, _ST_MISMATCH = 0, 1, 2
_STATE_NAMES = {_ST_DONE: "completed", _ST_FLIGHT: "in flight", _ST_MISMATCH: "mismatched"}

_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Arial, sans-serif"


def esc(value: object) -> str:
    """Escape text from a dump for plotly labels (its pseudo-HTML decodes &lt; &gt; &amp;
    but not &quot;, and these strings never land in an attribute)."""
    return html.escape(str(value), quote=False)


def _clip(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def ranks_text(ranks: Sequence[int], limit: int = 8) -> str:
    """``0-3, 8, 12`` style text for a set of ranks, shortened past ``limit`` runs."""
    rs = sorted(set(int(r) for r in ranks))
    runs: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]}, {rs[j]}")
        i = j + 1
    if len(runs) > limit:
        return ", ".join(runs[:limit]) + f", … ({len(rs)} ranks)"
    return ", ".join(runs)


def is_p2p_op(op: object) -> bool:
    """Waits on send/recv carry the p2p sequence number (whatever their wait kind)."""
    return str(op) in ("send", "recv")


def members_label(ranks: Sequence[int]) -> str:
    """Short label of a set of ranks: ``rank 5`` or ``ranks 0-7, 32-39, … ×248``."""
    rs = sorted(set(int(r) for r in ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    text = ranks_text(rs, 2)
    if "…" in text:
        text = text.split(", …")[0] + ", …"
    return f"ranks {text} ×{len(rs)}"


def _group_label(name: str, desc: str) -> str:
    return f"{desc} (group {name})" if desc and desc != name else f"group {name}"


def _note_lines(notes: list[str], width: int = 170) -> list[str]:
    import textwrap

    return [line for n in notes for line in textwrap.wrap(n, width, break_on_hyphens=False)]


def _top_margin(notes: list[str], extra: int = 40) -> int:
    """Room for the title, its note lines and a row of legend/buttons under them."""
    return 54 + 16 * len(_note_lines(notes)) + extra


def _base_layout(title: str, notes: list[str], height: int) -> dict[str, Any]:
    sub = "<br>".join(f"<span style='font-size:12px;color:#555'>{n}</span>" for n in _note_lines(notes))
    return {
        "title": {"text": f"<b>{title}</b>" + (f"<br>{sub}" if sub else ""), "x": 0.01,
                  "xanchor": "left", "yref": "container", "y": 1.0, "yanchor": "top",
                  "pad": {"t": 20}, "font": {"size": 16}},
        "height": height,
        "font": {"family": _FONT, "size": 12},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hoverlabel": {"align": "left", "font": {"family": "DejaVu Sans Mono, monospace", "size": 11}},
        "meta": {"hangscope": {"notes": notes}},
    }


# --------------------------------------------------------------------------- shared views


def _stack_texts(analysis: Analysis, ids: Iterable[int], frames: int = HOVER_FRAMES) -> dict[int, str]:
    """stack_id -> short escaped text (user frames first: torch internals are skipped)."""
    wanted = {int(i) for i in ids if int(i) >= 0}
    if not wanted:
        return {}
    st = analysis.tables.stacks
    sub = st[st["stack_id"].isin(list(wanted))].sort_values(["stack_id", "depth"])
    out: dict[int, str] = {}
    for sid, grp in sub.groupby("stack_id", sort=False):
        rows = list(grp[["name", "filename", "line"]].itertuples(index=False))
        user = [r for r in rows if "/torch/" not in str(r.filename)]
        shown = (user or rows)[:frames]
        hidden = len(rows) - len(shown)
        lines = [esc(_clip(f"{_short_path(str(r.filename))}:{int(r.line)} in {r.name}", 110)) for r in shown]
        if hidden:
            lines.append(f"(+{hidden} frame{'s' if hidden > 1 else ''}: torch internals or deeper)")
        out[int(sid)] = "<br>".join(lines)
    return out


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


def _pipeline_stage(analysis: Analysis) -> dict[int, int]:
    """rank -> pipeline stage, from groups whose desc names the pipeline (empty if none)."""
    stage: dict[int, int] = {}
    g = analysis.tables.groups
    for desc, members in g[["pg_desc", "ranks"]].itertuples(index=False):
        d = str(desc).upper()
        if "PIPELINE" in d and "EXPERT" not in d and len(members) > 1:
            for i, r in enumerate(members):
                stage.setdefault(int(r), i)
    return stage


@dataclass
class _Entries:
    """The entry columns the timeline needs, sorted by (rank, enqueue time), as arrays."""

    rank: np.ndarray
    created: np.ndarray
    end: np.ndarray
    completed_known: np.ndarray
    state: np.ndarray
    key: np.ndarray  # per-entry signature code
    idx: np.ndarray  # row positions in analysis.tables.entries
    starts: dict[int, tuple[int, int]] = field(default_factory=dict)

    def of(self, rank: int) -> slice:
        lo, hi = self.starts.get(rank, (0, 0))
        return slice(lo, hi)


def _entry_arrays(analysis: Analysis) -> _Entries:
    e = analysis.tables.entries
    gloo = analysis.matching.gloo_like
    rank = e["rank"].to_numpy(np.int64)
    created = e["time_created_ns"].to_numpy(np.int64)
    comp = e["time_completed_ns"].to_numpy(np.int64)
    state_s = e["state"].astype(str).to_numpy() if len(e) else np.array([], dtype=object)
    done = e["retired"].to_numpy(bool) if gloo else (state_s == "completed")
    if gloo:
        done = done | (state_s == "completed")
    state = np.where(done, _ST_DONE, _ST_FLIGHT).astype(np.int8)
    mm = analysis.matching.mismatches
    if len(mm) and len(e):
        bad = set(zip(mm["pg_name"].astype(str), mm["seq"].astype(int), mm["rank"].astype(int)))
        names = e["pg_name"].astype(str).to_numpy()
        seqs = e["seq"].to_numpy(np.int64)
        p2p = e["is_p2p"].to_numpy(bool)
        cand = np.flatnonzero(~p2p & np.isin(rank, [r for _, _, r in bad]))
        for i in cand:
            if (names[i], int(seqs[i]), int(rank[i])) in bad:
                state[i] = _ST_MISMATCH
    # Ops the wait analysis says a rank is blocked in are in flight, even where the recorder
    # retired them (gloo retires an op that timed out).
    w = analysis.waits
    if len(w) and len(e):
        blocked = {(int(r), str(g), int(q), is_p2p_op(o)) for r, g, q, o in
                   w[["waiter", "pg_name", "seq", "op"]].itertuples(index=False)}
        names = e["pg_name"].astype(str).to_numpy()
        p2p = e["is_p2p"].to_numpy(bool)
        seqs = np.where(p2p, e["p2p_seq"].to_numpy(np.int64), e["seq"].to_numpy(np.int64))
        cand = np.flatnonzero(np.isin(rank, list({b[0] for b in blocked})) & (state == _ST_DONE))
        cand = cand[np.isin(seqs[cand], list({b[2] for b in blocked}))]
        for i in cand:
            if (int(rank[i]), names[i], int(seqs[i]), bool(p2p[i])) in blocked:
                state[i] = _ST_FLIGHT
    order = np.lexsort((e["record_id"].to_numpy(np.int64), created, rank)) if len(e) else np.empty(0, np.int64)
    rank, created, comp, state = rank[order], created[order], comp[order], state[order]
    # Signature per entry: group role (desc, else name), seq (p2p seq for send/recv), op, state.
    desc_codes = e["pg_desc"].cat.codes.to_numpy(np.int64)[order] if len(e) else np.empty(0, np.int64)
    op_codes = e["op"].cat.codes.to_numpy(np.int64)[order] if len(e) else np.empty(0, np.int64)
    is_p2p = e["is_p2p"].to_numpy(bool)[order] if len(e) else np.empty(0, bool)
    seq = np.where(is_p2p, e["p2p_seq"].to_numpy(np.int64)[order], e["seq"].to_numpy(np.int64)[order]) \
        if len(e) else np.empty(0, np.int64)
    key = (((desc_codes * 4096 + op_codes) * 4 + state) << 32) ^ (seq & 0xFFFFFFFF)
    # Bar ends: completion when known; the next enqueue of the rank when the op is done but
    # its completion time was not recorded (gloo); the end of the record when never done.
    nxt = np.empty_like(created)
    if len(created):
        nxt[:-1] = created[1:]
        nxt[-1] = created[-1]
        last_of_rank = np.ones(len(rank), bool)
        last_of_rank[:-1] = rank[1:] != rank[:-1]
        nxt[last_of_rank] = created[last_of_rank]
    known = comp > 0
    end = np.where(known, comp, np.where(state == _ST_FLIGHT, -1, np.maximum(nxt, created)))
    starts: dict[int, tuple[int, int]] = {}
    if len(rank):
        cut = np.flatnonzero(np.diff(rank)) + 1
        lo = np.concatenate([[0], cut])
        hi = np.concatenate([cut, [len(rank)]])
        starts = {int(rank[a]): (int(a), int(b)) for a, b in zip(lo, hi)}
    return _Entries(rank=rank, created=created, end=end, completed_known=known, state=state,
                    key=key, idx=order, starts=starts)


# --------------------------------------------------------------------------- timeline


@dataclass
class _Lane:
    ranks: list[int]
    rep: int
    culprit: bool
    dumped: bool
    stage: int | None
    priority: int = 3
    y: int = 0

    def label(self) -> str:
        st = f"PP{self.stage} · " if self.stage is not None else ""
        who = members_label(self.ranks)
        txt = f"{st}{who}" + ("" if self.dumped else " (no dump)")
        if self.culprit:
            return f"<b style='color:{CULPRIT}'>★ {txt}</b>"
        return txt


def _lanes(analysis: Analysis, ea: _Entries, max_lanes: int,
           collapse: bool | None) -> tuple[list[_Lane], list[str]]:
    d = analysis.diagnosis
    culprits = set(int(r) for r in d.culprit_ranks)
    g = analysis.graph
    stage = _pipeline_stage(analysis)
    ranks_df = analysis.tables.ranks
    dumped = dict(zip(ranks_df["rank"].astype(int), ranks_df["dumped"].astype(bool)))
    classes: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    if collapse is None:
        collapse = len(dumped) > min(max_lanes, 32)
    for r in sorted(dumped):
        if r in culprits or not collapse:
            classes[("culprit", r)].append(r)
            continue
        sl = ea.of(r)
        sig = ("dump", stage.get(r), hash(ea.key[sl].tobytes())) if dumped[r] else ("none", stage.get(r))
        classes[sig].append(r)
    direct = {int(w) for c in culprits if c in g for w in g.predecessors(c)}
    on_chain = {int(s["waiter"]) for steps in d.chains.values() for s in steps}
    lanes: list[_Lane] = []
    for ranks in classes.values():
        rep = next((r for r in ranks if r in culprits), ranks[0])
        lane = _Lane(ranks=ranks, rep=rep, culprit=rep in culprits, dumped=dumped[rep],
                     stage=stage.get(rep))
        if lane.culprit:
            lane.priority = 0
        elif direct & set(ranks):
            lane.priority = 1
        elif on_chain & set(ranks) or not lane.dumped:
            lane.priority = 2
        lanes.append(lane)
    notes: list[str] = []
    n_ranks = len(dumped)
    if len(lanes) < n_ranks:
        notes.append(f"{n_ranks} ranks in {len(lanes)} lanes: ranks with the same sequence of "
                     "(group, seq, op, state) share a lane (×N); times are those of its first rank")
    if len(lanes) > max_lanes:
        keep = sorted(lanes, key=lambda ln: (ln.priority, -len(ln.ranks), ln.rep))[:max_lanes]
        dropped = [ln for ln in lanes if ln not in keep]
        notes.append(f"{len(dropped)} lanes ({sum(len(ln.ranks) for ln in dropped)} ranks) not drawn "
                     f"(cap {max_lanes}; culprits and the ranks waiting on them kept first)")
        lanes = keep
    lanes.sort(key=lambda ln: (ln.stage if ln.stage is not None else -1, ln.rep))
    for i, ln in enumerate(lanes):
        ln.y = i
    return lanes, notes


def _entry_hover(analysis: Analysis, rows: np.ndarray, lane: _Lane, state: np.ndarray,
                 x0: np.ndarray, x1: np.ndarray, known: np.ndarray, stacks: dict[int, str],
                 with_stack: np.ndarray) -> list[str]:
    e = analysis.tables.entries
    sub = e.iloc[rows]
    cols = {c: sub[c].astype(str).tolist() for c in (
        "pg_name", "pg_desc", "op", "state", "input_sizes", "output_sizes", "input_dtypes",
        "output_dtypes", "profiling_name")}
    seq = sub["seq"].to_numpy()
    pseq = sub["p2p_seq"].to_numpy()
    p2p = sub["is_p2p"].to_numpy()
    peer = sub["peer"].to_numpy()
    sid = sub["stack_id"].to_numpy()
    dur = sub["duration_ms"].to_numpy()
    who = f"rank {lane.rep}" if len(lane.ranks) == 1 else f"rank {lane.rep} (and {len(lane.ranks) - 1} alike)"
    out = []
    for i in range(len(rows)):
        s = int(state[i])
        seq_txt = f"p2p seq {int(pseq[i])} (seq {int(seq[i])}) · peer {int(peer[i])}" if p2p[i] else f"seq {int(seq[i])}"
        took = (f"took {(x1[i] - x0[i]) * 1e3:.3f} ms" if known[i] else
                "not completed (drawn to the end of the record)" if s == _ST_FLIGHT else
                "completion time not recorded")
        gpu = f" · GPU {dur[i]:.3f} ms" if not math.isnan(dur[i]) else ""
        parts = [
            f"<b>{esc(who)}</b> · {esc(_clip(_group_label(cols['pg_name'][i], cols['pg_desc'][i]), 80))}",
            f"{seq_txt} · <b>{esc(_clip(cols['op'][i], 60))}</b> · {esc(_STATE_NAMES[s])} ({esc(cols['state'][i])})",
            f"sizes {esc(_clip(cols['input_sizes'][i], 60))} → {esc(_clip(cols['output_sizes'][i], 60))}",
            f"dtypes {esc(_clip(cols['input_dtypes'][i], 50))} → {esc(_clip(cols['output_dtypes'][i], 50))}",
            f"enqueued {x0[i]:+.6f} s · {took}{gpu}",
        ]
        st = stacks.get(int(sid[i])) if with_stack[i] else None
        if st:
            parts.append("stack:<br>" + st)
        out.append("<br>".join(parts))
    return out


def timeline(analysis: Analysis, *, max_lanes: int = 64, window_s: float | None = None,
             clock: str = "job", collapse: bool | None = None, bar_budget: int = BAR_BUDGET) -> go.Figure:
    """One lane per rank (or per set of ranks that behave alike), one bar per recorded op.

    ``clock="job"`` plots every time relative to the newest timestamp of the whole dump set
    (x = seconds before the end of the record); ``clock="rank"`` relative to each rank's own
    newest timestamp, which removes the clock offset between hosts (NCCL dumps of different
    nodes can be offset) at the price of hiding which rank stopped first. ``window_s`` sets
    the default visible range (the last seconds before the hang); the buttons above the plot
    switch to the whole buffer. ``collapse`` merges ranks that behave identically into one
    lane (default: only when there are more ranks than fit, i.e. more than
    ``min(max_lanes, 32)``).
    """
    import plotly.graph_objects as go

    if clock not in ("job", "rank"):
        raise ValueError("clock must be 'job' or 'rank'")
    d = analysis.diagnosis
    ea = _entry_arrays(analysis)
    lanes, notes = _lanes(analysis, ea, max(1, int(max_lanes)), collapse)
    n_lanes = max(1, len(lanes))

    t_stop = int(max(ea.created.max(initial=0), ea.end.max(initial=0)))
    ref_of: dict[int, int] = {}
    for ln in lanes:
        sl = ea.of(ln.rep)
        ref_of[ln.rep] = (int(max(ea.created[sl].max(initial=0), ea.end[sl].max(initial=0)))
                          if clock == "rank" and sl.stop > sl.start else t_stop)
    # Provisional hang window (the newest few ops of every lane) sets how far never-completed
    # ops are drawn past the end of the record, so that one enqueued last stays visible.
    starts = []
    for ln in lanes:
        sl = ea.of(ln.rep)
        n = sl.stop - sl.start
        if n:
            k = min(8, n)
            starts.append((int(ea.created[sl.start + n - k]) - ref_of[ln.rep]) / 1e9)
    first_span = max(float(window_s) if window_s else -min(starts, default=-1.0), 1e-6)
    pad = 0.03 * first_span

    per_lane = min(LANE_BUDGET, max(40, bar_budget // n_lanes))
    keep_last = max(20, per_lane * 3 // 4)
    run_budget = max(4, per_lane - keep_last)
    merged_total = 0
    # Ops the culprit findings point at: outlined wherever they appear.
    focus: set[tuple[str, int, bool]] = set()
    for f in d.findings:
        if not f.culprit:
            continue
        for w in f.evidence.get("waited_in", []) or []:
            focus.add((str(w["group"]), int(w["seq"]), is_p2p_op(w.get("op"))))
        if f.group:
            focus.add((f.group, int(f.seq), False))

    traces: dict[str, dict[str, list[Any]]] = {
        k: {"base": [], "x": [], "y": [], "text": [], "lw": [], "lc": []}
        for k in ("history", "completed", "in flight", "mismatched")}
    e = analysis.tables.entries
    names_all = e["pg_name"].astype(str).to_numpy() if len(e) else np.array([], dtype=object)
    seq_all = e["seq"].to_numpy(np.int64)
    pseq_all = e["p2p_seq"].to_numpy(np.int64)
    p2p_all = e["is_p2p"].to_numpy(bool)
    drawn: list[tuple[_Lane, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    stack_ids: set[int] = set()
    sid_all = e["stack_id"].to_numpy(np.int64)
    x_min_all = 0.0
    for ln in lanes:
        sl = ea.of(ln.rep)
        n = sl.stop - sl.start
        if n <= 0:
            continue
        ref = ref_of[ln.rep]
        x0 = (ea.created[sl] - ref) / 1e9
        x1 = np.where(ea.end[sl] < 0, pad, (ea.end[sl] - ref) / 1e9)
        st0 = ea.state[sl]
        x1 = np.where(st0 != _ST_DONE, np.maximum(x1, x0 + pad), x1)  # keep pending ops visible
        x1 = np.maximum(x1, x0 + 0.3 * pad)  # and ops whose end is unknown (a rank's last, gloo)
        st = ea.state[sl]
        rows = ea.idx[sl]
        x_min_all = min(x_min_all, float(x0.min()))
        important = st != _ST_DONE
        if focus:
            fk = np.array([(names_all[r], int(pseq_all[r] if p2p_all[r] else seq_all[r]), bool(p2p_all[r])) in focus
                           for r in rows[max(0, n - 4 * per_lane):]], dtype=bool)
            important[max(0, n - 4 * per_lane):] |= fk
        single = important.copy()
        single[max(0, n - keep_last):] = True
        if single.sum() > per_lane:  # too many pending ops: keep the newest ones individually
            keep = np.flatnonzero(single)[-per_lane:]
            single[:] = False
            single[keep] = True
        merge_idx = np.flatnonzero(~single)
        if len(merge_idx):
            chunk = max(1, math.ceil(len(merge_idx) / run_budget))
            # runs of consecutive merged entries, cut every `chunk` entries
            breaks = np.flatnonzero(np.diff(merge_idx) != 1) + 1
            for run in np.split(merge_idx, breaks):
                for k in range(0, len(run), chunk):
                    part = run[k:k + chunk]
                    a, b = float(x0[part].min()), float(x1[part].max())
                    t = traces["history"]
                    t["base"].append(a)
                    t["x"].append(max(b - a, 0.0))
                    t["y"].append(ln.y)
                    t["text"].append(
                        f"<b>{esc('rank ' + str(ln.rep))}</b>: {len(part)} older op(s) merged<br>"
                        f"from {a:+.3f} s to {b:+.3f} s · "
                        f"{int((st[part] == _ST_DONE).sum())} completed")
                    t["lw"].append(0)
                    t["lc"].append("rgba(0,0,0,0)")
                    merged_total += len(part)
        pick = np.flatnonzero(single)
        with_stack = important[pick] | (pick >= n - STACK_HOVERS)
        drawn.append((ln, rows[pick], st[pick], x0[pick], x1[pick], ea.completed_known[sl][pick], with_stack))
        stack_ids.update(int(s) for s in sid_all[rows[pick][with_stack]])
    stacks = _stack_texts(analysis, stack_ids)
    for ln, rows, st, x0, x1, known, with_stack in drawn:
        texts = _entry_hover(analysis, rows, ln, st, x0, x1, known, stacks, with_stack)
        for i, r in enumerate(rows):
            key = (names_all[r], int(pseq_all[r] if p2p_all[r] else seq_all[r]), bool(p2p_all[r]))
            t = traces[_STATE_NAMES[int(st[i])]]
            t["base"].append(float(x0[i]))
            t["x"].append(max(float(x1[i] - x0[i]), 0.0))
            t["y"].append(ln.y)
            t["text"].append(texts[i])
            hot = key in focus and (ln.culprit or st[i] != _ST_DONE)
            t["lw"].append(2 if hot else 0.5)
            t["lc"].append(HIGHLIGHT if hot else "white")
    if merged_total:
        notes.append(f"{merged_total:,} older completed entries merged into grey history bars "
                     f"(bar budget {bar_budget:,}); pending, mismatched and culprit-related ops are "
                     "always drawn one by one")

    fig = go.Figure()
    legend_names = {"history": "completed (merged history)", "completed": "completed",
                    "in flight": "in flight (never completed)", "mismatched": "mismatched (desync)"}
    for name, t in traces.items():
        if not t["x"]:
            continue
        fig.add_trace(go.Bar(
            orientation="h", base=np.array(t["base"]), x=np.array(t["x"]), y=np.array(t["y"]),
            name=legend_names[name], marker={"color": COLORS[name], "line": {"width": t["lw"], "color": t["lc"]}},
            hovertext=t["text"], hoverinfo="text", width=0.72, cliponaxis=True,
        ))

    # Never joined: the ops peers wait in that the culprit never enqueued (or no dump).
    ghost_x: list[float] = []
    gx, gy, gtext = [], [], []
    bar_base, bar_x, bar_y, bar_text = [], [], [], []
    w = analysis.waits
    lane_of = {r: ln for ln in lanes for r in ln.ranks}
    for c in sorted(d.culprit_ranks):
        ln = lane_of.get(int(c))
        if ln is None or not len(w):
            continue
        mine = w[w["holder"] == c]
        if mine.empty:
            continue
        ref = ref_of.get(ln.rep, t_stop)
        items = []
        for (g, desc, s, op, kind), grp in mine.groupby(["pg_name", "pg_desc", "seq", "op", "kind"], sort=False):
            waiters = sorted(int(x) for x in grp["waiter"])
            p2p = is_p2p_op(op)
            col = pseq_all if p2p else seq_all
            m = (names_all == str(g)) & (col == int(s)) & (p2p_all == p2p) & np.isin(
                e["rank"].to_numpy(), waiters)
            if m.any():
                if clock == "rank":
                    rr = e["rank"].to_numpy()[m]
                    tt = e["time_created_ns"].to_numpy()[m]
                    xs = [(int(t) - ref_of.get(int(r), _rank_ref(ea, int(r)))) / 1e9 for r, t in zip(rr, tt)]
                    x = float(np.median(xs))
                else:
                    x = (int(e["time_created_ns"].to_numpy()[m].min()) - ref) / 1e9
            else:
                x = 0.0
            items.append((x, str(g), str(desc), int(s), str(op), str(kind), waiters))
        items.sort()
        for x, g, desc, s, op, kind, waiters in items[:16]:
            what = {
                "p2p": f"never posted the {'recv' if op == 'send' else 'send'} matching",
                "no_dump": "wrote no dump; peers wait in",
                "queued": "posted, but has queued behind an op it is blocked in,",
            }.get(kind, "never enqueued")
            gx.append(x)
            gy.append(ln.y)
            gtext.append(f"<b>never joined</b>: rank {int(c)} {esc(what)} {esc(op)} in "
                         f"{esc(_clip(_group_label(g, desc), 80))} {'p2p ' if is_p2p_op(op) else ''}seq {s}<br>"
                         f"awaited by ranks {esc(ranks_text(waiters))}<br>peers enqueued it at {x:+.6f} s")
            ghost_x.append(x)
        x_first = items[0][0]
        bar_base.append(x_first)
        bar_x.append(max(0.0 - x_first, 0.0) + pad)
        bar_y.append(ln.y)
        bar_text.append(f"<b>rank {int(c)}: never joined</b> {len(items)} op(s) its peers wait in; first: "
                        f"{esc(items[0][4])} in {esc(_clip(_group_label(items[0][1], items[0][2]), 80))} "
                        f"seq {items[0][3]}")
    if bar_x:
        fig.add_trace(go.Bar(
            orientation="h", base=bar_base, x=bar_x, y=bar_y, name="never joined (peers wait in it)",
            marker={"color": "rgba(214,39,40,0.18)", "line": {"width": 1.5, "color": CULPRIT},
                    "pattern": {"shape": "/", "fgcolor": CULPRIT, "size": 6}},
            hovertext=bar_text, hoverinfo="text", width=0.9, showlegend=True,
        ))
        # Underneath the recorded ops of the lane (a culprit may have recorded ops after it).
        fig.data = (fig.data[-1],) + tuple(fig.data[:-1])
        fig.add_trace(go.Scatter(
            x=gx, y=gy, mode="markers", name="awaited op (never enqueued)",
            marker={"symbol": "x-thin-open", "size": 12, "color": CULPRIT, "line": {"width": 2.5, "color": CULPRIT}},
            hovertext=gtext, hoverinfo="text", showlegend=False,
        ))

    # Lanes of ranks without a dump: a flat marker so they are visible even when empty.
    nd = [ln for ln in lanes if not ln.dumped]
    if nd:
        fig.add_trace(go.Scatter(
            x=[0.0] * len(nd), y=[ln.y for ln in nd], mode="markers", name="no dump",
            marker={"symbol": "square-x-open", "size": 12, "color": COLORS["no dump"]},
            hovertext=[f"rank{'s' if len(ln.ranks) > 1 else ''} {esc(ranks_text(ln.ranks))}: no dump" for ln in nd],
            hoverinfo="text",
        ))

    # Default view: the last moments before the hang.
    if window_s is not None and window_s > 0:
        x_lo = -float(window_s)
    else:
        cand = starts + ghost_x
        x_lo = min(cand) if cand else -1.0
    x_lo = max(x_lo, x_min_all) if x_min_all < 0 else x_lo
    span = max(-x_lo, 1e-6)
    win = [x_lo - 0.04 * span, max(0.06 * span, 1.5 * pad)]
    whole_span = max(-x_min_all, span)
    whole = [x_min_all - 0.04 * whole_span, max(0.06 * whole_span, 1.5 * pad)]

    shapes = [
        {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": ln.y - 0.5, "y1": ln.y + 0.5,
         "fillcolor": CULPRIT_BAND, "line": {"width": 0}, "layer": "below"}
        for ln in lanes if ln.culprit
    ]
    shapes.append({"type": "line", "xref": "x", "x0": 0, "x1": 0, "yref": "paper", "y0": 0, "y1": 1,
                   "line": {"color": "#999", "width": 1, "dash": "dot"}})
    if clock == "rank":
        notes.append("clock: each lane relative to its own rank's newest timestamp (removes host clock "
                     "offsets; hides which rank stopped first)")
    else:
        notes.append("clock: seconds before the newest timestamp of the dump set; clocks of different "
                     "hosts are not synchronized (use clock='rank' to align each rank on itself)")
    culprit_txt = ", ".join(str(r) for r in d.culprit_ranks)
    title = "Timeline" + (f": culprit rank{'s' if len(d.culprit_ranks) > 1 else ''} {culprit_txt}"
                          if culprit_txt else "")
    height = max(320, min(2400, 170 + 24 * n_lanes + 16 * len(notes)))
    layout = _base_layout(title, notes, height)
    layout["meta"]["hangscope"].update({"lanes": len(lanes), "window": win, "whole": whole,
                                        "merged_entries": merged_total})
    fig.update_layout(
        **layout,
        barmode="overlay",
        bargap=0.2,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        margin={"l": 10, "r": 10, "t": _top_margin(notes, 44), "b": 50},
        shapes=shapes,
        hovermode="closest",
        xaxis={"title": {"text": "seconds before the end of the record" if clock == "job"
                         else "seconds before the rank's newest entry"},
               "range": win, "zeroline": False, "showgrid": True, "gridcolor": "#eee"},
        yaxis={"tickmode": "array", "tickvals": [ln.y for ln in lanes], "ticktext": [ln.label() for ln in lanes],
               "range": [n_lanes - 0.5, -0.5], "showgrid": False, "automargin": True, "fixedrange": True},
        updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0.0, "xanchor": "left", "y": 1.0, "yanchor": "bottom",
            "pad": {"b": 4}, "showactive": True, "active": 0,
            "buttons": [
                {"label": f"Hang window ({span:.3g} s)", "method": "relayout", "args": [{"xaxis.range": win}]},
                {"label": f"Whole buffer ({whole_span:.3g} s)", "method": "relayout",
                 "args": [{"xaxis.range": whole}]},
            ],
        }],
    )
    return fig


def _rank_ref(ea: _Entries, rank: int) -> int:
    sl = ea.of(rank)
    if sl.stop <= sl.start:
        return 0
    return int(max(ea.created[sl].max(), ea.end[sl].max()))


# --------------------------------------------------------------------------- wait graph


def _distances(g: Any, targets: set[int]) -> dict[int, int]:
    dist = {t: 0 for t in targets}
    queue = deque(sorted(targets))
    while queue:
        n = queue.popleft()
        for p in g.predecessors(n):
            if p not in dist:
                dist[p] = dist[n] + 1
                queue.append(p)
    return dist


def wait_graph(analysis: Analysis, *, max_nodes: int = MAX_GRAPH_NODES, merge: bool | None = None) -> go.Figure:
    """The wait-for graph: culprits on the right, waiters further left by distance.

    An arrow ``A -> B`` means A is blocked in an op that B has not joined; hover the middle
    of an arrow for its group, sequence number, op and kind. Ranks that wait the same way
    (same distance, same kind of wait on the same holders) are merged into one node
    (``merge``; default: when more than 24 ranks are involved).
    """
    import plotly.graph_objects as go

    d = analysis.diagnosis
    g = analysis.graph
    culprits = set(int(r) for r in d.culprit_ranks)
    in_cycle = {int(r) for c in d.deadlock_cycles for r in c}
    involved = {int(n) for n in g.nodes if g.degree(n) > 0} | culprits
    sinks = {int(n) for n in involved if g.out_degree(n) == 0 and g.in_degree(n) > 0}
    targets = culprits | in_cycle | sinks
    dist = _distances(g, targets) if involved else {}
    far = max(dist.values(), default=0) + 1
    for n in involved:
        dist.setdefault(n, far)
    chain_edges = {(int(s["waiter"]), int(s["holder"])) for steps in d.chains.values() for s in steps}
    dumped = {int(n): bool(a.get("dumped", True)) for n, a in g.nodes(data=True)}
    notes: list[str] = []

    # Merge ranks that wait alike, from the targets outwards.
    cls: dict[int, tuple[Any, ...]] = {}
    if merge is None:
        merge = len(involved) > 24
    for n in sorted(involved, key=lambda r: (dist[r], r)):
        if n in targets:
            cls[n] = ("t", n)
            continue
        if not merge:
            cls[n] = ("w", dist[n], n)
            continue
        outs = []
        for _, h, a in g.out_edges(n, data=True):
            hc = cls.get(int(h), ("?", int(h))) if dist.get(int(h), far) < dist[n] else ("peer",)
            outs.append((hc, a.get("pg_desc") or a.get("pg_name"), a.get("op"), a.get("kind")))
        cls[n] = ("w", dist[n], dumped.get(n, True), tuple(sorted(set(outs), key=repr)))
    if len(set(cls.values())) > max_nodes:
        for n in involved:
            if n not in targets:
                cls[n] = ("w", dist[n], dumped.get(n, True))
        notes.append(f"more than {max_nodes} distinct waiters: waiting ranks merged by distance only")
    members: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for n, c in cls.items():
        members[c].append(n)
    node_keys = sorted(members, key=lambda c: (-dist[members[c][0]], min(members[c])))
    index = {c: i for i, c in enumerate(node_keys)}
    merged = sum(1 for c in node_keys if len(members[c]) > 1)
    if merged:
        notes.append(f"{len(involved)} ranks drawn as {len(node_keys)} nodes: ranks that wait alike share a node (×N)")
    uninvolved = analysis.tables.world_size - len(involved)
    if uninvolved > 0:
        notes.append(f"{uninvolved} rank(s) neither wait nor are waited on: not drawn")

    # Positions: column by distance (culprits at x=0, on the right), rows spread evenly.
    cols: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for c in node_keys:
        cols[dist[members[c][0]]].append(c)
    pos: dict[tuple[Any, ...], tuple[float, float]] = {}
    for k, cs in cols.items():
        cs.sort(key=lambda c: min(members[c]))
        m = len(cs)
        for i, c in enumerate(cs):
            pos[c] = (-float(k), (m - 1) / 2.0 - i)
    # Deadlock cycles: their members on a ring, so the arrows between them do not overlap.
    for cycle in d.deadlock_cycles:
        ring = [c for c in node_keys if set(members[c]) & set(int(r) for r in cycle)]
        if len(ring) < 2:
            continue
        cx = sum(pos[c][0] for c in ring) / len(ring)
        cy = sum(pos[c][1] for c in ring) / len(ring)
        ry = max(1.0, len(ring) / 3.0)
        for i, c in enumerate(sorted(ring, key=lambda c: min(members[c]))):
            ang = math.pi / 2 - 2 * math.pi * i / len(ring)
            pos[c] = (cx - 0.45 + 0.4 * math.cos(ang), cy + ry * math.sin(ang))
    xs_all = [x for x, _ in pos.values()] or [0.0]
    ys_all = [y for _, y in pos.values()] or [0.0]

    # Aggregate edges between nodes.
    agg: dict[tuple[int, int], dict[str, Any]] = {}
    for a, b, attrs in g.edges(data=True):
        ca, cb = cls.get(int(a)), cls.get(int(b))
        if ca is None or cb is None:
            continue
        ia, ib = index[ca], index[cb]
        if ia == ib:
            continue
        rec = agg.setdefault((ia, ib), {"n": 0, "labels": {}, "chain": False, "kinds": set()})
        rec["n"] += 1
        lab = (str(attrs.get("pg_name")), str(attrs.get("pg_desc")), int(attrs.get("seq", -1)),
               str(attrs.get("op")), str(attrs.get("kind")))
        rec["labels"][lab] = rec["labels"].get(lab, 0) + 1
        rec["kinds"].add(lab[4])
        rec["chain"] |= (int(a), int(b)) in chain_edges

    fig = go.Figure()
    ex: dict[str, list[float | None]] = {"plain": [], "chain": []}
    ey: dict[str, list[float | None]] = {"plain": [], "chain": []}
    mx, my, mtext = [], [], []
    annotations = []
    for (ia, ib), rec in agg.items():
        (x0, y0), (x1, y1) = pos[node_keys[ia]], pos[node_keys[ib]]
        which = "chain" if rec["chain"] else "plain"
        ex[which] += [x0, x1, None]
        ey[which] += [y0, y1, None]
        ra, rb = members[node_keys[ia]], members[node_keys[ib]]
        labels = sorted(rec["labels"].items(), key=lambda kv: -kv[1])
        lines = [f"{esc(_clip(_group_label(gn, gd), 70))} {'p2p ' if is_p2p_op(op) else ''}seq {s} · "
                 f"{esc(op)} [{esc(k)}]" + (f" ×{c}" if c > 1 else "")
                 for (gn, gd, s, op, k), c in labels[:6]]
        if len(labels) > 6:
            lines.append(f"… {len(labels) - 6} more")
        mx.append(x0 + 0.55 * (x1 - x0))
        my.append(y0 + 0.55 * (y1 - y0))
        mtext.append(f"<b>rank{'s' if len(ra) > 1 else ''} {esc(ranks_text(ra, 4))} wait on "
                     f"rank{'s' if len(rb) > 1 else ''} {esc(ranks_text(rb, 4))}</b>"
                     + (" (culprit chain)" if rec["chain"] else "") + "<br>" + "<br>".join(lines))
        if len(agg) <= 300:
            annotations.append({
                "x": x1, "y": y1, "ax": x0, "ay": y0, "xref": "x", "yref": "y", "axref": "x", "ayref": "y",
                "showarrow": True, "arrowhead": 3, "arrowsize": 1.2, "standoff": 14, "startstandoff": 8,
                "arrowwidth": 2.5 if rec["chain"] else 1.2,
                "arrowcolor": CULPRIT if rec["chain"] else "#7f8c9a", "text": "",
            })
    for which, color, width in (("plain", "#b8c2cc", 1), ("chain", CULPRIT, 2.5)):
        if ex[which]:
            fig.add_trace(go.Scatter(x=ex[which], y=ey[which], mode="lines", hoverinfo="skip",
                                     line={"color": color, "width": width},
                                     name="culprit chain" if which == "chain" else "waits on",
                                     showlegend=which == "chain"))
    if mx:
        fig.add_trace(go.Scatter(x=mx, y=my, mode="markers", hovertext=mtext, hoverinfo="text",
                                 marker={"size": 9, "color": "rgba(127,140,154,0.35)", "symbol": "circle"},
                                 name="wait (hover for group, seq, op)", showlegend=False))

    # Nodes, one trace per role so the legend explains the colours.
    roles = {"culprit": ([], CULPRIT, "diamond"), "deadlock cycle": ([], "#e67e22", "circle"),
             "no dump": ([], "#333333", "x"), "waiting": ([], "#3b73b9", "circle"),
             "waited on": ([], "#16a085", "square")}
    for c in node_keys:
        rs = members[c]
        if set(rs) & culprits:
            role = "culprit"
        elif not all(dumped.get(r, True) for r in rs):
            role = "no dump"
        elif set(rs) & in_cycle:
            role = "deadlock cycle"
        elif c[0] == "t":
            role = "waited on"
        else:
            role = "waiting"
        roles[role][0].append(c)
    for role, (cs, color, symbol) in roles.items():
        if not cs:
            continue
        xs = [pos[c][0] for c in cs]
        ys = [pos[c][1] for c in cs]
        sizes = [16 + 6 * math.log2(len(members[c])) for c in cs]
        labels = [members_label(members[c]).removeprefix("ranks ").removeprefix("rank ") for c in cs]
        hovers = []
        for c in cs:
            rs = members[c]
            r0 = rs[0]
            wait_on = sorted({int(h) for r in rs for h in g.successors(r)})
            waited = sorted({int(w) for r in rs for w in g.predecessors(r)})
            hovers.append(
                f"<b>rank{'s' if len(rs) > 1 else ''} {esc(ranks_text(rs))}</b> · {esc(role)}<br>"
                f"distance to culprit: {dist[r0]}<br>"
                f"waits on: {esc(ranks_text(wait_on, 6)) if wait_on else 'nobody'}<br>"
                f"waited on by: {esc(ranks_text(waited, 6)) if waited else 'nobody'}"
                + ("" if all(dumped.get(r, True) for r in rs) else "<br>wrote no dump"))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers+text", text=[esc(t) for t in labels],
            textposition="bottom center" if role != "culprit" else "middle right",
            textfont={"size": 11, "color": color if role == "culprit" else "#333"},
            marker={"size": sizes, "color": color, "symbol": symbol, "line": {"width": 1.5, "color": "white"}},
            hovertext=hovers, hoverinfo="text", name=role,
        ))
    if not involved:
        notes.append("nobody waits on anybody: the wait-for graph is empty")
    ncols = max(cols, default=0) + 1
    nrows = max((len(v) for v in cols.values()), default=1)
    layout = _base_layout("Wait-for graph: who waits on whom (arrows point at the rank waited on)",
                          notes, max(360, min(1600, 160 + 46 * nrows)))
    fig.update_layout(
        **layout,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        margin={"l": 30, "r": 30, "t": _top_margin(notes, 36), "b": 30},
        annotations=annotations,
        hovermode="closest",
        xaxis={"visible": True, "showgrid": False, "zeroline": False, "range": [min(xs_all) - 0.6, max(xs_all) + 0.8],
               "tickmode": "array", "tickvals": [-k for k in range(ncols)],
               "ticktext": ["culprit" if k == 0 else f"{k} hop{'s' if k > 1 else ''} away" for k in range(ncols)]},
        yaxis={"visible": False, "range": [min(ys_all) - 0.8, max(ys_all) + 0.5]},
    )
    return fig


# --------------------------------------------------------------------------- progress


def progress(analysis: Analysis) -> go.Figure:
    """Per group role and rank: how far behind its group's frontier each rank is.

    Top: enqueue lag (the newest sequence number any member enqueued minus this rank's);
    bottom: completion lag (the group's newest enqueued minus this rank's last completed).
    Cells of ranks that are not members are empty; crosses mark members whose progress is
    unknown (no dump, or nothing recorded about the group). Colour is log-scaled.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    p = analysis.matching.progress
    d = analysis.diagnosis
    world = int(analysis.tables.world_size)
    notes: list[str] = []
    sizes = dict(zip(analysis.tables.groups["pg_name"].astype(str), analysis.tables.groups["size"].astype(int)))
    p = p[p["pg_name"].astype(str).map(sizes).fillna(0) > 1] if len(p) else p
    if len(p):
        p = p.assign(role=[str(dd) if str(dd) else f"group {n}" for n, dd in zip(p["pg_name"], p["pg_desc"])])
        known = p[p["enqueued"] >= 0]
        frontier = known.groupby("pg_name")["enqueued"].max()
        p = p.assign(frontier=p["pg_name"].map(frontier).fillna(-1).astype(int))
        role_order = (p.groupby("role")["pg_name"].apply(lambda s: min(sizes.get(str(x), 0) for x in s) * -1)
                      .sort_values(kind="stable"))
        roles = list(role_order.index)
    else:
        roles = []
    ranks = list(range(world))
    ridx = {r: i for i, r in enumerate(roles)}
    shape = (len(roles), world)
    z_enq = np.full(shape, np.nan)
    z_cmp = np.full(shape, np.nan)
    c_enq = np.full(shape, np.nan)
    c_cmp = np.full(shape, np.nan)
    c_front = np.full(shape, np.nan)
    grp = np.full(shape, "", dtype=object)
    ux, uy, utext = [], [], []
    if len(roles):
        for row in p.itertuples(index=False):
            i, j = ridx[row.role], int(row.rank)
            if j >= world:
                continue
            if row.enqueued < 0 or row.frontier < 0:
                ux.append(j)
                uy.append(row.role)
                utext.append(f"rank {j} · {esc(_clip(_group_label(str(row.pg_name), str(row.pg_desc)), 70))}<br>"
                             f"progress unknown ({esc(row.source)})")
                continue
            lag = int(row.frontier) - int(row.enqueued)
            if np.isnan(z_enq[i, j]) or lag > z_enq[i, j]:
                z_enq[i, j] = lag
                c_enq[i, j] = row.enqueued
                c_cmp[i, j] = row.completed
                c_front[i, j] = row.frontier
                grp[i, j] = esc(_clip(_group_label(str(row.pg_name), str(row.pg_desc)), 70))
                z_cmp[i, j] = (int(row.frontier) - int(row.completed)) if row.completed >= 0 else np.nan
    max_lag = float(np.nanmax([np.nanmax(z_enq, initial=0), np.nanmax(z_cmp, initial=0)])) if len(roles) else 0.0
    ticks = [v for v in (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000) if v <= max(1.0, max_lag)]
    colorbar = {"title": {"text": "seqs behind"}, "tickvals": [math.log10(1 + v) for v in ticks],
                "ticktext": [str(v) for v in ticks], "len": 0.9}
    scale = [[0.0, "#f4f6f8"], [1e-9, "#fde0c5"], [0.35, "#f59e5b"], [0.7, "#e0452f"], [1.0, "#7b0d0d"]]
    zmax = max(math.log10(1 + max(1.0, max_lag)), 0.3)
    has_cmp = bool(len(roles)) and not np.isnan(z_cmp).all()
    n_rows = 2 if has_cmp else 1
    if not has_cmp:
        notes.append("no completion recorded for any group: only the enqueue lag is shown")
    fig = make_subplots(rows=n_rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=("enqueued: behind the group's newest enqueued seq",
                                        "completed: behind the group's newest enqueued seq")[:n_rows])
    custom = np.dstack([c_enq, c_cmp, c_front, grp]) if len(roles) else None
    tmpl = ("rank %{x} · %{customdata[3]}<br>enqueued %{customdata[0]} · completed %{customdata[1]}"
            "<br>group frontier %{customdata[2]}<extra></extra>")
    for k, z in enumerate((z_enq, z_cmp)[:n_rows]):
        fig.add_trace(go.Heatmap(
            z=np.log10(1 + z) if len(roles) else [[None]], x=ranks, y=roles or [""],
            customdata=custom, hovertemplate=tmpl, colorscale=scale, zmin=0, zmax=zmax,
            colorbar=colorbar, showscale=k == 0, xgap=1 if world <= 128 else 0, ygap=1,
        ), row=k + 1, col=1)
    if ux:
        for k in range(1, n_rows + 1):
            fig.add_trace(go.Scatter(x=ux, y=uy, mode="markers", hovertext=utext, hoverinfo="text",
                                     marker={"symbol": "x-thin-open", "size": 8, "color": "#333",
                                             "line": {"width": 1.5}},
                                     name="unknown / no dump", showlegend=k == 1), row=k, col=1)
    # At scale a cell is a pixel wide: ring the ranks furthest behind in each group role.
    if len(roles) and world > 64:
        lx, ly, ltext = [], [], []
        for i, role in enumerate(roles):
            row = z_enq[i]
            top = np.nanmax(row) if not np.isnan(row).all() else 0
            if top > 0:
                for j in np.flatnonzero(row == top)[:32]:
                    lx.append(int(j))
                    ly.append(role)
                    ltext.append(f"rank {int(j)}: {int(top)} behind in {esc(role)}")
        if lx:
            fig.add_trace(go.Scatter(x=lx, y=ly, mode="markers", hovertext=ltext, hoverinfo="text",
                                     marker={"symbol": "circle-open", "size": 14, "color": CULPRIT,
                                             "line": {"width": 2}},
                                     name="furthest behind"), row=1, col=1)
    for c in d.culprit_ranks:
        if int(c) < world:
            fig.add_vline(x=int(c), line={"color": CULPRIT, "width": 1.5, "dash": "dot"})
    if d.culprit_ranks:
        notes.append(f"dotted red: culprit rank{'s' if len(d.culprit_ranks) > 1 else ''} "
                     f"{esc(ranks_text(d.culprit_ranks))}")
    if analysis.matching.gloo_like:
        notes.append("gloo does not report completion: completion lag comes from pg_status counters only "
                     "(gloo retires an op that timed out as well)")
    layout = _base_layout("Progress per group: the lagging rank stands out", notes,
                          max(300, min(1400, 200 + n_rows * (60 + 26 * max(1, len(roles))))))
    fig.update_layout(**layout, margin={"l": 10, "r": 10, "t": _top_margin(notes, 30), "b": 40})
    fig.update_yaxes(automargin=True, autorange="reversed")
    fig.update_xaxes(title_text="rank", row=n_rows, col=1)
    fig.update_xaxes(showgrid=False, range=[-0.5, world - 0.5], zeroline=False)
    if world <= 64:
        fig.update_xaxes(tickmode="linear", tick0=0, dtick=1 if world <= 32 else 2)
    return fig


__all__ = ["timeline", "wait_graph", "progress", "COLORS", "ranks_text", "esc"]
