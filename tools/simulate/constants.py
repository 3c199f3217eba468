"""Constants of the simulated job: format, dialects, faults, group roles, times, model shape."""

from __future__ import annotations

FORMAT_VERSION = "2.10"
COMM_LIB_VERSION = "2.21.5"
BACKEND = "nccl"

#: How the dumps are written: ``nccl`` (the legacy ProcessGroupNCCL recorder, torch <= 2.14
#: and ``nccl-legacy`` in 2.15), ``nccl2`` (torch 2.15's default NCCL, written by the recorder
#: hook: one-sided send/recv sizes, pg_status in op_id units, completed + retired or
#: scheduled and not retired, no coalesced work entries, and a file only from ranks whose own
#: ops timed out), ``mixed`` (odd ranks nccl2, even ranks legacy: a partial upgrade).
DIALECTS = ("nccl", "nccl2", "mixed")

FAULTS = (
    "none",
    "stall",
    "crash",
    "pipeline_stall",
    "pp_deadlock",
    "group_order",
    "gpu_stuck",
    "slow_gpu",
    "size_desync",
    "dtype_desync",
    "p2p_size_desync",
    "p2p_dtype_desync",
)

# Group roles. Each rank belongs to at most one group of each role.
DEFAULT, DP, PP, EMB, TP, MP = range(6)
ROLE_DESC = (
    "default_pg",
    "DATA_PARALLEL_GROUP",
    "PIPELINE_MODEL_PARALLEL_GROUP",
    "EMBEDDING_GROUP",
    "TENSOR_MODEL_PARALLEL_GROUP",
    "MODEL_PARALLEL_GROUP",
)

COLL, SEND, RECV = 0, 1, 2

# Time constants (nanoseconds).
US = 1_000
MS = 1_000_000
SEC = 1_000_000_000
WATCHDOG_TICK_NS = 100 * MS  # kWatchdogThreadSleepMillis
BATCH_OP_LEAD_NS = 12 * US  # an op inside batch_isend_irecv is recorded before its work
SYNC_NS = 25 * US  # CPU wake-up after a synchronising op finished
POST_STEP_NS = 18 * MS  # optimizer step and logging between iterations
DEFAULT_TIMEOUT_MS = 600_000
DEFAULT_INFLIGHT = 32

# Shape of the simulated model (a 7B-class GPT).
HIDDEN = 4096
SEQ = 4096
MICRO_BATCH = 1
VOCAB = 50304
LAYERS = 32
TP_OPS_PER_PASS = 4  # all_gather / reduce_scatter pairs for attention and MLP

NVLINK_BYTES_PER_NS = 150.0
NETWORK_BYTES_PER_NS = 20.0

BASE_EPOCH_NS = 1_760_000_000 * SEC

TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
MEG = "/opt/megatron-lm"

DTYPE_BYTES = {"BFloat16": 2, "Float": 4, "Half": 2, "Long": 8}
