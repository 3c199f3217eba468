"""A batch of parse results on its way from a parser process to the loader.

A dump's entries come as some 27 columns of 2,000 values: pickled one array each, they came
back as tens of thousands of small blocks of the main process's heap, which normalize then frees one by one and glibc hands back only when the
heap is trimmed. A batch crosses with each column of all its dumps as one array, and each
dump's columns come back as views of it: one allocation per column and batch, freed whole
once normalize has copied every dump of the batch. A parser process spills its batch to a
private folder in memory rather than wait for the loader to read the pipe (:func:`spill`),
and a thread of the loader reads the batches as they come (:func:`read_in_thread`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterator
from queue import SimpleQueue
from typing import Any

import numpy as np

from analyzer.load.handover import COLUMN_FIELDS as _KINDS
from analyzer.load.parsed_dump import ParsedDump

__all__ = [
    "SPILL_SHARE",
    "SPILL_WAITING",
    "ParseBatch",
    "read_in_thread",
    "spill",
    "spill_folder",
    "unspill",
]


def _joinable(d: object) -> bool:
    """A dump whose columns are exactly the readers' fields, each one value per entry."""
    if not isinstance(d, ParsedDump) or d.n_entries <= 0:
        return False
    for kind, fields in _KINDS:
        columns = getattr(d, kind)
        if not isinstance(columns, dict) or tuple(columns) != fields:
            return False
        for values in columns.values():
            if not isinstance(values, np.ndarray) or values.shape != (d.n_entries,):
                return False
    return True


class ParseBatch:
    """The results of the files of one batch (a list of results per file), pickled with the
    entry columns of its dumps joined (see the module's doc)."""

    __slots__ = ("results",)

    def __init__(self, results: list[list[Any]]) -> None:
        self.results = results

    def __getstate__(self) -> tuple[Any, ...]:
        where: list[tuple[int, int]] = []
        light: list[list[Any]] = []
        joined: list[ParsedDump] = []
        for i, results in enumerate(self.results):
            out = []
            for j, r in enumerate(results):
                if _joinable(r):
                    where.append((i, j))
                    joined.append(r)
                    r = dataclasses.replace(r, strings={}, ints={}, bools={}, floats={})
                out.append(r)
            light.append(out)
        columns = (
            {
                f"{kind}.{f}": np.concatenate([getattr(d, kind)[f] for d in joined])
                for kind, fields in _KINDS
                for f in fields
            }
            if joined
            else {}
        )
        counts = np.array([d.n_entries for d in joined], dtype=np.int64)
        return light, where, counts, columns

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        light, where, counts, columns = state
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        for k, (i, j) in enumerate(where):
            d = light[i][j]
            lo, hi = starts[k], starts[k + 1]
            for kind, fields in _KINDS:
                setattr(d, kind, {f: columns[f"{kind}.{f}"][lo:hi] for f in fields})
        self.results = light


#: Batches a folder may hold unread before the parser processes send theirs through the
#: pipe again (which waits for the loader to read: the memory in flight stays bounded).
SPILL_WAITING = 8


_SPILL_PREFIX = "hangscope-batches-"


def spill_folder(shm: str = "/dev/shm") -> str | None:
    """A private folder in memory (``/dev/shm``) for batches on their way to the loader, or
    None where there is none (the batches then go through the pool's pipe). Its name carries
    this process's id: the folders of this user's processes that are gone (killed before
    they could remove theirs) are removed first."""
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)):
        return None
    _remove_orphans(shm)
    try:
        return tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-", dir=shm)
    except OSError:
        return None


def _remove_orphans(shm: str) -> None:
    try:
        names = [n for n in os.listdir(shm) if n.startswith(_SPILL_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_SPILL_PREFIX) :].partition("-")[0]
        path = os.path.join(shm, name)
        try:
            if not pid.isdigit() or os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)  # still running (or another process has its id): kept
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError, OverflowError):  # not ours to signal, gone, or no pid at all
            continue


def spill(batch: ParseBatch, folder: str | None) -> ParseBatch | str:
    """In a parser process: ``batch`` written to a file of ``folder`` and its path returned,
    so that the process parses its next files instead of waiting for the loader to read this
    batch through the pipe (at 4,096 ranks the cores idled about a fifth of the load). The
    batch itself when there is no folder, when it already holds :data:`SPILL_WAITING`
    unread batches or the run's share of the memory (:data:`SPILL_SHARE`), or when the file
    cannot be written (a full ``/dev/shm``)."""
    if folder is None:
        return batch
    try:
        names = os.listdir(folder)
        if len(names) >= SPILL_WAITING or not _room_for(batch, folder, names):
            return batch
        fd, path = tempfile.mkstemp(dir=folder, suffix=".batch")
    except OSError:
        return batch
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(batch, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return batch
    return path


#: The share of ``/dev/shm`` (what is free plus what the run's batches hold) the batches of
#: one run may take: a container's 64 MB ``/dev/shm`` is shared with everything else in it.
SPILL_SHARE = 0.25


def _batch_bytes(batch: ParseBatch) -> int:
    """About what ``batch`` takes pickled: its dumps' entry columns, and a little per file."""
    total = 0
    for results in batch.results:
        total += 4096
        for r in results:
            if isinstance(r, ParsedDump):
                for kind, _ in _KINDS:
                    columns = getattr(r, kind)
                    if isinstance(columns, dict):
                        total += sum(getattr(v, "nbytes", 0) for v in columns.values())
    return total


def _room_for(batch: ParseBatch, folder: str, names: list[str]) -> bool:
    """Whether ``batch`` fits in the run's share of ``folder``'s file system
    (:data:`SPILL_SHARE`) beside the batches already waiting there."""
    held = 0
    for name in names:
        with contextlib.suppress(OSError):
            held += os.stat(os.path.join(folder, name)).st_size
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    return held + _batch_bytes(batch) <= SPILL_SHARE * (free + held)


def unspill(got: ParseBatch | str) -> ParseBatch:
    """In the loader: the batch a parser process sent, read (and its file removed) if it
    was spilled. The file was written by this run's own parser process in a folder only
    this user can write to: it holds what the pipe would have carried."""
    if isinstance(got, ParseBatch):
        return got
    try:
        with open(got, "rb") as f:
            data = f.read()  # whole, as the pipe gives it: its arrays are laid out alike
        batch = pickle.loads(data)
        del data
    finally:
        with contextlib.suppress(OSError):
            os.unlink(got)
    if not isinstance(batch, ParseBatch):
        raise TypeError(f"{got}: not a batch of parse results")
    return batch


def read_in_thread(batches: Iterator[ParseBatch | str]) -> Iterator[ParseBatch]:
    """The parser processes' batches, read (spilled ones from their files) by a thread of
    their own as they come, in order. Their arrays are allocated by that thread, in a C heap
    (glibc arena) of its own, as when the pool's own thread unpickled them from its pipe: in
    the main thread's heap, the holes normalize leaves when it frees them kept matching from
    reusing its memory (a higher peak and a slower match: docs/performance.md). An error of the pool is raised where the batch would have come."""
    done = object()
    queue: SimpleQueue[object] = SimpleQueue()  # unbounded: what it holds, the loader keeps anyway

    def read() -> None:
        try:
            for got in batches:
                queue.put(unspill(got))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            queue.put(exc)
        queue.put(done)

    threading.Thread(target=read, name="hangscope-batches", daemon=True).start()
    while (item := queue.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item  # type: ignore[misc]
