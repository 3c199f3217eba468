"""A dump's group tables: ``pg_config`` (names, descs and member ranks of its groups) and
``pg_status`` (each group's last enqueued, started and completed op), every value checked."""

from __future__ import annotations

from typing import Any

from analyzer.config import AnalysisConfig
from analyzer.escape import clean
from analyzer.load.entry_columns import int64
from analyzer.load.field_checks import Reasons
from analyzer.load.members import member_ranks

__all__ = ["GroupConfig", "GroupStatus", "group_tables"]

#: group name -> (desc, member ranks or None when unknown).
GroupConfig = dict[str, tuple[str, tuple[int, ...] | None]]
#: backend-local pg_id -> (last enqueued, last started, last completed); -1 when not observed.
GroupStatus = dict[int, tuple[int, int, int]]
#: Most groups read from one dump's pg_config or pg_status.
_MAX_GROUPS = 1 << 16
_COUNTERS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")


def _items(raw: dict[str, Any], key: str, why: Reasons) -> list[tuple[Any, Any]]:
    """The first groups of the table ``key`` (none when it is not an object: counted)."""
    table = raw.get(key) or {}
    if not isinstance(table, dict):
        if table:
            why.fields[f"{key} is not an object"] += 1
        return []
    return list(table.items())[:_MAX_GROUPS]


def _config_of(raw: dict[str, Any], why: Reasons, config: AnalysisConfig) -> GroupConfig:
    pg_config: GroupConfig = {}
    for key, value in _items(raw, "pg_config", why):
        if not isinstance(value, dict):
            why.fields["pg_config entry is not an object"] += 1
            continue
        name, desc = value.get("name", key), value.get("desc") or ""
        if not isinstance(name, (str, int)) or not isinstance(desc, str):
            why.fields["pg_config name or desc is not a string"] += 1
            continue
        members = member_ranks(value.get("ranks"), config.max_rank)
        if members is None and value.get("ranks") not in (None, ""):
            why.fields["pg_config ranks are not a list of plausible ranks"] += 1
        pg_config[clean(str(name), 1024)] = (clean(desc, 1024), members)
    return pg_config


def _counter(value: Any) -> int:
    """A pg_status counter: -1 when absent, -2 when not a number at all."""
    return int64(value, -1) if isinstance(value, (str, int, float)) or value is None else -2


def _status_of(raw: dict[str, Any], why: Reasons, config: AnalysisConfig) -> GroupStatus:
    pg_status: GroupStatus = {}
    top = config.max_counter
    for key, value in _items(raw, "pg_status", why):
        pid = int64(key, -1) if isinstance(key, (str, int)) else -1
        if not isinstance(value, dict) or not -1 <= pid < 1 << 31:
            why.fields["pg_status entry is not an object of counters"] += 1
            continue
        enq, started, done = (_counter(value.get(k)) for k in _COUNTERS)
        counters = (enq, started, done)
        if any(not -1 <= c < top for c in counters):
            why.fields["pg_status counter is not an integer in range"] += 1
            enq, started, done = (c if -1 <= c < top else -1 for c in counters)
            counters = (enq, started, done)
        pg_status[pid] = counters
    return pg_status


def group_tables(
    raw: dict[str, Any], why: Reasons, config: AnalysisConfig
) -> tuple[GroupConfig, GroupStatus]:
    """A dump's pg_config and pg_status, each bad value counted in ``why``."""
    return _config_of(raw, why, config), _status_of(raw, why, config)
