"""A Python c10d backend that forwards every op to gloo under another backend name.

torch 2.15 attaches its generic ``FlightRecorderHook`` to every group whose backend does
not record itself (``_FR_SELF_RECORDING_BACKENDS`` in ``distributed_c10d.py``). The hook
files each entry under the name of the backend serving the op, so a Python backend that
calls itself ``nccl2`` (or ``nccl-lazy``) and forwards each op to a ``ProcessGroupGloo``
gets dumps whose entries read ``nccl2:all_reduce``, ``nccl2:send 0->1`` and so on: what the
hook writes for torch 2.15's default NCCL, recorded on a CPU.

A Python backend has no completion and no abort callbacks: the hook retires every entry
when it is issued (``scheduled`` + retired) and never writes a dump by itself. Trigger the
dump yourself with ``torch._C._distributed_c10d._dump_fr_trace(backend=NAME)``.

Self-contained: only torch is imported, and only inside the functions that need it.

Usage (in each worker, before ``init_process_group``)::

    from tools.hook_backend import register
    register("nccl2")                 # and register("nccl-lazy") for other groups
    dist.init_process_group("nccl2", store=..., rank=r, world_size=w, timeout=t)
    g = dist.new_group(ranks, backend="nccl-lazy")
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: Backend names this module has registered in this process.
REGISTERED: set[str] = set()
#: Every ProcessGroupGloo this process made, in order: True for a forwarding backend's own,
#: False for a group the job asked gloo for (:func:`note_c10d_gloo`). c10d's recorder numbers
#: gloo groups (``pg_id``) in that order, and records the forwarders' ops as well.
GLOO_MADE: list[bool] = []


class CompletionLog:
    """What the backend itself saw of each op it served, in issue order per backend name.

    The hook numbers a backend's entries (``record_id``) in the order the ops are issued,
    and every op reaches the backend once, so the n-th op this log saw for a name is entry n
    of that name's buffer. A polling thread stamps when each op's gloo work finished (and
    whether it succeeded): what nccl2's completion hook would have reported.
    """

    def __init__(self, poll_s: float = 0.002) -> None:
        self.ops: dict[str, list[dict[str, Any]]] = {}
        self._pending: list[tuple[dict[str, Any], Any]] = []
        self._lock = threading.Lock()
        self._poll_s = poll_s
        self._thread: threading.Thread | None = None

    def add(self, name: str, op: str, work: Any, *, waited: bool = False) -> Any:
        """Log ``work``; ``waited``: wait for it here (for works that never report
        completion, like gloo's reduce_scatter ones), raising what its wait raises."""
        rec = {
            "record_id": len(self.ops.setdefault(name, [])),
            "op": op,
            "done": False,
            "failed": False,
            "time_ns": 0,
        }
        self.ops[name].append(rec)
        if waited:
            try:
                work.wait()
            except Exception:
                rec["failed"], rec["time_ns"] = True, time.time_ns()
                raise
            rec["done"], rec["time_ns"] = True, time.time_ns()
            return work
        with self._lock:
            self._pending.append((rec, work))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="completion-log", daemon=True)
            self._thread.start()
        return work

    def poll(self) -> None:
        now = time.time_ns()
        with self._lock:
            still = []
            for rec, work in self._pending:
                try:
                    finished = work.is_completed()
                except Exception:  # noqa: BLE001 - a broken work is not a completion
                    finished = False
                if not finished:
                    still.append((rec, work))
                    continue
                try:
                    ok = work.is_success()
                except Exception:  # noqa: BLE001
                    ok = False
                rec["done"], rec["failed"], rec["time_ns"] = bool(ok), not ok, now
            self._pending = still

    def _run(self) -> None:
        while True:
            self.poll()
            time.sleep(self._poll_s)


#: The log every registered backend writes to (one per process).
LOG = CompletionLog()


