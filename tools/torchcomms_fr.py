"""A writer of TorchComms' flight-recorder dumps, for recording samples where TorchComms
itself cannot be installed (it is not on the package registry).

It follows meta-pytorch/torchcomms at commit 59426ba4bfee75800b2909274d200401c4d5d2df,
``comms/torchcomms/hooks/fr/FlightRecorder.cpp`` (line numbers of that file):

* ``FlightRecorderHook::registerWithComm`` (966-1028): ``pg_id`` is the hook's registration
  count, ``desc`` the comm's backend name, ``pg_config[name] = {name, desc, ranks}`` with the
  ranks written ``"[0,1]"`` (``ranks_str``, 30-39: no spaces); a split comm is registered by
  the split's post-hook (1149-1163);
* ``record_pg_ranks`` (309-317) stores the ranks in a ``std::map`` keyed by ``(name,
  backend)`` with ``operator[]``: a second comm of the same name and backend in one process
  (a middle pipeline stage's two ``pp`` comms) **overwrites** the first's ranks, while its
  entries keep their own ``pg_id`` (the registration count, 968-970); ``getPgConfig``
  (647-657) and ``getPgConfigJson`` (659-670) walk that map in key order and ``insert`` /
  ``emplace`` by name alone, which keep the first of two backends of one name;
* ``TorchComm::split`` (``comms/torchcomms/TorchComm.cpp`` 548-568): the pre-hook records the
  split on the parent; a rank outside the new comm passes no ranks, gets no comm back and
  never reaches the post-hook, so its split entry is never retired;
* ``onPreHook`` (1030-1134): ``profiling_name`` is ``"<backend>:<op>"`` (no peer for
  send/recv); a send records its tensor as input *and* output, a recv as output only
  (1053-1061), ``split``/``barrier``/``batch_op_issue`` no tensors; ``timeout_ms`` is always
  600000 (1131); no ``pg_status`` is passed (1132);
* ``FlightRecorder::record`` (216-307): ``collective_seq_id`` is one counter of the recorder,
  over every comm and op kind (252); ``op_id`` comes from TorchComms' process-wide op id
  generator; the ring buffer slot is ``op_id % max_entries`` (293-301);
* ``retire_id`` (406-526): on CPU ``duration_ms`` is the wall time from record to retire
  (487-491) and ``retired`` becomes true; it is called from the post-hook, which a call that
  raised (a gloo timeout) never reaches;
* ``getCollectiveTrace`` (539-645): each entry's keys in that order, ``p2p_seq_id`` 0,
  ``is_p2p`` false, state ``completed``/``started``/``scheduled`` from the discovered times,
  no ``frames`` (every dump path passes include-stack-traces false: 1173-1182, 169-175);
* ``dump`` (802-841): the top-level keys ``version`` ("2.10"), ``pg_config``,
  ``comm_lib_version``, ``pg_status`` (``{}``: ``getPgStatus`` skips null statuses,
  672-685), ``entries``; pickled by ``torch::jit::Pickler`` with protocol 2 (50-63; here
  Python's pickle, protocol 2, of the same plain values);
* ``dump_json`` (707-800): nlohmann's JSON (its objects keep keys sorted), ``process_group``
  a list, undiscovered times 0, ``entries`` left out when empty;
* ``DebugInfoWriter`` (848-920): file ``<prefix><rank>``, prefix
  ``TORCHCOMM_FR_DUMP_TEMP_FILE`` else ``~/.cache/torch/comm_lib_trace_rank_``.

On CUDA the state of an entry is read when it is retired, which for an asynchronous op is at
issue: ``cuda_states=True`` writes that (every issued op retired, ``scheduled``), since no
CUDA event can be observed here. The ops themselves run on real c10d gloo groups.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Comm", "FlightRecorder", "OpIds", "dtype_name"]

VERSION = "2.10"
TIMEOUT_MS = 600000
BUFFER_SIZE = 2000

_DTYPES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def dtype_name(t: Any) -> str:
    """``c10::toString(ScalarType)`` of a tensor's dtype: ``Float``, ``Long``..."""
    return _DTYPES.get(str(t.dtype).removeprefix("torch."), str(t.dtype))


def _thread_name() -> str:
    """``c10::getThreadName()``: the OS name of the calling thread."""
    try:
        return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
    except OSError:
        return threading.current_thread().name


class OpIds:
    """TorchComms' process-wide op id generator (one per process, every comm, every op)."""

    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        n = self.next
        self.next += 1
        return n


@dataclass
class _Entry:
    id: int
    pg_id: int
    pg_name: tuple[str, str]
    collective_seq_id: int
    op_id: int
    profiling_name: str
    time_created: int
    inputs: list[tuple[list[int], str]]
    outputs: list[tuple[list[int], str]]
    thread_id: str
    thread_name: str
    duration: float | None = None
    started: int | None = None
    completed: int | None = None
    retired: bool = False


