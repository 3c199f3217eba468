"""What a capture writes: every flight-recorder buffer of this process, and its context file
(schema ``hangscope.context/1``: every thread's stack, host, pid, device, versions, trigger).

Each file is written to a temporary name and renamed, so a process killed mid-write (the
realistic end of a hung job) never leaves half a file under a dump's name.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from analyzer.capture.torch_buffers import device, dump_buffers, versions
from analyzer.context_file import CONTEXT_SCHEMA, context_name

__all__ = ["dump_name", "int_env", "thread_stacks", "write_snapshot"]


def dump_name(backend: str, rank: int) -> str:
    """``<backend>_trace_rank_<rank>``, the backend name made safe for a file name."""
    safe = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in backend) or "c10d"
    return f"{safe}_trace_rank_{rank}"


def int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Rename is atomic against a process killed mid-write (the realistic end of a hung
        # job); no fsync: it can take seconds on a busy shared file system.
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink(missing_ok=True)


def _frames(frame: FrameType | None, limit: int = 64) -> list[dict[str, Any]]:
    """A thread's Python stack, innermost frame first (the flight recorder's order)."""
    out = [
        {"name": fs.name, "filename": fs.filename, "line": fs.lineno or 0}
        for fs in traceback.extract_stack(frame, limit=None)
    ]
    out.reverse()
    return out[:limit]


def thread_stacks(skip_ident: int | None = None) -> list[dict[str, Any]]:
    """Every Python thread's current stack, the main thread first."""
    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = []
    for ident, frame in frames.items():
        t = threads.get(ident)
        out.append(
            {
                "name": t.name if t else f"thread-{ident}",
                "ident": ident,
                "native_id": getattr(t, "native_id", None) if t else None,
                "main": ident == main,
                "daemon": bool(t.daemon) if t else None,
                "capture": ident == skip_ident,
                "frames": _frames(frame),
            }
        )
    out.sort(key=lambda d: (not d["main"], d["capture"], str(d["name"])))
    return out


def _write_buffers(dist: Any, dump_dir: Path, rank: int) -> list[dict[str, Any]]:
    """One file per buffer of this process; what was written."""
    written: list[dict[str, Any]] = []
    for backend, (data, obj) in sorted(dump_buffers(dist, entries=True).items()):
        path = dump_dir / dump_name(backend, rank)
        write_atomic(path, data)
        written.append(
            {
                "backend": backend,
                "file": path.name,
                "entries": len(obj.get("entries") or []),
                "comm_lib_version": str(
                    obj.get("comm_lib_version") or obj.get("nccl_version") or ""
                ),
            }
        )
    return written


def write_snapshot(
    dist: Any | None,
    dump_dir: Path,
    *,
    rank: int,
    world: int | None,
    gen: int | None,
    info: dict[str, Any],
) -> tuple[list[str], str]:
    """Write this process's buffers and context into ``dump_dir``: (file names, reason)."""
    # The stacks first: what the threads are doing now, before dumping moves anything.
    threads = thread_stacks(skip_ident=threading.get_ident())
    now_ns = time.time_ns()
    dump_dir.mkdir(parents=True, exist_ok=True)
    written = _write_buffers(dist, dump_dir, rank) if dist is not None else []
    reason = str(info.get("reason", ""))
    ctx = {
        "schema": CONTEXT_SCHEMA,
        "rank": rank,
        "world_size": world,
        "local_rank": int_env("LOCAL_RANK"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": device(),
        "time_ns": now_ns,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ns / 1e9)),
        "trigger": {
            "generation": gen,
            "reason": reason,
            "by_rank": info.get("by_rank"),
            "time_ns": info.get("time_ns"),
        },
        "versions": versions(),
        "dumps": written,
        "threads": threads,
    }
    write_atomic(dump_dir / context_name(rank), json.dumps(ctx, indent=1).encode())
    return [w["file"] for w in written] + [context_name(rank)], reason
