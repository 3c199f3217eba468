"""The debug server's cases (name tag ``_debugsrv``): the job runs torch 2.15's real debug
server with TorchComms' handlers (:mod:`tools.debug_server`), and the case's folder is what
the server's ``dump_dir`` holds after the hang.

The ranks compute :data:`STEP_S` after each step. Every rank starts its worker server at the
start of step ``spec.debugsrv_start`` (rank 0 also
the frontend, a ``multiprocessing`` child of its process, and its periodic dumper, every
``spec.debugsrv_interval`` s: ``stacks_<ts>.txt``, ``torchcomms_fr_trace_<ts>.txt``,
``torchcomms_health_check_<ts>.txt``, ``c10d_health_check_<ts>.txt``, and ``fr_trace_<ts>.txt``
when torch writes it). A rank whose op fails runs the tutorial's timeout handler: it writes
its own file ``per_rank/rank_<r>`` and its health check turns unhealthy, which makes the
frontend's next round ask every rank that answers to write its file there too. A rank of
``spec.debugsrv_exit`` then ends its process (a normal exit: rank 0's ends the frontend too)
:data:`EXIT_AFTER_S` later, so that the frontend's later rounds start ``PARTIAL DATA``. No
other file is written: no poller, no per-rank file elsewhere. A crashed rank 0 leaves its
frontend running (a daemon child outlives an ``os._exit`` or a SIGKILL); a stalled rank 0
leaves it running too (its own process). The frontend, forked from rank 0 after rank 0's
worker server was made, holds that server's listening socket: once rank 0 is dead, its
worker's port still takes connections that nobody answers, and every fetch from rank 0 waits
the frontend's fetch timeout (:data:`FETCH_TIMEOUT_S` here, 60 s by default) and says
``Timeout`` where a dead rank's refused connection says ``ConnectionError``.

Worker side: :class:`Server` (called from :mod:`tools.corpus.worker`); generator side:
:func:`run` and :func:`keep` (called from :mod:`tools.corpus.generate`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tools import debug_server, launcher
from tools.corpus.spec import CaseSpec
from tools.corpus.truth import expected, judge, read_logs

__all__ = ["EXIT_AFTER_S", "FRONTEND_PID", "Server", "keep", "run"]

#: A rank of ``spec.debugsrv_exit`` ends its process this long after its op failed.
EXIT_AFTER_S = 1.0
#: Rank 0 writes its frontend's process id here (in the side folder): the generator ends it.
FRONTEND_PID = "frontend.pid"
#: Every rank computes this long after each step (every rank alike, no op in flight), so
#: that the server's rounds land during the steps before the fault's when it started early.
STEP_S = 1.0
#: The frontend's ``fetch_timeout`` (torch's default, 60 s, would make a round of the files
#: after rank 0 died take five minutes).
FETCH_TIMEOUT_S = 4.0
RUN_DEADLINE_S = 120.0
NO_HANG_GIVE_UP_S = 45.0
#: After the last rank's op failed (or the healthy run ended), the generator waits for this
#: many more health-check rounds of the frontend (or :data:`ROUNDS_WAIT_S` at most).
ROUNDS_AFTER = 2
ROUNDS_WAIT_S = 45.0
_SNAPSHOT = re.compile(r"^([a-z0-9_]+?)_(\d{8}_\d{6})\.txt$")
_PARTIAL = re.compile(r"^PARTIAL DATA: (\d+)/(\d+) workers responded")


class Server:
    """One rank's side of the debug server: TorchComms' handlers over ``rec`` registered at
    once, the server started by :meth:`start` (at the start of the drawn step), the
    tutorial's timeout handler in :meth:`timed_out`."""

    def __init__(self, spec: CaseSpec, rank: int, cfg: dict[str, Any], rec: Any) -> None:
        self.spec, self.rank, self.cfg, self.rec = spec, rank, cfg, rec
        self.out = Path(cfg["out_dir"])
        self.per_rank = self.out / debug_server.PER_RANK
        self.per_rank.mkdir(parents=True, exist_ok=True)
        self.state = {"timed_out": False}
        self.started = False
        self.log = launcher.logger(rank)
        debug_server.control_plane(rec, rank, self.per_rank, self.state)

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        pid = debug_server.start(
            self.rank,
            self.spec.world,
            self.cfg["job_port"],
            self.cfg["frontend_port"],
            self.out,
            self.spec.debugsrv_interval,
            fetch_timeout=FETCH_TIMEOUT_S,
        )
        self.log(f"DEBUG SERVER started (interval {self.spec.debugsrv_interval:g} s)")
        if pid:
            (Path(self.cfg["side_dir"]) / FRONTEND_PID).write_text(str(pid))
            self.log(f"FRONTEND pid {pid}")

    def after_step(self, step: int) -> None:
        """The job's after-step hook: every rank computes :data:`STEP_S` (no op in flight),
        then the server starts at the start of its step."""
        time.sleep(STEP_S)
        if step + 1 == self.spec.debugsrv_start:
            self.start()

    def timed_out(self) -> None:
        """The tutorial's timeout handler: this rank's file into ``per_rank/``, then
        TorchComms' abort hook (unhealthy); a rank drawn to exit then ends its process."""
        path = self.rec.dump_file(self.rank, str(self.per_rank / "rank_"))
        self.log(f"DUMPED {path.name} {path.stat().st_size}")
        self.state["timed_out"] = True
        if self.rank in self.spec.debugsrv_exit:
            time.sleep(EXIT_AFTER_S)
            self.log("EXITING")
            sys.stdout.flush()
            sys.stderr.flush()
            debug_server.stop_frontend(self.rank)  # as the interpreter's exit would
            os._exit(0)