@dataclass
class FlightRecorder:
    """``torch::comms::fr::FlightRecorder`` and the parts of its hook that shape a dump."""

    max_entries: int = BUFFER_SIZE
    cuda_states: bool = False
    #: with ``cuda_states``: the state read at issue is ``started`` (the GPU had begun the
    #: kernel when the op retired), not ``scheduled``
    cuda_started: bool = False
    #: with ``cuda_states``: the chance that an entry's state read at issue is ``started``,
    #: drawn per entry from ``mix_seed``'s stream (a dump holding both states); 0 is off
    cuda_started_share: float = 0.0
    mix_seed: str = ""
    entries: list[_Entry] = field(default_factory=list)
    pg_name_to_ranks: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    registrations: int = 0
    comm_lib_version: str = ""
    _id: int = 0
    _seq: int = 0
    _latest_op_id: int = -1
    _by_op: dict[int, _Entry] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _mix: random.Random | None = None

    def register(self, name: str, backend: str, ranks: list[int]) -> int:
        """``registerWithComm``: the comm's pg_id; its ranks recorded under (name, backend)."""
        with self._lock:
            pg_id = self.registrations
            self.registrations += 1
            self.pg_name_to_ranks[(name, backend)] = list(ranks)
            return pg_id

    def record(
        self,
        pg_id: int,
        pg_name: tuple[str, str],
        op_id: int,
        profiling_name: str,
        inputs: list[Any],
        outputs: list[Any],
    ) -> None:
        e = _Entry(
            id=self._id,
            pg_id=pg_id,
            pg_name=pg_name,
            collective_seq_id=self._seq,
            op_id=op_id,
            profiling_name=profiling_name,
            time_created=time.time_ns(),
            inputs=[(list(t.shape), dtype_name(t)) for t in inputs],
            outputs=[(list(t.shape), dtype_name(t)) for t in outputs],
            thread_id=str(threading.get_ident()),
            thread_name=_thread_name(),
        )
        with self._lock:
            self._seq += 1
            idx = op_id % self.max_entries
            self._latest_op_id = op_id
            if len(self.entries) < self.max_entries:
                self.entries.append(e)
            else:
                self.entries[idx] = e
            self._by_op[op_id] = e
            self._id += 1

    def retire(self, op_id: int) -> None:
        """``retire_id``: the CPU duration, then retired."""
        with self._lock:
            e = self._by_op.pop(op_id, None)
            if e is None:
                return
            e.duration = (time.time_ns() - e.time_created) / 1e6
            if self.cuda_states and (self.cuda_started or self._mixed_started()):
                e.started = time.time_ns()
            e.retired = True

    def _mixed_started(self) -> bool:
        if self.cuda_started_share <= 0:
            return False
        if self._mix is None:
            self._mix = random.Random(self.mix_seed)
        return self._mix.random() < self.cuda_started_share

    def _ordered(self) -> list[_Entry]:
        """``dump_entries``: oldest first from the slot after the newest op."""
        if not self.entries:
            return []
        nxt = (self._latest_op_id + 1) % self.max_entries
        return self.entries[nxt:] + self.entries[:nxt]

    @staticmethod
    def _state(e: _Entry) -> str:
        if e.completed is not None:
            return "completed"
        if e.started is not None:
            return "started"
        return "scheduled"

    def _entry(self, e: _Entry, json_form: bool) -> dict[str, Any]:
        d: dict[str, Any] = {
            "record_id": e.id,
            "pg_id": e.pg_id,
            "process_group": list(e.pg_name) if json_form else tuple(e.pg_name),
            "thread_name": e.thread_name,
            "thread_id": e.thread_id,
            "collective_seq_id": e.collective_seq_id,
            "p2p_seq_id": 0,
            "op_id": e.op_id,
            "profiling_name": e.profiling_name,
            "time_created_ns": e.time_created,
        }
        if e.duration is not None:
            d["duration_ms"] = e.duration
        d["input_sizes"] = [s for s, _ in e.inputs]
        d["input_dtypes"] = [t for _, t in e.inputs]
        d["output_sizes"] = [s for s, _ in e.outputs]
        d["output_dtypes"] = [t for _, t in e.outputs]
        d["state"] = self._state(e)
        none = 0 if json_form else None
        d["time_discovered_started_ns"] = e.started if e.started is not None else none
        d["time_discovered_completed_ns"] = e.completed if e.completed is not None else none
        d["retired"] = e.retired
        d["timeout_ms"] = TIMEOUT_MS
        d["is_p2p"] = False
        return d

    def _config(self) -> dict[str, dict[str, str]]:
        """``getPgConfig``: (name, backend) in key order, the first backend of a name kept;
        a name registered twice holds the ranks of its last registration."""
        out: dict[str, dict[str, str]] = {}
        for (name, desc), ranks in sorted(self.pg_name_to_ranks.items()):
            ranks_str = "[" + ",".join(map(str, ranks)) + "]"
            out.setdefault(name, {"name": name, "desc": desc, "ranks": ranks_str})
        return out

    def dump(self, only_active: bool = False) -> bytes:
        """``dump``: the pickle (protocol 2) of the per-rank file."""
        with self._lock:
            entries = [
                self._entry(e, False) for e in self._ordered() if not (only_active and e.retired)
            ]
            top = {
                "version": VERSION,
                "pg_config": self._config(),
                "comm_lib_version": self.comm_lib_version,
                "pg_status": {},
                "entries": entries,
            }
        return pickle.dumps(top, protocol=2)

    def dump_json(self, only_active: bool = False) -> str:
        """``dump_json``: nlohmann's JSON (keys sorted, compact), ``entries`` only when any."""
        with self._lock:
            top: dict[str, Any] = {
                "version": VERSION,
                "comm_lib_version": self.comm_lib_version,
                "pg_config": self._config(),
                "pg_status": {},
            }
            entries = [
                self._entry(e, True) for e in self._ordered() if not (only_active and e.retired)
            ]
        if entries:
            top["entries"] = entries
        return json.dumps(top, sort_keys=True, separators=(",", ":"))

    def dump_file(self, rank: int, prefix: str | None = None) -> Path:
        """``DebugInfoWriter::write``: ``<prefix><rank>``."""
        if prefix is None:
            cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
            prefix = os.environ.get(
                "TORCHCOMM_FR_DUMP_TEMP_FILE", os.path.join(cache, "torch", "comm_lib_trace_rank_")
            )
        path = Path(f"{prefix}{rank}")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.dump())
        os.replace(tmp, path)
        return path


