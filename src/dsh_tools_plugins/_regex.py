"""Linear-time regular expressions for patterns a model supplies: RE2, via google-re2.

Python's ``re`` backtracks: ``(.*.*)*z`` on one 16-character line ran for 30 s holding the
GIL, so neither a timeout nor a cancellation could stop it, and a glob compiled to a
regex did the same on a 60-character name. RE2 matches in time linear in the text (times
the size of the pattern), bounds the memory a pattern may take, and releases the GIL
while it searches. Two uses here:

* grep patterns (:func:`compile_line_pattern`, :func:`matching_lines`): RE2 syntax, a
  match never spans lines, searched over a whole file buffer in chunks that end at line
  ends, so a cancelled call stops between chunks;
* path patterns (:func:`compile_path_regex`): the regex a glob translates to.

google-re2 is imported on first use: ``import dsh_tools`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh_tools.errors import ToolArgsError

__all__ = [
    "CHUNK_BYTES",
    "LineRegex",
    "MAX_PATTERN_MEMORY",
    "compile_line_pattern",
    "compile_path_regex",
    "matching_lines",
]

MAX_PATTERN_MEMORY = 4 * 1024 * 1024
"""Memory one compiled pattern may use (RE2's ``max_mem``), its search automaton
included; a larger pattern is refused as too large."""

CHUNK_BYTES = 256 * 1024
"""A file buffer is searched in chunks of about this size, ending at a line end; the
call's signal is checked between chunks (RE2's slowest path covers one in ~0.1 s)."""

_UNSUPPORTED_HINTS = (
    ("invalid perl operator: (?=", "lookahead is not supported"),
    ("invalid perl operator: (?!", "lookahead is not supported"),
    ("invalid perl operator: (?<=", "lookbehind is not supported"),
    ("invalid perl operator: (?<!", "lookbehind is not supported"),
    ("invalid perl operator: (?P=", "backreferences are not supported"),
    ("invalid escape sequence: \\Z", "use \\z for the end of the text"),
)


def _options(*, case_insensitive: bool = False, never_nl: bool = False) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False
    options.case_sensitive = not case_insensitive
    options.never_nl = never_nl
    return options


def _explain(message: str) -> str:
    """RE2's error message, with a hint for the Python ``re`` features RE2 lacks."""
    message = message.replace(": (?m)", ": ", 1)  # the line-mode prefix is ours
    for start, hint in _UNSUPPORTED_HINTS:
        if message.startswith(start):
            return f"{message} ({hint} in RE2 syntax)"
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return f"{message} (backreferences are not supported in RE2 syntax)"
    return message


def _any_byte_escape(pattern: str) -> bool:
    """Whether ``pattern`` uses ``\\C`` (one byte), which could split a UTF-8 character."""
    index = pattern.find("\\")
    while index >= 0:
        if pattern[index + 1 : index + 2] == "C":
            return True
        index = pattern.find("\\", index + 2)
    return False


class LineRegex:
    """A compiled grep pattern; :attr:`first` finds where its first match in a range of
    a buffer begins (-1 for none). ``^``, ``$`` and ``\\b`` see the whole buffer.

    google-re2's public ``search`` costs about 10 us per call in Python glue (a generator,
    an enum lookup, a match object) against 1 us for RE2 itself, and grep calls it once
    per file and per matching line: so :attr:`first` calls the wrapped ``RE2.Match``
    directly, or falls back to ``search`` should a google-re2 release rename it.
    """

    __slots__ = ("case_insensitive", "first", "source")

    def __init__(self, source: str, case_insensitive: bool, regex: Any) -> None:
        import re2

        self.source = source
        self.case_insensitive = case_insensitive
        self.first: Callable[[bytes, int, int], int]
        try:
            match, anchor = regex._regexp.Match, re2._Anchor.UNANCHORED
        except AttributeError:

            def first(data: bytes, start: int, end: int) -> int:
                found = regex.search(data, start, end)
                return -1 if found is None else int(found.start())

            self.first = first
        else:
            self.first = lambda data, start, end: int(match(anchor, data, start, end)[0][0])


