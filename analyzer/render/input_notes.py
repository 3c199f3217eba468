"""What the loader noticed about the input, for every output: files that are no dump
(ignored), duplicates merged or dropped, values dropped from dumps (warnings), unreadable
folders, and the ranks whose evidence is doubtful. Every text is escaped for a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyzer.escape import clean

if TYPE_CHECKING:
    from analyzer.analysis import Analysis


@dataclass(frozen=True, slots=True)
class InputNotes:
    ignored: tuple[tuple[str, str], ...]
    duplicates: tuple[dict[str, object], ...]
    warnings: tuple[dict[str, object], ...]
    unreadable_folders: tuple[tuple[str, str], ...]
    suspect_ranks: tuple[int, ...]
    unreadable_ranks: tuple[int, ...]


def input_notes(analysis: Analysis) -> InputNotes:
    loaded = analysis.loaded
    if loaded is None:
        return InputNotes((), (), (), (), (), ())
    return InputNotes(
        ignored=tuple((clean(i.path), clean(i.reason)) for i in loaded.ignored),
        duplicates=tuple(
            {
                "rank": d.rank,
                "kept": clean(d.kept),
                "dropped": clean(d.dropped),
                "identical": d.identical,
                "note": d.note,
            }
            for d in loaded.duplicates
        ),
        warnings=tuple(
            {"rank": r, "path": clean(p), "warning": clean(w)} for r, p, w in loaded.warnings
        ),
        unreadable_folders=tuple((clean(p), clean(w)) for p, w in loaded.unreadable_dirs),
        suspect_ranks=tuple(loaded.suspect_ranks),
        unreadable_ranks=tuple(
            r for r in loaded.unreadable_ranks if r < analysis.tables.world_size
        ),
    )


def text_lines(analysis: Analysis, *, verbose: bool = False) -> list[str]:
    """Lines for the text summary (ignored files only counted unless ``verbose``)."""
    n = input_notes(analysis)
    lines: list[str] = []
    if n.warnings:
        lines.append("warnings (values dropped from dumps; such a dump alone blames nobody):")
        for w in n.warnings[:50]:
            lines.append(f"  rank {w['rank']}: {w['warning']}")
        if len(n.warnings) > 50:
            lines.append(f"  ... {len(n.warnings) - 50} more (use --format json)")
    if n.duplicates:
        lines.append("duplicates:")
        lines.extend(f"  {d['note']}" for d in n.duplicates[:50])
    if n.unreadable_folders:
        lines.append("unreadable folders:")
        lines.extend(f"  {p}: {why}" for p, why in n.unreadable_folders)
    if n.ignored:
        if verbose:
            lines.append(f"ignored files ({len(n.ignored)}, not flight-recorder dumps):")
            lines.extend(f"  {p}: {why}" for p, why in n.ignored)
        else:
            lines.append(
                f"ignored files: {len(n.ignored)} (not flight-recorder dumps; -v lists them)"
            )
    return lines


__all__ = ["InputNotes", "input_notes", "text_lines"]
