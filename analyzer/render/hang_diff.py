"""``hangscope diff``'s text: the same hang or not, then field by field."""

from __future__ import annotations

from typing import Any

from analyzer.diagnosis import HangDiff
from analyzer.escape import clean
from analyzer.render.sentences import fingerprint_text
from analyzer.terms import rank_runs

__all__ = ["render_diff"]

_NAMES = {
    "verdict": "verdict",
    "kind": "kind",
    "op": "op",
    "group_role": "group role",
    "location": "location",
    "culprit_ranks": "culprit ranks",
    "world_size": "job size",
}


def _value(field: str, value: Any) -> str:
    if field == "culprit_ranks":
        return rank_runs(value, 16) if value else "none"
    if field == "world_size":
        return f"{value} ranks"
    return clean(str(value)) if value else "(none)"


def render_diff(diff: HangDiff) -> str:
    """The comparison as text: a first line that says it, each side, what differs, what is
    alike, and culprit ranks and job size (told, never making the hangs different)."""
    a, b = diff.a, diff.b
    if diff.same:
        head = f"SAME HANG: fingerprint {fingerprint_text(a.fingerprint)}"
    else:
        head = (
            f"DIFFERENT HANGS: fingerprints {clean(a.fingerprint.id)} (a) and "
            f"{clean(b.fingerprint.id)} (b)"
        )
    lines = [head, f"  a: {clean(a.source)}", f"  b: {clean(b.source)}"]
    if diff.differs:
        lines.append("differs:")
        lines.extend(
            f"  {_NAMES[d.field]}: {_value(d.field, d.a)} (a), {_value(d.field, d.b)} (b)"
            for d in diff.differs
        )
    if diff.alike:
        alike = ", ".join(f"{_NAMES[d.field]} {_value(d.field, d.a)}" for d in diff.alike)
        lines.append(f"alike: {alike}")
    lines.append("informational (never makes them different):")
    lines.extend(
        f"  {_NAMES[d.field]}: {_value(d.field, d.a)} (a), {_value(d.field, d.b)} (b)"
        for d in diff.informational
    )
    return "\n".join(lines) + "\n"
