"""Member lists of process groups: parsed, checked, shared and packed, in one place.

Every dump repeats the member list of each of its groups in ``pg_config``, and the default
group lists every rank: parsing and checking it in each dump would cost world size squared.
So a list's text is parsed once (:func:`member_ranks`), equal lists become one tuple
(:class:`SameMembers`), a parser process sends long lists as the bytes of an int32 array
(:func:`packed`, :func:`unpacked`), and the world a dump's own default group declares is
judged once per tuple (:func:`own_world`). The store keeps the same lists once per job
(``members.json``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.load.memo import BoundedMemo

__all__ = ["SameMembers", "member_ranks", "own_world", "packed", "parse_ranks", "unpacked"]

Members = tuple[int, ...]

_PARSED: BoundedMemo[tuple[str, int], tuple[Members | None]] = BoundedMemo(
    "member lists by their text", 256
)
_RANGES: BoundedMemo[int, tuple[Members, bool]] = BoundedMemo(
    "member tuples that list the ranks 0 to n-1", 256
)
_PACKED: BoundedMemo[int, tuple[Members, bytes]] = BoundedMemo(
    "member tuples packed as int32 bytes", 256
)
_UNPACKED: BoundedMemo[bytes, Members] = BoundedMemo("member lists unpacked from bytes", 256)


def parse_ranks(text: Any) -> Members | None:
    """Member ranks of a ``pg_config`` entry: ``"[0, 1, 2]"`` (string) or a list."""
    if isinstance(text, (list, tuple)):
        try:
            return tuple(int(r) for r in text)
        except (TypeError, ValueError):
            return None
    if not isinstance(text, str):
        return None
    body = text.strip().strip("[]()")
    if not body.strip():
        return ()
    try:
        return tuple(int(part) for part in body.split(","))
    except ValueError:
        return None


def member_ranks(text: Any, max_rank: int) -> Members | None:
    """Member ranks of a pg_config entry; None when they are not plausible ranks (below
    ``max_rank``, at most ``max_rank`` of them). Texts are remembered, with the same tuple
    returned for them (shared tuples are also pickled once per batch a parser sends back)."""
    if not isinstance(text, str):
        return _plausible(parse_ranks(text), max_rank)
    known = _PARSED.get((text, max_rank))
    if known is None:
        members = None if len(text) > 16 * max_rank else _plausible(parse_ranks(text), max_rank)
        known = _PARSED.put((text, max_rank), (members,))
    return known[0]


def _plausible(members: Members | None, max_rank: int) -> Members | None:
    if members and (min(members) < 0 or max(members) >= max_rank or len(members) > max_rank):
        return None
    return members


def own_world(pg_config: dict[str, tuple[str, Members | None]]) -> int | None:
    """The world a dump's own ``pg_config`` gives: the size of its default group (``"0"``)
    when that lists the ranks 0 to n-1; None otherwise (gloo's nameless entry, no list).
    Remembered per member tuple, which :func:`member_ranks` shares between dumps."""
    members = pg_config.get("0", ("", None))[1]
    if not members:
        return None
    known = _RANGES.get(id(members))
    if known is None or known[0] is not members:
        known = _RANGES.put(id(members), (members, members == tuple(range(len(members)))))
    return len(members) if known[1] else None


class SameMembers:
    """Equal member tuples -> one object (the first seen), hashing a tuple only when it is
    not the object seen last under the same group name."""

    def __init__(self) -> None:
        self.by_value: dict[Members, Members] = {}
        self.last: dict[str, tuple[Members, Members]] = {}

    def __call__(self, name: str, members: Members) -> Members:
        last = self.last.get(name)
        if last is not None and last[0] is members:
            return last[1]
        same = self.by_value.setdefault(members, members)
        self.last[name] = (members, same)
        return same


def packed(members: Members | None) -> bytes | Members | None:
    """A member list as it travels between processes: long lists as int32 bytes."""
    if not members or len(members) < 64:
        return members
    known = _PACKED.get(id(members))  # the tuple is kept with its bytes: its id stays its own
    if known is not None and known[0] is members:
        return known[1]
    try:
        blob = np.asarray(members, dtype=np.int32).tobytes()
    except OverflowError:  # pragma: no cover - ranks are bounded by max_rank
        return members
    _PACKED.put(id(members), (members, blob))
    return blob


def unpacked(members: bytes | Members | None) -> Members | None:
    """The member tuple :func:`packed` sent; equal bytes come back as one tuple."""
    if not isinstance(members, bytes):
        return members
    known = _UNPACKED.get(members)
    if known is None:
        known = _UNPACKED.put(members, tuple(np.frombuffer(members, dtype=np.int32).tolist()))
    return known
