"""Outputs are checked before the work: one rule for every command's ``-o`` (and
``report --png``), applied before a single dump is read.

- A missing folder on the way to the output is created (as ``export`` always did).
- A file where a folder is expected (``-o notes.txt/x.json``), a folder where a file is
  expected (``analyze -o some_dir``), or a place this user may not write is one line and exit
  6, before the analysis starts.
- ``export`` writes into a new or empty folder, or over a store of the same job; a folder
  holding other files is refused, a store of another job unless ``--force``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from analyzer.cli.exits import output_failed, write

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from analyzer.analysis import Analysis
    from analyzer.normalize import Tables

__all__ = [
    "check_file_output",
    "check_same_job",
    "check_store_output",
    "known_filter",
    "refuse",
    "write_blocks",
]


def refuse(message: str) -> typer.Exit:
    """Exit 6 (the output cannot be written) with one line."""
    from analyzer.escape import clean

    return output_failed(clean(message))


def _folder_ready(folder: Path, option: str, shown: Path) -> None:
    """``folder`` exists (created with its parents when missing) and this user may write in it."""
    for up in (folder, *folder.parents):
        if up.exists():
            if not up.is_dir():
                raise refuse(f"{option} {shown}: {up} is a file, not a folder")
            break
    if not folder.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise refuse(
                f"{option} {shown}: cannot create the folder {folder} ({exc.strerror or exc})"
            ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise refuse(f"{option} {shown}: the folder {folder} is not writable")


def check_file_output(path: Path | None, option: str = "-o") -> None:
    """The file ``path`` can be written (None: stdout, nothing to check)."""
    if path is None:
        return
    if path.is_dir():
        raise refuse(f"{option} {path}: is a folder; give a file name")
    _folder_ready(path.parent if str(path.parent) else Path("."), option, path)
    if path.exists() and not os.access(path, os.W_OK):
        raise refuse(f"{option} {path}: the file exists and is not writable")


def _store_meta(folder: Path) -> dict[str, object] | None:
    from analyzer.load import is_store

    if not is_store(folder):
        return None
    try:
        meta = json.loads((folder / "hangscope-store.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def check_store_output(folder: Path, force: bool) -> None:
    """``export -o FOLDER``: a new or empty folder, or a store (of the same job, checked
    again after loading by :func:`check_same_job`; of another job only with ``--force``). A
    folder of other files never: the store is built beside it and swapped in whole, which
    would remove them."""
    if folder.exists() and not folder.is_dir():
        raise refuse(f"-o {folder}: is a file; give a folder for the store")
    if folder.is_dir():
        try:
            held = next(iter(folder.iterdir()), None) is not None
        except OSError as exc:
            raise refuse(f"-o {folder}: cannot read the folder ({exc.strerror or exc})") from None
        if held and _store_meta(folder) is None:
            raise refuse(
                f"-o {folder}: the folder holds other files and is no hangscope store; "
                "give a new or empty folder (a store is written whole, and would remove them)"
            )
    if folder.is_dir():
        _folder_ready(folder, "-o", folder)
    else:  # the store's own folder is made when it is written: a failed export leaves none
        _folder_ready(folder.parent if str(folder.parent) else Path("."), "-o", folder)


def _groups_of(folder: Path) -> set[tuple[str, str]] | None:
    try:
        import pandas as pd

        g = pd.read_parquet(folder / "groups.parquet", columns=["pg_name", "pg_desc"])
    except Exception:  # noqa: BLE001 - an unreadable store is told apart by its world size only
        return None
    return set(zip(g["pg_name"].astype(str), g["pg_desc"].astype(str)))


def check_same_job(folder: Path, tables: Tables, force: bool) -> str | None:
    """After loading: None when ``folder`` is no store, a store of the same job (the same
    world size and process groups), or ``--force``; else the reason to refuse it."""
    if force:
        return None
    meta = _store_meta(folder)
    if not meta or "world_size" not in meta:
        return None
    other = f"-o {folder}: holds a store of another job"
    hint = "give a new folder, or --force to replace it"
    if int(str(meta["world_size"])) != int(tables.world_size):
        return f"{other} (a world of {meta['world_size']} ranks, not {tables.world_size}); {hint}"
    stored = _groups_of(folder)
    g = tables.groups
    mine = set(zip(g["pg_name"].astype(str), g["pg_desc"].astype(str)))
    if stored is not None and stored != mine:
        return f"{other} (other process groups); {hint}"
    return None


def write_blocks(blocks: Iterable[str], output: Path | None) -> None:
    """Write text block by block as it is made: to stdout (as :func:`~analyzer.cli.exits.write`
    does), or to the file ``output`` through a temporary file beside it, renamed when
    complete (never a half-written file)."""
    import tempfile

    if output is None:
        for block in blocks:  # stdout closed or full, or its reader gone: exit 6
            write(block, None)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for block in blocks:
                f.write(block)
        os.replace(tmp, output)
    except OSError as exc:
        raise refuse(f"{output}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def known_filter(analysis: Analysis, ranks: list[int] | None, groups: list[str] | None) -> None:
    """``entries -r``/``-g``: a rank or group the dumps do not have is exit 2 with the ones
    they have (not an empty table)."""
    from analyzer.cli.exits import fail
    from analyzer.terms import rank_runs

    t = analysis.tables
    have = sorted(int(r) for r in t.dumped_ranks)
    unknown = sorted(set(ranks or ()) - set(have))
    if unknown:
        raise fail(f"no dump of rank {', '.join(map(str, unknown))}; ranks: {rank_runs(have, 12)}")
    names = set(t.groups["pg_name"].astype(str)) | set(t.groups["pg_desc"].astype(str))
    e = t.entries
    for col in ("pg_name", "pg_desc"):  # the categories, not 4 million strings
        values = e[col]
        names |= set(map(str, values.cat.categories if hasattr(values, "cat") else values.unique()))
    missing = [g for g in groups or () if g not in names]
    if missing:
        listed = sorted(
            {
                f"{d} ({n})" if d and d != n else n
                for n, d in zip(t.groups["pg_name"].astype(str), t.groups["pg_desc"].astype(str))
            }
        )
        more = f", ... ({len(listed)} groups)" if len(listed) > 12 else ""
        raise fail(f"no group {missing[0]!r}; groups: {', '.join(listed[:12])}{more}")
