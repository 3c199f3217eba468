"""Reading compressed data within caps: the streams :mod:`analyzer.load.unpack` reads through.

Compressed data is streamed and counted while it is read (:func:`read_capped`,
:class:`Capped`): what passes a cap raises :class:`OverflowError` at once, so a
decompression bomb costs at most the cap. :class:`Prefixed` puts back the first bytes that
were read to tell the file type.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import zipfile
from typing import IO, Any

__all__ = [
    "Capped",
    "Prefixed",
    "compressed_errors",
    "decompressor",
    "fingerprint_of",
    "read_capped",
]

_CHUNK = 1 << 20


class Capped(io.RawIOBase):
    """A raw stream that stops with :class:`OverflowError` past ``limit`` bytes."""

    def __init__(self, inner: IO[bytes], limit: int, what: str) -> None:
        self.inner, self.limit, self.what, self.count = inner, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        n = self.inner.readinto(buf) if hasattr(self.inner, "readinto") else 0
        self.count += n
        if self.count > self.limit:
            raise OverflowError(f"{self.what} over {self.limit >> 20} MB decompressed")
        return n


def decompressor(kind: str, f: IO[bytes]) -> IO[bytes]:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(f)
    if kind == "xz":
        return lzma.LZMAFile(f)
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a dependency
        raise OSError("zstd support needs the zstandard package") from None
    return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)


def read_capped(f: IO[bytes], head: bytes, limit: int, what: str) -> bytes:
    """``head`` plus the rest of ``f``; :class:`OverflowError` as soon as it passes ``limit``."""
    chunks = [head]
    total = len(head)
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise OverflowError(f"{what} is over {limit >> 20} MB (decompressed)")
        chunks.append(chunk)
    return b"".join(chunks)


def fingerprint_of(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``inner``, as one readable stream."""

    def __init__(self, head: bytes, inner: IO[bytes]) -> None:
        self.head, self.inner = head, inner

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        if self.head:
            n = min(len(view), len(self.head))
            view[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.inner.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return self.head + self.inner.read() if self.head else self.inner.read()
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            if len(out) < n:
                out += self.inner.read(n - len(out))
            return out
        return self.inner.read(n)


def compressed_errors() -> tuple[type[BaseException], ...]:
    """What reading truncated or corrupt compressed data raises."""
    errors: tuple[type[BaseException], ...] = (
        EOFError,
        OSError,
        lzma.LZMAError,
        ValueError,
        zipfile.BadZipFile,
    )
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a dependency
        return errors
    return (*errors, zstandard.ZstdError)
