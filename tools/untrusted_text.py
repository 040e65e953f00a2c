"""Text from outside the program (a model's answer, a candidate's output) made safe to keep and to show:
`storable` gives text that every file, JSON line and checkpoint can hold, with nothing a terminal acts on;
`for_terminal` shows any text on a terminal with its control characters written out, never obeyed.

A lone surrogate (half of a UTF-16 pair, which a JSON `\\ud800` escape yields) is not text: UTF-8 cannot
encode it, so a JSON file or report holding it cannot be written, and a checkpoint silently reads it back
as `?`. Control characters other than tab and line ends are never part of honest code or prose, and a
terminal obeys them: ESC starts a sequence that can recolour or clear the screen, retitle the window or
(OSC 52) write the clipboard; NUL, DEL and the C1 controls (U+0080-U+009F, CSI and OSC in one byte on
some terminals) are no better.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Lone surrogates; C0 controls but tab, line feed and carriage return (CRLF line ends are honest); DEL; C1.
_NOT_STORABLE = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# What a terminal shows as it is: everything storable but the carriage return (it moves the cursor back,
# so that what follows overwrites the line: a forged progress line).
_NOT_SHOWN = re.compile("[\ud800-\udfff\x00-\x08\x0b-\x1f\x7f-\x9f]")


def storable(text: str) -> str:
    """`text` with each lone surrogate and control character (but tab, line feed, carriage return) replaced
    by U+FFFD, the character Unicode reserves for what could not be read; honest text comes back unchanged."""
    return _NOT_STORABLE.sub(REPLACEMENT, text)


def is_storable(text: str) -> bool:
    return _NOT_STORABLE.search(text) is None


def for_terminal(text: str) -> str:
    """`text` as a terminal should show it: each control character but tab and line feed (and each lone
    surrogate) written out as its escape (`\\x1b`, `\\r`, `\\ud800`), so that it is seen rather than obeyed."""
    return _NOT_SHOWN.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return {0x0D: "\\r"}.get(code) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
