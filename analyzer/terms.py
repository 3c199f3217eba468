"""The words every output uses for the same things: groups, ranks, sequence numbers.

The diagnosis writes its sentences with these; the renderers (text, HTML, figures, the
notebook) use them through :mod:`analyzer.render.sentences`, which adds the verdict line,
the kind titles and the chain sentences. One definition each, so the outputs cannot drift
apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized

__all__ = [
    "UNNAMED_GROUP",
    "group_label",
    "group_short",
    "is_p2p_op",
    "plural",
    "rank_list",
    "rank_runs",
    "rank_span",
    "run_texts",
    "seq_word",
]

#: How a group whose dump gives it no name (and no desc) is called.
UNNAMED_GROUP = "an unnamed group"


def plural(n: int | Sized, word: str = "rank") -> str:
    """``rank`` or ``ranks`` for ``n`` (a count or a collection)."""
    count = n if isinstance(n, int) else len(n)
    return word if count == 1 else f"{word}s"


def group_label(name: str, desc: str) -> str:
    """``TENSOR_PARALLEL (group 3)``, ``group 3``, or, with neither, :data:`UNNAMED_GROUP`."""
    if desc and desc != name:
        return f"{desc} (group {name})" if name else desc
    return f"group {name}" if name else UNNAMED_GROUP


def group_short(name: str, desc: str) -> str:
    """The group's desc, else its name (chain steps, stack headings)."""
    return desc or name or UNNAMED_GROUP


def is_p2p_op(op: object) -> bool:
    """Waits on send/recv carry the p2p sequence number (whatever their wait kind)."""
    return str(op) in ("send", "recv")


def seq_word(op: object) -> str:
    """``p2p seq`` for a send/recv, ``seq`` for a collective."""
    return "p2p seq" if is_p2p_op(op) else "seq"


def rank_list(ranks: Iterable[int]) -> str:
    """``0, 1, 2``; past 8 ranks the first 6 and the count: ``0, 1, ... (12 ranks)``."""
    rs = list(ranks)
    if len(rs) <= 8:
        return ", ".join(str(r) for r in rs)
    return ", ".join(str(r) for r in rs[:6]) + f", ... ({len(rs)} ranks)"


def run_texts(ranks: Iterable[int]) -> list[tuple[int, str]]:
    """Each run of consecutive ranks with its first rank: ``(0, "0-3")``, ``(8, "8, 9")``,
    ``(12, "12")`` (a run of three or more as a range)."""
    rs = sorted(set(int(r) for r in ranks))
    runs: list[tuple[int, str]] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(
            (
                rs[i],
                str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]}, {rs[j]}",
            )
        )
        i = j + 1
    return runs


def rank_runs(ranks: Sequence[int] | Iterable[int], limit: int = 8) -> str:
    """``0-3, 8, 12`` style text for a set of ranks, shortened past ``limit`` runs."""
    rs = set(int(r) for r in ranks)
    runs = [text for _, text in run_texts(rs)]
    if len(runs) > limit:
        return ", ".join(runs[:limit]) + f", … ({len(rs)} ranks)"
    return ", ".join(runs)


def rank_span(ranks: Iterable[int]) -> str:
    """``0-3, 5, 7-9`` (every run of two or more as a range)."""
    out: list[str] = []
    start: int | None = None
    prev = -2
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out)
