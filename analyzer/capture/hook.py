"""The one capture of this process: :func:`install` it, :func:`trigger` it (see
:mod:`analyzer.capture` for what it does and how a training script uses it)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from analyzer.capture import signal_trigger as wakeup
from analyzer.capture.watcher import DEFAULT_TIMEOUT_S, Capture, log, warm_up

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

__all__ = ["ENV_DIR", "ENV_TIMEOUT", "current", "install", "trigger"]
