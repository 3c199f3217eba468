"""The memos of the load layer: every process-wide cache, bounded, declared in one place.

Every rank's dump repeats the same values (member lists, stacks, op names, sizes): a memo
remembers what a pure function made of one such value, so a file that meets it again does
not redo the work. What a memo holds is a function of its key alone: it saves time and memory,
and cannot change what any file says, whichever files came before.

Each memo holds at most ``max_items`` keys and, where the caller counts sizes, about
``max_bytes``; when full it is emptied whole (the values a job repeats come back at once).
The memos outlive one analysis (a notebook that analyses several incidents keeps them warm);
:func:`clear_memos` empties them all, for a notebook that wants the memory back or a
measurement that wants a cold start.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["BoundedMemo", "clear_memos", "memos"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_REGISTERED: list[BoundedMemo[object, object]] = []


class BoundedMemo(Generic[K, V]):
    """A dict of results of a pure function, emptied whole when full."""

    __slots__ = ("_nbytes", "_values", "max_bytes", "max_items", "name")

    def __init__(
        self, name: str, max_items: int, max_bytes: int = 0, *, register: bool = True
    ) -> None:
        self.name = name
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._values: dict[K, V] = {}
        self._nbytes = 0
        if register:
            _REGISTERED.append(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def put(self, key: K, value: V, nbytes: int = 0) -> V:
        """Remember ``value`` for ``key`` (``nbytes``: what it costs, as the caller counts)."""
        if len(self._values) >= self.max_items or (
            self.max_bytes and self._nbytes > self.max_bytes
        ):
            self.clear()
        self._values[key] = value
        self._nbytes += nbytes
        return value

    def clear(self) -> None:
        self._values.clear()
        self._nbytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def nbytes(self) -> int:
        return self._nbytes


def memos() -> tuple[BoundedMemo[object, object], ...]:
    """Every registered memo of this process."""
    return tuple(_REGISTERED)


def clear_memos() -> None:
    """Empty every memo of this process (nothing any later analysis says changes)."""
    for memo in _REGISTERED:
        memo.clear()
