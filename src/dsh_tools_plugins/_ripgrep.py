"""ripgrep as a fast pre-selection of the files grep must read. It never decides a result.

When an ``rg`` executable is available, grep asks it which files *may* match, then reads
and matches only those itself: through the workspace's descriptor walk (no links
followed, every path inside), with the same ignore rules, size cap, binary test and RE2
engine as without ripgrep. So a result never depends on whether ``rg`` is installed;
ripgrep only saves reading the files that cannot match.

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

__all__ = ["MAX_EXCLUDED_DIRECTORIES", "Preselection", "superset_pattern"]

MAX_EXCLUDED_DIRECTORIES = 2000
"""Ignored directories passed to ripgrep as exclusions, at most (the rest are searched
by ripgrep and dropped by the walk)."""

_POLL_SECONDS = 0.05
_PROC_FD = "/proc/self/fd"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._+@=,%-]+")
"""Path components passed to ripgrep as exclusion globs verbatim: nothing to escape."""
_QUANTIFIER = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")
_CASE_FLAG = re.compile(r"\(\?[imsU]*i")
_ASCII_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\x{c}\\r "}
_CONTROL = {"t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
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
    relax_classes = case_insensitive or _CASE_FLAG.search(pattern) is not None
    try:
        body = _Translation(pattern, relax_classes).run()
    except _Unsupported:
        return None
    return f"(?i){body}" if relax_classes else body


class _Translation:
    """One left-to-right pass over an RE2 pattern; every token becomes one atom."""

    def __init__(self, pattern: str, relax_classes: bool) -> None:
        self.text = pattern
        self.index = 0
        self.relax = relax_classes
        self.out: list[str] = []

    def next(self) -> str:
        if self.index >= len(self.text):
            raise _Unsupported
        char = self.text[self.index]
        self.index += 1
        return char

    def peek(self, count: int = 1) -> str:
        return self.text[self.index : self.index + count]

    def run(self) -> str:
        while self.index < len(self.text):
            char = self.next()
            if char == "\\":
                self.out.append(self.escape())
            elif char == "[":
                self.out.append(self.char_class())
            elif char == "(":
                self.out.append(self.group())
            elif char in ")|.*+?":
                self.out.append(char)
            elif char in "^$":
                self.out.append(_EMPTY)
            elif char == "{":
                quantifier = _QUANTIFIER.match(self.text, self.index - 1)
                if quantifier is None:
                    self.out.append(self.literal(ord(char)))
                else:
                    self.out.append(quantifier.group())
                    self.index = quantifier.end()
            else:
                self.out.append(self.literal(ord(char)))
        return "".join(self.out)

    def literal(self, code: int) -> str:
        if code == 0x0A:
            return _EMPTY  # RE2 never matches a newline here: any atom is a superset
        if self.relax and code > 0x7F:
            return "."
        if chr(code).isascii() and chr(code).isalnum():
            return chr(code)
        return f"\\x{{{code:x}}}"

    def escape(self) -> str:
        char = self.next()
        if char in "dws":
            return "." if self.relax else f"[{_ASCII_CLASSES[char]}]"
        if char in "DWS":
            return "." if self.relax else f"[^{_ASCII_CLASSES[char.lower()]}]"
        if char in "bBAz":
            return _EMPTY
        if char in "pP":
            self.unicode_class_name()
            return "."
        if char == "x":
            return self.literal(self.hex_code())
        if char == "n":
            return _EMPTY
        if char in _CONTROL:
            return self.literal(_CONTROL[char])
        if char == "Q":
            end = self.text.find("\\E", self.index)
            end = len(self.text) if end < 0 else end
            quoted, self.index = self.text[self.index : end], end + 2
            return "(?:" + "".join(self.literal(ord(c)) for c in quoted) + ")"
        if char.isascii() and not char.isalnum():
            return self.literal(ord(char))
        raise _Unsupported  # octal, \C

    def unicode_class_name(self) -> None:
        if self.peek() == "{":
            end = self.text.find("}", self.index)
            if end < 0:
                raise _Unsupported
            self.index = end + 1
        else:
            self.next()

    def hex_code(self) -> int:
        if self.peek() == "{":
            end = self.text.find("}", self.index)
            if end < 0:
                raise _Unsupported
            digits, self.index = self.text[self.index + 1 : end], end + 1
        else:
            digits = self.next() + self.next()
        try:
            return int(digits, 16)
        except ValueError:
            raise _Unsupported from None

    def group(self) -> str:
        if self.peek() != "?":
            return "(?:"
        self.next()
        if self.peek() == ":":
            self.next()
            return "(?:"
        if self.peek() in ("P", "<"):
            end = self.text.find(">", self.index)
            if end < 0:
                raise _Unsupported
            self.index = end + 1
            return "(?:"
        while self.peek() and self.peek() in "imsU-":
            self.next()  # flags: case folding is applied to the whole pattern instead
        closing = self.next()
        if closing == ")":
            return _EMPTY
        if closing == ":":
            return "(?:"
        raise _Unsupported

    def char_class(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.next()
        members: list[str] = []
        relax = self.relax
        first = True
        while True:
            char = self.next()
            if char == "]" and not first:
                break
            first = False
            if char == "[" and self.peek() == ":":
                end = self.text.find(":]", self.index)
                if end < 0:
                    raise _Unsupported
                members.append(self.text[self.index - 1 : end + 2])
                self.index = end + 2
                continue
            low = self.class_member(char)
            if low is None:
                relax = True
                continue
            if self.peek() == "-" and self.peek(2) != "-]" and self.peek(2)[1:] != "]":
                self.next()
                high = self.class_member(self.next())
                if high is None:
                    raise _Unsupported
                members.append(f"{low}-{high}")
            else:
                members.append(low)
        if relax:
            return "."
        if not [member for member in members if member != "\\x{a}"]:
            return "." if negated else _EMPTY
        members = [member for member in members if member != "\\x{a}"]
        return f"[{'^' if negated else ''}{''.join(members)}]"

    def class_member(self, char: str) -> str | None:
        """One class member as ripgrep text; ``None`` when the class must be relaxed."""
        if char != "\\":
            return f"\\x{{{ord(char):x}}}"
        escaped = self.next()
        if escaped in "dws":
            return _ASCII_CLASSES[escaped]
        if escaped in "DWSpP":
            if escaped in "pP":
                self.unicode_class_name()
            return None
        if escaped == "x":
            return f"\\x{{{self.hex_code():x}}}"
        if escaped == "n":
            return "\\x{a}"
        if escaped in _CONTROL:
            return f"\\x{{{_CONTROL[escaped]:x}}}"
        if escaped.isascii() and not escaped.isalnum():
            return f"\\x{{{ord(escaped):x}}}"
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
