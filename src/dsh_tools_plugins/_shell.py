"""The argv of a shell command line, when it is one simple command and nothing more.

``run_command`` runs a ``command`` string with ``/bin/sh -c``. A permission rule that
allows by program and arguments must know exactly what ``sh`` will run, so
:func:`simple_argv` answers only for text whose words ``sh`` and :func:`shlex.split` read
the same way, and ``None`` for anything else:

* shell operators and redirections (``; & | < > ( )``, a newline) mean several commands
  or a changed input or output;
* ``$`` and backticks (variables, command and arithmetic substitution), globbing and
  expansion characters (``* ? [ ] { }``, and ``~`` where it starts a word or follows
  ``=`` or ``:``), comments (``#``) and ``!`` change the words after we have looked at
  them; inside double quotes ``$`` and backticks still expand;
* control characters (other than a tab between words) are read differently by
  :mod:`shlex` (which splits at ``\\r``) and by ``sh``;
* a first word holding ``=`` is a variable assignment (``PAGER=x git log``), and a first
  word that is a reserved word (``if``, ``time``, ...) starts a compound command.

Characters inside single quotes are literal for both readers, as is a backslash-escaped
character outside quotes. This is deliberately stricter than ``sh``: a command it refuses
is simply not matched by an allow rule, so the caller is asked instead.
"""

from __future__ import annotations

import shlex
from typing import Final

__all__ = ["simple_argv"]

_SPECIAL_UNQUOTED: Final = frozenset(";&|<>()$`*?[]{}#!")
_TILDE_AFTER: Final = frozenset(" \t=:")
"""After these (or first in the text) an unquoted ``~`` is expanded; ``HEAD~1`` is not."""
_SPECIAL_IN_DOUBLE_QUOTES: Final = frozenset("$`")
_RESERVED_WORDS: Final = frozenset(
    {
        "!",
        "{",
        "}",
        "[[",
        "]]",
        "case",
        "coproc",
        "do",
        "done",
        "elif",
        "else",
        "esac",
        "fi",
        "for",
        "function",
        "if",
        "in",
        "select",
        "then",
        "time",
        "until",
        "while",
    }
)


def _is_control(char: str) -> bool:
    return char < " " or char == "\x7f"


def _plain_words(text: str) -> bool:
    """Whether ``text`` holds no character that ``sh`` would treat specially."""
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if _is_control(char) and not (char == "\t" and not quote):
            return False
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char == "\\" and index < len(text) and text[index] in '"\\':
                index += 1  # \" and \\ mean the same to sh and shlex
            elif char == '"':
                quote = ""
            elif char in _SPECIAL_IN_DOUBLE_QUOTES:
                return False
        elif char == "\\":
            if index >= len(text) or _is_control(text[index]):
                return False
            index += 1  # an escaped character is literal for both readers
        elif char in "'\"":
            quote = char
        elif char in _SPECIAL_UNQUOTED or _expands_tilde(text, index - 1):
            return False
    return not quote


def _expands_tilde(text: str, position: int) -> bool:
    return text[position] == "~" and (position == 0 or text[position - 1] in _TILDE_AFTER)


def simple_argv(command: str) -> tuple[str, ...] | None:
    """The words of ``command`` if it is one simple command, else ``None``."""
    if not _plain_words(command):
        return None
    try:
        words = tuple(shlex.split(command))
    except ValueError:
        return None
    if not words or "=" in words[0] or words[0] in _RESERVED_WORDS:
        return None
    return words
