"""One wait, as one record: who waits, on whom, in which op.

The waits table (:data:`analyzer.schema.WAITS`), the steps of a wait chain and the edges of
a deadlock cycle are all this record; its keys are the columns the schema declares.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analyzer import schema

__all__ = ["WAIT_COLUMNS", "Wait"]

#: The columns of the waits table and the keys of a wait's JSON form, in order.
WAIT_COLUMNS: tuple[str, ...] = tuple(c.name for c in schema.WAITS)


@dataclass(frozen=True, eq=False, slots=True)
class Wait(Mapping[str, Any]):
    """``waiter`` is blocked in ``op`` of group ``pg_name`` at ``seq`` (the p2p sequence
    number for a send/recv), which ``holder`` has not joined. Reads like the dict it is
    written as in the JSON output (``wait["holder"]``)."""

    waiter: int
    holder: int
    pg_name: str
    pg_desc: str
    seq: int
    op: str
    kind: str = ""
    """Why it waits, a :class:`~analyzer.kinds.WaitKind`: ``collective``, ``p2p``,
    ``no_dump``, ``silent`` (the holder recorded nothing), ``unrecorded``, or ``queued``
    (every side posted the op, but a peer's matching op sits on its GPU stream behind an op
    that peer is blocked in)."""

    def to_dict(self, keys: Sequence[str] = WAIT_COLUMNS) -> dict[str, Any]:
        return {k: getattr(self, k) for k in keys}

    def __getitem__(self, key: str) -> Any:
        if key not in WAIT_COLUMNS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(WAIT_COLUMNS)

    def __len__(self) -> int:
        return len(WAIT_COLUMNS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.to_dict().values()))
