"""Glob patterns compiled to RE2, matched against whole relative paths. Nothing else.

The syntax is the one :mod:`dsh_tools_plugins.search` documents for ``glob`` patterns and
``grep``'s ``include``. A glob becomes an RE2 regex (:func:`~dsh_tools_plugins._search.regex.
compile_path_regex`), so matching a path costs time linear in its length.
"""

from __future__ import annotations

from typing import Any

from dsh_tools._json import is_unicode, unicode_text

from .regex import compile_path_regex

__all__ = ["GlobMatcher", "compile_glob"]


def _literal(char: str) -> str:
    return char if char.isascii() and char.isalnum() else f"\\x{{{ord(char):x}}}"


def _translate_class(body: str) -> str:
    """An RE2 class for the glob class ``body`` (between ``[`` and ``]``)."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    members: list[str] = []
    index = 0
    while index < len(body):
        if index + 2 < len(body) and body[index + 1] == "-":
            members.append(f"{_literal(body[index])}-{_literal(body[index + 2])}")
            index += 3
        else:
            members.append(_literal(body[index]))
            index += 1
    return f"[{'^/' if negate else ''}{''.join(members)}]"


def _translate_component(part: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(part):
        char = part[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = part.find("]", index + 1 if part[index : index + 1] in ("!", "^") else index)
            if end < 0:
                out.append(_literal(char))
                continue
            out.append(_translate_class(part[index:end]))
            index = end + 1
        elif char == "{":
            end = part.find("}", index)
            if end < 0:
                out.append(_literal(char))
                continue
            options = part[index:end].split(",")
            index = end + 1
            out.append("(?:" + "|".join(_translate_component(o) for o in options) + ")")
        else:
            out.append(_literal(char))
    return "".join(out)


class GlobMatcher:
    """A compiled glob: :meth:`matches` a ``/``-separated relative path, whole.

    Matching is RE2's, linear in the length of the path.
    """

    __slots__ = ("_regex", "pattern")

    def __init__(self, pattern: str, regex: Any) -> None:
        self.pattern = pattern
        self._regex = regex

    def matches(self, path: str) -> bool:
        """Whether ``path`` matches (a name that is not valid Unicode is matched as
        shown, with U+FFFD)."""
        if not is_unicode(path):
            path = unicode_text(path)
        return self._regex.fullmatch(path.encode()) is not None


def compile_glob(pattern: str, argument: str = "pattern") -> GlobMatcher:
    """Compile a glob ``pattern`` (the syntax is in :mod:`dsh_tools_plugins.search`).

    Raises :class:`~dsh_tools.errors.ToolArgsError` naming ``argument`` when the pattern
    cannot be compiled (a class range such as ``[z-a]``).
    """
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append("(?s:.*)" if last else "(?:[^/]+/)*")
        else:
            out.append(_translate_component(part) + ("" if last else "/"))
    return GlobMatcher(pattern, compile_path_regex("".join(out), pattern, argument))
