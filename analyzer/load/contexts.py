"""Context files written by :mod:`analyzer.capture` next to the dumps, and what they add.

A context file (``hangscope_context_rank_N.json``, schema ``hangscope.context/1``) holds, for
one rank at capture time, every Python thread's stack, the host, pid, local rank, device, time
and versions. It tells the analysis two things the dumps cannot:

- **where it is now**: what a culprit's main thread was doing when the dumps were taken (the
  data loader, a lock, a checkpoint write), not only where it issued its last collective;
- **alive**: a rank with a context file but no flight-recorder dump did not crash.

Context files are untrusted like every other file: recognised by content, bounded in size,
read as JSON only, every field checked and coerced. The file's record is
:mod:`analyzer.context_file`, shared with its writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.context_file import (
    CONTEXT_SCHEMA,
    MAX_FRAMES,
    MAX_TEXT,
    MAX_THREADS,
    NoAnswer,
    RankContext,
    ThreadStack,
)
from analyzer.load.debug_stacks import read_stacks

_SCHEMA_PREFIX = b"hangscope.context/"
_HEAD = 4096


@dataclass(frozen=True, slots=True)
class Contexts:
    """Every context file found beside the dumps, by rank, and those that were refused."""

    by_rank: dict[int, RankContext] = field(default_factory=dict)
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason)
    no_answer: dict[int, NoAnswer] = field(default_factory=dict)
    """Ranks the debug server stopped reaching while others answered (none of them above)."""

    def __bool__(self) -> bool:
        return bool(self.by_rank)

    @property
    def world_size(self) -> int | None:
        sizes = [c.world_size for c in self.by_rank.values() if c.world_size]
        return max(sizes) if sizes else None

    def world_hint(self, dump_ranks: Iterable[int]) -> int | None:
        """The world size the captured ranks reported, when it covers every dumped rank and
        every context (a bound against junk)."""
        ws = self.world_size
        highest = max([*dump_ranks, *self.by_rank], default=-1)
        return ws if ws is not None and highest < ws <= 1_000_000 else None

    def hosts(self) -> dict[int, str]:
        return {r: c.host for r, c in self.by_rank.items() if c.host}


class ContextError(ValueError):
    """A file that claims to be a context file but is not a valid one."""


# ------------------------------------------------------------------------------ reading


def is_context_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds a hangscope context document (judged by its first bytes)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
    except OSError:
        return False
    return head.lstrip()[:1] == b"{" and b'"schema"' in head and _SCHEMA_PREFIX in head


def _text(v: Any, limit: int = MAX_TEXT) -> str:
    return (v if isinstance(v, str) else "" if v is None else str(v))[:limit]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else None


def _frames(raw: Any) -> tuple[dict[str, Any], ...]:
    out = []
    for f in raw[:MAX_FRAMES] if isinstance(raw, list) else ():
        if isinstance(f, dict):
            out.append(
                {
                    "name": _text(f.get("name"), 200),
                    "filename": _text(f.get("filename"), 500),
                    "line": _int(f.get("line")) or 0,
                }
            )
    return tuple(out)


def read_context(
    path: str | os.PathLike[str], *, config: AnalysisConfig = DEFAULT_CONFIG
) -> RankContext:
    """Parse one context file (at most ``config.max_context_bytes``); raises
    :class:`ContextError` with a one-line reason."""
    p = Path(path)
    cap = config.max_context_bytes
    try:
        size = p.stat().st_size
        if size > cap:
            raise ContextError(f"context file larger than {cap // 2**20} MiB")
        doc = json.loads(p.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ContextError(f"unreadable context file ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != CONTEXT_SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise ContextError(f"unsupported context schema {_text(schema, 60)!r}")
    rank = _int(doc.get("rank"))
    if rank is None or rank < 0:
        raise ContextError("context file has no rank")
    threads = []
    for t in doc.get("threads", [])[:MAX_THREADS] if isinstance(doc.get("threads"), list) else ():
        if isinstance(t, dict):
            threads.append(
                ThreadStack(
                    name=_text(t.get("name"), 200),
                    main=t.get("main") is True,
                    frames=_frames(t.get("frames")),
                )
            )
    trig: dict[str, Any] = doc["trigger"] if isinstance(doc.get("trigger"), dict) else {}
    versions: dict[str, Any] = doc["versions"] if isinstance(doc.get("versions"), dict) else {}
    dumps: list[Any] = doc["dumps"] if isinstance(doc.get("dumps"), list) else []
    return RankContext(
        rank=rank,
        path=str(p),
        host=_text(doc.get("host"), 255),
        pid=_int(doc.get("pid")),
        local_rank=_int(doc.get("local_rank")),
        device=_text(doc.get("device"), 64),
        time=_text(doc.get("time"), 64),
        time_ns=_int(doc.get("time_ns")),
        world_size=_int(doc.get("world_size")),
        reason=_text(trig.get("reason")),
        by_rank=_int(trig.get("by_rank")),
        versions={
            _text(k, 64): _text(v, 200) for k, v in list(versions.items())[:32] if v is not None
        },
        dumps=tuple(_text(d.get("backend"), 64) for d in dumps[:64] if isinstance(d, dict)),
        threads=tuple(threads),
    )


def _json_files(top: Path) -> list[Path]:
    """The ``.json`` files under ``top``; folders that cannot be listed (unreadable, deeper
    than PATH_MAX) are passed over: discovery lists them as unreadable."""
    out: list[Path] = []
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        out.extend(Path(folder, n) for n in sorted(files) if n.endswith(".json"))
    return out


def _regular_json(f: Path, known: set[Path]) -> bool:
    try:
        return f.is_file() and f.resolve() not in known and not f.name.startswith(".")
    except OSError:  # a name too long, a loop: no context file
        return False


def _candidates(inputs: Sequence[str | os.PathLike[str]], dump_files: Iterable[Path]) -> list[Path]:
    known = {Path(f).resolve() for f in dump_files}
    out: dict[Path, None] = {}
    dirs_flat = {Path(f).parent for f in known}
    for spec in inputs:
        p = Path(os.fspath(spec))
        if p.is_dir():
            for f in _json_files(p):
                out.setdefault(f, None)
        elif p.is_file() and p.suffix == ".json":
            out.setdefault(p, None)
    for d in sorted(dirs_flat):
        try:
            for f in sorted(d.glob("*.json")):
                out.setdefault(f, None)
        except OSError:
            continue
    return [f for f in out if _regular_json(f, known)]


def find_contexts(
    inputs: Sequence[str | os.PathLike[str]],
    dump_files: Iterable[Path] = (),
    *,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> Contexts:
    """Context files among ``inputs`` (directories searched recursively) and beside the dump
    files. Two files for one rank: the newer capture (``time_ns``) is kept."""
    by_rank: dict[int, RankContext] = {}
    skipped: list[tuple[str, str]] = []
    for f in _candidates(inputs, dump_files):
        if not is_context_file(f):
            continue
        try:
            ctx = read_context(f, config=config)
        except ContextError as exc:
            skipped.append((str(f), str(exc)))
            continue
        old = by_rank.get(ctx.rank)
        if old is None or (ctx.time_ns or 0) > (old.time_ns or 0):
            by_rank[ctx.rank] = ctx
    # The debug server's stacks snapshots: where each rank is now, for ranks not captured.
    folders = {Path(f).parent for f in dump_files}
    stacks = read_stacks(inputs, sorted(folders), config=config)
    for rank, ctx in stacks.where.items():
        by_rank.setdefault(rank, ctx)
    return Contexts(
        by_rank=dict(sorted(by_rank.items())),
        skipped=tuple(skipped),
        no_answer={r: g for r, g in stacks.no_answer.items() if r not in by_rank},
    )


def where_now(culprits: Iterable[int], contexts: Contexts) -> list[dict[str, Any]]:
    """For each culprit with a context file: its main thread's stack at capture time."""
    return [contexts.by_rank[r].to_dict() for r in culprits if r in contexts.by_rank]


def alive_without_dump(dumped: Iterable[int], contexts: Contexts) -> list[int]:
    have = set(int(r) for r in dumped)
    return [r for r in contexts.by_rank if r not in have]


__all__ = [
    "ContextError",
    "Contexts",
    "alive_without_dump",
    "find_contexts",
    "is_context_file",
    "read_context",
    "where_now",
]
