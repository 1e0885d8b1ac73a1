"""grep's search of a directory tree: every admitted file, or those ripgrep pre-selects.

:class:`Findings` reads one file at a time (whole, up to the size cap) and keeps the
matching lines the call may return. :func:`search_tree` walks the tree through the
workspace (no links followed, ignore rules applied by the walk filter) and, when an
``rg`` executable is given and the pattern translates, first asks ripgrep which files can
match (:mod:`dsh_tools_plugins._search.ripgrep`), so only those are read. Either way each file
is opened, read and matched here, so the answer is the same.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from dsh_tools._safetext import safe_text
from dsh_tools.errors import ToolError

from .._file_bytes import is_binary, read_fd
from ..workspace import Opened, WalkFilter, Workspace
from .regex import LineRegex, matching_lines
from .ripgrep import Preselection, superset_pattern

__all__ = ["MAX_MATCH_LINE_CHARS", "Findings", "search_tree"]

MAX_MATCH_LINE_CHARS = 500
"""Matching lines longer than this are cut and marked with ``…``."""


class Findings:
    """What one grep call found: matching lines up to ``limit``, counts past it."""

    def __init__(
        self,
        regex: LineRegex,
        limit: int,
        max_file_bytes: int,
        stop: Callable[[], bool],
        scanned: Callable[[], None] = lambda: None,
    ) -> None:
        self.regex = regex
        self.limit = limit
        self.max_file_bytes = max_file_bytes
        self.stop = stop
        self.scanned = scanned
        """Called once per file searched (``grep`` reports progress through it)."""
        self.files: dict[str, list[dict[str, Any]]] = {}
        self.total = 0
        self.skipped = 0

    def search(self, display: str, fd: int, size: int) -> None:
        """Search the open file ``fd``, or count it as skipped (binary, over the cap)."""
        self.scanned()
        if size > self.max_file_bytes:
            self.skipped += 1
            return
        data = os.read(fd, size + 1)
        if len(data) > size:  # it grew since fstat
            data += read_fd(fd, self.max_file_bytes + 1 - len(data))
            if len(data) > self.max_file_bytes:
                self.skipped += 1
                return
        if is_binary(data):
            self.skipped += 1
            return
        if not self.regex.may_match(data):
            return  # most files: one look, and nothing to count
        kept, count = matching_lines(self.regex, data, self.limit - self.total, self.stop)
        self.total += count
        for number, line in kept:
            self.add(display, number, line.decode("utf-8", errors="replace"))

    def add(self, display: str, number: int, line: str) -> None:
        if len(line) > MAX_MATCH_LINE_CHARS:
            line = line[:MAX_MATCH_LINE_CHARS] + "…"
        entry = {"line_number": number, "line": line}
        self.files.setdefault(safe_text(display), []).append(entry)

    def value(self) -> dict[str, Any]:
        return {
            "files": [{"path": path, "matches": matches} for path, matches in self.files.items()],
            "total": self.total,
            "truncated": self.total > self.limit,
            "skipped_files": self.skipped,
        }


class _Recorder:
    """A walk filter that notes the directories ``inner`` refuses (ripgrep skips them)."""

    __slots__ = ("_inner", "_prefix", "refused")

    def __init__(self, inner: WalkFilter | None, prefix: str, refused: list[str]) -> None:
        self._inner = inner
        self._prefix = prefix
        self.refused = refused

    def admits(self, name: str, is_dir: bool) -> bool:
        if self._inner is None or self._inner.admits(name, is_dir):
            return True
        if is_dir:
            self.refused.append(self._prefix + name)
        return False

    def enter(self, name: str, dir_fd: int, files: AbstractSet[str]) -> _Recorder:
        inner = None if self._inner is None else self._inner.enter(name, dir_fd, files)
        return _Recorder(inner, f"{self._prefix}{name}/", self.refused)


class _Chosen:
    """A walk filter admitting only the chosen files and the directories that lead to
    them (paths relative to the walk's start, as bytes)."""

    __slots__ = ("_directories", "_files", "_prefix")

    def __init__(self, files: set[bytes], directories: set[bytes], prefix: bytes) -> None:
        self._files = files
        self._directories = directories
        self._prefix = prefix

    @classmethod
    def of(cls, files: set[bytes]) -> _Chosen:
        directories = set()
        for path in files:
            cut = path.rfind(b"/")
            while cut > 0 and path[:cut] not in directories:
                directories.add(path[:cut])
                cut = path.rfind(b"/", 0, cut)
        return cls(files, directories, b"")

    def admits(self, name: str, is_dir: bool) -> bool:
        path = self._prefix + os.fsencode(name)
        return path in (self._directories if is_dir else self._files)

    def enter(self, name: str, dir_fd: int, files: AbstractSet[str]) -> _Chosen:
        return _Chosen(self._files, self._directories, self._prefix + os.fsencode(name) + b"/")


def search_tree(
    workspace: Workspace,
    base: Opened,
    findings: Findings,
    entry_filter: WalkFilter | None,
    include: Callable[[str], bool] | None,
    *,
    ripgrep: str | None,
) -> None:
    """Search the directory ``base``: the files the walk admits (``entry_filter``) whose
    display path ``include`` accepts. With ``ripgrep``, read only those it pre-selects."""
    fast = (
        None
        if ripgrep is None
        else superset_pattern(
            findings.regex.source, case_insensitive=findings.regex.case_insensitive
        )
    )
    if (
        ripgrep is None
        or fast is None
        or not _search_with_ripgrep(workspace, base, findings, entry_filter, include, ripgrep, fast)
    ):
        _search_walk(workspace, base, findings, entry_filter, include)


def _search_walk(
    workspace: Workspace,
    base: Opened,
    findings: Findings,
    entry_filter: WalkFilter | None,
    include: Callable[[str], bool] | None,
) -> None:
    """The built-in search: read and match every file the walk admits."""
    stop, search, open_walked = findings.stop, findings.search, workspace.open_walked
    for found in workspace.walk_files(base, entry_filter=entry_filter, stop=stop):
        if stop():
            return
        if include is not None and not include(found.display):
            continue
        try:
            fd, info = open_walked(found)
        except (OSError, ToolError):
            findings.skipped += 1
            continue
        try:
            search(found.display, fd, info.st_size)
        finally:
            os.close(fd)


def _search_with_ripgrep(
    workspace: Workspace,
    base: Opened,
    findings: Findings,
    entry_filter: WalkFilter | None,
    include: Callable[[str], bool] | None,
    ripgrep: str,
    pattern: str,
) -> bool:
    """Search only the files ripgrep pre-selects; false when ripgrep could not answer.

    A first walk (no file is opened) applies the ignore rules and ``include`` exactly as
    :func:`_search_walk` does and counts the files over the size cap, while ripgrep
    runs: it starts once the walk has filtered the top directory, told to skip the
    ignored directories met so far. A second walk visits only the admitted files
    ripgrep returned, and the directories leading to them.
    """
    stop = findings.stop
    skip = 0 if base.display == "." else len(base.display) + 1
    refused: list[str] = []
    admitted: set[bytes] = set()
    oversized = 0
    preselection: Preselection | None = None
    walk = workspace.walk_files(base, entry_filter=_Recorder(entry_filter, "", refused), stop=stop)
    with contextlib.ExitStack() as running:
        for found in walk:
            if preselection is None:
                preselection = Preselection.start(
                    ripgrep,
                    base.fd,
                    pattern,
                    excluded_directories=refused,
                    max_file_bytes=findings.max_file_bytes,
                )
                if preselection is None:
                    return False
                running.enter_context(preselection)
            if stop():
                return True
            if include is not None and not include(found.display):
                continue
            try:
                size = os.stat(found.name, dir_fd=found.parent_fd, follow_symlinks=False).st_size
            except OSError:
                return False  # the built-in search would count it as skipped
            if size > findings.max_file_bytes:
                oversized += 1
            else:
                admitted.add(os.fsencode(found.display[skip:]))
        candidates = set() if preselection is None else preselection.files(stop)
    if candidates is None:
        return stop()
    findings.skipped += oversized
    _search_walk(workspace, base, findings, _Chosen.of(candidates & admitted), None)
    return True
