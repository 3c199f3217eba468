"""Text from a dump made safe to show: no control character reaches a terminal raw.

Group descs, frames, op names and file names are untrusted. A dump that writes
``"\\x1b[2J NO HANG"`` into a group desc must not repaint the engineer's screen, and a newline
must not start a fake line of output. Everything that is not printable (C0 and C1 controls,
DEL, bidirectional overrides and other format characters) is shown as a Python escape.
"""

from __future__ import annotations

#: Longest text kept from one dump value; longer values are cut, with a mark.
MAX_TEXT = 4096


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def clean(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` with every non-printable character escaped and at most ``limit`` characters.

    >>> clean("ok"), clean("a\\x1b[2Jb\\n")
    ('ok', 'a\\\\x1b[2Jb\\\\n')
    """
    if len(text) > limit:
        text = text[:limit] + f"...[{len(text) - limit} more characters]"
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


__all__ = ["MAX_TEXT", "clean"]
