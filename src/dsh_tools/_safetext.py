"""Text made safe to show: the one rule for text a person or a model reads.

Command lines, descriptions, output, file names, matched lines, reasons and error text
come from the model or the workspace. Shown as they are, a few characters act instead of
being read: an escape sequence in a terminal sets the window title (``ESC ] 0 ;``),
writes the clipboard (OSC 52) or moves the cursor and rewrites the line a person is about
to approve; a carriage return overwrites it; a newline in a file name forges a line of a
listing; a bidirectional override makes text read in another order than it runs
("Trojan Source"); Unicode tag characters carry text a model reads and a person does not
see. :func:`safe_text` writes each of them as a visible escape, the way text that is not
valid Unicode is shown with U+FFFD (:func:`dsh_tools._json.unicode_text`), so the text
still says what it held and can do nothing else.

What is escaped:

* control characters (Unicode category ``Cc``): C0 (``\\x00``-``\\x1f``, ESC among
  them), DEL (``\\x7f``) and C1 (``\\x80``-``\\x9f``, the one-byte CSI ``\\x9b`` among
  them); with ``multiline=True`` newline and tab are kept, and so is a carriage return
  that ends a line (``\\r\\n``);
* the bidirectional controls (``U+061C``, ``U+200E``, ``U+200F``, ``U+202A``-``U+202E``,
  ``U+2066``-``U+2069``);
* the line and paragraph separators ``U+2028`` and ``U+2029`` (they break lines for
  Python's ``splitlines`` and many editors);
* the tag characters ``U+E0000``-``U+E007F``.

Each becomes ``\\n``, ``\\r`` or ``\\t`` (newline, carriage return, tab), ``\\xNN`` (up
to ``U+00FF``), ``\\uNNNN`` or ``\\UNNNNNNNN``; a lone surrogate
becomes U+FFFD. The result is valid Unicode and shows the same in any terminal. It is
meant to be read, not reversed: a backslash already in the text is left alone, so a file
name shown with an escape cannot be opened by the name shown.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["safe_text"]

_OTHERS: Final = (
    "\x7f-\x9f"  # DEL and the C1 controls
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional controls
    "\u2028\u2029"  # line and paragraph separators
    "\U000e0000-\U000e007f"  # tag characters
    "\ud800-\udfff"  # lone surrogates (shown as U+FFFD)
)
_ONE_LINE: Final = re.compile(f"[\x00-\x1f{_OTHERS}]")
_MULTILINE: Final = re.compile(f"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f{_OTHERS}]")


_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe_text(text: str, *, multiline: bool = False) -> str:
    """``text`` with every character that could act rather than be read written as a
    visible escape (see the module docstring): ``"\\x1b]0;x\\x07"`` becomes
    ``"\\\\x1b]0;x\\\\x07"``.

    :param multiline: keep newlines, tabs and line-ending carriage returns, for text laid
        out in lines (command output, file content, a message); by default they are
        escaped too, for text shown on one line (a title, a file name, a reason).

    Text of printable ASCII is returned as it is, quickly; escaping twice changes nothing.
    """
    if text.isascii() and text.isprintable():
        return text
    return (_MULTILINE if multiline else _ONE_LINE).sub(_escape, text)
