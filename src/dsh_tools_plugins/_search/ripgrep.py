"""ripgrep as a fast pre-selection of the files grep must read. It never decides a result.

When a grep tool is given ripgrep (``grep_tool(ws, ripgrep=True)``), grep asks it which
files *may* match, then reads and matches only those itself: through the workspace's
descriptor walk (no links followed, every path inside), with the same ignore rules, size
cap, binary test and RE2 engine as without ripgrep. So a result never depends on
ripgrep; it only saves reading the files that cannot match.

For that, the set ripgrep returns must contain every file the built-in search would
report. ripgrep runs with ``--no-ignore --hidden --text`` (the walk, not ripgrep,
applies ignore rules), on the search directory entered through ``/proc/self/fd`` (so
the directory cannot be swapped), and with a pattern that matches *at least* every line
the RE2 pattern matches (:func:`superset_pattern`), plus ``\\x00`` so binary files come
back to be counted as skipped. Anything unexpected (ripgrep missing, a pattern it
refuses, a file it could not read: exit status 2) makes grep search everything itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterable

from .regex import Token, escape_tokens, tokens

__all__ = ["MAX_EXCLUDED_DIRECTORIES", "Preselection", "superset_pattern"]

MAX_EXCLUDED_DIRECTORIES = 2000
"""Ignored directories passed to ripgrep as exclusions, at most (the rest are searched
by ripgrep and dropped by the walk)."""

_POLL_SECONDS = 0.05
_PROC_FD = "/proc/self/fd"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._+@=,%-]+")
"""Path components passed to ripgrep as exclusion globs verbatim: nothing to escape."""
_ASCII_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\x{c}\\r "}
_EMPTY = "(?:)"


class _Unsupported(Exception):
    """A construct the translation does not handle: grep searches without ripgrep."""


def superset_pattern(pattern: str, *, case_insensitive: bool) -> str | None:
    """A ripgrep pattern matching every line the RE2 ``pattern`` matches (maybe more).

    ``pattern`` must already compile under RE2. The translation keeps literals,
    alternation, groups, repetition and simple character classes, spells ``\\d``,
    ``\\w`` and ``\\s`` in ASCII as RE2 means them, and relaxes what the two engines
    might read differently: every anchor and word boundary becomes empty, a Unicode
    class ``\\pL`` becomes ``.``, and under case-insensitive matching anywhere so do
    classes and non-ASCII letters. ``None`` when the pattern uses a construct left out
    (octal escapes).
    """
    found = tokens(pattern)
    relax = case_insensitive or any(token.folds_case for token in found)
    try:
        body = "".join(_translate(token, relax) for token in found)
    except _Unsupported:
        return None
    return f"(?i){body}" if relax else body


def _translate(token: Token, relax: bool) -> str:
    """The ripgrep text for one RE2 token: one atom, so quantifiers still apply."""
    kind = token.kind
    if kind == "literal":
        return _literal(token.code, relax)
    if kind == "perl":
        letter = token.text[1]
        if relax:
            return "."
        negated = "^" if letter.isupper() else ""
        return f"[{negated}{_ASCII_CLASSES[letter.lower()]}]"
    if kind in ("unicode", "dot"):
        return "."
    if kind in ("assertion", "flags"):
        return _EMPTY  # flags: case folding is applied to the whole pattern instead
    if kind == "class":
        return _translate_class(token.text, relax)
    if kind == "open":
        return "(?:"
    if kind in ("close", "alt", "quantifier"):
        return token.text
    raise _Unsupported  # octal escapes, \C


def _literal(code: int, relax: bool) -> str:
    if code == 0x0A:
        return _EMPTY  # RE2 never matches a newline here: any atom is a superset
    if relax and code > 0x7F:
        return "."
    if chr(code).isascii() and chr(code).isalnum():
        return chr(code)
    return f"\\x{{{code:x}}}"


def _translate_class(text: str, relax: bool) -> str:
    """A ripgrep class for the RE2 class ``text`` (``[...]``), or ``.`` when relaxed."""
    body = text[1:-1]
    negated = body.startswith("^")
    if negated:
        body = body[1:]
    members: list[str] = []
    index = 0
    while index < len(body):
        if body.startswith("[:", index):
            end = body.index(":]", index) + 2
            members.append(body[index:end])  # ASCII in both engines
            index = end
            continue
        low, index = _class_member(body, index)
        if low is None:
            relax = True
        elif body[index : index + 1] == "-" and index + 1 < len(body):
            high, index = _class_member(body, index + 1)
            if high is None:
                raise _Unsupported
            members.append(f"{low}-{high}")
        else:
            members.append(low)
    if relax:
        return "."
    members = [member for member in members if member != "\\x{a}"]  # never matched
    if not members:
        return "." if negated else _EMPTY
    return f"[{'^' if negated else ''}{''.join(members)}]"


def _class_member(body: str, index: int) -> tuple[str | None, int]:
    """One class member at ``index`` as ripgrep text (``None``: relax the class) and the
    index after it."""
    if body[index] != "\\":
        return f"\\x{{{ord(body[index]):x}}}", index + 1
    [token], after = escape_tokens(body, index)
    if token.kind == "literal":
        return f"\\x{{{token.code:x}}}", after
    if token.kind == "perl" and token.text[1].islower():
        return _ASCII_CLASSES[token.text[1]], after
    if token.kind in ("perl", "unicode"):
        return None, after
    raise _Unsupported


def _exclusion(path: str) -> str | None:
    """An anchored ripgrep glob excluding the directory ``path``, if it is plain text."""
    parts = path.split("/")
    if all(_PLAIN_NAME.fullmatch(part) for part in parts):
        return f"!/{path}/"
    return None


class Preselection:
    """A ripgrep run listing the files that may match; it works while the caller walks.

    Use it as a context manager: leaving the block kills ripgrep if it is still running.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def start(
        cls,
        executable: str,
        directory_fd: int,
        pattern: str,
        *,
        excluded_directories: Iterable[str],
        max_file_bytes: int,
    ) -> Preselection | None:
        """Start ripgrep on the directory ``directory_fd``; ``None`` when it cannot run.

        Files over ``max_file_bytes`` are left out, as are the directories in
        ``excluded_directories`` (relative paths; an optimisation only, so names that
        would need escaping are simply not excluded).
        """
        if not os.path.isdir(_PROC_FD):
            return None
        globs: list[str] = ["--glob", "!.git/"]
        for path in excluded_directories:
            exclusion = _exclusion(path)
            if exclusion is not None and len(globs) < 2 * MAX_EXCLUDED_DIRECTORIES:
                globs += ["--glob", exclusion]
        argv = [
            executable,
            "--no-config",
            "--files-with-matches",
            "--null",
            "--no-messages",
            "--text",
            "--hidden",
            "--no-ignore",
            "--encoding=none",
            f"--max-filesize={max_file_bytes}",
            *globs,
            "--regexp",
            pattern,
            "--regexp",
            "\\x00",  # binary files come back, to be counted as skipped
            "--",
            ".",
        ]
        try:
            process = subprocess.Popen(
                argv,
                cwd=f"{_PROC_FD}/{directory_fd}",  # the directory itself: no swap possible
                pass_fds=(directory_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return None
        return cls(process)

    def files(self, stop: Callable[[], bool]) -> set[bytes] | None:
        """The paths (relative to the directory, as bytes) that may match.

        ``None`` when ripgrep could not give a complete answer (it refused the pattern or
        could not read a file: exit status 2), or when ``stop`` returned true first.
        """
        while True:
            try:
                output, _ = self._process.communicate(timeout=_POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if stop():
                    self.close()
                    return None
        if self._process.returncode not in (0, 1):
            return None
        return {
            path[2:] if path.startswith(b"./") else path for path in output.split(b"\0") if path
        }

    def close(self) -> None:
        """Kill ripgrep if it still runs, and reap it."""
        if self._process.poll() is None:
            with contextlib.suppress(OSError):
                self._process.kill()
        self._process.communicate()

    def __enter__(self) -> Preselection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
