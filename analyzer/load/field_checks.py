"""What one distinct value of an entry field may be: op names, groups, sizes, dtypes, states,
thread names and stacks, each checked within a bounded walk and made safe to show.

Both readers (:mod:`analyzer.load.parse` and the compiled one's :mod:`analyzer.load.parse_native`) check
the distinct objects of a column with these functions, so a value means the same whichever
reader read it. Each check returns what the value reads as, and which distinct values are bad.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import numpy as np

from analyzer.config import AnalysisConfig
from analyzer.escape import MAX_TEXT, clean
from analyzer.load.entry_columns import int64

__all__ = [
    "Frame",
    "NameSplit",
    "Reasons",
    "check_lists",
    "check_names",
    "check_state",
    "check_thread",
    "group_parts",
    "split_profiling_name",
    "stack_ids",
    "stack_keys",
    "text_of",
    "version_text",
]

Frame = tuple[str, str, int]
#: (backend, op, group-local rank of self, of the peer) of one ``profiling_name``.
NameSplit = tuple[str, str, int, int]

_P2P = re.compile(r"^(send|recv)\s*(?:(\d+)\s*(->|<-)\s*(\d+))?")
OP_NAME = re.compile(
    r"^[A-Za-z0-9_.\-]{0,64}:[A-Za-z_][A-Za-z0-9_]{0,127}(?:[ \t].{0,256})?$|"
    r"^[A-Za-z_][A-Za-z0-9_]{0,127}(?:[ \t].{0,256})?$",
    re.S,
)
SHAPES_TEXT = re.compile(r"^[\[\]\d, ]*$")
DTYPES_TEXT = re.compile(r'^[\[\]\w", \']*$')
#: Longest sizes or dtypes text that is looked at.
_MAX_LIST_TEXT = 1 << 16


class Reasons:
    """Counted reasons for what a parse dropped: per entry, and per field value."""

    def __init__(self) -> None:
        self.entries: Counter[str] = Counter()
        self.fields: Counter[str] = Counter()

    def lines(self) -> list[str]:
        out = [
            f"{n} entr{'y' if n == 1 else 'ies'} dropped: {why}" for why, n in self.entries.items()
        ]
        out += [
            f"{n} value{'' if n == 1 else 's'} ignored: {why}" for why, n in self.fields.items()
        ]
        return out


def split_profiling_name(name: str) -> NameSplit:
    """``"nccl:send 0->1"`` -> (backend, op, self_local, peer_local); -1 where unknown."""
    backend, sep, rest = name.partition(":")
    if not sep:
        backend, rest = "", name
    rest = rest.strip()
    m = _P2P.match(rest)
    if m:
        op = m.group(1)
        if m.group(2) is not None:
            a, b = int(m.group(2)), int(m.group(4))
            return backend, op, a, b
        return backend, op, -1, -1
    op = rest.split(" ", 1)[0].lower() if rest else "unknown"
    return backend, op, -1, -1


def check_names(
    values: list[Any], max_rank: int
) -> tuple[list[str], list[NameSplit], list[int], list[int]]:
    """Distinct ``profiling_name`` values: their clean names ("" for bad ones), their split
    (local ranks at or over ``max_rank`` read as unknown), and the indices of the values that
    are not strings and of those that are no ``backend:op`` name."""
    not_str = [i for i, v in enumerate(values) if type(v) is not str]
    odd = [i for i, v in enumerate(values) if type(v) is str and not OP_NAME.match(v)]
    names = [clean(v) if type(v) is str and OP_NAME.match(v) else "" for v in values]
    split = [
        (b, op, me if me < max_rank else -1, peer if peer < max_rank else -1)
        for b, op, me, peer in map(split_profiling_name, names)
    ]
    return names, split, not_str, odd


def group_parts(pg: Any) -> tuple[str, str] | None:
    """(name, desc) of a ``process_group`` value, or None when it is not one."""
    if isinstance(pg, str):
        pg = (pg, "")
    if not isinstance(pg, (list, tuple)) or not 1 <= len(pg) <= 2:
        return None
    if not all(type(p) is str and len(p) <= 1024 for p in pg):
        return None
    return clean(pg[0]), clean(pg[1]) if len(pg) > 1 else ""


def _shape_list(value: Any, limit: int) -> bool:
    """A list of shapes (lists of non-negative ints), within a bounded walk."""
    if not isinstance(value, (list, tuple)) or len(value) > limit:
        return False
    seen = 0
    for shape in value:
        if not isinstance(shape, (list, tuple)):
            return False
        seen += len(shape) + 1
        if seen > limit:
            return False
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return False
    return True


def _str_list(value: Any, limit: int) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) <= limit
        and all(type(v) is str and len(v) <= 256 for v in value)
    )


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return json.dumps(_plain(value), separators=(", ", ": "))
    return "" if value is None else str(value)


def text_of(value: Any) -> str:
    """Sizes and dtypes as JSON-like text, whether they came as lists, tuples or text."""
    if isinstance(value, (list, tuple)):
        return clean(repr(value).replace("(", "[").replace(")", "]").replace("'", '"'), 1 << 20)
    return clean(_text(value))


def check_lists(
    values: list[Any], key: str, config: AnalysisConfig
) -> tuple[list[str], list[bool]]:
    """Distinct values of ``input_sizes``/``output_sizes`` (lists of shapes) or of
    ``input_dtypes``/``output_dtypes`` (lists of dtype names): their text ("" for bad ones),
    and whether each is one."""
    limit = config.max_shape_values
    sizes = key.endswith("_sizes")
    check, pattern = (_shape_list, SHAPES_TEXT) if sizes else (_str_list, DTYPES_TEXT)
    ok = [
        v is None
        or check(v, limit)
        or (type(v) is str and len(v) <= _MAX_LIST_TEXT and pattern.match(v) is not None)
        for v in values
    ]
    return [text_of(v) if good else "" for v, good in zip(values, ok)], ok


def check_state(values: list[Any]) -> tuple[list[str], list[bool]]:
    """Distinct ``state`` values: their text (``unknown`` when absent or bad), and which are
    short strings."""
    ok = [v is None or (type(v) is str and len(v) <= 64) for v in values]
    return [clean(v) if good and v else "unknown" for v, good in zip(values, ok)], ok


def check_thread(values: list[Any]) -> tuple[list[str], list[bool]]:
    """Distinct ``thread_name`` values: their text, and which are strings."""
    ok = [v is None or type(v) is str for v in values]
    return [clean(v, 256) if good and v else "" for v, good in zip(values, ok)], ok


def _stack_key(frames: Any, max_frames: int) -> tuple[Frame, ...] | None:
    """The frames as (name, filename, line) tuples; None when they are not frames."""
    if not isinstance(frames, (list, tuple)) or len(frames) > max_frames:
        return None
    out = []
    for f in frames:
        if type(f) is not dict:
            return None
        name, filename, line = f.get("name", ""), f.get("filename", ""), f.get("line")
        if type(name) is not str or type(filename) is not str:
            return None
        # The common case inline (printable, not too long, an int line): this runs per frame.
        if len(name) > MAX_TEXT or not name.isprintable():
            name = clean(name)
        if len(filename) > MAX_TEXT or not filename.isprintable():
            filename = clean(filename)
        if type(line) is not int or not 0 <= line < 1 << 31:
            line = int64(line, 0) if not isinstance(line, (list, tuple, dict)) else 0
        out.append((name, filename, line))
    return tuple(out)


def stack_keys(values: list[Any], config: AnalysisConfig) -> list[tuple[Frame, ...] | None]:
    """Distinct ``frames`` values as stacks: ``()`` for none, None for what is no stack."""
    return [_stack_key(frames, config.max_frames) if frames else () for frames in values]


def stack_ids(keys: list[tuple[Frame, ...] | None]) -> tuple[np.ndarray, list[tuple[Frame, ...]]]:
    """One stack id per distinct stack (-1 for none), and the stacks in order of first use."""
    ids: dict[tuple[Frame, ...], int] = {}
    per_distinct = np.array(
        [ids.setdefault(key, len(ids)) if key else -1 for key in keys] or [-1], dtype=np.int64
    )
    return per_distinct, list(ids)


def version_text(value: Any) -> str:
    return clean(str(value), 64) if isinstance(value, (str, int, float)) else ""
