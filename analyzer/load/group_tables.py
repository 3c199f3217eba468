"""A dump's group tables: ``pg_config`` (names, descs and member ranks of its groups) and
``pg_status`` (each group's last enqueued, started and completed op), every value checked."""

from __future__ import annotations

from typing import Any

from analyzer.config import AnalysisConfig
from analyzer.escape import clean
from analyzer.load.entry_columns import int64
from analyzer.load.field_checks import Reasons

__all__ = ["GroupConfig", "GroupStatus", "SameMembers", "group_tables", "own_world", "parse_ranks"]

#: group name -> (desc, member ranks or None when unknown).
GroupConfig = dict[str, tuple[str, tuple[int, ...] | None]]
#: backend-local pg_id -> (last enqueued, last started, last completed); -1 when not observed.
GroupStatus = dict[int, tuple[int, int, int]]
#: Most groups read from one dump's pg_config or pg_status.
_MAX_GROUPS = 1 << 16
_COUNTERS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")


def parse_ranks(text: Any) -> tuple[int, ...] | None:
    """Member ranks of a ``pg_config`` entry: ``"[0, 1, 2]"`` (string) or a list."""
    if isinstance(text, (list, tuple)):
        try:
            return tuple(int(r) for r in text)
        except (TypeError, ValueError):
            return None
    if not isinstance(text, str):
        return None
    body = text.strip().strip("[]()")
    if not body.strip():
        return ()
    try:
        return tuple(int(part) for part in body.split(","))
    except ValueError:
        return None


_MEMBERS_SEEN: dict[tuple[str, int], tuple[tuple[int, ...] | None]] = {}


def _member_ranks(text: Any, max_rank: int) -> tuple[int, ...] | None:
    """Member ranks of a pg_config entry; None when they are not plausible ranks (below
    ``max_rank``, at most ``max_rank`` of them). Texts are remembered, with the same tuple
    returned for them.

    Every dump repeats the member list of each of its groups, and the default group lists
    every rank: parsing and checking it in each dump would cost world size squared, and
    shared tuples are pickled once per batch of dumps sent back by a parser process.
    """
    if not isinstance(text, str):
        return _plausible(parse_ranks(text), max_rank)
    known = _MEMBERS_SEEN.get((text, max_rank))
    if known is None:
        if len(_MEMBERS_SEEN) >= 256:
            _MEMBERS_SEEN.clear()
        members = None if len(text) > 16 * max_rank else _plausible(parse_ranks(text), max_rank)
        known = _MEMBERS_SEEN[(text, max_rank)] = (members,)
    return known[0]


def _plausible(members: tuple[int, ...] | None, max_rank: int) -> tuple[int, ...] | None:
    if members and (min(members) < 0 or max(members) >= max_rank or len(members) > max_rank):
        return None
    return members


_RANGES_SEEN: dict[int, tuple[tuple[int, ...], bool]] = {}


def own_world(pg_config: GroupConfig) -> int | None:
    """The world a dump's own ``pg_config`` gives: the size of its default group (``"0"``)
    when that lists the ranks 0 to n-1; None otherwise (gloo's nameless entry, no list).
    Remembered per member tuple, which :func:`_member_ranks` shares between dumps."""
    members = pg_config.get("0", ("", None))[1]
    if not members:
        return None
    known = _RANGES_SEEN.get(id(members))
    if known is None or known[0] is not members:
        if len(_RANGES_SEEN) >= 256:
            _RANGES_SEEN.clear()
        known = _RANGES_SEEN[id(members)] = (members, members == tuple(range(len(members))))
    return len(members) if known[1] else None


class SameMembers:
    """Equal member tuples -> one object (the first seen), hashing a tuple only when it is
    not the object seen last under the same group name."""

    def __init__(self) -> None:
        self.by_value: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.last: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def __call__(self, name: str, members: tuple[int, ...]) -> tuple[int, ...]:
        last = self.last.get(name)
        if last is not None and last[0] is members:
            return last[1]
        same = self.by_value.setdefault(members, members)
        self.last[name] = (members, same)
        return same


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
        members = _member_ranks(value.get("ranks"), config.max_rank)
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
