"""What every summary says of each culprit, read from the diagnosis (never recomputed): its
confidence, the op it last recorded and that op's stack, the stack of the op the others
await (and who issued it), and each wait chain as one arrow line (``rank 0 → 2 → 3``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.terms import group_short, seq_word

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.diagnosis import Diagnosis, Finding
    from analyzer.waits import Wait

__all__ = [
    "CulpritView",
    "chain_arrow",
    "chain_hops",
    "culprit_views",
    "op_words",
    "short_stack",
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
