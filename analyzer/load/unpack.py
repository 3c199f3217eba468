"""What a file holds, decided from its first bytes, and its dump bytes within fixed caps.

A file can hold one dump (pickle or JSON, in UTF-8, with a byte-order mark, or in UTF-16), a
compressed dump (gzip, zstd, bzip2, xz) or an archive of dumps (tar, possibly compressed, or
zip). Everything else (core files, logs, zeros, random bytes) is *foreign*. Compressed data is
streamed and counted while it is read: nothing beyond ``max_dump_bytes`` per dump, nor
beyond ``max_archive_bytes`` per archive (:class:`~analyzer.config.AnalysisConfig`), is ever
held, and nothing from an archive is written to disk.
"""

from __future__ import annotations

import io
import lzma
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, cast

from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
from analyzer.load.debug_server import is_torchcomms_page, page_member, page_ranks
from analyzer.load.filetype import COMPRESSED, FOREIGN_WHAT, HEAD_BYTES, sniff
from analyzer.load.streams import (
    Capped,
    Prefixed,
    compressed_errors,
    decompressor,
    fingerprint_of,
    read_capped,
)

#: The default caps (``HANGSCOPE_MAX_DUMP_MB``, ``HANGSCOPE_MAX_ARCHIVE_MB``); what is read
#: follows the :class:`~analyzer.config.AnalysisConfig` given to :func:`payloads`.
MAX_DUMP_BYTES = DEFAULT_CONFIG.max_dump_bytes
MAX_ARCHIVE_BYTES = DEFAULT_CONFIG.max_archive_bytes
MAX_ARCHIVE_MEMBERS = DEFAULT_CONFIG.max_archive_members


