"""The lanes the timeline draws (ranks, or sets of ranks that behave alike), with the hover
texts of their bars, and what every part of the figure shares (:class:`Frame`); the entry
columns they are drawn from: :mod:`~analyzer.render.timeline_entries`."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from analyzer.render.figure_style import (
    CULPRIT,
    ST_FLIGHT,
    STATE_NAMES,
    clip,
    members_label,
    pipeline_stage,
)
from analyzer.render.sentences import for_plot
from analyzer.render.timeline_entries import Entries
from analyzer.terms import group_label, is_p2p_op

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis

__all__ = ["Frame", "Key", "Lane", "entry_hover", "focus_of", "frame_of", "lanes_of"]


@dataclass
class Lane:
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
        txt = f"{st}{who}" + (
            "" if self.dumped else " (no dump, alive)" if self.host else " (no dump)"
        )
        if self.culprit:
            return f"<b style='color:{CULPRIT}'>★ {txt}</b>"
        return txt


def lanes_of(
    analysis: Analysis, ea: Entries, max_lanes: int, collapse: bool | None
) -> tuple[list[Lane], list[str]]:
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
        sig: tuple[Any, ...] = (
            ("dump", stage.get(r), hash(ea.key[sl].tobytes()))
            if dumped[r]
            else ("none", stage.get(r))
        )
        sig += (hosts.get(r, ""),)
        classes[sig].append(r)
    direct = {int(w) for c in culprits if c in g for w in g.predecessors(c)}
    on_chain = {int(s["waiter"]) for steps in d.chains.values() for s in steps}
    lanes: list[Lane] = []
    for ranks in classes.values():
        rep = next((r for r in ranks if r in culprits), ranks[0])
        lane = Lane(
            ranks=ranks,
            rep=rep,
            culprit=rep in culprits,
            dumped=dumped[rep],
            stage=stage.get(rep),
            host=hosts.get(rep, ""),
        )
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
        notes.append(
            f"{n_ranks} ranks in {len(lanes)} lanes: ranks with the same sequence of "
            "(group, seq, op, state) share a lane (×N); times are those of its first rank"
        )
    if len(lanes) > max_lanes:
        keep = sorted(lanes, key=lambda ln: (ln.priority, -len(ln.ranks), ln.rep))[:max_lanes]
        dropped = [ln for ln in lanes if ln not in keep]
        notes.append(
            f"{len(dropped)} lanes ({sum(len(ln.ranks) for ln in dropped)} ranks) not drawn "
            f"(cap {max_lanes}; culprits and the ranks waiting on them kept first)"
        )
        lanes = keep
    lanes.sort(key=lambda ln: (ln.host, ln.stage if ln.stage is not None else -1, ln.rep))
    for i, ln in enumerate(lanes):
        ln.y = i
    return lanes, notes


def entry_hover(
    analysis: Analysis,
    rows: np.ndarray,
    lane: Lane,
    state: np.ndarray,
    x0: np.ndarray,
    x1: np.ndarray,
    known: np.ndarray,
    stacks: dict[int, str],
    with_stack: np.ndarray,
) -> list[str]:
    e = analysis.tables.entries
    sub = e.iloc[rows]
    cols = {
        c: sub[c].astype(str).tolist()
        for c in (
            "pg_name",
            "pg_desc",
            "op",
            "state",
            "input_sizes",
            "output_sizes",
            "input_dtypes",
            "output_dtypes",
            "profiling_name",
        )
    }
    seq = sub["seq"].to_numpy()
    pseq = sub["p2p_seq"].to_numpy()
    p2p = sub["is_p2p"].to_numpy()
    peer = sub["peer"].to_numpy()
    sid = sub["stack_id"].to_numpy()
    dur = sub["duration_ms"].to_numpy()
    who = (
        f"rank {lane.rep}"
        if len(lane.ranks) == 1
        else f"rank {lane.rep} (and {len(lane.ranks) - 1} alike)"
    )
    out = []
    for i in range(len(rows)):
        s = int(state[i])
        seq_txt = (
            f"p2p seq {int(pseq[i])} (seq {int(seq[i])}) · peer {int(peer[i])}"
            if p2p[i]
            else f"seq {int(seq[i])}"
        )
        took = (
            f"took {(x1[i] - x0[i]) * 1e3:.3f} ms"
            if known[i]
            else "not completed (drawn to the end of the record)"
            if s == ST_FLIGHT
            else "completion time not recorded"
        )
        gpu = f" · GPU {dur[i]:.3f} ms" if not math.isnan(dur[i]) else ""
        parts = [
            f"<b>{for_plot(who)}</b> · {for_plot(clip(group_label(cols['pg_name'][i], cols['pg_desc'][i]), 80))}",
            f"{seq_txt} · <b>{for_plot(clip(cols['op'][i], 60))}</b> · {for_plot(STATE_NAMES[s])} ({for_plot(cols['state'][i])})",
            f"sizes {for_plot(clip(cols['input_sizes'][i], 60))} → {for_plot(clip(cols['output_sizes'][i], 60))}",
            f"dtypes {for_plot(clip(cols['input_dtypes'][i], 50))} → {for_plot(clip(cols['output_dtypes'][i], 50))}",
            f"enqueued {x0[i]:+.6f} s · {took}{gpu}",
        ]
        st = stacks.get(int(sid[i])) if with_stack[i] else None
        if st:
            parts.append("stack:<br>" + st)
        out.append("<br>".join(parts))
    return out


Key = tuple[str, int, bool]


@dataclass
class Frame:
    """What every part of the figure shares: lanes, clocks, entry columns, the padding."""

    analysis: Analysis
    ea: Entries
    lanes: list[Lane]
    clock: str
    t_stop: int
    ref_of: dict[int, int]
    starts: list[float]
    pad: float
    names: np.ndarray = field(init=False)
    seq: np.ndarray = field(init=False)
    pseq: np.ndarray = field(init=False)
    p2p: np.ndarray = field(init=False)
    sid: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        e = self.analysis.tables.entries
        self.names = e["pg_name"].astype(str).to_numpy() if len(e) else np.array([], dtype=object)
        self.seq = e["seq"].to_numpy(np.int64)
        self.pseq = e["p2p_seq"].to_numpy(np.int64)
        self.p2p = e["is_p2p"].to_numpy(bool)
        self.sid = e["stack_id"].to_numpy(np.int64)

    def key(self, r: int) -> Key:
        return (self.names[r], int(self.pseq[r] if self.p2p[r] else self.seq[r]), bool(self.p2p[r]))


def frame_of(
    analysis: Analysis, ea: Entries, lanes: list[Lane], clock: str, window_s: float | None
) -> Frame:
    t_stop = int(max(ea.created.max(initial=0), ea.end.max(initial=0)))
    ref_of: dict[int, int] = {}
    for ln in lanes:
        sl = ea.of(ln.rep)
        ref_of[ln.rep] = (
            int(max(ea.created[sl].max(initial=0), ea.end[sl].max(initial=0)))
            if clock == "rank" and sl.stop > sl.start
            else t_stop
        )
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
    return Frame(
        analysis=analysis,
        ea=ea,
        lanes=lanes,
        clock=clock,
        t_stop=t_stop,
        ref_of=ref_of,
        starts=starts,
        pad=0.03 * first_span,
    )


def focus_of(analysis: Analysis) -> set[Key]:
    """Ops the culprit findings point at: outlined wherever they appear."""
    focus: set[Key] = set()
    for f in analysis.diagnosis.findings:
        if not f.culprit:
            continue
        for w in f.evidence.get("waited_in", []) or []:
            focus.add((str(w["group"]), int(w["seq"]), is_p2p_op(w.get("op"))))
        if f.group:
            focus.add((f.group, int(f.seq), is_p2p_op(f.op)))
        if "recv_seq" in f.evidence:  # a send/recv desync: the receiver's side too
            focus.add((f.group, int(f.evidence["recv_seq"]), True))
    return focus
