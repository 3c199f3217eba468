"""The loader's notes a store keeps beside its dumps (``inputs.json``: skipped, ignored and
duplicate files, ranks whose only dump was an older round's; ``contexts.json``: where each
rank was), read back from one store or several."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.config import DEFAULT_CONFIG
from analyzer.context_file import NoAnswer, RankContext, ThreadStack
from analyzer.errors import InputError
from analyzer.load import MAX_BESIDE, Contexts, Duplicate, Ignored, RankFile, Skipped
from analyzer.store.layout import CONTEXTS, INPUTS, store_rank

__all__ = ["Notes", "contexts_of", "read_json", "read_notes"]


def read_json(folder: Path, name: str) -> dict[str, Any]:
    try:
        doc = json.loads((folder / name).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / name}: cannot read ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{folder / name}: not a JSON object")
    return doc


def contexts_of(doc: dict[str, Any]) -> Contexts:
    by_rank: dict[int, RankContext] = {}
    for c in doc.get("by_rank", []):
        c = dict(c)
        c["versions"] = dict(c.get("versions") or {})
        c["dumps"] = tuple(c.get("dumps") or ())
        c["threads"] = tuple(
            ThreadStack(t["name"], bool(t["main"]), tuple(t["frames"]))
            for t in c.get("threads") or ()
        )
        by_rank[int(c["rank"])] = RankContext(**c)
    return Contexts(
        by_rank=by_rank,
        skipped=tuple(tuple(s) for s in doc.get("skipped", [])),
        no_answer=_no_answer(doc.get("no_answer", [])),
    )


def _no_answer(rows: list[Any]) -> dict[int, NoAnswer]:
    """The ranks the debug server stopped reaching, as a store keeps them (checked: a store
    is as untrusted as a dump)."""
    out: dict[int, NoAnswer] = {}
    for row in rows[:MAX_BESIDE]:
        rank = int(row["rank"])
        if not 0 <= rank < DEFAULT_CONFIG.max_rank:
            raise ValueError(f"a rank beyond any job's: {rank}")
        texts = (str(row["answered"])[:255], str(row["since"])[:255], str(row["error"])[:60])
        out[rank] = NoAnswer(rank, *texts)
    return out


@dataclass
class Notes:
    """The loader's notes kept by the stores, together."""

    skipped: list[Skipped] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    stale: list[tuple[int, str]] = field(default_factory=list)
    unaligned: dict[int, str] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    files: list[RankFile] = field(default_factory=list)
    beside: list[RankFile] = field(default_factory=list)
    contexts: dict[int, RankContext] = field(default_factory=dict)
    ctx_skipped: list[tuple[str, str]] = field(default_factory=list)
    no_answer: dict[int, NoAnswer] = field(default_factory=dict)


def read_notes(folders: list[Path]) -> Notes:
    """Skipped, ignored and duplicate files, ranks whose only dump was an older round's,
    unreadable folders, files and the newest context of each rank, from every store."""
    notes = Notes()
    skipped, ignored, duplicates = notes.skipped, notes.ignored, notes.duplicates
    unreadable, files, by_rank, ctx_skipped = (
        notes.unreadable,
        notes.files,
        notes.contexts,
        notes.ctx_skipped,
    )
    for folder in folders:
        doc = read_json(folder, INPUTS)
        try:
            skipped += [
                Skipped(str(p), store_rank(r, -1), str(w)) for p, r, w in doc.get("skipped", [])
            ]
            ignored += [Ignored(str(p), str(w)) for p, w in doc.get("ignored", [])]
            duplicates += [
                Duplicate(store_rank(r), str(k), str(dr), bool(i))
                for r, k, dr, i in doc.get("duplicates", [])
            ]
            notes.stale += [(store_rank(r), str(w)) for r, w in doc.get("stale", [])]
            notes.unaligned.update(
                (store_rank(r), str(w)[:500]) for r, w in doc.get("unaligned", [])[:MAX_BESIDE]
            )
            unreadable += [(str(p), str(w)) for p, w in doc.get("unreadable_dirs", [])]
            files += [RankFile(store_rank(r), Path(p)) for r, p in doc.get("files", [])]
            notes.beside += [
                RankFile(int(r), Path(p))
                for r, p in doc.get("beside", [])[:MAX_BESIDE]
                if 0 <= int(r) < DEFAULT_CONFIG.max_rank
            ]
            contexts = contexts_of(read_json(folder, CONTEXTS))
        except (ValueError, TypeError, KeyError) as exc:
            raise InputError(
                f"{folder}: {INPUTS} or {CONTEXTS} is malformed ({type(exc).__name__}: "
                f"{str(exc)[:80]})"
            ) from None
        for rank, c in contexts.by_rank.items():
            old = by_rank.get(rank)
            if old is None or (c.time_ns or 0) > (old.time_ns or 0):
                by_rank[rank] = c
        ctx_skipped += contexts.skipped
        notes.no_answer.update(contexts.no_answer)
    return notes
