"""Where things are in the text of a TOML file, for errors that name a line: the
position of a syntax error, the line of a key, and the region a table is written in.
The rules file's readers use these (:mod:`dsh_tools_plugins._rules.file`, the sandbox
and limit tables)."""

from __future__ import annotations

import re

__all__ = [
    "TABLE",
    "key_line",
    "line_of",
    "region",
    "toml_position",
    "top_key_line",
]

_AT_END = " (at end of document)"
_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
TABLE = re.compile(r"^[ \t]*\[", re.MULTILINE)


def toml_position(error: Exception, text: str) -> tuple[int | None, int | None, str]:
    """Line, column and message of a TOML error (attributes on 3.14+/tomli 2.1+, else
    parsed from the message; "at end of document" is the last line)."""
    message = str(error)
    if message.endswith(_AT_END):
        return len(text.splitlines()) or 1, None, message[: -len(_AT_END)]
    line = getattr(error, "lineno", None)
    column = getattr(error, "colno", None)
    problem = getattr(error, "msg", None) or message
    found = _POSITION.search(message)
    if found is not None:
        problem = message[: found.start()] if problem == message else problem
        if line is None:
            line, column = int(found.group(1)), int(found.group(2))
    return line, column, problem


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _first_table(text: str) -> int:
    match = TABLE.search(text)
    return match.start() if match else len(text)


def _spelled(key: str) -> str:
    """A regex for ``key`` written bare, or in double or single quotes."""
    escaped = re.escape(key)
    return rf"(?:{escaped}|\"{escaped}\"|'{escaped}')"


def key_line(text: str, key: str, start: int, end: int) -> int | None:
    """The line of ``key =`` between offsets ``start`` and ``end``, if there is one."""
    pattern = re.compile(rf"^[ \t]*{_spelled(key)}[ \t]*=", re.MULTILINE)
    match = pattern.search(text, start, end)
    return line_of(text, match.start()) if match else None


def top_key_line(text: str, key: str) -> int | None:
    """The line that sets a top-level ``key``: ``key =`` before the first table, or a
    ``[key]``, ``[key.sub]`` or ``[[key]]`` header."""
    line = key_line(text, key, 0, _first_table(text))
    if line is not None:
        return line
    header = re.compile(rf"^[ \t]*\[\[?[ \t]*{_spelled(key)}[ \t]*[\].]", re.MULTILINE)
    match = header.search(text)
    return line_of(text, match.start()) if match else None


def region(text: str, key: str) -> tuple[int, int] | None:
    """Where ``[key]`` and the ``[key.sub]`` tables right after it are written, if they
    are: from its header to the next other table."""
    header = re.compile(rf"^[ \t]*\[[ \t]*{_spelled(key)}[ \t]*[\].]", re.MULTILINE)
    found = header.search(text)
    if found is None:
        return None
    start = end = found.start()
    while found is not None:
        following = TABLE.search(text, found.end())
        end = following.start() if following else len(text)
        found = header.match(text, end) if following else None
    return start, end
