"""Text from users and files shown safely: control and invisible characters as escapes.

One home for the escaping that terminal output (``asrpt queue``) and error messages (trace
readers) need: a job name, or a line of a binary file mistaken for a trace, must not move the
cursor, hide text or flood the screen. Standard library only; nothing here does I/O.
"""

from __future__ import annotations

_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: What undecodable bytes became when a file was read with ``errors="replace"``.
REPLACEMENT_CHARACTER = "\ufffd"


def _escape(ch: str) -> str:
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would obey or hide (ESC, newline, DEL, C1
    controls, bidi overrides, zero-width characters) shown as its escape (``\\x1b``, ``\\n``,
    ``\\u202e``): job names and users are the submitter's text. Idempotent."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def excerpt(text: str, limit_chars: int = 60) -> str:
    """A quoted, escaped excerpt of at most about ``limit_chars`` characters, for an error
    message: what the input held, never the input itself (binary, megabytes of one line).
    Replacement characters from undecodable bytes are escaped too (``\\ufffd``)."""
    shown: list[str] = []
    length = 0
    for ch in text:
        if ch == "'":
            piece = "\\'"
        elif ch.isprintable() and ch != REPLACEMENT_CHARACTER:
            piece = ch
        else:
            piece = _escape(ch)
        if length + len(piece) > limit_chars:
            return f"'{''.join(shown)}'... ({len(text)} characters)"
        shown.append(piece)
        length += len(piece)
    return f"'{''.join(shown)}'"


def looks_binary(text: str) -> bool:
    """True for text with NUL bytes or undecodable bytes: not a text file at all."""
    return "\x00" in text or REPLACEMENT_CHARACTER in text
