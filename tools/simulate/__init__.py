"""Simulate an NCCL training job and write NCCL-format flight-recorder dumps with a fault.

The simulated job is a Megatron-style tp x pp x dp run (global rank
``dp_idx*(pp*tp) + pp_idx*tp + tp_idx``, tensor parallel fastest). Every rank runs the same
training step: per microbatch a forward pass (receive activations from the previous stage,
a few sequence-parallel all_gather / reduce_scatter ops in its tensor-parallel group, send
activations to the next stage), then the backward passes mirroring it, then the end of the
step (tied-embedding all_reduce between the first and last stage, data-parallel gradient
all_reduce buckets whose size depends on the stage, a small tensor-parallel all_reduce and a
small all_reduce over the whole job whose result the CPU reads).

NCCL is asynchronous, and the dumps are built from a discrete scheduler that respects it:

* a rank's CPU enqueues ops until it has ``K`` ops in flight or reaches an op whose result it
  reads (the end-of-step all_reduce, or a blocking recv);
* each rank has one in-order stream: an op starts when it was enqueued and everything before
  it on that rank finished (plus the compute in between);
* a collective completes when every member has started it; a send/recv pair completes when
  both sides have started their half.

Ranks advance round-robin until nobody can move; whatever never completed is what the hang
leaves behind. Every live rank then dumps after the watchdog timeout.

Only the last iteration (the one where the fault happens) and one healthy iteration (used as
a template for the earlier, fully completed history) are scheduled op by op; the history
before them is laid out from the template, so 16k-rank jobs stay cheap.

Usage::

    python -m tools.simulate -o DIR --tp 2 --pp 2 --dp 2 --fault stall --rank 5 \
        [--timing] [--json] [--buffer-size N] [--jobs N]

The package, one module per part (each imports only the ones listed before it):

* :mod:`~tools.simulate.constants`: format, dialects, faults, group roles, times, model shape;
* :mod:`~tools.simulate.topology`: ranks and process groups;
* :mod:`~tools.simulate.sites`: the call sites (sizes, dtypes, stacks, durations);
* :mod:`~tools.simulate.program`: a rank's ops of one training step;
* :mod:`~tools.simulate.scheduler`: the discrete scheduler;
* :mod:`~tools.simulate.faults`: what each fault changes;
* :mod:`~tools.simulate.forms`: the nccl2 (recorder hook) and JSON forms of a dump;
* :mod:`~tools.simulate.dumps`: one rank's dump, and writing the files;
* :mod:`~tools.simulate.driver`: :func:`simulate_job` and the command line.
"""

from __future__ import annotations

from tools.simulate.constants import (
    BACKEND,
    BASE_EPOCH_NS,
    BATCH_OP_LEAD_NS,
    COLL,
    COMM_LIB_VERSION,
    DEFAULT,
    DEFAULT_INFLIGHT,
    DEFAULT_TIMEOUT_MS,
    DIALECTS,
    DP,
    DTYPE_BYTES,
    EMB,
    FAULTS,
    FORMAT_VERSION,
    HIDDEN,
    LAYERS,
    MEG,
    MICRO_BATCH,
    MP,
    MS,
    NETWORK_BYTES_PER_NS,
    NVLINK_BYTES_PER_NS,
    POST_STEP_NS,
    PP,
    RECV,
    ROLE_DESC,
    SEC,
    SEND,
    SEQ,
    SYNC_NS,
    TORCH,
    TP,
    TP_OPS_PER_PASS,
    US,
    VOCAB,
    WATCHDOG_TICK_NS,
)
from tools.simulate.driver import main, simulate_job
from tools.simulate.dumps import build_dump, dump_path, rank_dialect
from tools.simulate.faults import FaultPlan, plan_fault
from tools.simulate.forms import to_hook_form, to_json_form
from tools.simulate.program import Op, build_program
from tools.simulate.scheduler import Schedule, run_schedule
from tools.simulate.sites import Site, SiteTable
from tools.simulate.topology import Topology

__all__ = [
    "BACKEND",
    "BASE_EPOCH_NS",
    "BATCH_OP_LEAD_NS",
    "COLL",
    "COMM_LIB_VERSION",
    "DEFAULT",
    "DEFAULT_INFLIGHT",
    "DEFAULT_TIMEOUT_MS",
    "DIALECTS",
    "DP",
    "DTYPE_BYTES",
    "EMB",
    "FAULTS",
    "FORMAT_VERSION",
    "HIDDEN",
    "LAYERS",
    "MEG",
    "MICRO_BATCH",
    "MP",
    "MS",
    "NETWORK_BYTES_PER_NS",
    "NVLINK_BYTES_PER_NS",
    "POST_STEP_NS",
    "PP",
    "RECV",
    "ROLE_DESC",
    "SEC",
    "SEND",
    "SEQ",
    "SYNC_NS",
    "TORCH",
    "TP",
    "TP_OPS_PER_PASS",
    "US",
    "VOCAB",
    "WATCHDOG_TICK_NS",
    "FaultPlan",
    "Op",
    "Schedule",
    "Site",
    "SiteTable",
    "Topology",
    "build_dump",
    "build_program",
    "dump_path",
    "main",
    "plan_fault",
    "rank_dialect",
    "run_schedule",
    "simulate_job",
    "to_hook_form",
    "to_json_form",
]
