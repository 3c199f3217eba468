"""The names the layers pass between them, as str-Enums.

Each member equals its string value (``MatchState.FULLY_MATCHED == "fully_matched"``), so
tables keep plain strings (or categories of them) and JSON stays as it is; code compares
and builds with the members, never with bare strings.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FindingKind", "MatchState", "PeerState", "WaitKind"]


class MatchState(StrEnum):
    """How one collective (group, sequence number) matched across its members."""

    FULLY_MATCHED = "fully_matched"
    """Every member enqueued it with the same op, sizes and dtypes, and it completed."""
    NOT_JOINED = "not_joined"
    """Some members never enqueued it."""
    IN_FLIGHT = "in_flight"
    """Every member enqueued it; it has not completed on all of them."""
    OP_MISMATCH = "op_mismatch"
    SIZE_MISMATCH = "size_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    UNKNOWN = "unknown"
    """The dumps do not say (e.g. the entry fell out of some members' ring buffers)."""


class PeerState(StrEnum):
    """What the peer of a send/recv did with it."""

    PAIRED = "paired"
    NOT_POSTED = "not_posted"
    NO_DUMP = "no_dump"


class WaitKind(StrEnum):
    """Why a waiter waits on a holder (the ``kind`` of a wait edge)."""

    COLLECTIVE = "collective"
    """The holder has not enqueued a collective the waiter is blocked in."""
    P2P = "p2p"
    """The holder has not posted the send/recv the waiter is blocked in."""
    NO_DUMP = "no_dump"
    """The holder wrote no dump."""
    SILENT = "silent"
    """The holder's dump recorded nothing of the group."""
    UNRECORDED = "unrecorded"
    """Counters say the holder is behind in ops its ring buffer did not record."""
    QUEUED = "queued"
    """Every side posted the op, but a peer's matching op sits on its stream behind an op
    that peer is blocked in."""


class FindingKind(StrEnum):
    """What a finding says; the diagnosis's ``kind`` is that of its leading finding."""

    NOT_JOINED = "not_joined"
    MISSING_DUMP = "missing_dump"
    OP_MISMATCH = "op_mismatch"
    SIZE_MISMATCH = "size_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    DEADLOCK = "deadlock"
    STUCK_IN_COLLECTIVE = "stuck_in_collective"
    UNRECORDED_OPS = "unrecorded_ops"
    NO_HANG = "no_hang"
    INCONCLUSIVE = "inconclusive"
