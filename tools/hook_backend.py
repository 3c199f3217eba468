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

from typing import Any

#: Backend names this module has registered in this process.
REGISTERED: set[str] = set()


def _backend_class() -> type:
    import torch
    from torch._C._distributed_c10d import Backend as C10dBackend
    from torch._C._distributed_c10d import ProcessGroupGloo

    class ForwardingBackend(C10dBackend):  # type: ignore[misc, valid-type]
        """Every op goes to a ProcessGroupGloo of the same store, rank and size."""

        def __init__(self, name: str, opts: Any) -> None:
            super().__init__(opts.group_rank, opts.group_size)
            self._name = name
            self._gloo = ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size,
                                          timeout=opts.timeout)
            self._gloo.options.global_ranks_in_group = opts.global_ranks_in_group
            self._gloo.options.group_name = opts.group_id

        def getBackendName(self) -> str:  # noqa: N802 - the C++ name
            return self._name

        @property
        def name(self) -> str:  # type: ignore[override]
            return self._name

        # Collectives -------------------------------------------------------------------
        def allreduce(self, tensors: Any, opts: Any = None) -> Any:
            return self._gloo.allreduce(tensors, opts)

        def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
            return self._gloo.allreduce_coalesced(tensors, opts)

        def broadcast(self, tensors: Any, opts: Any = None) -> Any:
            return self._gloo.broadcast(tensors, opts)

        def reduce(self, tensors: Any, opts: Any = None) -> Any:
            return self._gloo.reduce(tensors, opts)

        def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._gloo.allgather(outputs, inputs, opts)

        def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._gloo._allgather_base(output, input, opts)

        def allgather_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._gloo.allgather_coalesced(outputs, inputs, opts)

        def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._gloo.gather(outputs, inputs, opts)

        def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._gloo.scatter(outputs, inputs, opts)

        def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return self._gloo.reduce_scatter(outputs, inputs, opts)

        def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return self._gloo._reduce_scatter_base(output, input, opts)

        def alltoall_base(self, output: Any, input: Any, out_split: Any, in_split: Any,
                          opts: Any = None) -> Any:
            return self._gloo.alltoall_base(output, input, out_split, in_split, opts)

        def barrier(self, opts: Any = None) -> Any:
            return self._gloo.barrier(opts)

        # Point to point ----------------------------------------------------------------
        def send(self, tensors: Any, dst: int, tag: int = 0) -> Any:
            return self._gloo.send(tensors, dst, tag)

        def recv(self, tensors: Any, src: int, tag: int = 0) -> Any:
            return self._gloo.recv(tensors, src, tag)

        def recv_anysource(self, tensors: Any, tag: int = 0) -> Any:
            return self._gloo.recv_anysource(tensors, tag)

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
    return _dump_fr_trace(includeCollectives=True, includeStackTraces=stacks, onlyActive=False,
                          backend=backend)
