"""Types of the compiled reader (``analyzer/load/_fastpickle/module.c`` over ``core.c``)."""

from typing import Any

def parse(
    data: bytes, /
) -> (
    tuple[
        dict[str, Any],  # the dump's top-level keys but the entries
        int,  # entries
        tuple[bytes, ...],  # integer columns, int64 bytes each
        tuple[bytes, ...],  # flag columns
        bytes,  # duration_ms, float64 bytes
        tuple[tuple[bytes, list[bytes]], ...],  # per object field: int32 codes, distinct keys
        tuple[tuple[int, int], ...],  # smallest and largest value of each integer column
    ]
    | str
):
    """The columns of a pickled dump, or a str saying why the compiled reader declined it."""

def field_names() -> tuple[str, ...]:
    """The entry keys in column order."""

def decode(key: bytes, /) -> Any:
    """The plain value behind a distinct value's canonical bytes."""
