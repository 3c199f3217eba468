"""Layer 1, load: the files a user pointed at -> parsed dumps (:class:`Loaded`).

Discovery (what files, which rank each name gives), the file type from content, decompression
and archives within caps, the safe pickle/JSON decode, the reference reader and the compiled
one, every field checked, parsing in parallel processes (or on Dask workers), and the
context files a capture left beside the dumps. Nothing here knows about matching or
diagnosis; every file is untrusted, and one file never changes what the others prove.
"""

from analyzer.load.contexts import Contexts, alive_without_dump, find_contexts, where_now
from analyzer.load.dask_workers import ClusterError, scheduler_address
from analyzer.load.discover import MAX_BESIDE, STORE_MARKER, RankFile, is_dump_name, is_store
from analyzer.load.duplicates import (
    Duplicate,
    backends_of,
    newest,
    resolve_ranks,
    set_aside_stale,
    stale_snapshots,
    unordered_rounds,
)
from analyzer.load.entry_columns import narrow
from analyzer.load.handover import COLUMN_FIELDS, column_bytes, drop_column, is_released
from analyzer.load.incidents import Incident
from analyzer.load.loader import (
    Ignored,
    Loaded,
    Loading,
    Progress,
    Skipped,
    default_jobs,
    load_dumps,
    start_loading,
)
from analyzer.load.members import SameMembers
from analyzer.load.memo import BoundedMemo, clear_memos
from analyzer.load.parsed_dump import (
    BOOL_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    STRING_FIELDS,
    ParsedDump,
)
from analyzer.load.pool import ParseNote
from analyzer.load.torchcomms import (
    LABEL_PREFIX,
    TorchCommsRead,
    comm_key,
    resolve_across_shards,
)

__all__ = [
    "BOOL_FIELDS",
    "COLUMN_FIELDS",
    "FLOAT_FIELDS",
    "INT_FIELDS",
    "LABEL_PREFIX",
    "MAX_BESIDE",
    "STORE_MARKER",
    "STRING_FIELDS",
    "BoundedMemo",
    "ClusterError",
    "Contexts",
    "Duplicate",
    "Ignored",
    "Incident",
    "Loaded",
    "Loading",
    "ParseNote",
    "ParsedDump",
    "Progress",
    "RankFile",
    "SameMembers",
    "Skipped",
    "TorchCommsRead",
    "alive_without_dump",
    "backends_of",
    "clear_memos",
    "column_bytes",
    "comm_key",
    "default_jobs",
    "drop_column",
    "find_contexts",
    "is_dump_name",
    "is_released",
    "is_store",
    "load_dumps",
    "narrow",
    "newest",
    "resolve_across_shards",
    "resolve_ranks",
    "scheduler_address",
    "set_aside_stale",
    "stale_snapshots",
    "start_loading",
    "unordered_rounds",
    "where_now",
]