def _per_rank(out: Path) -> set[int]:
    folder = out / debug_server.PER_RANK
    if not folder.is_dir():
        return set()
    return {int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(r"rank_(\d+)", p.name))}


def _rounds_since(out: Path, since_wall: float) -> int:
    return sum(
        1 for p in out.glob("torchcomms_health_check_*.txt") if p.stat().st_mtime > since_wall
    )


def _end_frontend(side_dir: Path) -> None:
    """End rank 0's frontend process (by its id) when it outlived rank 0."""
    pid_file = side_dir / FRONTEND_PID
    if not pid_file.exists():
        return
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _wait(spec: CaseSpec, workers: list[launcher.Worker], side: Any, out: Path) -> set[int]:
    """Wait until the hang is in the folder (every op that fails has failed, then
    :data:`ROUNDS_AFTER` more health-check rounds) or the run is hopeless; the ranks whose
    process ended on its own."""
    started = time.monotonic()
    slack = 3.0 * spec.world
    healthy = spec.fault.kind in ("healthy", "slow_rank")
    t_mark: float | None = None  # (wall) when the rounds after it count
    settle = spec.timeout_s + EXIT_AFTER_S + 2.0
    t_err: float | None = None
    while time.monotonic() - started < RUN_DEADLINE_S + slack:
        time.sleep(0.2)
        if not any(w.running() for w in workers):
            break
        now = time.monotonic()
        if t_mark is None:
            if healthy:
                if side.add("finished", 0) >= spec.world:
                    t_mark = time.time()
                continue
            if t_err is None and side.add("errors", 0) > 0:
                t_err = now
            if t_err is None:
                if now - started > NO_HANG_GIVE_UP_S + slack:
                    break
                continue
            if now - t_err > settle:
                t_mark = time.time()
            continue
        if _rounds_since(out, t_mark) >= ROUNDS_AFTER or time.time() - t_mark > ROUNDS_WAIT_S:
            time.sleep(0.5)  # the round's last files
            break
    died = {w.rank for w in workers if not w.running()}
    launcher.end(workers)
    _end_frontend(out.parent / "side")
    launcher.remove_partial(out / debug_server.PER_RANK)
    return died


def run(spec: CaseSpec, work: Path) -> tuple[dict[str, Any] | None, str]:
    """Run the case once in ``work`` (``work/out`` the server's ``dump_dir``); (truth, "")
    or (None, why it was discarded)."""
    out_dir, side_dir, log_dir = work / "out", work / "side", work / "logs"
    launcher.fresh_dirs(out_dir, side_dir, log_dir)
    job_store = launcher.free_store(spec.world)
    side_store = launcher.free_store(spec.world)
    frontend_port = debug_server.free_port()
    cfgs = spec.worker_configs(
        out_dir, side_dir, job_store.port, side_store.port, frontend_port=frontend_port
    )
    started = time.monotonic()
    wall = time.time() - started  # the machine's monotonic time (the logs') to wall time
    env = launcher.worker_env(spec.buffer_size)
    env["TORCH_DISABLE_ADDR2LINE"] = "1"
    workers = launcher.spawn("tools.corpus.worker", cfgs, log_dir, env)
    died = _wait(spec, workers, side_store, out_dir)
    elapsed = time.monotonic() - started
    logs = read_logs(log_dir, spec.world)
    texts = {r: _text(log_dir / f"rank_{r}.log") for r in range(spec.world)}
    exited = {r for r in died if "] EXITING" in texts[r]}
    dumped = _per_rank(out_dir)
    why = _judge(spec, logs, died, exited, dumped, texts)
    rounds = _rounds(out_dir, logs, wall)
    if not why and not rounds:
        why = "the debug server wrote no round"
    late = [r for r in rounds if r["taken"] != "before the fault fired"]
    if not why and spec.fault.kind != "healthy" and not late:
        why = "no round of the debug server was taken after the fault fired"
    if why:
        return None, why
    truth = expected(spec, dumped, died)
    f = spec.fault
    truth["debug_server"] = {
        "dump_dir": ".",
        "dump_interval_s": spec.debugsrv_interval,
        "started": f"at the start of step {spec.debugsrv_start}",
        "frontend": _frontend(spec, died, exited),
        "rounds": rounds,
        "per_rank": {
            "folder": debug_server.PER_RANK,
            "ranks": sorted(dumped),
            "by": "the tutorial's timeout handler (ranks that caught their timeout) and the "
            "health check's dump of every rank that answered",
        },
        "exited_before_last_round": sorted(exited),
        "died": sorted(died),
        "culprit_is_rank_0": 0 in f.ranks,
    }
    truth.update(
        {
            "world": spec.world,
            "dumped_ranks": sorted(dumped),
            "aborted_ranks": sorted(died - set(f.ranks) - exited),
            "first_error_rank": min(
                ((t, r) for r, log in logs.items() for t, _ in log.errors), default=(0, None)
            )[1],
            "elapsed_s": round(elapsed, 1),
        }
    )
    return truth, ""


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _judge(
    spec: CaseSpec,
    logs: dict[int, Any],
    died: set[int],
    exited: set[int],
    dumped: set[int],
    texts: dict[int, str],
) -> str | None:
    """Why the run is discarded: the generator's checks (:func:`tools.corpus.truth.judge`,
    the ranks drawn to exit not counted as deaths), the server started on every rank, a
    healthy run with no file in ``per_rank/``."""
    not_started = [r for r, t in texts.items() if "] DEBUG SERVER started" not in t]
    if not_started:
        return f"the debug server did not start on ranks {not_started}"
    if spec.fault.kind in ("healthy", "slow_rank"):
        if any(log.errors for log in logs.values()):
            return "an op failed in a run without a hang"
        if not all(log.done for log in logs.values()):
            return "a healthy run did not finish on every rank"
        if dumped:
            return f"a healthy run has per-rank files of ranks {sorted(dumped)}"
        return None
    if exited - set(spec.debugsrv_exit):
        return f"ranks {sorted(exited - set(spec.debugsrv_exit))} exited without being meant to"
    return judge(spec, logs, died - exited, dumped)


