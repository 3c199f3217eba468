"""This process's flight-recorder buffers, read through torch (for :mod:`analyzer.capture.hook`).

torch is never imported here: only used once the script has imported it and a process group
exists. Every call may fail (no such recorder, no NCCL in this build): nothing raises out.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from analyzer.unpickler import SafeUnpickler

__all__ = ["device", "dump_buffers", "enqueued_any", "progress_signature", "torch_dist", "versions"]

#: Backend recorder names tried besides those of the job's groups (torch 2.15 keeps one
#: recorder per backend name; torch 2.13 has one, gloo's).
KNOWN_BACKENDS = ("gloo", "nccl2", "nccl-lazy", "nccl", "nccl-legacy", "xccl", "ucc", "mpi", "c10d")

Buffers = dict[str, tuple[bytes, dict[str, Any]]]


def torch_dist() -> Any | None:
    """torch.distributed, only when the script has imported it and a group exists."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001
        pass
    return None


def _backend_names(dist: Any) -> list[str]:
    names: list[str] = []
    try:
        for cfg in dist.distributed_c10d._world.pg_backend_config.values():
            for part in str(cfg).split(","):
                name = part.split(":", 1)[-1].strip()
                if name and name not in names:
                    names.append(name)
    except Exception:  # noqa: BLE001
        pass
    for name in KNOWN_BACKENDS:
        if name not in names:
            names.append(name)
    return names


def _dump_calls(dist: Any, c10d: Any, entries: bool) -> list[tuple[str, Callable[[], bytes]]]:
    """(backend asked for, call returning its pickled buffer) for every recorder to try."""
    dump = getattr(c10d, "_dump_fr_trace", None)
    calls: list[tuple[str, Callable[[], bytes]]] = []
    if dump is not None:
        try:
            dump(
                includeCollectives=False, includeStackTraces=False, onlyActive=False, backend="gloo"
            )
            per_backend = True
        except TypeError:  # torch < 2.15: one recorder
            per_backend = False
        except Exception:  # noqa: BLE001
            per_backend = True
        if per_backend:
            for name in _backend_names(dist):
                calls.append(
                    (
                        name,
                        partial(
                            dump,
                            includeCollectives=entries,
                            includeStackTraces=entries,
                            onlyActive=False,
                            backend=name,
                        ),
                    )
                )
        else:
            calls.append(
                (
                    "gloo",
                    lambda: dump(
                        includeCollectives=entries, includeStackTraces=entries, onlyActive=False
                    ),
                )
            )
    legacy = getattr(c10d, "_dump_nccl_trace", None)
    if legacy is not None:
        calls.append(
            (
                "nccl",
                lambda: legacy(
                    includeCollectives=entries, includeStackTraces=entries, onlyActive=False
                ),
            )
        )
    return calls


def _backend_of(obj: dict[str, Any], asked: str) -> str:
    """The ``profiling_name`` prefix of a buffer's entries (``asked`` when it holds none)."""
    for e in obj.get("entries") or []:
        pn = e.get("profiling_name") if isinstance(e, dict) else None
        if isinstance(pn, str) and ":" in pn:
            return pn.split(":", 1)[0]
    return asked


def _loads(data: bytes) -> Any:
    """Unpickle a buffer torch wrote, refusing globals; the garbage collector is left alone
    (this runs beside the training thread)."""
    return SafeUnpickler(io.BytesIO(data)).load()


def dump_buffers(dist: Any, *, entries: bool) -> Buffers:
    """Every flight-recorder buffer of this process: {backend: (pickle bytes, parsed)}.

    The backend of a buffer is the ``profiling_name`` prefix of its entries (the name it was
    asked for when it holds none). Buffers with neither entries nor group counters are left
    out, and so is a second copy of a buffer already seen under another name.
    """
    from torch._C import _distributed_c10d as c10d

    out: Buffers = {}
    seen: set[bytes] = set()
    for asked, call in _dump_calls(dist, c10d, entries):
        try:
            data = call()
            obj = _loads(data)
        except Exception:  # noqa: BLE001 - no such recorder, or no NCCL in this build
            continue
        if not isinstance(obj, dict) or not (obj.get("entries") or obj.get("pg_status")):
            continue
        if data in seen:
            continue
        seen.add(data)
        backend = _backend_of(obj, asked)
        if backend in out:
            backend = asked if asked not in out else f"{backend}-{asked}"
        out[backend] = (data, obj)
    return out


def progress_signature(dist: Any) -> tuple[Any, ...]:
    """The group counters of every buffer: any change means a collective moved."""
    sig = []
    for backend, (_data, obj) in sorted(dump_buffers(dist, entries=False).items()):
        for key, st in sorted((obj.get("pg_status") or {}).items(), key=lambda kv: str(kv[0])):
            if isinstance(st, dict):
                sig.append(
                    (
                        backend,
                        str(key),
                        str(st.get("last_enqueued_collective")),
                        str(st.get("last_completed_collective")),
                    )
                )
    return tuple(sig)


def enqueued_any(sig: tuple[Any, ...]) -> bool:
    """Whether a signature shows any enqueued op (a job that has started communicating)."""
    for _b, _k, enq, _done in sig:
        try:
            if int(enq) >= 0:
                return True
        except ValueError:
            continue
    return False


def versions() -> dict[str, Any]:
    """Python, torch, CUDA and NCCL versions, as far as they are known without importing."""
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    torch = sys.modules.get("torch")
    if torch is None:
        return out
    out["torch"] = str(getattr(torch, "__version__", ""))
    with contextlib.suppress(Exception):
        out["cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        pass
    return out


def device() -> str:
    """This process's current CUDA device, or ``cpu``."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return f"cuda:{torch.cuda.current_device()}"
    except Exception:  # noqa: BLE001
        pass
    return "cpu"
