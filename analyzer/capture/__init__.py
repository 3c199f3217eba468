"""Capture every rank's flight-recorder buffers and where each rank is now, when a job hangs.

For training scripts. One line, before or after ``init_process_group``::

    import analyzer.capture  # with HANGSCOPE_CAPTURE_DIR=/shared/dumps in the environment

or, after ``init_process_group``::

    import analyzer.capture as capture
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
must be on when the process groups are created: importing this package sets
``TORCH_FR_BUFFER_SIZE=2000`` when neither it nor ``TORCH_NCCL_TRACE_BUFFER_SIZE`` is set.

The pieces: :mod:`~analyzer.capture.hook` (install, trigger: the one capture of this process),
:mod:`~analyzer.capture.watcher` (the watcher thread and when it triggers),
:mod:`~analyzer.capture.signal_trigger` (SIGUSR1 through a wakeup socket),
:mod:`~analyzer.capture.c10d_link` (the store protocol between ranks),
:mod:`~analyzer.capture.snapshot` (what is written), :mod:`~analyzer.capture.torch_buffers`
(the flight-recorder buffers, read through torch) and :mod:`~analyzer.context_file`
(the context file, shared with the reader). This layer imports only itself and the base
modules: never pandas, never the analysis.

Importing :mod:`analyzer` does not import this package, and this package imports torch only
inside the watcher, once the script has imported it. One cost is paid up front: torch's stack
symbolizer imports ``torch._inductor`` on its first dump with stacks (one to three seconds
holding the GIL), so :func:`install` imports it at once when torch is loaded (before the
training loop, when called after ``init_process_group``), and the watcher does it as soon as
the process group exists otherwise. After that the watcher costs one look at the group
counters and one store round trip per poll (``timeout_s / 4``, at most a second).
"""

from analyzer.capture.c10d_link import STORE_PREFIX
from analyzer.capture.hook import ENV_DIR, ENV_TIMEOUT, current, install, trigger
from analyzer.capture.snapshot import dump_name, thread_stacks
from analyzer.capture.watcher import DEFAULT_TIMEOUT_S, Capture
from analyzer.context_file import CONTEXT_SCHEMA, RankContext, ThreadStack, context_name

__all__ = [
    "CONTEXT_SCHEMA",
    "DEFAULT_TIMEOUT_S",
    "ENV_DIR",
    "ENV_TIMEOUT",
    "STORE_PREFIX",
    "Capture",
    "RankContext",
    "ThreadStack",
    "context_name",
    "current",
    "dump_name",
    "install",
    "thread_stacks",
    "trigger",
]
