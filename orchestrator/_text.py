"""Text from a model, a tool, a file or a user, made safe to show on a terminal.

Such text is never parsed as Rich markup (``[bold]`` stays ``[bold]``) and its control
characters are shown, never executed: an ESC from a model must not recolour, move the
cursor or clear the screen of the person reading. Every renderer of the command line
(progress, tables, chat, approval questions, ``runs show``, ``agents show``) goes
through these helpers.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, and the invisible Unicode
# formatting characters that reorder or hide text (bidi overrides, zero-width, line
# and paragraph separators).
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_NAMED = {"\r": "\\r", "\x1b": "\\e", "\b": "\\b", "\x07": "\\a", "\x0c": "\\f", "\x0b": "\\v"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character written out (``\\e``, ``\\x00``, ``\\u202e``);
    newlines and tabs stay."""
    return _CONTROL.sub(_escape, text)


def one_line(text: str, limit: int | None = None) -> str:
    """``visible`` text on one line (runs of whitespace become one space), cut at a word
    boundary with "…" when longer than ``limit`` characters."""
    flat = " ".join(visible(text).split())
    if limit is None or len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a word boundary not too far back
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


def literal(text: str, style: str = "") -> Text:
    """A Rich renderable showing ``text`` exactly: no markup, controls made visible."""
    return Text(visible(text), style=style)


def plural(count: int, noun: str) -> str:
    """``1 turn``, ``2 turns``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