@dataclass
class Comm:
    """A TorchComms communicator as its hooks see it, over a real c10d group: each op is
    recorded by every recorder registered with it before it runs and retired after it
    returned (an op that raised stays not retired, as a timed-out gloo op does)."""

    name: str
    backend: str
    ranks: list[int]
    rank: int
    group: Any
    op_ids: OpIds
    recorders: list[tuple[FlightRecorder, str, int]] = field(default_factory=list)

    def register(self, recorder: FlightRecorder, backend: str | None = None) -> None:
        """``registerWithComm`` of ``recorder``; ``backend`` overrides the name it is told."""
        label = backend or self.backend
        self.recorders.append((recorder, label, recorder.register(self.name, label, self.ranks)))

    def call(self, op: str, inputs: list[Any], outputs: list[Any], run: Any) -> Any:
        """Record ``op`` (its tensors), run ``run()`` and retire it when it returned."""
        return self._run(op, inputs, outputs, run)

    def _run(self, op: str, inputs: list[Any], outputs: list[Any], call: Any) -> Any:
        op_id = self.op_ids.take()
        for rec, label, pg_id in self.recorders:
            rec.record(pg_id, (self.name, label), op_id, f"{label}:{op}", inputs, outputs)
            if rec.cuda_states:  # an async op retires (and reads its state) at issue
                rec.retire(op_id)
        out = call()
        for rec, _, _ in self.recorders:
            if not rec.cuda_states:
                rec.retire(op_id)
        return out

    def all_reduce(self, t: Any) -> None:
        import torch.distributed as dist

        self._run("all_reduce", [t], [t], lambda: dist.all_reduce(t, group=self.group))

    def barrier(self) -> None:
        import torch.distributed as dist

        self._run("barrier", [], [], lambda: dist.barrier(group=self.group))

    def send(self, t: Any, dst: int) -> None:
        import torch.distributed as dist

        self._run("send", [t], [t], lambda: dist.send(t, self.ranks[dst], group=self.group))

    def recv(self, t: Any, src: int) -> None:
        import torch.distributed as dist

        self._run("recv", [], [t], lambda: dist.recv(t, self.ranks[src], group=self.group))

    def split(self, name: str, ranks: list[int], group: Any) -> Comm | None:
        """``split``: recorded on this comm; the new comm is registered with every recorder
        of this one (the split's post-hook, which retires the split). ``group`` is the c10d
        group of ``ranks``; a rank outside them passes ``[]`` and gets ``None``, its split
        entry never retired (``TorchComm::split`` returns before the post-hook)."""
        import torch.distributed as dist

        op_id = self.op_ids.take()
        for rec, label, pg_id in self.recorders:
            rec.record(pg_id, (self.name, label), op_id, f"{label}:split", [], [])
        dist.barrier(group=self.group)
        if not ranks:
            return None
        new = Comm(name, self.backend, list(ranks), ranks.index(self.rank), group, self.op_ids)
        for rec, label, _ in self.recorders:
            rec.retire(op_id)
            new.register(rec, label)
        return new
