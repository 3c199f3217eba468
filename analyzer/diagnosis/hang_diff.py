"""Two incidents compared: the same hang or not (``hangscope diff``).

Each side is a diagnosis reduced to what the comparison needs (:class:`HangSide`): its
fingerprint, and its culprit ranks and job size, which are told but never make two hangs
different (the same fault at another size or on other ranks is the same hang). A side is made
from a fresh diagnosis (:func:`side_of`) or read from the JSON ``hangscope analyze -f json``
wrote (:func:`read_saved`), which is untrusted input: size-capped, checked to be hangscope's,
its fingerprint's id checked against its parts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from analyzer.diagnosis.fingerprint import PARTS, Fingerprint, fingerprint_id
from analyzer.diagnosis.records import Diagnosis
from analyzer.errors import SavedAnalysisError

__all__ = [
    "DIFF_SCHEMA",
    "MAX_SAVED_BYTES",
    "FieldDiff",
    "HangDiff",
    "HangSide",
    "compare",
    "read_saved",
    "side_of",
]

#: The version of ``hangscope diff -f json``'s document.
DIFF_SCHEMA = "hangscope.diff/1"
#: The largest saved analysis read (an analysis of a very large job's JSON is well below).
MAX_SAVED_BYTES = 64 << 20
#: The schema prefix of the JSON ``hangscope analyze -f json`` writes.
_ANALYSIS_SCHEMA = "hangscope.diagnosis/"
#: The longest text a saved fingerprint's part may be.
_MAX_PART = 1000
#: The most culprit ranks kept from a saved analysis (they are only told).
_MAX_RANKS = 1 << 22


@dataclass(frozen=True, slots=True)
class HangSide:
    """One incident: where it came from, its fingerprint, its culprits and its job's size."""

    source: str
    fingerprint: Fingerprint
    culprit_ranks: tuple[int, ...]
    world_size: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "fingerprint": self.fingerprint.to_dict(),
            "culprit_ranks": list(self.culprit_ranks),
            "world_size": self.world_size,
        }


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One field and its value on each side (strings, or ranks for ``culprit_ranks``)."""

    field: str
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b}


@dataclass(frozen=True, slots=True)
class HangDiff:
    """The comparison: ``same`` when the fingerprint ids are equal; ``differs``: the parts of
    the fingerprint that differ; ``informational``: culprit ranks and job size, always both."""

    a: HangSide
    b: HangSide
    same: bool
    differs: tuple[FieldDiff, ...]
    alike: tuple[FieldDiff, ...]
    informational: tuple[FieldDiff, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA,
            "same": self.same,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "differs": [d.to_dict() for d in self.differs],
            "informational": [d.to_dict() for d in self.informational],
        }


def side_of(d: Diagnosis, world_size: int, source: str) -> HangSide:
    """The side of a fresh diagnosis."""
    return HangSide(
        source=source,
        fingerprint=d.fingerprint,
        culprit_ranks=tuple(int(r) for r in d.culprit_ranks),
        world_size=int(world_size),
    )


def compare(a: HangSide, b: HangSide) -> HangDiff:
    """Whether ``a`` and ``b`` are the same hang, and field by field what differs."""
    pa, pb = a.fingerprint.parts(), b.fingerprint.parts()
    fields = [FieldDiff(name, pa[name], pb[name]) for name in PARTS]
    return HangDiff(
        a=a,
        b=b,
        same=a.fingerprint.id == b.fingerprint.id,
        differs=tuple(f for f in fields if f.a != f.b),
        alike=tuple(f for f in fields if f.a == f.b),
        informational=(
            FieldDiff("culprit_ranks", list(a.culprit_ranks), list(b.culprit_ranks)),
            FieldDiff("world_size", a.world_size, b.world_size),
        ),
    )


def _load(path: str) -> Any:
    """The JSON value of the file ``path``, at most :data:`MAX_SAVED_BYTES`."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_SAVED_BYTES:
                raise SavedAnalysisError(path, f"larger than {MAX_SAVED_BYTES >> 20} MiB")
            data = fh.read(MAX_SAVED_BYTES + 1)
    except OSError as exc:
        raise SavedAnalysisError(path, f"cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_SAVED_BYTES:
        raise SavedAnalysisError(path, f"larger than {MAX_SAVED_BYTES >> 20} MiB")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SavedAnalysisError(path, "not JSON") from None


def _saved_fingerprint(path: str, value: Any) -> Fingerprint:
    if not isinstance(value, dict):
        raise SavedAnalysisError(
            path, "has no fingerprint (written by an older hangscope): analyze its dumps again"
        )
    parts = {name: value.get(name, "") for name in (*PARTS, "id")}
    if not all(isinstance(v, str) and len(v) <= _MAX_PART for v in parts.values()):
        raise SavedAnalysisError(path, "its fingerprint's fields are not short strings")
    ident = parts.pop("id")
    if ident != fingerprint_id(parts):
        raise SavedAnalysisError(path, "its fingerprint's id does not match its parts (edited?)")
    return Fingerprint(id=ident, **parts)


def read_saved(path: str) -> HangSide:
    """The side of the JSON ``hangscope analyze -f json`` wrote to ``path``; a
    :class:`~analyzer.errors.SavedAnalysisError` when it is too large, not JSON, not
    hangscope's analysis, or its fingerprint is missing or does not match its id."""
    doc = _load(path)
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(_ANALYSIS_SCHEMA):
        raise SavedAnalysisError(
            path, f"not the JSON of hangscope analyze -f json (no {_ANALYSIS_SCHEMA} schema)"
        )
    fingerprint = _saved_fingerprint(path, doc.get("fingerprint"))
    ranks = doc.get("culprit_ranks", [])
    world = doc.get("world_size", 0)
    if (
        not isinstance(ranks, list)
        or len(ranks) > _MAX_RANKS
        or not all(type(r) is int and r >= 0 for r in ranks)
        or type(world) is not int
        or world < 0
    ):
        raise SavedAnalysisError(path, "its culprit_ranks or world_size are not ranks")
    return HangSide(
        source=path,
        fingerprint=fingerprint,
        culprit_ranks=tuple(ranks),
        world_size=world,
    )
