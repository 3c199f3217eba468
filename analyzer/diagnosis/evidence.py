"""Evidence records: one frozen dataclass per kind of finding.

Each reads like the dict it is written as in the JSON output (``finding.evidence["values"]``,
``.get``, ``**``), and :meth:`Evidence.to_dict` gives exactly that dict, keys in their
documented order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from analyzer.waits import WAIT_COLUMNS, Wait

__all__ = [
    "NO_EVIDENCE",
    "CycleEvidence",
    "Evidence",
    "MismatchEvidence",
    "OpGapEvidence",
    "OpIdCountersEvidence",
    "P2PMismatchEvidence",
    "RootEvidence",
    "SlowEvidence",
    "StuckEvidence",
    "SuspectSignals",
    "WaitedIn",
    "WindowCountersEvidence",
]


class Evidence(Mapping[str, Any]):
    """Base of the evidence records: a read-only mapping over :meth:`to_dict`."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return {}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


#: The evidence of a finding that needs none (``no_hang``).
NO_EVIDENCE = Evidence()


@dataclass(frozen=True, eq=False, slots=True)
class MismatchEvidence(Evidence):
    """Members issued one sequence number with different ops, sizes or dtypes."""

    by_rank: dict[str, str]
    """rank -> the value it issued (the minority, or every side without a majority); the
    ``values`` of the JSON output."""
    majority: str
    agreeing_members: int
    recorded_members: int
    ambiguous: bool
    decided_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": self.by_rank,
            "majority": self.majority,
            "agreeing_members": self.agreeing_members,
            "recorded_members": self.recorded_members,
            "ambiguous": self.ambiguous,
            "decided_by": self.decided_by,
        }


@dataclass(frozen=True, eq=False, slots=True)
class P2PMismatchEvidence(Evidence):
    """A send and the recv it pairs with disagree (``what``: ``sizes`` or ``dtypes``)."""

    by_rank: dict[str, Any]
    """rank -> what it posted (``values`` in the JSON output)."""
    sender: int
    receiver: int
    send_seq: int
    recv_seq: int
    what: str
    usual_send: Any
    usual_recv: Any

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": self.by_rank,
            "sender": self.sender,
            "receiver": self.receiver,
            "send_seq": self.send_seq,
            "recv_seq": self.recv_seq,
            f"usual_send_{self.what}": self.usual_send,
            f"usual_recv_{self.what}": self.usual_recv,
        }


@dataclass(frozen=True, slots=True)
class WaitedIn:
    """One op a root is waited on in, and by whom."""

    group: str
    group_desc: str
    seq: int
    op: str
    kind: str
    waiters: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "group_desc": self.group_desc,
            "seq": self.seq,
            "op": self.op,
            "kind": self.kind,
            "waiters": list(self.waiters),
        }


@dataclass(frozen=True, eq=False, slots=True)
class RootEvidence(Evidence):
    """A rank others wait on that waits on nobody."""

    waited_in: tuple[WaitedIn, ...]
    all_waiters: int
    waited_op: dict[str, Any]
    last_recorded_op: dict[str, Any]
    wait_kind: str
    no_dump: str | None = None
    """``crashed``, or ``stalled_or_crashed`` where the backend dumps only failed ranks."""
    last_recorded_stack: tuple[dict[str, Any], ...] | None = None
    alive: bool | None = None
    """Set when a context file shows the rank without a dump alive."""
    context: str | None = None
    waits_text: str = ""
    """What the summary says of the waits on it (the ops, the count); not in the JSON."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "waited_in": [w.to_dict() for w in self.waited_in],
            "all_waiters": self.all_waiters,
            "waited_op": self.waited_op,
            "last_recorded_op": self.last_recorded_op,
            "wait_kind": self.wait_kind,
        }
        if self.no_dump is not None:
            out["no_dump"] = self.no_dump
        if self.last_recorded_stack is not None:
            out["last_recorded_stack"] = list(self.last_recorded_stack)
        if self.alive is not None:
            out["alive"] = self.alive
            out["context"] = self.context
        return out


@dataclass(frozen=True, eq=False, slots=True)
class SuspectSignals(Evidence):
    """What singled out (or failed to single out) a member of a stuck collective."""

    enqueued_after_others_s: float | None = None
    others_spread_s: float | None = None
    enqueue_offsets_s: dict[str, float] | None = None
    not_timed_out: int | None = None
    not_started: int | None = None
    conflicting: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.enqueued_after_others_s is not None:
            out["enqueued_after_others_s"] = self.enqueued_after_others_s
            out["others_spread_s"] = self.others_spread_s
            out["enqueue_offsets_s"] = self.enqueue_offsets_s
        for key in ("not_timed_out", "not_started"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.conflicting is not None:
            out["conflicting"] = list(self.conflicting)
        return out


@dataclass(frozen=True, eq=False, slots=True)
class StuckEvidence(Evidence):
    """Every member enqueued the op and none completed it."""

    members: tuple[int, ...]
    started: int
    completed: int
    suspect: int | None
    suspect_reasons: tuple[str, ...]
    signals: SuspectSignals = field(default_factory=SuspectSignals)
    last_to_start: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "members": list(self.members),
            "started": self.started,
            "completed": self.completed,
        }
        if self.last_to_start is not None:
            out["last_to_start"] = list(self.last_to_start)
        out["suspect"] = self.suspect
        out["suspect_reasons"] = list(self.suspect_reasons)
        out.update({k: v for k, v in self.signals.to_dict().items() if k not in out})
        return out


@dataclass(frozen=True, eq=False, slots=True)
class SlowEvidence(Evidence):
    """Ranks whose completions stopped before their peers' (matching's stale completers)."""

    per_rank: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"per_rank": self.per_rank}


@dataclass(frozen=True, eq=False, slots=True)
class CycleEvidence(Evidence):
    cycle: tuple[int, ...]
    edges: tuple[Wait, ...]
    by_first_wait: bool = False
    """The culprit is the holder of the wait that began first: no majority of the ranks ran
    the cycle's groups in one order (not in the JSON: the summary says it)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "cycle": list(self.cycle),
            "edges": [e.to_dict(WAIT_COLUMNS[:-1]) for e in self.edges],  # without the kind
        }


@dataclass(frozen=True, eq=False, slots=True)
class WindowCountersEvidence(Evidence):
    """``pg_status`` counters past the newest recorded sequence number."""

    counters: dict[str, int]
    last_recorded: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"counters": self.counters, "last_recorded": self.last_recorded}


@dataclass(frozen=True, eq=False, slots=True)
class OpGapEvidence(Evidence):
    """op_id gaps between recorded entries (gloo send/recv)."""

    unrecorded_ops_per_rank: dict[str, int]
    gaps_before_seq: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "unrecorded_ops_per_rank": self.unrecorded_ops_per_rank,
            "gaps_before_seq": list(self.gaps_before_seq),
        }


@dataclass(frozen=True, eq=False, slots=True)
class OpIdCountersEvidence(Evidence):
    """``pg_status`` counters (op_id units) past the newest recorded op_id."""

    counters: dict[str, int]
    last_recorded_op_id: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"counters": self.counters, "last_recorded_op_id": self.last_recorded_op_id}