@dataclass(frozen=True, slots=True)
class Payload:
    """The bytes of one dump candidate: ``label`` names it (``archive.tar.gz:job/rank_3``)."""

    label: str
    name: str
    fmt: str  # "pickle" or "json"
    data: bytes
    fingerprint: str = ""
    #: The bytes are the file itself (not decompressed, not an archive member).
    plain: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Something that is not read: ``foreign`` when it is not a dump at all (ignored), else a
    dump that cannot be read (skipped, with the reason)."""

    label: str
    name: str
    reason: str
    foreign: bool


def _one(
    label: str,
    name: str,
    f: IO[bytes],
    *,
    size: int | None,
    depth: int,
    fingerprint: bool,
    budget: _Budget,
) -> Iterator[Payload | Refusal]:
    """What the stream ``f`` holds; ``size`` is known for plain files (checked before reading)."""
    head = f.read(HEAD_BYTES)
    kind = sniff(head)
    if kind in FOREIGN_WHAT:
        yield Refusal(label, name, FOREIGN_WHAT[kind], foreign=True)
        return
    if kind in ("pickle", "json"):
        cap = budget.config.max_dump_bytes
        if size is not None and size > cap:
            yield Refusal(label, name, _too_large(size, cap), foreign=False)
            return
        limit = min(cap, budget.left)
        try:
            data = read_capped(f, head, limit, "the dump")
        except OverflowError as exc:
            yield Refusal(label, name, f"{exc}: a decompression bomb?", foreign=False)
            return
        budget.left -= len(data)
        yield Payload(label, name, kind, data, fingerprint_of(data) if fingerprint else "")
        return
    if kind == "debug-page":
        yield Refusal(label, name, "a debug-server page inside an archive (not read)", foreign=True)
        return
    if depth >= 3:
        yield Refusal(label, name, f"{kind} nested too deep", foreign=False)
        return
    if kind == "zip" and depth == 0 and f.seekable():
        f.seek(0)  # a zip file on disk: its central directory is read in place
        yield from _zip(label, f, depth, budget, in_place=True)
        return
    stream = cast(IO[bytes], Prefixed(head, f))
    if kind in COMPRESSED:
        stream = cast(IO[bytes], Prefixed(b"", decompressor(kind, stream)))
        yield from _one(
            label, name, stream, size=None, depth=depth + 1, fingerprint=fingerprint, budget=budget
        )
        return
    if kind == "tar":
        yield from _tar(label, stream, depth, budget)
        return
    if kind == "zip":
        yield from _zip(label, stream, depth, budget)
        return
    yield Refusal(label, name, f"unknown content {kind}", foreign=True)  # pragma: no cover


def _member(archive: str, name: str) -> tuple[str, str, Refusal | None]:
    """(base name, label) of an archive member, and its refusal when it is a hidden file."""
    base = name.rsplit("/", 1)[-1]
    where = f"{archive}:{name}"
    hidden = Refusal(where, base, "hidden file", foreign=True) if base.startswith(".") else None
    return base, where, hidden


def _too_large(size: int, cap: int) -> str:
    if cap < 1 << 20:  # a cap set below a megabyte (AnalysisConfig.max_dump_bytes) reads in bytes
        return f"{size:,} bytes is over the {cap:,} bytes a dump may have"
    return f"{size / (1 << 20):,.0f} MB is over the {cap >> 20} MB a dump may have"


@dataclass(slots=True)
class _Budget:
    """What one file may still cost: the caps, and the decompressed bytes left to read."""

    config: AnalysisConfig
    left: int = 0

    def too_many(self, label: str) -> Refusal:
        return Refusal(
            label,
            "",
            f"more than {self.config.max_archive_members:,} members: the rest is not read",
            foreign=False,
        )


def _tar(label: str, stream: IO[bytes], depth: int, budget: _Budget) -> Iterator[Payload | Refusal]:
    """Every regular member of a tar stream, read in order (``r|``: no seeking, no extraction)."""
    seen = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tf:
            for member in tf:
                seen += 1
                if seen > budget.config.max_archive_members:
                    yield budget.too_many(label)
                    return
                if not member.isfile():
                    continue
                base, where, hidden = _member(label, member.name)
                if hidden is not None:
                    yield hidden
                    continue
                if member.size > budget.left:
                    yield Refusal(
                        where,
                        base,
                        "archive over its decompressed-size budget "
                        f"({budget.config.max_archive_bytes >> 20} MB)",
                        foreign=False,
                    )
                    return
                inner = tf.extractfile(member)
                if inner is None:  # pragma: no cover - isfile() members have data
                    continue
                yield from _one(
                    where,
                    base,
                    inner,
                    size=member.size,
                    depth=depth + 1,
                    fingerprint=True,
                    budget=budget,
                )
    except OverflowError as exc:
        yield Refusal(label, "", f"{exc}: a decompression bomb?", foreign=False)
    except (
        tarfile.TarError,
        EOFError,
        OSError,
        zipfile.BadZipFile,
        lzma.LZMAError,
        ValueError,
    ) as exc:
        yield Refusal(
            label,
            "",
            f"truncated or corrupt archive ({type(exc).__name__}: {str(exc)[:120]})",
            foreign=False,
        )


def _zip(
    label: str, stream: IO[bytes], depth: int, budget: _Budget, *, in_place: bool = False
) -> Iterator[Payload | Refusal]:
    """Every member of a zip file. Its central directory needs random access: a zip inside a
    compressed file is read into memory first, within the size a dump may have."""
    source: IO[bytes] = stream
    if not in_place:
        try:
            source = io.BytesIO(
                read_capped(stream, b"", budget.config.max_dump_bytes, "the zip file")
            )
        except OverflowError as exc:
            yield Refusal(label, "", str(exc), foreign=False)
            return
    try:
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            for n, info in enumerate(infos):
                if n >= budget.config.max_archive_members:
                    yield budget.too_many(label)
                    return
                if info.is_dir():
                    continue
                base, where, hidden = _member(label, info.filename)
                if hidden is not None:
                    yield hidden
                    continue
                try:
                    with zf.open(info) as inner:
                        capped = io.BufferedReader(Capped(inner, budget.left, "archive"))
                        yield from _one(
                            where,
                            base,
                            capped,
                            size=None,
                            depth=depth + 1,
                            fingerprint=True,
                            budget=budget,
                        )
                except OverflowError as exc:
                    yield Refusal(where, base, f"{exc}: a decompression bomb?", foreign=False)
                    return
                except (
                    zipfile.BadZipFile,
                    NotImplementedError,
                    RuntimeError,
                    OSError,
                    EOFError,
                    ValueError,
                    lzma.LZMAError,
                ) as exc:
                    yield Refusal(
                        where, base, f"corrupt member ({type(exc).__name__})", foreign=False
                    )
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        yield Refusal(label, "", f"truncated or corrupt zip ({type(exc).__name__})", foreign=False)


def _page(
    path: str, name: str, data: bytes, size: int, fingerprint: bool, config: AnalysisConfig
) -> Iterator[Payload | Refusal]:
    """One JSON payload per rank section of a saved debug-server page, within the archive
    caps (a page is read whole, its sections are members)."""
    cap = config.max_archive_bytes
    if size > cap:
        yield Refusal(path, name, _too_large(size, cap), foreign=False)
        return
    text = data[: cap + 1].decode("utf-8", "replace")
    got, comms, limit = 0, is_torchcomms_page(text), config.max_dump_bytes
    for rank, body in page_ranks(text, config.max_archive_members):
        got += 1
        member = page_member(path, rank, comms)
        if len(body) > limit:
            yield Refusal(member, name, _too_large(len(body), limit), False)
            continue
        fp = fingerprint_of(body) if fingerprint else ""
        yield Payload(member, member.rsplit(":", 1)[1], "json", body, fp)
    if not got:
        yield Refusal(path, name, "a debug-server page without a rank's JSON", foreign=True)


def payloads(
    path: str,
    *,
    fingerprint: bool = False,
    lenient: bool = False,
    config: AnalysisConfig = DEFAULT_CONFIG,
) -> Iterator[Payload | Refusal]:
    """The dump candidates in the file at ``path`` (one, or one per archive member).

    ``lenient``: a pickle or JSON without the flight-recorder keys in its first bytes is
    still read (for a file named like a dump, so that its reason can be told: an unsafe
    pickle, a truncated one, other keys).

    Never raises for bad content: unreadable files and members come back as :class:`Refusal`.
    A plain dump's size is checked before it is read, and it is read in one piece.
    """
    name = os.path.basename(path)
    budget = _Budget(config, config.max_archive_bytes)
    cap = config.max_dump_bytes
    try:
        with _open_regular(path) as raw:
            st = os.fstat(raw.fileno())
            head = os.pread(raw.fileno(), HEAD_BYTES, 0)
            kind = sniff(head)
            if lenient and kind in ("foreign-pickle", "foreign-json"):
                kind = kind[len("foreign-") :]
            if kind in ("pickle", "json"):
                if st.st_size > cap:
                    yield Refusal(path, name, _too_large(st.st_size, cap), foreign=False)
                    return
                data = raw.readall()
                if len(data) > cap:  # grew while being read
                    yield Refusal(
                        path, name, "grew past the size limit while being read", foreign=False
                    )
                    return
                yield Payload(
                    path, name, kind, data, fingerprint_of(data) if fingerprint else "", plain=True
                )
                return
            if kind in FOREIGN_WHAT:
                yield Refusal(path, name, FOREIGN_WHAT[kind], foreign=True)
                return
            if kind == "debug-page":
                fits = st.st_size <= config.max_archive_bytes
                yield from _page(
                    path, name, raw.readall() if fits else b"", st.st_size, fingerprint, config
                )
                return
            f = io.BufferedReader(raw, buffer_size=HEAD_BYTES)
            try:
                yield from _one(
                    path, name, f, size=st.st_size, depth=0, fingerprint=fingerprint, budget=budget
                )
            except OverflowError as exc:
                yield Refusal(path, name, f"{exc}: a decompression bomb?", foreign=False)
            except compressed_errors() as exc:
                why = getattr(exc, "strerror", None) or str(exc)[:120] or type(exc).__name__
                yield Refusal(
                    path, name, f"truncated or corrupt compressed data ({why})", foreign=False
                )
    except _NotRegular as exc:
        yield Refusal(path, name, str(exc), foreign=False)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if os.path.islink(path) and not os.path.exists(path):
            why = "a symbolic link to a missing file"
        yield Refusal(path, name, f"cannot read: {why}", foreign=False)


class _NotRegular(Exception):
    """The file at a dump's path is no regular file (a FIFO, a device, a socket)."""


_KINDS_OF_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _open_regular(path: str) -> io.FileIO:
    """``path`` opened for reading without ever blocking (a FIFO without a writer would
    wait for good): ``O_NONBLOCK``, and the type checked on the open descriptor (the file
    may have been swapped since it was listed). :class:`_NotRegular` for anything but a
    regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = next((w for test, w in _KINDS_OF_FILES if test(mode)), "no regular file")
            raise _NotRegular(f"cannot read: {what}, not a regular file")
        os.set_blocking(fd, True)
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


__all__ = [
    "MAX_ARCHIVE_BYTES",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_DUMP_BYTES",
    "Payload",
    "Refusal",
    "payloads",
]
