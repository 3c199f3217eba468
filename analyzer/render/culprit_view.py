"""What every summary says of each culprit, read from the diagnosis (never recomputed): its
confidence, the op it last recorded and that op's stack, the stack of the op the others
await (and who issued it), and each wait chain as one arrow line (``rank 0 → 2 → 3``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.kinds import FindingKind
from analyzer.terms import group_short, is_p2p_op, plural, rank_runs, seq_word

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.analysis import Analysis
    from analyzer.diagnosis import Diagnosis, Finding
    from analyzer.normalize import Tables
    from analyzer.waits import Wait

__all__ = [
    "CulpritView",
    "CycleSide",
    "StackBlock",
    "chain_arrow",
    "chain_hops",
    "culprit_views",
    "cycle_sides",
    "issued_stack",
    "op_words",
    "short_stack",
    "stack_blocks",
    "stack_lines",
]

#: Frames a short stack keeps (the caller's side, torch.distributed's own frames dropped).
SHORT_FRAMES = 5


def short_stack(frames: Sequence[dict[str, Any]], keep: int = SHORT_FRAMES) -> list[str]:
    """``file:line in name`` for the first ``keep`` frames, starting at the caller (the frames
    of torch.distributed at the top are skipped); the rest counted."""
    fs = list(frames)
    while len(fs) > 1 and "/torch/distributed/" in str(fs[0].get("filename", "")):
        fs.pop(0)
    out = [f"{f.get('filename', '?')}:{f.get('line', '?')} in {f.get('name', '?')}" for f in fs]
    if len(out) > keep:
        return [
            *out[:keep],
            f"... {len(out) - keep} outer frame{'s' if len(out) - keep > 1 else ''}",
        ]
    return out


def op_words(op: dict[str, Any] | None) -> str:
    """``all_reduce DATA_PARALLEL_GROUP seq 2`` for an entry record of the evidence."""
    if not op:
        return ""
    name = str(op.get("op") or op.get("profiling_name") or "an op")
    group = group_short(str(op.get("group", "")), str(op.get("group_desc", "")))
    p2p = seq_word(name) != "seq"
    number = op.get("p2p_seq") if p2p else op.get("seq")
    return f"{name} {group} {seq_word(name)} {number}"


@dataclass(frozen=True, slots=True)
class CulpritView:
    rank: int
    confidence: str
    """``certain``, ``likely`` or ``suspect`` (empty when the diagnosis does not say)."""
    because: str
    finding: Finding | None
    last_op: str
    """The culprit's own last recorded op (``all_reduce DATA_PARALLEL_GROUP seq 2``)."""
    last_stack: tuple[dict[str, Any], ...]
    awaited_op: str
    """The op the others are blocked in, which the culprit has not joined."""
    awaited_by: tuple[int, ...]
    awaited_stack: tuple[dict[str, Any], ...]
    """Where the awaited op was issued, by the ranks of :attr:`awaited_by`."""
    own_stack: bool
    """The finding's stack is the culprit's own op (a desync), not the awaited one."""


def culprit_views(d: Diagnosis) -> list[CulpritView]:
    """One view per culprit (or suspect of an inconclusive verdict), in the diagnosis's order."""
    sure = {int(c.rank): c for c in d.culprits}
    out = []
    for rank in sure or d.culprit_ranks:  # an inconclusive verdict's suspects too
        f = next((x for x in d.findings if x.culprit and rank in x.ranks), None)
        ev = f.evidence if f is not None else {}
        last = ev.get("last_recorded_op") if f is not None else None
        waited = ev.get("waited_op") if f is not None else None
        awaited_by: tuple[int, ...] = ()
        if f is not None and ev.get("waited_in") and isinstance(waited, dict):
            same = [
                x
                for x in ev["waited_in"]
                if (str(x.get("group")), x.get("seq"))
                == (str(waited.get("group")), waited.get("seq"))
            ] or list(ev["waited_in"])[:1]
            awaited_by = tuple(sorted({int(w) for x in same for w in x["waiters"]}))
        own = f is not None and waited is None and bool(f.stack)
        c = sure.get(int(rank))
        conf, because = (str(c.confidence), c.because) if c is not None else ("", "")
        last_is_own = isinstance(last, dict) and int(last.get("rank", rank)) == rank
        out.append(
            CulpritView(
                rank=int(rank),
                confidence=conf,
                because=because,
                finding=f,
                last_op=op_words(last) if last_is_own else "",
                last_stack=tuple(ev.get("last_recorded_stack") or ()) if f is not None else (),
                awaited_op=op_words(waited) if isinstance(waited, dict) else "",
                awaited_by=awaited_by,
                awaited_stack=tuple(f.stack) if f is not None and not own else (),
                own_stack=own,
            )
        )
    return out


def chain_hops(steps: Sequence[Wait], total: int = 0) -> list[int | str]:
    """The ranks of a chain in order, the waits left out as a ``… (N more) …`` marker."""
    if not steps:
        return []
    hops: list[int | str] = [int(steps[0].waiter)]
    for before, s in zip((None, *steps), steps):
        if before is not None and before.holder != s.waiter:
            left = total - len(steps)
            hops.append(f"… {left} more …" if left > 0 else "…")
            hops.append(int(s.waiter))
        hops.append(int(s.holder))
    return hops


def chain_arrow(steps: Sequence[Wait], total: int = 0) -> str:
    """``rank 0 → 2 → 3`` (``rank 120 → 56 → … 3 more … → 0 → 1`` where waits were left out)."""
    hops = chain_hops(steps, total)
    return "rank " + " → ".join(str(h) for h in hops) if hops else ""