def compile_line_pattern(pattern: str, *, case_insensitive: bool) -> LineRegex:
    """Compile a grep ``pattern`` (RE2 syntax) for :func:`matching_lines`.

    ``^`` and ``$`` match at line boundaries, and nothing in the pattern matches a
    newline (``\\n``, ``\\s`` or ``[^a]`` included), so every match lies within one line.
    Raises :class:`~dsh_tools.errors.ToolArgsError` naming the problem for a pattern RE2
    refuses (backreferences, lookaround, a bad class, too large), for ``\\C`` and for
    text that is not valid Unicode.
    """
    import re2

    def refuse(reason: str) -> ToolArgsError:
        return ToolArgsError(
            [f'"pattern" is not a valid regular expression (RE2 syntax): {reason}']
        )

    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise refuse("it is not valid Unicode text") from None
    if _any_byte_escape(pattern):
        raise refuse("\\C (any single byte) is not supported")
    options = _options(case_insensitive=case_insensitive, never_nl=True)
    options.never_capture = True  # grep needs where a match is, not its groups: faster
    try:
        return LineRegex(pattern, case_insensitive, re2.compile(b"(?m)" + encoded, options))
    except re2.error as error:
        raise refuse(_explain(_error_text(error))) from None


def compile_path_regex(regex: str, pattern: str, argument: str) -> Any:
    """Compile the RE2 ``regex`` that the glob ``pattern`` translates to.

    Match paths with ``fullmatch``. Raises :class:`~dsh_tools.errors.ToolArgsError`
    naming ``argument`` and the glob when RE2 refuses the translation (a malformed
    character class, for example).
    """
    import re2

    try:
        return re2.compile(regex, _options())
    except re2.error as error:
        raise ToolArgsError(
            [f'"{argument}": "{pattern}" is not a valid glob pattern: {_error_text(error)}']
        ) from None
    except UnicodeEncodeError:
        raise ToolArgsError([f'"{argument}": "{pattern}" is not valid Unicode text']) from None


def _error_text(error: Exception) -> str:
    detail = error.args[0] if error.args else str(error)
    if isinstance(detail, bytes):
        return detail.decode("utf-8", errors="replace")
    return str(detail)


def matching_lines(
    regex: LineRegex, data: bytes, keep: int, stop: Callable[[], bool]
) -> tuple[list[tuple[int, bytes]], int]:
    """The first ``keep`` lines of ``data`` that ``regex`` matches, as ``(number, line)``,
    and how many lines match in all.

    Lines end at ``\\n`` (a ``\\r`` before it is dropped from the line shown); an empty
    buffer has no lines, and a final ``\\n`` does not start one. ``stop`` is polled
    between chunks of :data:`CHUNK_BYTES`; once it returns true, the search ends there.
    Lines past ``keep`` are only counted, which costs a third as much.
    """
    first = regex.first
    text_end = len(data) - (data[-1:] == b"\n")
    kept: list[tuple[int, bytes]] = []
    count, number, counted, start = 0, 1, 0, 0
    while start <= text_end and data:
        end = text_end
        if end - start > CHUNK_BYTES:
            end = data.find(b"\n", start + CHUNK_BYTES, text_end)
            end = text_end if end < 0 else end
        position = start
        while position <= end and count < keep:
            at = first(data, position, end)
            if at < 0:
                break
            line_start = data.rfind(b"\n", 0, at) + 1
            line_end = data.find(b"\n", at, end)
            line_end = end if line_end < 0 else line_end
            number += data.count(b"\n", counted, line_start)
            counted = line_start
            line = data[line_start:line_end]
            kept.append((number, line[:-1] if line[-1:] == b"\r" else line))
            count += 1
            position = line_end + 1
        while position <= end:  # past keep: count only
            at = first(data, position, end)
            if at < 0:
                break
            count += 1
            position = data.find(b"\n", at, end) + 1 or end + 1
        start = end + 1
        if start <= text_end and stop():
            break
    return kept, count
