"""Nothing half-written under a final name: files and store folders written beside their
final name and renamed into place.

- A file (a report, ``analyze -o``): written to a hidden temporary name in the same folder,
  flushed to disk (``fsync``), then renamed over the final name (:func:`write_text`). A
  failed write (a full disk, a signal) removes the temporary file: the final name holds the
  old file or nothing.
- A store: built in a hidden folder beside the final one (:func:`begin_store`), every file
  flushed to disk, then swapped in at once (:func:`swap_in`, ``renameat2(RENAME_EXCHANGE)``
  where the kernel has it); the old store (or empty folder) is removed after. A store folder
  is complete or absent, a failed re-export leaves the old store as it was, and of two
  exports into one folder at once the one that finished last is the store, whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from analyzer.errors import InputError
from analyzer.store.layout import MARKER, STAGING

__all__ = [
    "BUILD_TAG",
    "begin_store",
    "fsync_file",
    "is_build",
    "swap_in",
    "write_text",
]

#: In the name of the hidden folder a store is built in, beside its final folder.
BUILD_TAG = ".hangscope-partial-"


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot sync a folder
        fsync_file(path)


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary name beside ``path``, flushed, renamed to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """``text`` (UTF-8) as the file ``path``, whole or not at all (see the module's doc)."""
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _is_store_or_empty(folder: Path) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return not (set(names) - {STAGING}) or MARKER in names


def _remove_dead_builds(final: Path) -> None:
    """Build folders beside ``final`` of exports that are gone (killed before they could
    remove theirs): the process id in their name runs no more."""
    prefix = f".{final.name}{BUILD_TAG}"
    with contextlib.suppress(OSError):
        for name in os.listdir(final.parent):
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix) :].partition("-")[0]
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(final.parent / name, ignore_errors=True)
            except (OSError, ValueError):
                continue


def begin_store(out: str | os.PathLike[str]) -> Path:
    """A new hidden folder beside ``out`` to build a store in, for :func:`swap_in`.

    ``out`` must be absent, an empty folder or a store (replaced whole): a folder holding
    anything else is refused (:class:`InputError`), its files are not the store's to replace.
    OSError when the folder cannot be made (a read-only or full disk)."""
    final = Path(out)
    if final.exists() and not (final.is_dir() and _is_store_or_empty(final)):
        raise InputError(
            f"{final}: exists and is no hangscope store: give a new or empty folder "
            "(or a store, which is replaced)"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(final)
    build = final.parent / f".{final.name}{BUILD_TAG}{os.getpid()}-{secrets.token_hex(4)}"
    build.mkdir()
    return build


def is_build(folder: Path) -> bool:
    """Whether ``folder`` was made by :func:`begin_store`."""
    return folder.name.startswith(".") and BUILD_TAG in folder.name


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` at once (Linux ``renameat2``); False where the
    kernel or the C library cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    got = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if got == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def swap_in(build: Path, out: Path) -> None:
    """The store built in ``build`` (every file already flushed) made the folder ``out``
    at once; what ``out`` held (an older store, an empty folder) is removed."""
    _fsync_dir(build)
    try:
        os.rename(build, out)  # out absent (or an empty folder): done
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        if not _is_store_or_empty(out):
            raise InputError(f"{out}: became something else than a store while written") from None
        if not _exchange(build, out):  # no renameat2: out is absent a moment
            old = out.with_name(f".{out.name}{BUILD_TAG}old-{secrets.token_hex(4)}")
            os.rename(out, old)
            os.rename(build, out)
            build = old
        shutil.rmtree(build, ignore_errors=True)  # now the old store
    _fsync_dir(out.parent)
