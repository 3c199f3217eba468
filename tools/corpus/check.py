"""Score the analyzer on the corpus: every case analyzed, its answer held against its truth.

An answer is **right** when it says the truth's verdict and, for a hang, names exactly the
injected ranks with a kind the truth allows (or ``missing_dump`` when an injected rank wrote
no file); **unsure** when it says it is unsure (verdict
``inconclusive``, or a culprit whose ``confidence`` is ``suspect``) and the injected ranks are
among the ranks it names, its suspects and the ranks it lists as not ruled out (or it names
none, or it says "or a rank with no dump" and the injected ranks it leaves out wrote no
file), or when it names exactly the injected ranks with another kind but lists the truth's
kind in ``also_possible`` (the kind it cannot rule out); **wrong** otherwise: a confident
wrong culprit,
a missed culprit, a missed hang (``no_hang`` on a hang), a false alarm (a hang on a healthy
run), a wrong kind, an unsure answer whose suspects leave the truth out, or an analysis that
failed.

Both forms of the diagnosis JSON are read: ``hangscope.diagnosis/1`` (``culprit_ranks``, every
culprit confident) and ``hangscope.diagnosis/1.1`` (``culprits: [{rank, confidence,
because}]``, ``suspects``; 1.2 adds ``also_possible``, 1.3 ``unseen_suspect``, 1.5
``not_ruled_out``). Needs the analyzer, not torch.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Outcome",
    "Said",
    "allowed_kinds",
    "analyze_folder",
    "case_paths",
    "check_case",
    "classify",
    "missing_fact",
    "read_case",
    "read_said",
]

RIGHT, WRONG, UNSURE = "right", "wrong", "unsure"


@dataclass(frozen=True)
class Said:
    """What the analyzer answered, in the terms the score needs."""

    verdict: str  # hang, no_hang, inconclusive, or error (the analysis failed)
    kind: str
    culprits: tuple[tuple[int, str], ...] = ()  # (rank, confidence)
    suspects: tuple[int, ...] = ()
    headline: str = ""
    also_possible: tuple[str, ...] = ()  # 1.2: other kinds the answer says it cannot rule out
    unseen_suspect: bool = False  # 1.3: a rank that wrote no file may be the culprit
    reasons: tuple[str, ...] = ()  # why each suspect is only a suspect (its ``because``)


@dataclass(frozen=True)
class Outcome:
    case: str
    fault: str
    dialect: str
    result: str  # right, wrong, unsure
    why: str  # for a wrong answer: what went wrong, in a few words (the group it falls in)
    said: Said
    truth: dict[str, Any] = field(repr=False)


def _rank(value: Any) -> int | None:
    if isinstance(value, dict):
        value = value.get("rank")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_said(doc: dict[str, Any]) -> Said:
    """The answer in a diagnosis JSON document, old schema or new."""
    verdict = str(doc.get("verdict", ""))
    culprits: list[tuple[int, str]] = []
    if isinstance(doc.get("culprits"), list):  # 1.1: [{rank, confidence, because}]
        for c in doc["culprits"]:
            r = _rank(c)
            if r is not None:
                conf = str(c.get("confidence", "certain")) if isinstance(c, dict) else "certain"
                culprits.append((r, conf))
    else:
        culprits = [(r, "certain") for r in doc.get("culprit_ranks") or [] if _rank(r) is not None]
    suspects = []
    if isinstance(doc.get("suspects"), list):  # 1.1 only: in 1, suspect_ranks are dumps
        suspects = [r for r in (_rank(s) for s in doc["suspects"]) if r is not None]
    if isinstance(doc.get("not_ruled_out"), list):  # 1.5: ranks after the suspects
        suspects += [r for r in (_rank(s) for s in doc["not_ruled_out"]) if r is not None]
    return Said(
        verdict=verdict,
        kind=str(doc.get("kind", "")),
        culprits=tuple(culprits),
        suspects=tuple(sorted(set(suspects))),
        headline=str(doc.get("headline", "")),
        also_possible=tuple(
            str(a.get("kind", "")) for a in doc.get("also_possible") or [] if isinstance(a, dict)
        ),
        unseen_suspect=bool(doc.get("unseen_suspect")),
        reasons=tuple(
            str(c.get("because", ""))
            for c in doc.get("culprits") or []
            if isinstance(c, dict) and c.get("confidence") == "suspect"
        ),
    )


def allowed_kinds(truth: dict[str, Any]) -> set[str]:
    """The kinds a right answer may give: the truth's, and ``missing_dump`` when an injected
    rank wrote no file (its desync, its half of a deadlock or its stall is in no dump: that
    it has none and others wait on it is all the files can say). A stalled rank with no file
    of the newest round but one of an earlier round taken after its stall began (the
    interval timer's, while hung) may also be read from that file: ``not_joined``."""
    kinds = set(truth["kinds"])
    dumped = truth.get("dumped_ranks")
    if dumped is not None and set(truth["culprits"]) - set(dumped):
        kinds.add("missing_dump")
        if str(truth.get("fault", "")).startswith("stall_") and _seen_stalled(truth):
            kinds.add("not_joined")
    return kinds


def _seen_stalled(truth: dict[str, Any]) -> bool:
    """A culprit with no file of the newest round has one in a round taken after the fault
    fired (``while hung`` or ``after the first op failed``)."""
    gone = set(truth["culprits"]) - set(truth.get("dumped_ranks") or ())
    rounds = ((truth.get("recorded") or {}).get("rounds") or {}).get("rounds") or []
    return any(
        ("while hung" in str(x.get("taken")) or "after the first op failed" in str(x.get("taken")))
        and gone & set(x.get("ranks") or ())
        for x in rounds
        if isinstance(x, dict)
    )


def classify(truth: dict[str, Any], said: Said) -> tuple[str, str]:
    """(right | wrong | unsure, why) for an answer against a case's truth."""
    if said.verdict == "error":
        return WRONG, "the analysis failed"
    if not truth["hang"]:
        if said.verdict == "no_hang":
            return RIGHT, ""
        if said.verdict == "inconclusive":
            return UNSURE, ""
        return WRONG, f"false alarm ({said.kind})"
    if said.verdict == "no_hang":
        return WRONG, "missed hang (no_hang)"
    want = set(truth["culprits"])
    named = {r for r, _ in said.culprits}
    unsure = said.verdict == "inconclusive" or any(c == "suspect" for _, c in said.culprits)
    confident = (
        set() if said.verdict == "inconclusive" else {r for r, c in said.culprits if c != "suspect"}
    )
    if confident - want:
        return WRONG, f"confident wrong culprit ({said.kind})"
    if unsure:
        pool = named | set(said.suspects)
        unnamed = want - pool
        dumped = truth.get("dumped_ranks")
        if said.unseen_suspect and dumped is not None:  # "or a rank with no dump"
            unnamed -= want - set(dumped)
        if not pool or not unnamed:
            return UNSURE, ""
        return WRONG, f"unsure, the truth not among its suspects ({said.kind})"
    if named == want:
        if said.kind in allowed_kinds(truth):
            return RIGHT, ""
        if set(said.also_possible) & allowed_kinds(truth):
            return UNSURE, ""  # the right ranks, and the true kind named as not ruled out
        return WRONG, f"right culprit, wrong kind ({said.kind})"
    if named < want:
        return WRONG, f"missed a culprit ({said.kind})"
    return WRONG, f"wrong culprit ({said.kind})"


#: What the dumps lack, by the words of the answer that says so: (phrase, the missing fact).
#: The first that an unsure answer's headline, suspects or other kinds hold names its group.
MISSING_FACTS: tuple[tuple[str, str], ...] = (
    ("an older round", "an older round's dump only: where the rank is now is not in it"),
    ("that many files absent", "half the ranks' files absent: those given may be one host's"),
    (
        "on one of them alone",
        "ranks with no dump awaited together: which stopped (or whose file was not collected)",
    ),
    ("split with no majority", "a desync split with no majority: any side may be the odd one"),
    ("could make the other side", "a desync whose deciding members wrote no dump"),
    ("cannot be trusted", "a dump that cannot be trusted (truncated, values dropped)"),
    ("group of two", "a group of two disagrees: either side may have issued the odd op"),
    ("died in that op", "a desync whose partner died: only the odd rank's history is left"),
    ("only in its last op", "a retired last op: one crash, or a crash beside a stall"),
    ("whether it joined", "a member with no dump beside a stalled rank: did it join?"),
    ("may never have been joined by", "a member with no dump beside a stalled rank: did it join?"),
    (
        "ran the cycle's groups in one order",
        "a cycle with no majority order: which rank ran its groups out of order",
    ),
    (
        "where the job stopped",
        "a rank with no dump beside a proven culprit: file lost, or a 2nd fault",
    ),
    ("pending on the ranks that did", "no member list: ranks with no dump may hold the rest"),
    ("no file gives its number", "no member list: a rank that wrote no file may hold them"),
    ("list no group's members", "no member list: ranks that wrote no file cannot be ruled out"),
    ("no dump lists", "no member list: ranks that wrote no file cannot be ruled out"),
    ("report no completion", "no completion reports: finished and stuck inside look alike"),
    ("reports no completion", "no completion reports: finished and stuck inside look alike"),
    ("no member stands out", "every member inside one collective: which holds it is unknown"),
    (
        "runs gloo's monitored_barrier",
        "a monitored_barrier the recorder does not write: a rank that never reached it",
    ),
    ("writes no peer", "a send/recv whose peer the recorder does not write"),
    ("records no send/recv", "send/recv the recorder does not write"),
    ("does not record", "send/recv the recorder does not write"),
    ("in no buffer", "ops in no buffer (counter gaps)"),
    ("single anyone out", "pending ops no rank can be blamed for"),
    ("no rank can be blamed", "pending ops no rank can be blamed for"),
)


def missing_fact(said: Said) -> str:
    """For an unsure answer: the fact the dumps lack, in the words of :data:`MISSING_FACTS`
    (``kind not decided: deadlock`` where only the kind is open)."""
    text = " ".join((said.headline, *said.reasons))
    for phrase, fact in MISSING_FACTS:
        if phrase in text:
            return fact
    if said.also_possible:
        return f"the kind is not decided: {' or '.join(said.also_possible)}"
    return f"other ({said.verdict} {said.kind})"


def case_paths(root: Path) -> list[Path]:
    """The corpus's cases (``*.tar.xz``), by name."""
    return sorted(root.glob("*.tar.xz"))


def _inside(name: str) -> str:
    """Where a member ``<case>/[<folder>/[<folder>/]]<file>`` goes in the case's folder: its
    subfolders kept (a restart's ``attempt_0/``, ``attempt_1/``; an interval round's
    ``dumps_<ts>/``, inside an attempt's folder when both) when they are plain names, else
    the base name alone."""
    parts = name.split("/")[1:] or [Path(name).name]
    plain = all(p not in ("", ".", "..") and "\\" not in p for p in parts)
    return "/".join(parts) if plain and 1 <= len(parts) <= 3 else parts[-1]


def read_case(path: Path, into: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The truth of a case and, with ``into``, its files unpacked into ``into/<name>``
    (``TRUTH.json`` left out). Only regular files, by base name or under one plain
    subfolder (:func:`_inside`): nothing escapes ``into``."""
    truth: dict[str, Any] = {}
    folder = into / path.name.removesuffix(".tar.xz") if into is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "r:xz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            base = Path(member.name).name
            fileobj = tar.extractfile(member)
            data = fileobj.read() if fileobj is not None else b""
            if base == "TRUTH.json":
                truth = json.loads(data)
            elif folder is not None and base not in ("", ".", ".."):
                dest = folder / _inside(member.name)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
    return truth, folder


def analyze_folder(folder: Path, world_size: int | None = None) -> dict[str, Any]:
    """The JSON answer for ``folder`` (with ``--world-size world_size`` where given), or an
    ``error`` verdict where the analysis failed."""
    import analyzer
    from analyzer.render import to_json

    try:
        return to_json(analyzer.analyze(folder, jobs=1, world_size=world_size))
    except Exception as exc:  # noqa: BLE001 - a failed analysis is a wrong answer, not a crash
        return {"verdict": "error", "kind": type(exc).__name__, "headline": str(exc)[:200]}


def check_case(path: Path, work: Path | None = None, world_given: bool = False) -> Outcome:
    """Analyze one case and score the answer; ``world_given``: with the job's world size
    given, as a user who knows it types ``--world-size N`` (the truth's ``world``: the
    newest attempt's, the one the answer is about)."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        truth, folder = read_case(path, Path(tmp))
        assert folder is not None
        world = int(truth["world"]) if world_given else None
        said = read_said(analyze_folder(folder, world))
    result, why = classify(truth, said)
    return Outcome(
        case=truth.get("case", path.name),
        fault=truth.get("fault", "?"),
        dialect=truth.get("recorded", {}).get("dialect", "?"),
        result=result,
        why=why,
        said=said,
        truth=truth,
    )


def check_all(paths: Iterable[Path]) -> Iterator[Outcome]:
    for path in paths:
        yield check_case(path)


def to_record(o: Outcome) -> dict[str, Any]:
    """An outcome as one JSON object (for ``--json`` and the baseline)."""
    return {
        "case": o.case,
        "fault": o.fault,
        "dialect": o.dialect,
        "result": o.result,
        "why": o.why,
        "said": {
            "verdict": o.said.verdict,
            "kind": o.said.kind,
            "culprits": [list(c) for c in o.said.culprits],
            "suspects": list(o.said.suspects),
        },
        "truth": {"culprits": o.truth.get("culprits"), "kinds": o.truth.get("kinds")},
    }


def dumps(records: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    json.dump(records, buf, indent=1)
    return buf.getvalue() + "\n"
