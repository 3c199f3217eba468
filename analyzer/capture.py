"""Capture every rank's flight-recorder buffers and where each rank is now, when a job hangs.

For training scripts. One line, before or after ``init_process_group``::

    import analyzer.capture  # with HANGSCOPE_CAPTURE_DIR=/shared/dumps in the environment

or, after ``init_process_group``::

    from analyzer import capture
    capture.install(dump_dir="/shared/dumps", timeout_s=300)

A daemon thread on every rank (the watcher) triggers a capture when

- no collective made progress on this rank for ``timeout_s`` seconds (its own deadline, for
  backends that never time out, and usually well before the backend's own timeout);
- an exception escapes the training loop or any thread (a timeout or a communication error
  that the script does not catch);
- the process receives ``SIGUSR1`` (``hangscope capture --signal PID...``), or the script
  calls :func:`trigger`.

The rank that triggers tells every rank through the job's c10d store (a counter under
``hangscope/capture/``); every rank then writes, into ``dump_dir``, one file per
flight-recorder buffer it holds, named ``<backend>_trace_rank_<rank>`` (``gloo``, ``nccl2``,
``nccl-lazy``, ``nccl``, ...; the backend is the ``profiling_name`` prefix of its entries),
and ``hangscope_context_rank_<rank>.json`` (schema ``hangscope.context/1``): every Python
thread's current stack, host name, pid, local rank, device, time, torch and backend versions.

It never hurts training: nothing raises out of it, it never blocks the training thread, the
store may go away (the watcher keeps its own connection, retries rarely, and captures locally
meanwhile), and each file is written to a temporary name and renamed. The flight recorder
must be on when the process groups are created: importing this module sets
``TORCH_FR_BUFFER_SIZE=2000`` when neither it nor ``TORCH_NCCL_TRACE_BUFFER_SIZE`` is set.

The pieces: :mod:`analyzer.watcher` (the watcher thread and when it triggers),
:mod:`analyzer.wakeup` (SIGUSR1 through a wakeup socket), :mod:`analyzer.storelink` (the
store protocol between ranks), :mod:`analyzer.snapshot` (what is written) and
:mod:`analyzer.buffers` (the flight-recorder buffers, read through torch).

Importing :mod:`analyzer` does not import this module, and this module imports torch only
inside the watcher, once the script has imported it. One cost is paid up front: torch's stack
symbolizer imports ``torch._inductor`` on its first dump with stacks (one to three seconds
holding the GIL), so :func:`install` imports it at once when torch is loaded (before the
training loop, when called after ``init_process_group``), and the watcher does it as soon as
the process group exists otherwise. After that the watcher costs one look at the group
counters and one store round trip per poll (``timeout_s / 4``, at most a second).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from analyzer import wakeup
from analyzer.context import CONTEXT_SCHEMA, context_name
from analyzer.snapshot import dump_name, thread_stacks
from analyzer.storelink import STORE_PREFIX
from analyzer.watcher import DEFAULT_TIMEOUT_S, Capture, log, warm_up

ENV_DIR = "HANGSCOPE_CAPTURE_DIR"
ENV_TIMEOUT = "HANGSCOPE_CAPTURE_TIMEOUT"

_CURRENT: Capture | None = None


def _hook_exceptions(cap: Capture) -> None:
    """An exception that escapes the training loop or a thread asks every rank to capture."""
    prev_sys = sys.excepthook
    prev_thr = threading.excepthook

    def sys_hook(tp: type[BaseException], val: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(tp, (KeyboardInterrupt, SystemExit)):
            cap.request(
                f"exception: {tp.__name__}: {str(val).splitlines()[0][:200] if str(val) else ''}",
                wait_s=cap.grace_s,
            )
        prev_sys(tp, val, tb)

    def thr_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit and args.thread is not cap._thread:
            cap.request(
                f"exception in thread {getattr(args.thread, 'name', '?')}: "
                f"{args.exc_type.__name__}",
                wait_s=0,
            )
        prev_thr(args)

    sys.excepthook = sys_hook
    threading.excepthook = thr_hook


def _fr_on() -> None:
    if not os.environ.get("TORCH_FR_BUFFER_SIZE") and not os.environ.get(
        "TORCH_NCCL_TRACE_BUFFER_SIZE"
    ):
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"


def install(
    dump_dir: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
    *,
    poll_s: float | None = None,
    store: Any | None = None,
    grace_s: float = 10.0,
) -> Capture | None:
    """Start the watcher of this process (once; later calls return the same one).

    ``dump_dir`` defaults to ``$HANGSCOPE_CAPTURE_DIR``; ``timeout_s`` (the watcher's own
    deadline) to ``$HANGSCOPE_CAPTURE_TIMEOUT`` or 300 s; ``store`` to the job's default
    c10d store. May be called before ``init_process_group`` (the watcher waits for it).
    Returns None (and logs why) instead of raising.
    """
    global _CURRENT
    try:
        if _CURRENT is not None:
            return _CURRENT
        where = dump_dir if dump_dir is not None else os.environ.get(ENV_DIR)
        if not where:
            log(f"no dump_dir and no {ENV_DIR}: capture not installed")
            return None
        if timeout_s is None:
            timeout_s = float(os.environ.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S)
        poll = poll_s if poll_s is not None else max(0.05, min(1.0, timeout_s / 4))
        _fr_on()
        wake = wakeup.setup(signal.SIGUSR1, log)
        cap = Capture(
            dump_dir=Path(where),
            timeout_s=float(timeout_s),
            poll_s=poll,
            grace_s=grace_s,
            store=store,
            wakeup=wake,
        )
        _hook_exceptions(cap)
        # At exit, let the watcher leave any torch call before the interpreter tears down
        # (a daemon thread inside a store or recorder call then can abort the process).
        import atexit

        atexit.register(cap.stop, 2.0)
        if threading.current_thread() is threading.main_thread():
            warm_up()  # before the training loop starts, when called after init_process_group
        cap.start()
        _CURRENT = cap
        return cap
    except Exception as exc:  # noqa: BLE001
        log(f"capture not installed: {type(exc).__name__}: {exc}")
        return None


def trigger(reason: str = "requested by the script", wait_s: float = 0.0) -> bool:
    """Ask every rank to capture now (no-op without :func:`install`). Never raises."""
    return _CURRENT.request(reason, wait_s=wait_s) if _CURRENT is not None else False


def current() -> Capture | None:
    return _CURRENT


if os.environ.get(ENV_DIR):
    install()

__all__ = [
    "CONTEXT_SCHEMA",
    "DEFAULT_TIMEOUT_S",
    "ENV_DIR",
    "ENV_TIMEOUT",
    "STORE_PREFIX",
    "Capture",
    "context_name",
    "current",
    "dump_name",
    "install",
    "thread_stacks",
    "trigger",
]
