"""torch 2.15's debug server around a recorded job, with TorchComms' handlers: the parts the
sample recorder (:mod:`tools.record_debug_server`) and the corpus worker share.

Every rank calls :func:`start` (a worker server per rank, rank 0 also the frontend and its
periodic dumper, a ``multiprocessing`` child of rank 0's process) after registering
TorchComms' three control-plane handlers over the writer (:func:`control_plane`,
``FlightRecorder.cpp`` 68-184, ``HealthCheck.cpp``): ``torchcomms_fr_trace_json`` (its
recorder's JSON), ``torchcomms_fr_dump_file`` (its per-rank file into ``per_rank/``) and
``torchcomms_health_check`` (``{"healthy": false}`` once the rank's abort hook ran). The
debug server's own handlers and dumper do the rest. Worker URLs use the name ``localhost``
(the frontend fetches them; nothing leaves loopback).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

__all__ = [
    "DUMPS",
    "PER_RANK",
    "control_plane",
    "free_port",
    "scrub",
    "start",
    "stop_frontend",
]

#: The tutorial's dumps: the defaults and TorchComms' trace tables.
DUMPS = frozenset(
    {
        "stacks",
        "fr_trace",
        "torchcomms_fr_trace",
        "torchcomms_health_check",
        "c10d_health_check",
    }
)
#: Where the per-rank files go in the dump folder (the tutorial's layout).
PER_RANK = "per_rank"


def free_port() -> int:
    """A free port for the frontend (it listens on every address, IPv6 first)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::", 0))
            return int(s.getsockname()[1])
    except OSError:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


def control_plane(rec: Any, rank: int, per_rank: Path, state: dict[str, bool]) -> None:
    """TorchComms' handlers on this rank's worker server, over the writer ``rec``
    (:class:`tools.torchcomms_fr.FlightRecorder`); ``state["timed_out"]``: the rank's abort
    hook ran (its health check then answers unhealthy)."""
    from torch._C._distributed_c10d import _register_handler

    def param(req: Any, name: str) -> str:
        try:
            return str(req.get_param(name))
        except Exception:  # noqa: BLE001 - absent
            return ""

    def trace_json(req: Any, res: Any) -> None:
        only = param(req, "onlyactive") == "true"
        res.set_content(rec.dump_json(only_active=only), "application/json")
        res.set_status(200)

    def dump_file(req: Any, res: Any) -> None:
        rec.dump_file(rank, str(per_rank / "rank_"))
        res.set_content(f"Flight Recorder dump initiated for rank {rank}", "text/plain")
        res.set_status(200)

    def health(req: Any, res: Any) -> None:
        text = '{"healthy": false}' if state["timed_out"] else '{"healthy": true}'
        res.set_content(text, "application/json")
        res.set_status(200)

    _register_handler("torchcomms_fr_trace_json", trace_json)
    _register_handler("torchcomms_fr_dump_file", dump_file)
    _register_handler("torchcomms_health_check", health)


def start(
    rank: int,
    world: int,
    store_port: int,
    frontend_port: int,
    dump_dir: Path,
    interval: float,
    dumps: frozenset[str] = DUMPS,
    fetch_timeout: float = 60.0,
) -> int:
    """Start this rank's worker server (rank 0: and the frontend, writing into ``dump_dir``
    every ``interval`` s, waiting ``fetch_timeout`` s at most for each worker's answer; 60 s
    is torch's default), its URL registered in the job's store under the name
    ``localhost``. Returns the frontend process's id on rank 0, else 0."""
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(store_port),
        }
    )
    socket.gethostname = lambda: "localhost"  # the worker URLs the frontend fetches
    import torch.distributed.debug as debug

    debug.start_debug_server(
        port=frontend_port,
        dump_dir=str(dump_dir),
        dump_interval=interval,
        enabled_dumps=set(dumps),
        fetch_timeout=fetch_timeout,
    )
    proc = getattr(debug, "_DEBUG_SERVER_PROC", None)
    return int(proc.pid) if rank == 0 and proc is not None and proc.pid else 0


def stop_frontend(rank: int) -> None:
    """Stop rank 0's frontend process before ``os._exit``, as the interpreter's normal exit
    would (it is a daemon ``multiprocessing`` child: only a normal exit ends it)."""
    if rank != 0:
        return
    from torch.distributed.debug import stop_debug_server

    with contextlib.suppress(AssertionError):  # never started
        stop_debug_server()


def scrub(out: Path) -> None:
    """Machine paths in the text files (stacks): this repository and the interpreter's
    prefixes."""
    import sysconfig

    from tools import launcher
    from tools.record_gloo import SCRUB_PY, SCRUB_REPO

    pairs = [(str(launcher.REPO_ROOT), SCRUB_REPO)]
    for key in ("purelib", "platlib"):
        pairs.append((sysconfig.get_paths()[key], f"{SCRUB_PY}/site-packages"))
    pairs.append((sysconfig.get_paths()["stdlib"], SCRUB_PY))
    pairs.sort(key=lambda kv: len(kv[0]), reverse=True)
    for f in sorted(out.rglob("*.txt")):
        text = f.read_text(errors="replace")
        for old, new in pairs:
            text = text.replace(old, new)
        f.write_text(text)
