"""The capture watcher of one process: a daemon thread that decides when every rank captures
(see :mod:`analyzer.capture.hook`, which installs it).

It triggers a capture when no collective made progress for ``timeout_s``, when asked
(:meth:`Capture.request`: an exception hook, :func:`analyzer.capture.hook.trigger`) or on SIGUSR1
(:mod:`analyzer.capture.signal_trigger`); it tells every rank through the job's store
(:class:`~analyzer.capture.c10d_link.StoreLink`) and answers the requests of the others.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.capture.c10d_link import StoreLink
from analyzer.capture.signal_trigger import Wakeup
from analyzer.capture.snapshot import int_env, write_snapshot
from analyzer.capture.torch_buffers import enqueued_any, progress_signature, torch_dist

__all__ = ["DEFAULT_TIMEOUT_S", "Capture", "log", "warm_up"]

DEFAULT_TIMEOUT_S = 300.0


def log(msg: str) -> None:
    try:
        sys.stderr.write(f"[hangscope.capture pid {os.getpid()} {time.time():.3f}] {msg}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr may be closed
        pass


def warm_up() -> None:
    """Import what torch's stack symbolizer imports on the first dump with stacks
    (``torch._inductor``: seconds of imports holding the GIL), now rather than at hang time.
    Only once torch is imported by the script."""
    if "torch" not in sys.modules or "torch._inductor" in sys.modules:
        return
    try:
        import importlib

        importlib.import_module("torch._inductor")
    except Exception:  # noqa: BLE001
        pass


@dataclass
class _Progress:
    """What the watcher knows of this rank's progress between polls."""

    seen: int = 0  # the last request generation answered
    sig: tuple[Any, ...] = ()
    last_change: float = 0.0
    armed: bool = True
    last_end_ns: int = 0


@dataclass
class Capture:
    """The watcher of one process (see :mod:`analyzer.capture.hook`)."""

    dump_dir: Path
    timeout_s: float = DEFAULT_TIMEOUT_S
    poll_s: float = 1.0
    grace_s: float = 10.0
    store: Any | None = None
    captures: int = 0
    polls: int = 0
    cpu_s: float = 0.0  # the watcher thread's CPU time so far, and at the end of its warm-up
    cpu0_s: float = 0.0
    last_files: list[str] = field(default_factory=list)
    wakeup: Wakeup | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _requests: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done: threading.Condition = field(default_factory=threading.Condition)

    # -- public
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hangscope-capture", daemon=True)
            self._thread.start()

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop the watcher; wait up to ``wait_s`` for it to leave what it is doing."""
        self._stop.set()
        self._wake()
        if (
            wait_s > 0
            and self._thread is not None
            and self._thread is not threading.current_thread()
        ):
            self._thread.join(wait_s)

    def request(self, reason: str, wait_s: float = 0.0) -> bool:
        """Ask every rank to capture; optionally wait for this rank's files. Never raises."""
        try:
            with self._done:
                before = self.captures
                with self._lock:
                    self._requests.append(reason)
                self._wake()
                if wait_s > 0 and threading.current_thread() is not self._thread:
                    self._done.wait_for(lambda: self.captures > before, timeout=wait_s)
                return self.captures > before
        except Exception:  # noqa: BLE001
            return False

    # -- internals
    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup.wake()

    def _sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when SIGUSR1 arrived meanwhile."""
        if self.wakeup is None:
            self._stop.wait(seconds)
            return False
        return self.wakeup.sleep(seconds, self._stop.wait)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - never let the watcher die loudly
            log(f"watcher stopped: {type(exc).__name__}: {exc}")

    def _await_group(self) -> Any | None:
        """torch.distributed once a process group exists (None when stopped first); SIGUSR1
        meanwhile captures this process alone."""
        dist = None
        while dist is None and not self._stop.is_set():
            dist = torch_dist()
            if dist is None and self._sleep(min(self.poll_s, 0.2)):  # no group, no store
                self._capture_local(
                    None,
                    {
                        "reason": "signal SIGUSR1 (no process group yet)",
                        "by_rank": int_env("RANK"),
                        "time_ns": time.time_ns(),
                    },
                )
        return dist

    def _loop(self) -> None:
        dist = self._await_group()
        if dist is None:
            return
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        warm_up()  # a no-op when install() did it
        self.cpu0_s = time.thread_time()
        store = StoreLink(dist, self.store, log)
        state = _Progress(seen=store.generation() or 0, last_change=time.monotonic())
        while not self._stop.is_set():
            self.cpu_s = time.thread_time()  # the watcher's own CPU time so far (benchmark)
            self.polls += 1
            reasons = self._reasons(dist, state)
            gen = store.generation()
            if reasons and not (gen is not None and gen > state.seen):
                # A request of this rank (unless another rank asked meanwhile: answer that).
                info = {"reason": reasons[0], "by_rank": self.rank, "time_ns": time.time_ns()}
                new = store.publish(info)
                if new is None:  # no store: this rank alone
                    self._capture_local(None, info)
                    continue
                gen = new
            if gen is not None and gen > state.seen:
                self._answer(store, gen, state)

    def _reasons(self, dist: Any, state: _Progress) -> list[str]:
        """Why to capture now, after one poll: requests, SIGUSR1, the deadline."""
        signalled = self._sleep(self.poll_s)
        with self._lock:
            reasons, self._requests = self._requests, []
        if signalled:
            reasons.append("signal SIGUSR1")
        now = time.monotonic()
        try:
            sig = progress_signature(dist)
        except Exception:  # noqa: BLE001
            sig = state.sig
        if sig != state.sig:
            state.sig, state.last_change, state.armed = sig, now, True
        elif state.armed and enqueued_any(sig) and now - state.last_change >= self.timeout_s:
            state.armed = False
            reasons.append(
                f"deadline: no collective progressed for {now - state.last_change:.1f} s"
            )
        return reasons

    def _answer(self, store: StoreLink, gen: int, state: _Progress) -> None:
        """Capture for request ``gen`` (and those made with it), then acknowledge it."""
        time.sleep(0.05)  # let simultaneous requests coalesce into one capture
        gen = store.generation() or gen
        info = store.reason(gen)
        # A request made before this rank's last capture ended is answered by it
        # (several ranks reach their deadline at about the same time).
        if int(info.get("time_ns") or 0) > state.last_end_ns or info.get("by_rank") == self.rank:
            self._capture_local(gen, info)
            state.last_end_ns = time.time_ns()
        state.seen = gen
        store.done(gen)

    def _capture_local(self, gen: int | None, info: dict[str, Any]) -> None:
        try:
            self._write(gen, info)
        except Exception as exc:  # noqa: BLE001
            log(f"capture failed: {type(exc).__name__}: {exc}")
        with self._done:
            self.captures += 1
            self._done.notify_all()

    def _write(self, gen: int | None, info: dict[str, Any]) -> None:
        rank = getattr(self, "rank", int(os.environ.get("RANK", "-1") or -1))
        files, reason = write_snapshot(
            torch_dist(),
            self.dump_dir,
            rank=rank,
            world=getattr(self, "world", None),
            gen=gen,
            info=info,
        )
        self.last_files = files
        log(f"rank {rank}: captured {', '.join(files)} ({reason or 'on request'})")
