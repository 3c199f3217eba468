"""Parsing on a Dask cluster: the files are read by the cluster's workers, where they are.

``hangscope analyze DIR --scheduler tcp://HOST:8786`` (or ``HANGSCOPE_SCHEDULER``) finds the
files on this machine, as without a cluster, then sends them in batches to the workers of
the ``dask.distributed`` scheduler at that address. Each worker opens and parses its batch
with the same code as the in-process pool (the compiled reader where it is built) and sends
back, per file, the columns of its dump (:class:`~analyzer.load.parse.ParsedDump`: numpy arrays
and their vocabularies, never one Python object per entry), or why it was skipped. This
process keeps the order of the files, so the analysis is the one the in-process pool gives.

The paths are sent as this machine names them: every worker must be able to read them under
the same names (a shared file system, or the node's local dumps on that node). A file a
worker cannot read is skipped with its reason, like any unreadable file, and the other
ranks are analyzed. A batch whose worker fails (the worker died, or cannot import
``analyzer``) skips its files with the worker's error; when every batch failed, or the
scheduler cannot be reached, :class:`ClusterError` is raised.

Dask is imported only here, and only when a scheduler is given (``pip install
'hangscope[dask]'``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from analyzer.errors import AnalyzerError

SCHEDULER_ENV = "HANGSCOPE_SCHEDULER"
TIMEOUT_ENV = "HANGSCOPE_SCHEDULER_TIMEOUT"
#: Seconds to connect to the scheduler and to wait for its first worker.
CONNECT_TIMEOUT_S = 10.0
#: Files per task: large enough that a task's overhead (a few ms) is small beside its parse.
BATCH_FILES = 32

Item = TypeVar("Item")
Result = TypeVar("Result")


class ClusterError(AnalyzerError):
    """The Dask cluster cannot be used: unreachable scheduler, no worker, every batch failed."""


def scheduler_address(explicit: str | None) -> str | None:
    """``explicit`` (``--scheduler``), else ``HANGSCOPE_SCHEDULER``; None or empty: in-process."""
    address = explicit if explicit is not None else os.environ.get(SCHEDULER_ENV, "")
    address = address.strip()
    return address or None


def _timeout() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV, CONNECT_TIMEOUT_S))
    except ValueError:
        return CONNECT_TIMEOUT_S
    return value if value > 0 else CONNECT_TIMEOUT_S


def _connect(address: str) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(
            f"--scheduler {address}: parsing on a Dask cluster needs dask.distributed "
            "(pip install 'hangscope[dask]')"
        ) from None
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if not location:
            raise ValueError("no host")
    except (ValueError, TypeError) as exc:
        raise ClusterError(
            f"--scheduler {address}: not a Dask scheduler address like "
            f"tcp://HOST:8786 ({str(exc).splitlines()[0][:120]})"
        ) from None
    timeout = _timeout()
    try:
        client = Client(address, timeout=f"{timeout}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({why})") from None
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        client.close()
        raise ClusterError(
            f"the Dask scheduler at {address} has no worker "
            f"(none joined within {timeout:g} s): {type(exc).__name__}"
        ) from None
    return client


def _run_batch(parse: Callable[[Any], list[Any]], items: list[Any]) -> tuple[str, list[list[Any]]]:
    """On a worker: every item of one batch through ``parse``, and the worker's host name."""
    import socket

    return socket.gethostname(), [parse(item) for item in items]


def parse_on_cluster(
    address: str,
    items: Sequence[Item],
    parse: Callable[[Item], list[Result]],
    failed: Callable[[Item, str], Result],
    *,
    annotate: Callable[[Result, str], Result] | None = None,
) -> Iterator[list[Result]]:
    """``parse(item)`` of every item, run on the workers of the scheduler at ``address``, in
    the order of ``items``.

    ``failed(item, reason)`` stands for an item whose batch failed on its worker;
    ``annotate(result, host)`` may reword a result with the host that produced it. Raises
    :class:`ClusterError` when the scheduler cannot be reached, has no worker, or every
    batch failed.
    """
    client = _connect(address)
    try:
        yield from _gather(client, address, items, parse, failed, annotate)
    finally:
        with contextlib.suppress(OSError, TimeoutError):  # closing a lost connection
            client.close(timeout=_timeout())


def _gather(
    client: Any,
    address: str,
    items: Sequence[Item],
    parse: Callable[[Item], list[Result]],
    failed: Callable[[Item, str], Result],
    annotate: Callable[[Result, str], Result] | None,
) -> Iterator[list[Result]]:
    from distributed import as_completed

    batches = [list(items[i : i + BATCH_FILES]) for i in range(0, len(items), BATCH_FILES)]
    futures = {
        client.submit(_run_batch, parse, batch, pure=False): n for n, batch in enumerate(batches)
    }
    done: dict[int, list[list[Result]]] = {}
    errors: list[str] = []
    next_out = 0
    for future in as_completed(list(futures), loop=client.loop):
        n = futures.pop(future)
        try:
            host, results = future.result()
        except Exception as exc:  # noqa: BLE001 - any worker failure skips that batch's files
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            errors.append(why)
            results = [[failed(item, f"its Dask worker failed ({why})")] for item in batches[n]]
        else:
            if annotate is not None:
                results = [[annotate(r, host) for r in per_item] for per_item in results]
        future.release()
        done[n] = results
        while next_out in done:  # in the order of the items
            yield from done.pop(next_out)
            next_out += 1
    if batches and len(errors) == len(batches):
        raise ClusterError(f"every batch failed on the Dask workers at {address}: {errors[0]}")


__all__ = [
    "BATCH_FILES",
    "CONNECT_TIMEOUT_S",
    "SCHEDULER_ENV",
    "TIMEOUT_ENV",
    "ClusterError",
    "parse_on_cluster",
    "scheduler_address",
]