def _frontend(spec: CaseSpec, died: set[int], exited: set[int]) -> str:
    """What became of rank 0's process (the frontend's parent)."""
    f = spec.fault
    if 0 in exited:
        return "rank 0 exited after its op failed: the frontend stopped with it"
    if 0 in f.ranks and 0 in died:
        return (
            "rank 0 crashed: the frontend (its daemon child) went on, holding rank 0's "
            "worker port (its fetches from rank 0 time out)"
        )
    if 0 in died:
        return "rank 0 died (aborted): the frontend (its daemon child) went on"
    if 0 in f.ranks and f.kind not in ("healthy", "slow_rank"):
        return "rank 0 is a culprit and alive: the frontend (its own process) went on"
    return "rank 0 alive: the frontend went on"


def _rounds(out: Path, logs: dict[int, Any], wall: float) -> list[dict[str, Any]]:
    """The server's files by timestamp: which kinds, how many workers answered, when taken
    relative to the fault (the ranks' logs, on the machine's monotonic clock)."""
    fired = [t for log in logs.values() for t, _ in log.faults]
    errors = [t for log in logs.values() for t, _ in log.errors]
    t_fire = min(fired) + wall if fired else None
    t_err = min(errors) + wall if errors else None
    by_ts: dict[str, dict[str, Any]] = {}
    for p in sorted(out.iterdir()):
        m = _SNAPSHOT.match(p.name)
        if not p.is_file() or not m:
            continue
        kind, ts = m.groups()
        r = by_ts.setdefault(ts, {"at": ts, "files": [], "partial": {}, "mtime": 0.0})
        r["files"].append(kind)
        r["mtime"] = max(r["mtime"], p.stat().st_mtime)
        with p.open(errors="replace") as fh:
            first = fh.readline()
        if pm := _PARTIAL.match(first):
            r["partial"][kind] = f"{pm.group(1)}/{pm.group(2)}"
    rounds = []
    for ts in sorted(by_ts):
        r = by_ts[ts]
        taken = "before the fault fired" if t_fire is not None else "in a run without a fault"
        if t_fire is not None and r["mtime"] >= t_fire:
            taken = "after the fault fired"
        if t_err is not None and r["mtime"] >= t_err:
            taken = "after the first op failed"
        rounds.append(
            {"at": ts, "files": sorted(r["files"]), "partial": r["partial"], "taken": taken}
        )
    return rounds


def keep(spec: CaseSpec, truth: dict[str, Any], work: Path, dest: Path) -> list[Path]:
    """Scrub the server's text files, check the per-rank files load, pack the case."""
    from tools import record_gloo as rg
    from tools.corpus.generate import _describe, _pack

    out = work / "out"
    debug_server.scrub(out)
    for p in sorted((out / debug_server.PER_RANK).glob("rank_*")):
        rg.scrub_dump(p)
        rg.load_dump(p)  # loads with the no-globals unpickler
    if not any((out / debug_server.PER_RANK).iterdir()):
        (out / debug_server.PER_RANK).rmdir()
    doc = _describe(spec, truth, "torchcomms")
    doc["case"] = spec.name
    doc["recorded"]["debug_server"] = doc.pop("debug_server")
    return [_pack(dest, spec.name, out, doc)]
