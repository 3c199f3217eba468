"""A hang's fingerprint: what makes two hangs the same one, whatever the job's size.

The parts are the verdict, the kind, the op the culprits stopped at (or are awaited in), the
role of its group and the code location of the culprit. Rank numbers, timestamps, sequence
numbers, the job's size and the dumps' paths are left out, so the same fault in a job of 8
ranks and in one of 512 gives the same fingerprint.

* **group role**: the group's description (``TENSOR_MODEL_PARALLEL_GROUP``, ``default_pg``);
  where there is none, the name of a TorchComms communicator without its ranks (``tp`` of
  ``tp[0,1]``). A name that is only a number or a hash says nothing of the role: left out.
* **location**: the innermost frame of the user's code (not torch, not ``<frozen ...>``, not
  the standard library) in the stack of the culprit's last recorded op, or else in the stack
  of the op the others wait in: the file's base name and the function, ``train.py in step``.
  The line number is left out on purpose: any edit above the call (a comment, an import)
  moves it, and the same hang seen after an unrelated commit must keep its fingerprint; the
  folder is left out as it differs between machines and checkouts.

The id is the first 12 hex digits of the SHA-256 of the parts as canonical JSON (sorted keys,
no spaces, with the fingerprint's own version ``v``). A verdict without a culprit (no hang,
inconclusive without suspects) has a fingerprint too, of its kind and what is known.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # records holds a Fingerprint: Finding is only named here
    from analyzer.diagnosis.records import Finding

__all__ = [
    "FINGERPRINT_VERSION",
    "NO_FINGERPRINT",
    "PARTS",
    "Fingerprint",
    "fingerprint_id",
    "fingerprint_of",
    "group_role",
    "make_fingerprint",
    "user_location",
]

#: The version of the parts hashed (a change to what goes in makes new ids).
FINGERPRINT_VERSION = 1
#: The fields of a fingerprint besides its id, in the order they are shown and compared.
PARTS: tuple[str, ...] = ("verdict", "kind", "op", "group_role", "location")

_HASH_LIKE = re.compile(r"[0-9a-fA-F:_.\-]+")
_RANKS_SUFFIX = re.compile(r"\s*[\[(][^\])]*[\])]\s*$")
_STDLIB = re.compile(r"[/\\]lib[/\\](pypy|python)\d+(\.\d+)?[/\\]")
_THIRD_PARTY = ("site-packages", "dist-packages")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What makes this hang this hang (see the module); ``id`` names it in 12 hex digits."""

    id: str
    verdict: str
    kind: str
    op: str = ""
    group_role: str = ""
    location: str = ""
    """``train.py in step``: the file's base name and the function (no line, no folder)."""

    def parts(self) -> dict[str, str]:
        return {name: str(getattr(self, name)) for name in PARTS}

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, **self.parts()}


def fingerprint_id(parts: Mapping[str, str]) -> str:
    """The first 12 hex digits of the SHA-256 of ``parts`` as canonical JSON."""
    body = {"v": FINGERPRINT_VERSION, **{name: str(parts.get(name, "")) for name in PARTS}}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]


def make_fingerprint(**parts: str) -> Fingerprint:
    """The fingerprint of these parts, its id computed."""
    values = {name: str(parts.get(name, "")) for name in PARTS}
    return Fingerprint(id=fingerprint_id(values), **values)


#: The fingerprint of a diagnosis that says nothing (the default of a Diagnosis).
NO_FINGERPRINT = make_fingerprint()


def group_role(name: str, desc: str) -> str:
    """The role of a group: its description, else its name without a ranks suffix; never a
    name that is a number or a hash."""
    for text in (desc, name):
        role = _RANKS_SUFFIX.sub("", str(text)).strip()
        hashed = _HASH_LIKE.fullmatch(role) and (any(c.isdigit() for c in role) or len(role) >= 16)
        if role and role != "undefined" and not hashed:
            return role
    return ""


def _is_user_frame(filename: str) -> bool:
    f = filename.replace("\\", "/")
    if not f or f.startswith("<"):
        return False
    if "/torch/" in f or f.startswith("torch/"):
        return False
    return not (_STDLIB.search(f) and not any(t in f for t in _THIRD_PARTY))


def user_location(frames: Sequence[Mapping[str, Any]]) -> str:
    """``train.py in step``: the innermost frame of the user's code (frames innermost first),
    ``""`` when there is none. Frames outside installed packages come first: a decorator of
    an installed helper library (``typing_extensions`` wrapping torch's calls) is no place of
    the user's; an installed package's frame is taken only where no other is."""
    for installed in (False, True):
        for fr in frames:
            filename = str(fr.get("filename", ""))
            if not _is_user_frame(filename):
                continue
            if not installed and any(t in filename for t in _THIRD_PARTY):
                continue
            base = filename.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
            return f"{base} in {fr.get('name', '?')}"
    return ""


def _lead(findings: Sequence[Finding], kind: str) -> Finding | None:
    """The finding the fingerprint is of: the first culprit's, else the first of the kind."""
    return next((f for f in findings if f.culprit), None) or next(
        (f for f in findings if f.kind == kind), None
    )


def _location(f: Finding) -> str:
    """The culprit's own last recorded op's stack first, then the finding's (awaited) stack."""
    ev = f.evidence
    last = ev.get("last_recorded_stack") if isinstance(ev, Mapping) else None
    return user_location(tuple(last or ())) or user_location(f.stack)


def fingerprint_of(verdict: str, kind: str, findings: Sequence[Finding]) -> Fingerprint:
    """The fingerprint of a diagnosis of ``verdict`` and ``kind`` with these findings."""
    f = _lead(findings, kind)
    if f is None:
        return make_fingerprint(verdict=verdict, kind=kind)
    return make_fingerprint(
        verdict=verdict,
        kind=kind,
        op=f.op,
        group_role=group_role(f.group, f.group_desc),
        location=_location(f),
    )
