"""What a file is, from its first bytes: a dump (pickle or JSON, in UTF-8, with a byte-order
mark, or in UTF-16/32), compressed data, an archive, a capture's context file, or foreign."""

from __future__ import annotations

from analyzer.load.debug_server import is_page

__all__ = ["COMPRESSED", "FOREIGN_WHAT", "HEAD_BYTES", "sniff"]

#: Bytes looked at to tell what a file is (a dump's top-level keys are in its first bytes).
HEAD_BYTES = 64 << 10
COMPRESSED = ("gzip", "zstd", "bz2", "xz")

_KEYS = ("version", "entries", "pg_config", "pg_status")
_PICKLE_KEYS = tuple(k.encode() for k in _KEYS)
_JSON_KEYS = tuple(f'"{k}"' for k in _KEYS)


def _json_text(head: bytes) -> str | None:
    """The start of ``head`` as text when it looks like JSON in UTF-8 (BOM or not) or UTF-16/32."""
    for bom, codec in (
        (b"\xef\xbb\xbf", "utf-8"),
        (b"\xff\xfe\x00\x00", "utf-32-le"),
        (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xff\xfe", "utf-16-le"),
        (b"\xfe\xff", "utf-16-be"),
    ):
        if head.startswith(bom):
            body, enc = head[len(bom) :], codec
            break
    else:
        body = head
        if len(head) >= 4 and head[0] == 0 and head[1] == 0 and head[2] == 0:
            enc = "utf-32-be"
        elif len(head) >= 4 and head[1] == 0 and head[2] == 0 and head[3] == 0:
            enc = "utf-32-le"
        elif len(head) >= 2 and head[0] == 0:
            enc = "utf-16-be"
        elif len(head) >= 2 and head[1] == 0:
            enc = "utf-16-le"
        else:
            enc = "utf-8"
    width = {"utf-8": 1, "utf-16-le": 2, "utf-16-be": 2}.get(enc, 4)
    body = body[: len(body) - len(body) % width]
    text = body.decode(enc, errors="ignore")
    stripped = text.lstrip(" \t\r\n")
    return text if stripped[:1] in ("{", "[") else None


def sniff(head: bytes) -> str:
    """``pickle``, ``json``, a compression (:data:`COMPRESSED`), ``tar``, ``zip``, ``empty``,
    ``context`` (a capture's context file), ``debug-page`` (a page of torch's debug server,
    one rank's JSON per section), ``foreign-pickle``, ``foreign-json`` or ``foreign``."""
    if not head.strip(b" \t\r\n"):
        return "empty" if not head else ("foreign" if head.strip(b" \t\r\n\x00") else "empty")
    if len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle" if any(k in head for k in _PICKLE_KEYS) else "foreign-pickle"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bz2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    if is_page(head):
        return "debug-page"
    text = _json_text(head)
    if text is not None:
        if '"schema"' in text and "hangscope." in text:
            return "context"
        return "json" if any(k in text for k in _JSON_KEYS) else "foreign-json"
    return "foreign"


FOREIGN_WHAT = {
    "empty": "empty file",
    "context": "a hangscope context file, not a dump",
    "foreign-pickle": "a pickle without the flight-recorder keys",
    "foreign-json": "JSON without the flight-recorder keys",
    "foreign": "not a flight-recorder dump (neither pickle nor JSON)",
}
