"""One rank of a corpus case: build the groups, run the steps, inject the fault, dump.

Started by :mod:`tools.corpus.generate` as ``python -m tools.corpus.worker --worker CFG``
(through :mod:`tools.launcher`). Every line this module logs carries the rank and the
machine's monotonic time, and the generator reads them back to check that the fault fired
as designed: ``OP step.index kind`` before each op, ``FAULT ...`` when the fault fires,
``ERROR ...`` when one of this rank's ops fails, ``DUMPED ...`` for each file written and
``BODY DONE`` when the steps ended.

Dumps: with the policy ``all`` every rank dumps once any rank's op failed (a polling thread
watches the side store's trigger key, as the NCCL watchdog does); with ``timed_out`` a rank
dumps only when one of its own ops failed (torch 2.15's nccl2). gloo's recorder writes
``nccl_trace_rank_<r>`` (pickle) or ``rank_<r>.json``; the recorder hook writes
``<backend>_trace_rank_<r>`` per backend it recorded (and, with groups on gloo beside,
c10d's own recorder ``nccl_trace_rank_<r>`` for those); TorchComms' recorder
(:mod:`tools.corpus.comms`) ``comm_lib_trace_rank_<r>`` (pickle) or ``....json``. With the
debug server (``_debugsrv``, :mod:`tools.corpus.debugsrv`) only the server and the tutorial's
timeout handler write, into the server's ``dump_dir``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tools import launcher
from tools.corpus.spec import CaseSpec
from tools.corpus.workload import Job, run_steps

STALL_S = 600.0
#: Repeated snapshots: the newer one is written this long after the job's timeout has
#: passed since the older one (the other ranks' ops have failed by then), into NEWER_DIR
#: (renamed ``dumps_<ts>`` by the generator).
SNAPSHOT_DELAY_S = 1.0
NEWER_DIR = "newer"
#: A periodic dump: the round taken while the job still runs goes here (renamed
#: ``dumps_<ts>`` by the generator, as the dumps after the hang are moved into a newer one);
#: the hook's ops noted for that round are saved under this prefix in the side folder.
PERIODIC_DIR = "periodic"
PERIODIC_WAIT_S = 60.0
#: ... and the ranks go on this long after the round is in (no op in flight), so that the
#: dumps after the hang are named by a later second even when the job fails at once.
PERIODIC_GAP_S = 1.2
#: Several interval rounds: round ``k`` goes to ``ROUND_DIR + str(k)`` (renamed ``dumps_<ts>``
#: by the generator); after the step of a round each rank waits for its own file to be
#: written, then computes :data:`ROUNDS_GAP_S` (every rank alike, no op in flight), so that
#: the next round and the dumps after the hang are named by a later second.
ROUND_DIR = "round_"
ROUNDS_GAP_S = 1.2
#: ... and the dump thread writes this long after the rank reached its point (an interval
#: timer does not wait for an op to end: the rank is inside its op by then, or past it).
ROUND_LAG_S = 0.1
#: The hang's round by an interval timer: after the last interval round each rank's dump
#: thread writes its buffer into ``TICK_DIR + str(j)`` at every tick ``j`` of a timer of
#: :data:`TICK_S` on the machine's monotonic clock (the same ticks for every rank).
TICK_DIR = "tick_"
TICK_S = 1.5


def _ring(data: bytes, size: int) -> bytes:
    """A pickled dump as a buffer of ``size`` entries would hold it: its last ones."""
    import pickle

    doc = pickle.loads(data)
    doc["entries"] = list(doc.get("entries", []))[-size:]
    return pickle.dumps(doc, protocol=data[1] if data[:1] == b"\x80" else 2)


def _writer(spec: CaseSpec, rank: int, out_dir: Path, side_dir: Path, comms: Any) -> Any:
    """The function that writes this rank's buffer(s) once (``comms``: TorchComms'
    recorder, for the ``torchcomms`` recorder). With repeated snapshots it writes them
    twice: the older snapshot now, the newer one :data:`SNAPSHOT_DELAY_S` after the job's
    timeout into :data:`NEWER_DIR` (unless the rank's newer snapshot is to be missing, or
    ``newer`` is false: a rank that freezes), and then puts the older one in place (so
    that both are in when the generator sees the rank's file)."""
    log = launcher.logger(rank)
    lock = threading.Lock()
    done: list[bool] = []

    def write(newer: bool = True) -> None:
        with lock:
            if done:
                return
            done.append(True)
            if not spec.snapshots:
                write_into(out_dir)
                return
            stage = side_dir / f"older_{rank}"
            stage.mkdir(parents=True, exist_ok=True)
            older = write_into(stage)
            if newer and rank not in spec.snapshot_missing:
                time.sleep(spec.timeout_s + SNAPSHOT_DELAY_S)
                (out_dir / NEWER_DIR).mkdir(exist_ok=True)
                log("SNAPSHOT newer")
                write_into(out_dir / NEWER_DIR, f"{NEWER_DIR}_" if spec.snapshot_layout else "")
            for p in older:
                os.replace(p, out_dir / p.name)

    def write_into(folder: Path, noted: str = "") -> list[Path]:
        """``noted``: a prefix for the hook's side files of noted ops (a periodic round)."""
        if spec.recorder == "torchcomms":
            from tools.corpus.comms import PREFIX

            if spec.fmt == "json":
                path = folder / f"{PREFIX}{rank}.json"
                launcher.write_atomically(path, comms.dump_json().encode())
            else:
                path = comms.dump_file(rank, str(folder / PREFIX))
            log(f"DUMPED {path.name} {path.stat().st_size}")
            return [path]
        if spec.recorder == "gloo":
            from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

            if spec.fmt == "json":
                data = _dump_fr_trace_json(includeCollectives=True, onlyActive=False)
                path = folder / f"rank_{rank}.json"
            else:
                data = _dump_fr_trace(
                    includeCollectives=True, includeStackTraces=True, onlyActive=False
                )
                path = folder / f"nccl_trace_rank_{rank}"
            launcher.write_atomically(path, data)
            log(f"DUMPED {path.name} {len(data)}")
            return [path]
        from tools.hook_backend import LOG, dump

        LOG.poll()
        paths = []
        backends = ["nccl2"] + (["nccl-lazy"] if spec.recorder == "nccl-lazy" else [])
        ext = ".json" if spec.hook_json else ""  # as _dump_fr_trace_json returns them
        for backend in backends:
            data = dump(backend, json_format=spec.hook_json)
            if spec.hook_ring:  # a ring of the buffer's last entries
                data = _ring(data, spec.buffer_size)
            path = folder / f"{backend}_trace_rank_{rank}{ext}"
            launcher.write_atomically(path, data)
            ops = json.dumps(LOG.ops.get(backend, []))
            (side_dir / f"{noted}{path.name}.ops.json").write_text(ops)
            log(f"DUMPED {path.name} {len(data)}")
            paths.append(path)
        if spec.cpu_groups:  # c10d's own recorder: the groups on gloo
            from tools.hook_backend import c10d_gloo_dump

            data = c10d_gloo_dump(
                keep=spec.buffer_size if spec.hook_ring else 0, json_format=spec.hook_json
            )
            path = folder / f"nccl_trace_rank_{rank}{ext}"
            launcher.write_atomically(path, data)
            log(f"DUMPED {path.name} {len(data)}")
            paths.append(path)
        return paths

    write.into = write_into  # type: ignore[attr-defined]
    return write


def _periodic_round(spec: CaseSpec, rank: int, out_dir: Path, write: Any, side: Any) -> Any:
    """The function the workload calls after each step: after ``spec.periodic_after`` it
    writes this rank's buffer into :data:`PERIODIC_DIR` (an interval dump taken while the
    job still runs) and waits, on the side store (no torch op), until every rank has, so
    that a slow first dump makes no op time out (then :data:`PERIODIC_GAP_S` more)."""
    log = launcher.logger(rank)

    def after(step: int) -> None:
        if step != spec.periodic_after:
            return
        folder = out_dir / PERIODIC_DIR
        folder.mkdir(exist_ok=True)
        log(f"PERIODIC after step {step}")
        write.into(folder, noted=f"{PERIODIC_DIR}_")
        side.add("periodic", 1)
        deadline = time.monotonic() + PERIODIC_WAIT_S
        while side.add("periodic", 0) < spec.world and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(PERIODIC_GAP_S)

    return after


def _interval_rounds(
    spec: CaseSpec, rank: int, out_dir: Path, side_dir: Path, write: Any, job: Any
) -> Any:
    """(before, after_step): the rank's own dump thread (a debug server's interval dump)
    writes round ``k`` :data:`ROUND_LAG_S` after the main thread reached op
    ``spec.round_points[k][rank]`` of step ``spec.rounds_at[k]`` (the step's length: after
    its last op); the main thread computes there ``spec.round_compute[k][rank]`` s (uneven
    compute: the ranks that went on wait inside their next op for it) and goes on into its
    ops. So each rank is caught wherever it is then: computing, inside an op in flight or
    past it; no barrier. It logs ``ROUND k written during <step.index op> (<state>)``.
    After the round's step the rank waits for its own file only. A rank in
    ``spec.round_skip[k]`` writes no file of round ``k``; one in ``spec.round_late[k]``
    takes it at its point but its file lands in round ``k + 1``'s folder as that round is
    due (and it writes none of its own there). With ``spec.timer_rounds`` the dump thread
    then writes at every tick of :data:`TICK_S` (``TICK j written during ...``)."""
    log = launcher.logger(rank)
    todo: queue.Queue[int] = queue.Queue()
    n_step = len(spec.step_ops)
    computing: list[bool] = [False]
    staged: dict[int, list[Path]] = {}  # round k: this rank's late file of round k - 1

    def mine(table: tuple[tuple[int, ...], ...], k: int) -> bool:
        return 0 <= k < len(table) and rank in table[k]

    def dumper() -> None:
        while True:
            k = todo.get()
            time.sleep(ROUND_LAG_S)  # an interval timer does not wait for an op to end
            folder = out_dir / f"{ROUND_DIR}{k}"
            folder.mkdir(exist_ok=True)
            where = job().where + (" (computing before it)" if computing[0] else "")
            if k in staged:  # the file of round k - 1, an interval late
                for p in staged.pop(k):
                    os.replace(p, folder / p.name)
                log(f"ROUND {k} holds round {k - 1}'s file, landed late during {where}")
            elif mine(spec.round_skip, k):
                log(f"ROUND {k} skipped during {where}")
            elif mine(spec.round_late, k):
                stage = side_dir / f"late_{rank}_{k}"
                stage.mkdir(parents=True, exist_ok=True)
                staged[k + 1] = write.into(stage, noted=f"{ROUND_DIR}{k + 1}_")
                log(f"ROUND {k} written during {where}, landing late in round {k + 1}")
            else:
                write.into(folder, noted=f"{ROUND_DIR}{k}_")
                log(f"ROUND {k} written during {where}")
            todo.task_done()

    def ticker() -> None:
        j = int(time.monotonic() / TICK_S) + 1
        while True:
            time.sleep(max(0.0, j * TICK_S - time.monotonic()))
            folder = out_dir / f"{TICK_DIR}{j}"
            folder.mkdir(exist_ok=True)
            where = job().where
            write.into(folder, noted=f"{TICK_DIR}{j}_")
            log(f"TICK {j} written during {where}")
            j = max(j + 1, int(time.monotonic() / TICK_S) + 1)

    threading.Thread(target=dumper, name="fr-interval-dump", daemon=True).start()

    def at(step: int, index: int, kind: str) -> None:
        for k, (s, points) in enumerate(zip(spec.rounds_at, spec.round_points)):
            if step == s and index == points[rank]:
                log(f"ROUND {k} due at {step}.{index} {kind}")
                todo.put(k)
                computing[0] = True
                time.sleep(spec.round_compute[k][rank])
                computing[0] = False

    def before(step: int, index: int, kind: str) -> None:
        if index < n_step:  # (the eval pass's ops follow the step's: no points there)
            at(step, index, kind)

    def after(step: int) -> None:
        job().where = f"{step}.{n_step} between steps"
        at(step, n_step, "end of step")
        if step in spec.rounds_at:
            todo.join()
            time.sleep(ROUNDS_GAP_S)
            if spec.timer_rounds and step == spec.rounds_at[-1]:
                threading.Thread(target=ticker, name="fr-interval-timer", daemon=True).start()

    return before, after


def _chain(first: Any, then: Any) -> Any:
    """A before-op hook calling ``first``, then ``then``."""

    def both(step: int, index: int, kind: str) -> None:
        first(step, index, kind)
        then(step, index, kind)

    return both


def _stall(kind: str, log: Any) -> None:
    """Stop making progress, in the way ``kind`` names (the main thread blocks for good)."""
    if kind == "stall_lock":
        lock = threading.Lock()
        holder = threading.Thread(target=lambda: (lock.acquire(), time.sleep(STALL_S)))
        holder.daemon = True
        holder.start()
        time.sleep(0.05)
        lock.acquire()  # held by the other thread forever
    elif kind == "stall_dataloader":
        batches: queue.Queue[Any] = queue.Queue()
        loader = threading.Thread(target=lambda: time.sleep(STALL_S), daemon=True)
        loader.start()  # a loader that never produces a batch
        batches.get()
    else:
        deadline = time.monotonic() + STALL_S
        while time.monotonic() < deadline:  # "compute": sleep in slices
            time.sleep(0.5)


def _make_fault_hook(spec: CaseSpec, rank: int, side: Any, write: Any) -> Any:
    """The function the workload calls before each op; it fires the fault where designed."""
    log = launcher.logger(rank)
    f = spec.fault

    def before(step: int, index: int, kind: str) -> None:
        if step >= f.step and f.kind == "slow_rank" and rank in f.ranks:
            if step == f.step and index == 0:
                log(f"FAULT slow_rank sleeping {f.variant} s before each op")
            time.sleep(float(f.variant))
            return
        if (step, index) != (f.step, f.index) or rank not in f.ranks:
            return
        mode = f.kind
        if f.kind == "two_faults":
            mode = "stall_compute" if f.variant == "stall" or rank == f.ranks[0] else "crash_exit"
        if mode.startswith("stall"):
            log(f"FAULT {f.kind} {mode} before {step}.{index} {kind}")
            _stall(mode, log)
        elif mode in ("crash_exit", "crash_sigkill"):
            log(f"FAULT {f.kind} {mode} before {step}.{index} {kind}")
            sys.stdout.flush()
            sys.stderr.flush()
            if mode == "crash_sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(17)

    def freeze() -> None:
        """Write the buffer as it stands and stop the process (SIGSTOP), like a host that
        hangs with an op in flight; the store key ``frozen_<rank>`` tells the others."""
        log(f"FAULT stuck_in_collective freezing in {f.step}.{f.index} (its op enqueued)")
        write(newer=False)
        side.set(f"frozen_{rank}", "1")
        log("frozen")
        os.kill(os.getpid(), signal.SIGSTOP)

    return before, freeze


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    spec = CaseSpec.from_json(cfg["spec"])
    rank, world = cfg["rank"], spec.world
    out_dir, side_dir = Path(cfg["out_dir"]), Path(cfg["side_dir"])
    log = launcher.logger(rank)
    backend = "gloo"
    if spec.recorder in ("nccl2", "nccl-lazy"):
        from tools.hook_backend import register

        for name in ("nccl2", "nccl-lazy"):
            register(name)
        backend = "nccl2"
    comms = None
    if spec.recorder == "torchcomms":
        from tools.torchcomms_fr import FlightRecorder

        comms = FlightRecorder(
            max_entries=spec.buffer_size,
            cuda_states=spec.cuda,
            cuda_started=spec.cuda_started,
            cuda_started_share=spec.cuda_mixed,
            mix_seed=f"hangscope-corpus-2-mixed-states-{spec.torch}-{spec.seed}-{rank}",
        )
    write = _writer(spec, rank, out_dir, side_dir, comms)
    job_store = launcher.store_client(cfg["job_port"], world)
    timeout = timedelta(seconds=spec.timeout_s)
    dist.init_process_group(backend, store=job_store, rank=rank, world_size=world, timeout=timeout)
    side = launcher.store_client(cfg["side_port"], world)
    log(f"STARTED torch {torch.__version__}")
    server = None
    if spec.debugsrv_interval:  # the debug server's folder: no other file is written
        from tools.corpus.debugsrv import Server

        server = Server(spec, rank, cfg, comms)
        if spec.debugsrv_start == 0:
            server.start()

    if spec.policy == "all" and not spec.timer_rounds:  # (else the timer writes them)

        def poller() -> None:
            poll_side = launcher.store_client(cfg["side_port"], world)
            log("POLLER waiting")
            launcher.wait_for_trigger(poll_side)
            log("POLLER triggered")
            write()

        threading.Thread(target=poller, name="fr-dump-poller", daemon=True).start()
    before, freeze = _make_fault_hook(spec, rank, side, write)
    job_ref: list[Any] = []
    if spec.rounds_at:
        round_before, round_after = _interval_rounds(
            spec, rank, out_dir, side_dir, write, lambda: job_ref[0]
        )
        before = _chain(round_before, before)
    api: Any = dist
    if comms is not None:
        from tools.corpus.comms import CommsDist

        api = CommsDist(dist, rank, world, comms, backend="nccl" if spec.cuda else "gloo")
    job = Job(spec, rank, torch, api, timeout, side, before, freeze, log)
    job_ref.append(job)
    if spec.periodic_after >= 0:
        job.after_step = _periodic_round(spec, rank, out_dir, write, side)
    if spec.rounds_at:
        job.after_step = round_after
    if server is not None:
        job.after_step = server.after_step
    try:
        run_steps(job)
        log("BODY DONE")
        if spec.fault.kind in ("healthy", "slow_rank"):
            launcher.finish_healthy(side, rank, world)
    except Exception as exc:  # noqa: BLE001 - one of this rank's ops timed out or failed
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log(f"ERROR at {job.where}: {msg}")
        side.add("errors", 1)
        side.set(launcher.TRIGGER_KEY, str(rank))
        if server is not None:
            server.timed_out()
        elif spec.policy == "timed_out" and not spec.timer_rounds:
            write()
    time.sleep(STALL_S)  # the generator ends every process once the dumps are in


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--worker":
        _worker(json.loads(args[1]))
        return 0
    print("usage: python -m tools.corpus.worker --worker CFG (started by tools.corpus.generate)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
