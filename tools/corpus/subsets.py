"""A subset of the files: each corpus case with one "host's" dumps taken away, or one file.

Users often hold only part of the files a hang wrote: one host's copied, another's copy
failed. Each variant keeps the real files of one block of ranks (the first half of the
world and the second half; a block of 8 ranks in worlds above 8), every other file of the
case beside them, and scores the answer against the case's truth, with its dumped ranks
narrowed to the ranks kept. A rank the files left cannot set apart must not be blamed as
sure: the count that matters is of the confident wrong answers; an unsure answer whose
suspects miss the truth is counted wrong too, as :func:`tools.corpus.check.classify` says.

The other form (``lost_one``): every file but one rank's, a rank that is no culprit (one
disk full, one copy failed). Its absence must not make a waiting rank a sure culprit, nor
the culprit the others prove less than named.

    python bench/accuracy_real.py --subsets
    python bench/accuracy_real.py --lost-one
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.corpus.check import Said, analyze_folder, classify, read_case, read_said

__all__ = ["Variant", "blocks", "lost_one", "lost_ranks", "variants"]


@dataclass(frozen=True)
class Variant:
    """One case with only the dumps of ``kept`` ranks, and its score."""

    case: str
    kept: tuple[int, int]  # first and last rank kept
    result: str
    why: str
    said: Said
    truth: dict[str, Any]

    @property
    def confident(self) -> bool:
        """Wrong with a rank blamed as sure (not only an unsure answer missing the truth)."""
        return self.result == "wrong" and not self.why.startswith("unsure")


def blocks(world: int) -> list[range]:
    """The blocks of ranks kept, one variant each: halves, or blocks of 8 above 8 ranks."""
    size = world // 2 if world <= 8 else 8
    return [range(lo, min(lo + size, world)) for lo in range(0, world, size)] if size else []


def copy_kept(folder: Path, into: Path, keep: Container[int]) -> None:
    """The files of ``folder`` into ``into`` (subfolders kept), but a rank's dump only where
    its rank is in ``keep``: junk and files of no rank stay."""
    from analyzer.load.discover import rank_from_name

    for f in folder.rglob("*"):
        if not f.is_file():
            continue
        r = rank_from_name(f.name)
        if r is not None and r not in keep:
            continue
        dest = into / f.relative_to(folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)


def variants(paths: list[Path]) -> Iterator[Variant]:
    """Each hang's (and healthy run's) blocks, analyzed and scored; a block that keeps no
    dump at all is skipped (there is nothing to analyze)."""
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            truth, folder = read_case(path, Path(tmp))
            assert folder is not None
            for keep in blocks(int(truth.get("world") or 0)):
                dumped = truth.get("dumped_ranks")
                if dumped is not None and not set(dumped) & set(keep):
                    continue
                sub = Path(tmp) / f"kept_{keep.start}_{keep.stop - 1}"
                copy_kept(folder, sub, keep)
                narrowed = dict(truth)
                if dumped is not None:
                    narrowed["dumped_ranks"] = [r for r in dumped if r in keep]
                said = read_said(analyze_folder(sub))
                result, why = classify(narrowed, said)
                yield Variant(
                    truth.get("case", path.name),
                    (keep.start, keep.stop - 1),
                    result,
                    why,
                    said,
                    narrowed,
                )
                shutil.rmtree(sub, ignore_errors=True)


@dataclass(frozen=True)
class _AllBut:
    """Every rank but ``rank`` (files named like ranks beyond the world, junk, stay too)."""

    rank: int

    def __contains__(self, r: object) -> bool:
        return r != self.rank


def lost_ranks(truth: dict[str, Any]) -> list[int]:
    """The ranks whose file one ``lost_one`` variant takes away: the lowest and the highest
    dumped rank that is no culprit (one each where they are the same). None where a single
    rank dumped: without its file nothing is left to analyze (the analysis refuses an empty
    set, as it should)."""
    culprits = set(truth.get("culprits") or ())
    dumped = list(truth.get("dumped_ranks") or ())
    spared = [r for r in dumped if r not in culprits]
    return sorted({spared[0], spared[-1]}) if spared and len(dumped) > 1 else []


def lost_one(paths: list[Path]) -> Iterator[Variant]:
    """Each case with one rank's files taken away (:func:`lost_ranks`), analyzed and scored;
    ``kept`` names the rank lost, as (rank, rank)."""
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            truth, folder = read_case(path, Path(tmp))
            assert folder is not None
            for gone in lost_ranks(truth):
                sub = Path(tmp) / f"lost_{gone}"
                copy_kept(folder, sub, _AllBut(gone))
                narrowed = dict(truth)
                narrowed["dumped_ranks"] = [r for r in truth["dumped_ranks"] if r != gone]
                said = read_said(analyze_folder(sub))
                result, why = classify(narrowed, said)
                yield Variant(
                    truth.get("case", path.name), (gone, gone), result, why, said, narrowed
                )
                shutil.rmtree(sub, ignore_errors=True)
