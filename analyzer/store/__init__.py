"""The store: one incident's tables (or a shard of them) as Parquet files, read back as
input by every command, and several shards opened as one job.
"""

from analyzer.store.atomic import begin_store, write_text
from analyzer.store.merge import Exported, open_stores, prepare_export
from analyzer.store.parquet import ranges, read_store, store_inputs, write_store

__all__ = [
    "Exported",
    "begin_store",
    "open_stores",
    "prepare_export",
    "ranges",
    "read_store",
    "store_inputs",
    "write_store",
    "write_text",
]