def issued_stack(
    tables: Tables, ranks: Sequence[int], group: str, seq: int, op: str
) -> tuple[dict[str, Any], ...]:
    """The stack with which the first of ``ranks`` that recorded one issued ``op`` of
    ``group`` at ``seq`` (the p2p sequence number for a send/recv); none when not recorded."""
    e = tables.entries
    col = "p2p_seq" if is_p2p_op(op) else "seq"
    rows = e[(e["pg_name"] == group) & (e[col] == seq) & e["rank"].isin(list(ranks))]
    rows = rows[rows["stack_id"] >= 0]
    if rows.empty:
        return ()
    st = tables.stacks
    frames = st[st["stack_id"] == int(rows["stack_id"].iloc[0])].sort_values("depth")
    return tuple(
        {"name": str(n), "filename": str(f), "line": int(ln)}
        for n, f, ln in frames[["name", "filename", "line"]].itertuples(index=False)
    )


@dataclass(frozen=True, slots=True)
class CycleSide:
    """One side of a deadlock: ``waiters`` are blocked in ``op`` of a group at ``seq``, which
    ``holders`` have not joined."""

    waiters: tuple[int, ...]
    holders: tuple[int, ...]
    group: str
    group_desc: str
    seq: int
    op: str

    def words(self) -> str:
        return (
            f"{self.op} {group_short(self.group, self.group_desc)} {seq_word(self.op)} {self.seq}"
        )


def cycle_sides(d: Diagnosis) -> list[CycleSide]:
    """The sides of each deadlock finding: its waits grouped by the op they are blocked in."""
    sides: dict[tuple[str, str, int, str], tuple[set[int], set[int]]] = {}
    for f in d.findings:
        if f.kind != FindingKind.DEADLOCK or not f.culprit:
            continue
        for e in f.evidence.get("edges") or ():
            key = (str(e["pg_name"]), str(e["pg_desc"]), int(e["seq"]), str(e["op"]))
            w, h = sides.setdefault(key, (set(), set()))
            w.add(int(e["waiter"]))
            h.add(int(e["holder"]))
    return [CycleSide(tuple(sorted(w)), tuple(sorted(h)), *key) for key, (w, h) in sides.items()]


def _frames_key(frames: Sequence[dict[str, Any]]) -> tuple[tuple[str, object, str], ...]:
    return tuple((str(f.get("filename")), f.get("line"), str(f.get("name"))) for f in frames)


def _frames_of(key: object) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"filename": fn, "line": ln, "name": name}
        for fn, ln, name in key  # type: ignore[attr-defined]
    )


@dataclass(frozen=True, slots=True)
class StackBlock:
    """A labelled stack: ``head`` says whose it is (``rank 3 last issued ...``), ``frames``
    innermost first; ``short``: the fewer frames to show (another stack of the culprit
    follows)."""

    head: str
    frames: tuple[dict[str, Any], ...]
    short: bool = False


def stack_blocks(analysis: Analysis, *, most: int = 3) -> tuple[list[StackBlock], int]:
    """Whose stack is it, for the text, the ticket summary and the report: for a deadlock,
    each side and the op it is blocked in; else, per culprit, the awaited op with the ranks
    that issued it and the culprit's own last issued op (or the op it issued that the
    finding is about). Culprits whose ops and stacks are the same are one block. Returns the
    blocks of the first ``most`` culprits (or folds) and how many more there are."""
    d = analysis.diagnosis
    sides = cycle_sides(d)
    if sides:
        return [
            StackBlock(
                f"{plural(s.waiters)} {rank_runs(s.waiters)} blocked in {s.words()} (waiting on "
                f"{plural(s.holders)} {rank_runs(s.holders)}), issued",
                issued_stack(analysis.tables, s.waiters, s.group, s.seq, s.op),
            )
            for s in sides
        ], 0
    said: dict[tuple[object, ...], list[int]] = {}
    for v in culprit_views(d):
        f = v.finding
        key: tuple[object, ...]
        if v.own_stack and f is not None:
            op = f"{f.op} {group_short(f.group, f.group_desc)} {seq_word(f.op)} {f.seq}"
            key = ("own", op, _frames_key(f.stack))
        else:
            key = (
                "waited",
                v.awaited_op if v.awaited_stack else "",
                v.awaited_by,
                _frames_key(v.awaited_stack),
                v.last_op if v.last_stack else "",
                _frames_key(v.last_stack),
            )
        said.setdefault(key, []).append(v.rank)
    out: list[StackBlock] = []
    for key, ranks in list(said.items())[:most]:
        who = f"{plural(ranks)} {rank_runs(ranks)}"
        if key[0] == "own":
            out.append(StackBlock(f"{who} issued {key[1]}", _frames_of(key[2])))
            continue
        _, awaited, by, awaited_stack, last, last_stack = key
        if awaited_stack:
            by_ranks: tuple[int, ...] = tuple(by)  # type: ignore[arg-type]
            out.append(
                StackBlock(
                    f"awaited op ({awaited}), as issued by {plural(by_ranks)} {rank_runs(by_ranks)}",
                    _frames_of(awaited_stack),
                    short=bool(last_stack),  # the culprit's own stack follows
                )
            )
        if last_stack:  # without a stack, the headline already names the op
            out.append(StackBlock(f"{who} last issued {last}", _frames_of(last_stack)))
    return out, max(0, len(said) - most)


def stack_lines(analysis: Analysis, *, frames: int = 8) -> list[str]:
    """:func:`stack_blocks` as indented text lines."""
    blocks, more = stack_blocks(analysis)
    out: list[str] = []
    for b in blocks:
        out.append(f"  {b.head}" + (" at:" if b.frames else " (no stack recorded)"))
        out.extend(f"    {x}" for x in short_stack(b.frames, 4 if b.short else frames))
    if more:
        out.append(f"  ... the stacks of {more} more culprit(s): --format json")
    return out
