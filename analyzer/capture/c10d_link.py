"""The capture watcher's own connection to the job's c10d store (for :mod:`analyzer.capture.hook`).

Every call may fail: the store may go away with a dying job. A failed call returns None, the
connection is dropped and tried again only every ``retry_s`` seconds, so that the watcher
captures locally meanwhile instead of blocking.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

__all__ = ["STORE_PREFIX", "StoreLink"]

STORE_PREFIX = "hangscope/capture/"


class StoreLink:
    """The watcher's own connection to the job's c10d store; every call may fail."""

    def __init__(
        self, dist: Any, store: Any | None, log: Callable[[str], None], retry_s: float = 10.0
    ) -> None:
        self.dist = dist
        self.given = store
        self.log = log
        self.retry_s = retry_s
        self.store: Any | None = None
        self.next_try = 0.0
        self.addr: tuple[str, int] | None = None
        self.failures = 0

    def _connect(self) -> Any | None:
        from datetime import timedelta

        dist = self.dist
        base = self.given
        if base is None:
            base = dist.distributed_c10d._get_default_store()
        # Unwrap PrefixStores to the TCPStore: a separate client connection never shares a
        # lock (or a blocked request) with the training thread.
        inner = base
        while hasattr(inner, "underlying_store"):
            inner = inner.underlying_store
        if isinstance(inner, dist.TCPStore):
            self.addr = (inner.host, inner.port)
            inner = dist.TCPStore(
                inner.host,
                inner.port,
                is_master=False,
                timeout=timedelta(seconds=5),
                wait_for_workers=False,
            )
        return dist.PrefixStore(STORE_PREFIX, inner)

    def get(self) -> Any | None:
        if self.store is None and time.monotonic() >= self.next_try:
            try:
                self.store = self._connect()
            except Exception as exc:  # noqa: BLE001
                self._down(exc)
        return self.store

    def _down(self, exc: BaseException) -> None:
        if self.failures == 0:
            self.log(
                f"store unavailable ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:120]}); capturing locally, retrying now and then"
            )
        self.failures += 1
        self.store = None
        self.next_try = time.monotonic() + self.retry_s

    def call(self, fn: Callable[[Any], Any]) -> Any | None:
        st = self.get()
        if st is None:
            return None
        try:
            return fn(st)
        except Exception as exc:  # noqa: BLE001
            self._down(exc)
            return None

    # The capture protocol: a generation counter, the reason of each request, and acks.

    def generation(self) -> int | None:
        """The number of capture requests made so far (None: no store)."""
        return self.call(lambda s: s.add("generation", 0))

    def publish(self, info: dict[str, Any]) -> int | None:
        """Make a new request with ``info`` (reason, by_rank, time_ns); its generation."""

        def add(s: Any) -> int:
            gen = int(s.add("generation", 1))
            s.set(f"reason/{gen}", json.dumps(info))
            return gen

        return self.call(add)

    def reason(self, gen: int) -> dict[str, Any]:
        """What request ``gen`` said ({} when unknown)."""
        return self.call(lambda s: json.loads(s.get(f"reason/{gen}"))) or {}

    def done(self, gen: int) -> None:
        """This rank answered request ``gen``."""
        self.call(lambda s: s.add(f"done/{gen}", 1))