def _backend_class() -> type:
    import torch
    from torch._C._distributed_c10d import Backend as C10dBackend
    from torch._C._distributed_c10d import ProcessGroupGloo

    class ForwardingBackend(C10dBackend):  # type: ignore[misc, valid-type, unused-ignore]
        """Every op goes to a ProcessGroupGloo of the same store, rank and size."""

        def __init__(self, name: str, opts: Any) -> None:
            super().__init__(opts.group_rank, opts.group_size)
            self._name = name
            self._gloo = ProcessGroupGloo(
                opts.store, opts.group_rank, opts.group_size, timeout=opts.timeout
            )
            GLOO_MADE.append(True)
            self._gloo.options.global_ranks_in_group = opts.global_ranks_in_group
            self._gloo.options.group_name = opts.group_id

        def _log(self, op: str, work: Any) -> Any:
            return LOG.add(self._name, op, work)

        def _log_waited(self, op: str, work: Any) -> Any:
            # gloo's reduce_scatter works never read is_completed(), even after their wait:
            # the op completes here, before it returns (the caller waits for it anyway).
            return LOG.add(self._name, op, work, waited=True)

        def getBackendName(self) -> str:
            return self._name

        @property
        def name(self) -> str:  # type: ignore[override, unused-ignore]
            return self._name

        # Collectives -------------------------------------------------------------------
        def allreduce(self, tensors: Any, opts: Any = None) -> Any:
            return self._log("allreduce", self._gloo.allreduce(tensors, opts))

        def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
            return self._log("allreduce_coalesced", self._gloo.allreduce_coalesced(tensors, opts))

        def broadcast(self, tensors: Any, opts: Any = None) -> Any:
            return self._log("broadcast", self._gloo.broadcast(tensors, opts))

        def reduce(self, tensors: Any, opts: Any = None) -> Any:
            return self._log("reduce", self._gloo.reduce(tensors, opts))

        def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log("allgather", self._gloo.allgather(outputs, inputs, opts))

        def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log("_allgather_base", self._gloo._allgather_base(output, input, opts))

        def allgather_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log(
                "allgather_coalesced", self._gloo.allgather_coalesced(outputs, inputs, opts)
            )

        def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log("gather", self._gloo.gather(outputs, inputs, opts))

        def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log("scatter", self._gloo.scatter(outputs, inputs, opts))

        def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log_waited(
                "reduce_scatter", self._gloo.reduce_scatter(outputs, inputs, opts)
            )

        def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log_waited(
                "_reduce_scatter_base", self._gloo._reduce_scatter_base(output, input, opts)
            )

        def alltoall_base(
            self, output: Any, input: Any, out_split: Any, in_split: Any, opts: Any = None
        ) -> Any:
            return self._log(
                "alltoall_base", self._gloo.alltoall_base(output, input, out_split, in_split, opts)
            )

        def alltoall(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log("alltoall", self._gloo.alltoall(outputs, inputs, opts))

        # The single-tensor names torch 2.15's c10d calls (older ones above stay for 2.13).
        def all_to_all_single(
            self, output: Any, input: Any, out_split: Any, in_split: Any, opts: Any = None
        ) -> Any:
            return self._log(
                "all_to_all_single",
                self._gloo.all_to_all_single(output, input, out_split, in_split, opts),
            )

        def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log("all_gather_single", self._gloo.all_gather_single(output, input, opts))

        def all_gather_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._log(
                "all_gather_single_coalesced",
                self._gloo.all_gather_single_coalesced(outputs, inputs, opts),
            )

        def gather_into_tensor(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log(
                "gather_into_tensor", self._gloo.gather_into_tensor(output, input, opts)
            )

        def gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log("gather_single", self._gloo.gather_single(output, input, opts))

        def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._log_waited(
                "reduce_scatter_single", self._gloo.reduce_scatter_single(output, input, opts)
            )

        def reduce_scatter_single_coalesced(
            self, outputs: Any, inputs: Any, opts: Any = None
        ) -> Any:
            return self._log_waited(
                "reduce_scatter_single_coalesced",
                self._gloo.reduce_scatter_single_coalesced(outputs, inputs, opts),
            )

        def barrier(self, opts: Any = None) -> Any:
            return self._log("barrier", self._gloo.barrier(opts))

        # Point to point ----------------------------------------------------------------
        def send(self, tensors: Any, dst: int, tag: int = 0) -> Any:
            return self._log("send", self._gloo.send(tensors, dst, tag))

        def recv(self, tensors: Any, src: int, tag: int = 0) -> Any:
            return self._log("recv", self._gloo.recv(tensors, src, tag))

        def recv_anysource(self, tensors: Any, tag: int = 0) -> Any:
            return self._log("recv_anysource", self._gloo.recv_anysource(tensors, tag))

    del torch
    return ForwardingBackend


def register(name: str = "nccl2") -> None:
    """Register ``name`` as a CPU backend that forwards to gloo (idempotent)."""
    import torch.distributed as dist

    if name in REGISTERED:
        return
    cls = _backend_class()

    def create(opts: Any, backend_options: Any = None) -> Any:
        return cls(name, opts)

    dist.Backend.register_backend(name, create, extended_api=True, devices=["cpu"])
    REGISTERED.add(name)


def dump(backend: str, *, json_format: bool = False, stacks: bool = True) -> bytes:
    """This process's flight-recorder buffer of ``backend``, as PyTorch serializes it."""
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    if json_format:
        return _dump_fr_trace_json(includeCollectives=True, onlyActive=False, backend=backend)
    return _dump_fr_trace(
        includeCollectives=True, includeStackTraces=stacks, onlyActive=False, backend=backend
    )


def note_c10d_gloo() -> None:
    """Say that the job just made a gloo group this rank is in (``new_group(...,
    backend="gloo")``), for :func:`c10d_gloo_dump`."""
    GLOO_MADE.append(False)


def c10d_gloo_dump(*, stacks: bool = True, keep: int = 0, json_format: bool = False) -> bytes:
    """c10d's own recorder's buffer (``_dump_fr_trace``, what gloo groups write) as a job
    whose other groups run on nccl2 would have it.

    Each forwarding backend runs its ops on a ProcessGroupGloo of its own, which records
    them in c10d's recorder too (as ``gloo:`` entries of a group named ``""``); a real nccl2
    group leaves nothing there. Those entries are taken out, and the rest numbered as the
    recorder would have numbered them without the forwarders' groups: ``record_id`` from 0
    in order (the buffer must not have wrapped), ``pg_id`` and the ``pg_status`` keys by the
    order the job's own gloo groups were made (:data:`GLOO_MADE`). Raises ``ValueError``
    when an entry does not sit where that order says. ``keep`` > 0: only the last ``keep``
    of the job's entries, as a buffer of that size that held no forwarder's op would (the
    numbering goes on: the first kept one is not 0). ``json_format``: written as
    ``_dump_fr_trace_json`` writes it (``entries`` left out when none is kept, as it does).
    """
    import json
    import pickle

    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    if json_format:
        raw = _dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        doc = json.loads(raw)
    else:
        raw = _dump_fr_trace(includeCollectives=True, includeStackTraces=stacks, onlyActive=False)
        doc = pickle.loads(raw)
    made = list(GLOO_MADE)
    new_id = {old: new for new, old in enumerate(i for i, fwd in enumerate(made) if not fwd)}
    entries = []
    for e in doc.get("entries", []):
        pg, name = int(e["pg_id"]), str(e["process_group"][0])
        if pg >= len(made) or made[pg] != (name == ""):
            raise ValueError(f"gloo entry {e['record_id']} of group {name!r} has pg_id {pg}")
        if made[pg]:
            continue
        e = dict(e)
        e["record_id"], e["pg_id"] = len(entries), new_id[pg]
        entries.append(e)
    if doc.get("entries") and int(doc["entries"][0]["record_id"]) != 0:
        raise ValueError("c10d's recorder wrapped: the numbering cannot be restored")
    status = {}
    for key, value in (doc.get("pg_status") or {}).items():
        if int(key) >= len(made):
            raise ValueError(f"pg_status of gloo group {key}, only {len(made)} made")
        if not made[int(key)]:
            status[str(new_id[int(key)])] = value
    doc["entries"], doc["pg_status"] = entries[-keep:] if keep > 0 else entries, status
    if json_format:
        if not doc["entries"]:
            del doc["entries"]
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return pickle.dumps(doc, protocol=raw[1] if raw[:1] == b"\x80" else 2)


# Backend calls whose entries the hook names after the older c10d op (torch 2.15's
# all_gather_into_tensor reaches the backend as all_gather_single, recorded _all_gather_base).
_HOOK_NAME = {"allgathersingle": "allgatherbase", "reducescattersingle": "reducescatterbase"}


def _same_op(hook_op: str, backend_op: str) -> bool:
    """Does the hook's op name (``all_reduce``, ``send``...) name the backend call?"""
    a, b = hook_op.replace("_", "").lower(), backend_op.replace("_", "").lower()
    b = _HOOK_NAME.get(b, b)
    p2p = {"send", "recv", "recvanysource"}
    if (a in p2p) != (b in p2p):
        return False
    if a in p2p:
        return a == b or (a == "recv" and b == "recvanysource")
    return a == b or a.startswith(b) or b.startswith(a)


def overlay_states(
    dump_obj: dict[str, Any], backend: str, ops: list[dict[str, Any]]
) -> dict[str, Any]:
    """The dump as nccl2's own completion hook would have left it, from what the backend saw.

    A Python backend reports no completion, so the hook retired every entry when it was
    issued (``scheduled`` + retired). nccl2 reports completion: an op that finished reads
    ``completed`` + retired with its completion time, one that never finished (timed out,
    failed, still waiting) stays ``scheduled`` and is not retired; ``pg_status`` counts the
    last completed op_id. Only those fields change; a dump whose entries do not line up with
    ``ops`` (entry n of the buffer is the n-th op the backend served) raises ``ValueError``.
    """
    out = dict(dump_obj)
    entries = [dict(e) for e in dump_obj.get("entries", [])]
    completed_op: dict[str, int] = {}
    for e in entries:
        rid = int(e["record_id"])
        if rid >= len(ops):
            raise ValueError(f"{backend}: entry {rid} was never served by the backend")
        rec = ops[rid]
        op = str(e.get("profiling_name", "")).partition(":")[2].split(" ")[0]
        if not _same_op(op, rec["op"]):
            raise ValueError(f"{backend}: entry {rid} is {op} but the backend served {rec['op']}")
        if rec["done"]:
            e["state"], e["retired"] = "completed", True
            e["time_discovered_completed_ns"] = int(rec["time_ns"])
            key = str(e["pg_id"])
            completed_op[key] = max(completed_op.get(key, -1), int(e["op_id"]))
        else:
            e["state"], e["retired"] = "scheduled", False
    out["entries"] = entries
    status = {}
    for key, value in (dump_obj.get("pg_status") or {}).items():
        value = dict(value)
        last = completed_op.get(str(key), -1)
        value["last_completed_collective"] = (
            str(last) if isinstance(value.get("last_completed_collective"), str) else last
        )
        status[key] = value
    out["pg_status"] = status
    return out
