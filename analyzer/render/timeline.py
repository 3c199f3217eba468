"""The timeline figure: one lane per rank, a bar per recorded op."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from analyzer.render.figstyle import (
    ST_DONE,
    ST_FLIGHT,
    ST_MISMATCH,
    STATE_NAMES,
    BAR_BUDGET,
    COLORS,
    CULPRIT,
    CULPRIT_BAND,
    HIGHLIGHT,
    LANE_BUDGET,
    STACK_HOVERS,
    base_layout,
    clip,
    group_label,
    pipeline_stage,
    stack_texts,
    top_margin,
    esc,
    is_p2p_op,
    members_label,
    ranks_text,
)

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from analyzer.analysis import Analysis


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
    gloo = analysis.matching.dialects.completion_unobserved
    rank = e["rank"].to_numpy(np.int64)
    created = e["time_created_ns"].to_numpy(np.int64)
    comp = e["time_completed_ns"].to_numpy(np.int64)
    state_s = e["state"].astype(str).to_numpy() if len(e) else np.array([], dtype=object)
    done = e["retired"].to_numpy(bool) if gloo else (state_s == "completed")
    if gloo:
        done = done | (state_s == "completed")
    state = np.where(done, ST_DONE, ST_FLIGHT).astype(np.int8)
    mm = analysis.matching.mismatches
    if len(mm) and len(e):
        bad = set(zip(mm["pg_name"].astype(str), mm["seq"].astype(int), mm["rank"].astype(int)))
        names = e["pg_name"].astype(str).to_numpy()
        seqs = e["seq"].to_numpy(np.int64)
        p2p = e["is_p2p"].to_numpy(bool)
        cand = np.flatnonzero(~p2p & np.isin(rank, [r for _, _, r in bad]))
        for i in cand:
            if (names[i], int(seqs[i]), int(rank[i])) in bad:
                state[i] = ST_MISMATCH
    # Ops the wait analysis says a rank is blocked in are in flight, even where the recorder
    # retired them (gloo retires an op that timed out).
    w = analysis.waits
    if len(w) and len(e):
        blocked = {(int(r), str(g), int(q), is_p2p_op(o)) for r, g, q, o in
                   w[["waiter", "pg_name", "seq", "op"]].itertuples(index=False)}
        names = e["pg_name"].astype(str).to_numpy()
        p2p = e["is_p2p"].to_numpy(bool)
        seqs = np.where(p2p, e["p2p_seq"].to_numpy(np.int64), e["seq"].to_numpy(np.int64))
        cand = np.flatnonzero(np.isin(rank, list({b[0] for b in blocked})) & (state == ST_DONE))
        cand = cand[np.isin(seqs[cand], list({b[2] for b in blocked}))]
        for i in cand:
            if (int(rank[i]), names[i], int(seqs[i]), bool(p2p[i])) in blocked:
                state[i] = ST_FLIGHT
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
    end = np.where(known, comp, np.where(state == ST_FLIGHT, -1, np.maximum(nxt, created)))
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
    host: str = ""  # from the captured context files: lanes are grouped by host

    def label(self) -> str:
        st = f"PP{self.stage} · " if self.stage is not None else ""
        st = (f"{html.escape(self.host)} · " if self.host else "") + st
        who = members_label(self.ranks)
        txt = f"{st}{who}" + ("" if self.dumped else " (no dump, alive)" if self.host else " (no dump)")
        if self.culprit:
            return f"<b style='color:{CULPRIT}'>★ {txt}</b>"
        return txt


def _lanes(analysis: Analysis, ea: _Entries, max_lanes: int,
           collapse: bool | None) -> tuple[list[_Lane], list[str]]:
    d = analysis.diagnosis
    culprits = set(int(r) for r in d.culprit_ranks)
    g = analysis.graph
    stage = pipeline_stage(analysis)
    ranks_df = analysis.tables.ranks
    dumped = dict(zip(ranks_df["rank"].astype(int), ranks_df["dumped"].astype(bool)))
    hosts = analysis.contexts.hosts()
    classes: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    if collapse is None:
        collapse = len(dumped) > min(max_lanes, 32)
    for r in sorted(dumped):
        if r in culprits or not collapse:
            classes[("culprit", r)].append(r)
            continue
        sl = ea.of(r)
        sig = ("dump", stage.get(r), hash(ea.key[sl].tobytes())) if dumped[r] else ("none", stage.get(r))
        sig += (hosts.get(r, ""),)
        classes[sig].append(r)
    direct = {int(w) for c in culprits if c in g for w in g.predecessors(c)}
    on_chain = {int(s["waiter"]) for steps in d.chains.values() for s in steps}
    lanes: list[_Lane] = []
    for ranks in classes.values():
        rep = next((r for r in ranks if r in culprits), ranks[0])
        lane = _Lane(ranks=ranks, rep=rep, culprit=rep in culprits, dumped=dumped[rep],
                     stage=stage.get(rep), host=hosts.get(rep, ""))
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
    lanes.sort(key=lambda ln: (ln.host, ln.stage if ln.stage is not None else -1, ln.rep))
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
                "not completed (drawn to the end of the record)" if s == ST_FLIGHT else
                "completion time not recorded")
        gpu = f" · GPU {dur[i]:.3f} ms" if not math.isnan(dur[i]) else ""
        parts = [
            f"<b>{esc(who)}</b> · {esc(clip(group_label(cols['pg_name'][i], cols['pg_desc'][i]), 80))}",
            f"{seq_txt} · <b>{esc(clip(cols['op'][i], 60))}</b> · {esc(STATE_NAMES[s])} ({esc(cols['state'][i])})",
            f"sizes {esc(clip(cols['input_sizes'][i], 60))} → {esc(clip(cols['output_sizes'][i], 60))}",
            f"dtypes {esc(clip(cols['input_dtypes'][i], 50))} → {esc(clip(cols['output_dtypes'][i], 50))}",
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
            focus.add((f.group, int(f.seq), is_p2p_op(f.op)))
        if "recv_seq" in f.evidence:  # a send/recv desync: the receiver's side too
            focus.add((f.group, int(f.evidence["recv_seq"]), True))

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
        x1 = np.where(st0 != ST_DONE, np.maximum(x1, x0 + pad), x1)  # keep pending ops visible
        x1 = np.maximum(x1, x0 + 0.3 * pad)  # and ops whose end is unknown (a rank's last, gloo)
        st = ea.state[sl]
        rows = ea.idx[sl]
        x_min_all = min(x_min_all, float(x0.min()))
        important = st != ST_DONE
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
                        f"{int((st[part] == ST_DONE).sum())} completed")
                    t["lw"].append(0)
                    t["lc"].append("rgba(0,0,0,0)")
                    merged_total += len(part)
        pick = np.flatnonzero(single)
        with_stack = important[pick] | (pick >= n - STACK_HOVERS)
        drawn.append((ln, rows[pick], st[pick], x0[pick], x1[pick], ea.completed_known[sl][pick], with_stack))
        stack_ids.update(int(s) for s in sid_all[rows[pick][with_stack]])
    stacks = stack_texts(analysis, stack_ids)
    for ln, rows, st, x0, x1, known, with_stack in drawn:
        texts = _entry_hover(analysis, rows, ln, st, x0, x1, known, stacks, with_stack)
        for i, r in enumerate(rows):
            key = (names_all[r], int(pseq_all[r] if p2p_all[r] else seq_all[r]), bool(p2p_all[r]))
            t = traces[STATE_NAMES[int(st[i])]]
            t["base"].append(float(x0[i]))
            t["x"].append(max(float(x1[i] - x0[i]), 0.0))
            t["y"].append(ln.y)
            t["text"].append(texts[i])
            hot = key in focus and (ln.culprit or st[i] != ST_DONE)
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
                         f"{esc(clip(group_label(g, desc), 80))} {'p2p ' if is_p2p_op(op) else ''}seq {s}<br>"
                         f"awaited by ranks {esc(ranks_text(waiters))}<br>peers enqueued it at {x:+.6f} s")
            ghost_x.append(x)
        x_first = items[0][0]
        bar_base.append(x_first)
        bar_x.append(max(0.0 - x_first, 0.0) + pad)
        bar_y.append(ln.y)
        bar_text.append(f"<b>rank {int(c)}: never joined</b> {len(items)} op(s) its peers wait in; first: "
                        f"{esc(items[0][4])} in {esc(clip(group_label(items[0][1], items[0][2]), 80))} "
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
    layout = base_layout(title, notes, height)
    layout["meta"]["hangscope"].update({"lanes": len(lanes), "window": win, "whole": whole,
                                        "merged_entries": merged_total})
    fig.update_layout(
        **layout,
        barmode="overlay",
        bargap=0.2,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        margin={"l": 10, "r": 10, "t": top_margin(notes, 44), "b": 50},
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
