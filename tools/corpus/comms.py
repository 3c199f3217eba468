"""TorchComms' recorder over a corpus job: the workload's ``torch.distributed`` calls, each
recorded by :class:`tools.torchcomms_fr.FlightRecorder` through a communicator per group.

:class:`CommsDist` stands where the workload uses ``torch.distributed``: ``new_group`` makes
the real c10d gloo group and, on its members, a communicator split from the world one (named
as a device mesh names it: ``tp``, ``cp``, ``dp``...; the split is recorded on the world
communicator, as TorchComms' split does, without a barrier of its own: c10d's ``new_group``
already synchronised); every op runs on the real group, recorded before it runs and retired
after it returned (an op that raised stays not retired, as TorchComms' post-hook never runs).
Op names are TorchComms' (``all_gather_single``, ``reduce_scatter_single``,
``all_to_all_v_single``, ``batch_op_issue`` for a batched send/recv...). Anything else goes to ``torch.distributed`` unrecorded.
"""

from __future__ import annotations

from typing import Any

from tools.torchcomms_fr import Comm, FlightRecorder, OpIds

__all__ = ["PREFIX", "CommsDist"]

#: ``DebugInfoWriter``'s default file prefix: ``comm_lib_trace_rank_<rank>``.
PREFIX = "comm_lib_trace_rank_"
_NAMES = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "DATA_PARALLEL_GROUP": "dp",
    "HSDP_SHARD_GROUP": "shard",
    "HSDP_REPLICATE_GROUP": "replicate",
    "GROUP_B": "group_b",
}


class CommsDist:
    """``torch.distributed`` as the workload calls it, each op through a recorded comm."""

    def __init__(
        self, dist: Any, rank: int, world: int, recorder: FlightRecorder, backend: str = "gloo"
    ) -> None:
        """``backend``: the name the recorder is told (``nccl`` for TorchComms on CUDA, with
        a recorder of ``cuda_states``); the ops run on gloo either way."""
        self._dist = dist
        self.rank = rank
        self.recorder = recorder
        self.world = Comm("world", backend, list(range(world)), rank, None, OpIds())
        self.world.register(recorder)
        self._comms: dict[int, Comm] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)

    def _comm(self, group: Any) -> Comm:
        return self.world if group is None else self._comms[id(group)]

    def new_group(self, ranks: list[int], group_desc: str = "", **kw: Any) -> Any:
        g = self._dist.new_group(ranks=ranks, group_desc=group_desc, **kw)
        if self.rank in ranks:
            name = _NAMES.get(group_desc, group_desc.lower())
            self.world.call("split", [], [], lambda: None)
            comm = Comm(
                name, self.world.backend, list(ranks), ranks.index(self.rank), g, self.world.op_ids
            )
            for rec, label, _ in self.world.recorders:
                comm.register(rec, label)
            self._comms[id(g)] = comm
        return g

    def all_reduce(self, t: Any, group: Any = None, async_op: bool = False) -> Any:
        d = self._dist
        call = lambda: d.all_reduce(t, group=group, async_op=async_op)  # noqa: E731
        return self._comm(group).call("all_reduce", [t], [t], call)

    def broadcast(self, t: Any, src: int, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.broadcast(t, src=src, group=group)  # noqa: E731
        return self._comm(group).call("broadcast", [t], [t], call)

    def all_gather(self, out: list[Any], t: Any, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.all_gather(out, t, group=group)  # noqa: E731
        return self._comm(group).call("all_gather", [t], list(out), call)

    def all_gather_into_tensor(self, out: Any, t: Any, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.all_gather_into_tensor(out, t, group=group)  # noqa: E731
        return self._comm(group).call("all_gather_single", [t], [out], call)

    def reduce_scatter_tensor(self, out: Any, t: Any, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.reduce_scatter_tensor(out, t, group=group)  # noqa: E731
        return self._comm(group).call("reduce_scatter_single", [t], [out], call)

    def all_to_all_single(self, out: Any, t: Any, group: Any = None, **splits: Any) -> Any:
        d = self._dist
        call = lambda: d.all_to_all_single(out, t, group=group, **splits)  # noqa: E731
        return self._comm(group).call("all_to_all_v_single", [t], [out], call)

    def barrier(self, group: Any = None) -> Any:
        d = self._dist
        return self._comm(group).call("barrier", [], [], lambda: d.barrier(group=group))

    def send(self, t: Any, dst: int, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.send(t, dst=dst, group=group)  # noqa: E731
        return self._comm(group).call("send", [t], [t], call)

    def recv(self, t: Any, src: int, group: Any = None) -> Any:
        d = self._dist
        call = lambda: d.recv(t, src=src, group=group)  # noqa: E731
        return self._comm(group).call("recv", [], [t], call)

    def batch_p2p(self, ops: list[tuple[str, Any, int]], group: Any = None) -> Any:
        """``batch_isend_irecv`` as TorchComms' batch: one ``batch_op_issue`` entry (no
        tensors) for the batch's ``("isend" | "irecv", tensor, peer)`` ops, posted together
        and waited for (retired when they all returned, as the other ops)."""
        d = self._dist

        def run() -> None:
            works = [
                d.irecv(t, src=peer, group=group)
                if kind == "irecv"
                else d.isend(t, dst=peer, group=group)
                for kind, t, peer in ops
            ]
            for w in works:
                w.wait()

        return self._comm(group).call("batch_op_issue", [], [], run)
