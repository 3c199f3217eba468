"""The dialect defaults per ``profiling_name`` prefix: the one table that knows backend names
(see :mod:`analyzer.match.dialect` for what each field means and how a rank's content overrides it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "EVERY_RANK",
    "HOOK",
    "MANUAL",
    "NONE",
    "OBSERVED",
    "OWN_TIMEOUT",
    "PREFIXES",
    "TORCHCOMMS",
    "Dialect",
    "default_for",
    "legacy",
]

OBSERVED = "observed"
HOOK = "hook"
NONE = "none"

EVERY_RANK = "every_rank"
OWN_TIMEOUT = "own_timeout"
MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one rank's dump is read."""

    name: str
    """Dialect name: ``nccl-legacy``, ``nccl2``, ``nccl-lazy``, ``gloo``, ``hook`` (another
    hook-recorded backend), ``xccl``..."""
    backend: str
    """The ``profiling_name`` prefix the rank's entries carry."""
    completion: str
    counter: str
    one_sided_p2p: bool
    records_p2p: bool
    dump_policy: str
    evidence: tuple[str, ...] = ()
    """What the rank's own content confirmed or overrode (empty: the prefix default as is)."""

    @property
    def completion_observed(self) -> bool:
        return self.completion != NONE

    def to_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.name,
            "backend": self.backend,
            "completion": self.completion,
            "counter": self.counter,
            "one_sided_p2p": self.one_sided_p2p,
            "records_p2p": self.records_p2p,
            "dump_policy": self.dump_policy,
            "evidence": list(self.evidence),
        }


def legacy(name: str) -> Dialect:
    return Dialect(name, name, OBSERVED, "seq", False, True, EVERY_RANK)


def _hooked(
    name: str, completion: str = NONE, policy: str = MANUAL, dialect: str = "hook"
) -> Dialect:
    return Dialect(dialect, name, completion, "op_id", True, True, policy)


#: Defaults per ``profiling_name`` prefix (``nccl:`` is the legacy class in torch 2.15 too).
PREFIXES: dict[str, Dialect] = {
    "nccl": replace(legacy("nccl"), name="nccl-legacy"),
    "nccl-legacy": replace(legacy("nccl-legacy"), name="nccl-legacy"),
    "ncclx": legacy("ncclx"),
    "rccl": legacy("rccl"),
    "hccl": legacy("hccl"),
    "mccl": legacy("mccl"),
    "xccl": legacy("xccl"),
    "nccl2": _hooked("nccl2", HOOK, OWN_TIMEOUT, "nccl2"),
    "nccl-lazy": _hooked("nccl-lazy", HOOK, MANUAL, "nccl-lazy"),
    "c10d": _hooked("c10d"),
    "ucc": _hooked("ucc"),
    "mpi": _hooked("mpi"),
    "gloo": Dialect("gloo", "gloo", NONE, "op_id", False, False, EVERY_RANK),
}


#: The backend label the loader gives dumps it recognised as TorchComms' recorder from their
#: content (``analyzer.load.torchcomms``): never a ``profiling_name`` prefix of its own.
TORCHCOMMS = "torchcomms-"


def torchcomms(backend: str) -> Dialect:
    """TorchComms' recorder over ``backend``: comms keyed by (name, members), collectives by
    their position in their comm, peerless send/recv (a send writes its tensor as input and
    output, a recv as output), no ``pg_status``. No completion reports either way: on CPU
    (gloo) an op is retired when its call returned, so the one not retired is the op the rank
    timed out in; on CUDA the state is read once at issue and every issued op is retired.
    Nobody dumps by itself (user code or the debug server's health check does)."""
    return Dialect(backend, backend, NONE, "seq", True, True, MANUAL)


def default_for(backend: str) -> Dialect:
    """The prefix table's dialect for ``backend``; an unknown custom name is hook-recorded
    (torch 2.15 hooks every backend that does not record itself) without completion reports."""
    if backend.startswith(TORCHCOMMS):
        return torchcomms(backend)
    known = PREFIXES.get(backend)
    if known is not None:
        return known
    return _hooked(backend)
