"""Read one dump file (pickle or JSON) safely and flatten its entries into columns.

The pickle reader refuses every global (:mod:`analyzer.unpickler`), so a crafted file that
names ``os.system`` (or any other callable) is reported as unsafe and nothing in it runs.
Parsing happens in worker processes for large dump sets, so :func:`parse_dump` returns
compact columns (integer codes plus small vocabularies) instead of per-entry dicts.

Every value is checked column by column (:mod:`analyzer.load.entry_columns`, once per distinct object
with :mod:`analyzer.load.field_checks`), within the caps of an :class:`~analyzer.config.AnalysisConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import DumpFormatError
from analyzer.load import entry_columns as col
from analyzer.load import field_checks as val
from analyzer.load.decode import decode, first_payload
from analyzer.load.field_checks import Reasons
from analyzer.load.group_tables import (
    group_tables,
)
from analyzer.load.parsed_dump import Columns, ParsedDump, int_columns
from analyzer.load.unpack import Payload

__all__ = ["parse_dump", "parse_payload"]


class _Parse:
    """One Python-reader parse: the columns, the entries dropped and the reasons counted."""

    def __init__(self, entries: list[dict[str, Any]], why: Reasons, config: AnalysisConfig) -> None:
        self.entries, self.why, self.config = entries, why, config
        self.cols = Columns()
        self.drop = np.zeros(len(entries), dtype=bool)

    def reject(
        self, index: np.ndarray, bad_distinct: list[int], reason: str, *, entry: bool
    ) -> None:
        """Entries whose value is one of the distinct values ``bad_distinct``."""
        if not bad_distinct:
            return
        rows = np.isin(index, bad_distinct)
        count = int(rows.sum())
        if entry:
            self.drop[rows] = True
            self.why.entries[reason] += count
        else:
            self.why.fields[reason] += count

    def distinct(self, key: str) -> tuple[np.ndarray, list[Any]]:
        return col.distinct(col.column(self.entries, key))

    def names(self) -> None:
        """Profiling name -> backend, op and the group-local ranks of a send/recv."""
        index, values = self.distinct("profiling_name")
        names, split, not_str, odd = val.check_names(values, self.config.max_rank)
        self.reject(index, not_str, "profiling_name is not a string", entry=True)
        self.reject(index, odd, "profiling_name is not a backend:op name", entry=True)
        self.cols.encode_names(index, names, split)

    def groups(self) -> tuple[np.ndarray, list[tuple[str, str] | None]]:
        """Group name and description; (each entry's index, the distinct groups)."""
        index, values = self.distinct("process_group")
        parts = [val.group_parts(pg) for pg in values]
        self.reject(
            index,
            [i for i, pg in enumerate(parts) if pg is None],
            "process_group is missing or not (name, desc) strings",
            entry=True,
        )
        pg_parts = [pg or ("", "") for pg in parts]
        self.cols.encode("pg_name", index, [name for name, _ in pg_parts])
        self.cols.encode("pg_desc", index, [desc for _, desc in pg_parts])
        return index, parts

    def lists(self) -> None:
        """Sizes and dtypes are compared across ranks: a value that is not one would read as
        a desync, so its entry is dropped rather than kept with a made-up value."""
        for key in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
            index, values = self.distinct(key)
            texts, ok = val.check_lists(values, key, self.config)
            what = "a list of shapes" if key.endswith("_sizes") else "a list of dtype names"
            self.reject(
                index,
                [i for i, good in enumerate(ok) if not good],
                f"{key} is not {what}",
                entry=True,
            )
            self.cols.encode(key, index, texts)

    def texts(self) -> None:
        """State and thread name: a bad one reads as not observed."""
        for key, check, reason in (
            ("state", val.check_state, "state is not a short string"),
            ("thread_name", val.check_thread, "thread_name is not a string"),
        ):
            index, values = self.distinct(key)
            texts, ok = check(values)
            self.reject(index, [i for i, good in enumerate(ok) if not good], reason, entry=False)
            self.cols.encode(key, index, texts)

    def stacks(self) -> list[tuple[val.Frame, ...]]:
        """Stacks: one key per distinct frames object, one stack id per distinct key."""
        index, values = self.distinct("frames")
        keys = val.stack_keys(values, self.config)
        self.reject(
            index,
            [i for i, k in enumerate(keys) if k is None],
            "frames is not a list of frames",
            entry=False,
        )
        per_distinct, stacks = val.stack_ids(keys)
        self.cols.ints["stack"] = per_distinct[index]
        return stacks

    def ints(self) -> None:
        """Counters, ids and times, each checked against its range."""
        for name, (key, default, lo, hi, is_entry) in int_columns(self.config).items():
            values, bad_rows = col.checked_ints(col.column(self.entries, key), default, lo, hi)
            if bad_rows.any():
                count = int(bad_rows.sum())
                if is_entry:
                    self.drop |= bad_rows
                    self.why.entries[f"{key} is not a sequence number"] += count
                else:
                    self.why.fields[f"{key} is not an integer in range"] += count
            self.cols.ints[name] = values

    def keep(
        self, pg_index: np.ndarray, parts: list[tuple[str, str] | None], flags: list[np.ndarray]
    ) -> dict[int, str]:
        """Drop the rejected entries; what they still prove: which backend-local pg_id is
        which group, so that the dump's pg_status counters of that group still count."""
        dropped_pg_ids: dict[int, str] = {}
        if not self.drop.any():
            return dropped_pg_ids
        pg_ids = self.cols.ints["pg_id"]
        for row in np.flatnonzero(self.drop).tolist():
            pg = parts[pg_index[row]]
            pid = int(pg_ids[row])
            if pg is not None and pid >= 0:
                dropped_pg_ids.setdefault(pid, pg[0])
        keep = ~self.drop
        self.cols.strings = {k: v[keep] for k, v in self.cols.strings.items()}
        self.cols.ints = {k: v[keep] for k, v in self.cols.ints.items()}
        flags[:] = [f[keep] for f in flags]
        return dropped_pg_ids


def _entries_of(raw: dict[str, Any], path: str, why: Reasons) -> list[dict[str, Any]]:
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise DumpFormatError(path, f"'entries' is a {type(entries).__name__}, not a list")
    if any(t is not dict for t in set(map(type, entries))):
        kept = [e for e in entries if isinstance(e, dict)]
        if len(entries) - len(kept):
            why.entries["not an object"] += len(entries) - len(kept)
        entries = kept
    return entries


def parse_dump(rank: int, path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG) -> ParsedDump:
    """Read and flatten one dump file. Raises :class:`DumpFormatError` on bad input."""
    return parse_payload(rank, first_payload(path, config=config), config=config)


def parse_payload(
    rank: int, payload: Payload, *, config: AnalysisConfig = DEFAULT_CONFIG
) -> ParsedDump:
    """Decode and flatten one dump. Raises :class:`DumpFormatError` on bad input.

    Every value is checked column by column (once per distinct object for names, sizes,
    groups and frames; with numpy for counters): an entry whose identity is broken (not an
    object, an op name or group that is not one, a sequence number out of range) is dropped,
    any other bad value reads as 'not observed'. Each drop is counted with its reason in
    ``warnings``, and the dump is then marked ``suspect``.
    """
    raw = decode(payload)
    path = payload.label
    why = Reasons()
    entries = _entries_of(raw, str(path), why)
    p = _Parse(entries, why, config)
    p.names()
    pg_index, parts = p.groups()
    p.lists()
    p.texts()
    stacks = p.stacks()
    p.ints()
    flags = [
        col.bools(col.column(entries, "is_p2p")),
        col.bools(col.column(entries, "retired")),
        col.floats(col.column(entries, "duration_ms")),
    ]
    dropped_pg_ids = p.keep(pg_index, parts, flags)
    tables = group_tables(raw, why, config)
    n = len(p.cols.ints["record_id"])
    if why.entries and not n and not tables[1]:
        # Nothing of it can be used: a crafted or broken file, not a rank's evidence.
        raise DumpFormatError(str(path), "no usable entry (" + "; ".join(why.lines()[:3]) + ")")
    parsed = p.cols.finish(
        rank=rank,
        path=str(path),
        fmt=payload.fmt,
        top=raw,
        n=n,
        flags=(flags[0], flags[1], flags[2]),
        tables=tables,
    )
    parsed.stacks = stacks
    parsed.warnings = why.lines()
    parsed.suspect = bool(why.entries) or bool(why.fields)
    parsed.dropped_pg_ids = dropped_pg_ids
    parsed.fingerprint = payload.fingerprint
    return parsed
