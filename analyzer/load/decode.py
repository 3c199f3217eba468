"""The top-level dict of one dump candidate: JSON or pickle, read without running anything."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.errors import DumpFormatError, UnsafeDumpError
from analyzer.escape import clean
from analyzer.load.unpack import Payload, Refusal, payloads
from analyzer.unpickler import unpickle

__all__ = ["decode", "first_payload", "load_raw"]


def _from_json(label: str, data: bytes) -> Any:
    try:
        return json.loads(data)  # detects UTF-8 (BOM or not), UTF-16 and UTF-32
    except RecursionError:
        raise DumpFormatError(label, "JSON nested too deeply to be a dump") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise DumpFormatError(label, f"truncated or invalid JSON ({str(exc)[:160]})") from None
    except MemoryError:
        raise DumpFormatError(label, "JSON too large to read") from None


def _from_pickle(label: str, data: bytes) -> Any:
    try:
        return unpickle(data)
    except pickle.UnpicklingError as exc:
        if "refused" in str(exc):
            raise UnsafeDumpError(
                label, f"unsafe pickle: {exc} (a real dump holds only plain data; not executed)"
            ) from None
        raise DumpFormatError(label, f"truncated or corrupt pickle ({str(exc)[:160]})") from None
    except (
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        MemoryError,
        RecursionError,
        UnicodeDecodeError,
        OverflowError,
    ) as exc:
        raise DumpFormatError(
            label, f"truncated or corrupt pickle ({type(exc).__name__})"
        ) from None


def decode(payload: Payload) -> dict[str, Any]:
    """The top-level dict of one dump candidate.

    Raises :class:`UnsafeDumpError` for a pickle that names code, and
    :class:`DumpFormatError` for a truncated, corrupt, too deeply nested or foreign one.
    """
    label, data = payload.label, payload.data
    obj = _from_json(label, data) if payload.fmt == "json" else _from_pickle(label, data)
    if not isinstance(obj, dict):
        raise DumpFormatError(
            label, f"not a flight-recorder dump (top level is {type(obj).__name__})"
        )
    if "version" not in obj or not ({"entries", "pg_config", "pg_status"} & obj.keys()):
        keys = sorted(clean(str(k))[:40] for k in list(obj)[:64])[:8]
        raise DumpFormatError(label, f"not a flight-recorder dump (keys {keys})")
    return obj


def load_raw(path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG) -> tuple[dict[str, Any], str]:
    """The top-level dict of a dump file and its format (``"pickle"`` or ``"json"``).

    Compressed files are read through; for an archive, its first member. Raises
    :class:`UnsafeDumpError` for a pickle that names code, and :class:`DumpFormatError` for an
    empty, truncated or foreign file.
    """
    for item in payloads(str(path), lenient=True, config=config):
        if isinstance(item, Refusal):
            reason = (
                item.reason
                if not item.foreign or item.reason.startswith(("not a", "empty"))
                else f"not a flight-recorder dump ({item.reason})"
            )
            raise DumpFormatError(item.label, reason)
        return decode(item), item.fmt
    raise DumpFormatError(str(path), "empty archive")


def first_payload(path: Path, *, config: AnalysisConfig = DEFAULT_CONFIG) -> Payload:
    """The first dump candidate of one file (the file itself, or an archive's first member).
    Raises :class:`DumpFormatError` when it is refused or the archive is empty."""
    for item in payloads(str(path), lenient=True, config=config):
        if isinstance(item, Refusal):
            raise DumpFormatError(item.label, item.reason)
        return item
    raise DumpFormatError(str(path), "empty archive")
