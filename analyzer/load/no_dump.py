"""The one line that says why no dump at all could be read (exit 2 in the CLI)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from analyzer.errors import InputError
from analyzer.escape import clean
from analyzer.load.debug_server import snapshot_only
from analyzer.load.snapshot_tables import NO_TABLES

__all__ = ["no_dump_error"]


def no_dump_error(
    inputs: Sequence[str | os.PathLike[str]],
    skipped: Sequence[tuple[str, str]],
    ignored: Sequence[str],
) -> InputError:
    """Why none of the files gave a dump: ``skipped`` as (path, reason), ``ignored`` paths."""
    where = ", ".join(clean(os.fspath(s)) for s in inputs)
    if not skipped and snapshot_only(ignored):
        return InputError(f"{where}: {NO_TABLES}")
    if not skipped:
        return InputError(
            f"{where}: none of the {len(ignored)} file(s) is a flight-recorder dump "
            f"(pickle or JSON with its keys, or such a dump compressed or archived)"
        )
    reasons = "; ".join(f"{clean(Path(p).name)}: {why}" for p, why in skipped[:3])
    more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
    return InputError(f"no readable dump among {len(skipped)} file(s): {reasons}{more}")
