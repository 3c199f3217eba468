"""The parser processes: started so that they die with the process that started them, and
let go at once when the load is abandoned.

A supervisor ends a run with SIGTERM or SIGKILL (a timeout, the OOM killer): a parser process
left behind would wait on its call queue for good, holding the caller's pipes (a
``subprocess.run(..., capture_output=True, timeout=T)`` would never return) and its batches
in ``/dev/shm``. Each parser process asks the kernel for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``) and watches its parent besides (where the kernel cannot be asked);
either way it removes the run's batch folder and ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from functools import partial
from types import FrameType
from typing import Any

from analyzer.load.batches import ParseBatch, read_in_thread, spill_folder

__all__ = ["PARENT_WATCH_S", "ParseNote", "abandon", "parse_in_pool", "parser_pool"]


class ParseNote(UserWarning):
    """How the dumps were parsed when the machine did not allow the usual way (no writable
    ``/dev/shm``): the results are the same, only the time differs."""


#: How often a parser process checks that its parent is still there (seconds).
PARENT_WATCH_S = 0.5
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> bool:
    """Ask the kernel for SIGTERM when the parent goes (Linux); whether it was granted."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _end(folder: str | None, code: int) -> None:
    """End this parser process now, the batch folder of its run removed first when the
    parent is gone (nobody else will)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(code)


def _init_parser(parent: int, folder: str | None) -> None:
    """The parser process's start: no cyclic collection (the parsers make no garbage
    cycles), and its end tied to its parent's (see the module's doc)."""
    gc.disable()

    def on_term(signum: int, frame: FrameType | None) -> None:
        _end(folder if os.getppid() != parent else None, 128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C does
    _die_with_parent()
    if os.getppid() != parent:  # the parent went before the kernel was asked
        _end(folder, 143)

    def watch() -> None:
        while True:
            time.sleep(PARENT_WATCH_S)
            if os.getppid() != parent:
                _end(folder, 143)

    threading.Thread(target=watch, name="hangscope-parent-watch", daemon=True).start()


def parser_pool(jobs: int, folder: str | None) -> ProcessPoolExecutor:
    """``jobs`` parser processes (forked on Linux), each ending with this process.

    Raises OSError when the pool cannot be made (no ``/dev/shm`` for its semaphores)."""
    ctx = None
    if sys.platform.startswith("linux"):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
    return ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_init_parser, initargs=(os.getpid(), folder)
    )


def abandon(pool: ProcessPoolExecutor) -> None:
    """Let the pool go without waiting for the chunks in progress: its processes are ended
    (SIGTERM), the chunks not started are dropped."""
    processes = dict(getattr(pool, "_processes", None) or {})  # no public handle on them
    for process in processes.values():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def parse_in_pool(
    chunks: list[list[Any]],
    jobs: int,
    parse_batch: Callable[..., ParseBatch | str],
    stack: ExitStack,
    aborting: list[bool],
) -> Iterator[list[Any]] | None:
    """Every chunk's results (``parse_batch(chunk, folder=...)`` in ``jobs`` processes),
    file by file; the pool and the batch folder let go by ``stack`` (abandoned when
    ``aborting[0]`` is set by then). None, with a :class:`ParseNote`, where no pool can be
    made: a container without a writable ``/dev/shm`` has no semaphores for one."""
    folder = spill_folder()
    if folder is not None:  # removed after the pool is let go (callbacks run last first)
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
    try:
        pool = parser_pool(jobs, folder)
        stack.callback(_let_go, pool, aborting)
        # Every chunk is submitted now; each comes back as one ParseBatch.
        batches = pool.map(partial(parse_batch, folder=folder), chunks)
    except OSError as exc:
        warnings.warn(
            ParseNote(
                f"no parser processes ({exc.strerror or exc}; is /dev/shm writable?): "
                "the dumps are parsed in this one process"
            ),
            stacklevel=3,
        )
        return None
    if folder is None:
        warnings.warn(
            ParseNote("/dev/shm is not writable: the parsed dumps come through a pipe"),
            stacklevel=3,
        )
    return (results for batch in read_in_thread(batches) for results in batch.results)


def _let_go(pool: ProcessPoolExecutor, aborting: list[bool]) -> None:
    """Unfinished: the chunks not started yet are dropped, not parsed first; abandoned (an
    error, a signal), the processes are ended at once."""
    if aborting[0]:
        abandon(pool)
    else:
        pool.shutdown(wait=True, cancel_futures=True)
