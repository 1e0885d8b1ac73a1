"""The directory walker behind :meth:`Workspace.walk_files
<dsh_tools_plugins.workspace.Workspace.walk_files>`. Nothing else.

A walk goes depth-first in name order through directory descriptors, each one opened
from its parent's with ``O_NOFOLLOW``: symbolic links are neither entered nor reported,
nor are FIFOs, sockets and devices. It is iterative (any depth) and keeps at most
:data:`WALK_OPEN_DIRECTORIES` descriptors open; a directory reopened on the way back must
be the one first entered (``st_dev``/``st_ino``), or the rest of it is skipped. Where a
walk starts, and that it starts inside the workspace, is :mod:`~dsh_tools_plugins.workspace`'s
job.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from typing import NamedTuple, Protocol

from dsh_tools.errors import ToolError

__all__ = ["WALK_OPEN_DIRECTORIES", "WalkFilter", "WorkspaceFile", "open_walked", "walk_files"]

_NOFOLLOW_CLOEXEC = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_STEP = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW_CLOEXEC
_WALKED_READ = os.O_RDONLY | _NOFOLLOW_CLOEXEC | getattr(os, "O_NONBLOCK", 0)

WALK_OPEN_DIRECTORIES = 32
"""Directory descriptors one walk keeps open at most, however deep the tree: deeper
ancestors are closed and reopened (and re-identified) when the walk climbs back."""


class WorkspaceFile(NamedTuple):
    """A regular file met while walking: its display path, parent descriptor and name.

    ``parent_fd`` is only valid during the iteration step that yields the record. (A
    named tuple: a walk makes one per file, and it is the cheapest record to make.)
    """

    display: str
    parent_fd: int
    name: str


class WalkFilter(Protocol):
    """Decides, one directory at a time, what :meth:`Workspace.walk_files` visits.

    Ignore rules are the usual filter: a directory's rules depend on its ancestors'
    rules and on the ignore files it holds, hence one filter object per directory.
    """

    def admits(self, name: str, is_dir: bool) -> bool:
        """Whether the entry ``name`` of this directory is reported (or entered)."""
        ...

    def enter(self, name: str, dir_fd: int, files: AbstractSet[str]) -> WalkFilter:
        """The filter for the admitted subdirectory ``name``, now open as ``dir_fd``;
        ``files`` are the names of the regular files in it."""
        ...


def walk_files(
    start_fd: int,
    start_display: str,
    skip: frozenset[str],
    entry_filter: WalkFilter | None,
    stop: Callable[[], bool] | None,
) -> Iterator[WorkspaceFile]:
    """Every regular file under the directory ``start_fd`` (shown as ``start_display``);
    see :meth:`Workspace.walk_files`. ``start_fd`` is never closed here."""
    info = os.fstat(start_fd)
    prefix = "" if start_display == "." else start_display + "/"
    pending = _visit(_scan(start_fd, skip), entry_filter)
    stack = [_Level(start_fd, (info.st_dev, info.st_ino), "", prefix, entry_filter, pending)]
    try:
        while stack:
            level = stack[-1]
            if not level.pending:
                _close_level(stack.pop(), keep=start_fd)
                continue
            name, is_dir = level.pending.pop()
            if level.fd is None and not _reopen(stack):
                continue
            assert level.fd is not None
            if not is_dir:
                yield WorkspaceFile(level.prefix + name, level.fd, name)
                continue
            if stop is not None and stop():
                return
            child = _enter(level, name, skip)
            if child is not None:
                stack.append(child)
                _trim(stack)
    finally:
        for level in stack:
            _close_level(level, keep=start_fd)


def open_walked(found: WorkspaceFile) -> tuple[int, os.stat_result]:
    """Open ``found`` for reading, non-blocking and without following a link; see
    :meth:`Workspace.open_walked`."""
    fd = os.open(found.name, _WALKED_READ, dir_fd=found.parent_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f'"{found.display}" is not a regular file')
    except BaseException:
        os.close(fd)
        raise
    return fd, info


class _Level:
    """One directory on a walk's stack: its descriptor (``None`` while closed to save
    descriptors), identity, name in its parent, display prefix, filter and the entries
    still to visit (``(name, is_dir)``, last one next)."""

    __slots__ = ("entry_filter", "fd", "ident", "name", "pending", "prefix")

    def __init__(
        self,
        fd: int,
        ident: tuple[int, int],
        name: str,
        prefix: str,
        entry_filter: WalkFilter | None,
        pending: list[tuple[str, bool]],
    ) -> None:
        self.fd: int | None = fd
        self.ident = ident
        self.name = name
        self.prefix = prefix
        self.entry_filter = entry_filter
        self.pending = pending


def _scan(fd: int, skip: frozenset[str]) -> list[tuple[str, bool]]:
    """The subdirectories and regular files of the directory ``fd``: ``(name, is_dir)``."""
    found: list[tuple[str, bool]] = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in skip:
                            found.append((entry.name, True))
                    elif entry.is_file(follow_symlinks=False):
                        found.append((entry.name, False))
                    # symlinks, FIFOs, sockets and devices are never visited
                except OSError:
                    continue
    except OSError:
        return []
    return found


def _visit(
    entries: list[tuple[str, bool]], entry_filter: WalkFilter | None
) -> list[tuple[str, bool]]:
    """The ``entries`` ``entry_filter`` admits, in reverse name order (popped from the end)."""
    if entry_filter is not None:
        entries = [entry for entry in entries if entry_filter.admits(*entry)]
    entries.sort(reverse=True)
    return entries


def _enter(parent: _Level, name: str, skip: frozenset[str]) -> _Level | None:
    """Open and scan the subdirectory ``name`` of ``parent``; ``None`` when it cannot be."""
    assert parent.fd is not None
    try:
        fd = os.open(name, _DIRECTORY_STEP, dir_fd=parent.fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        entries = _scan(fd, skip)
        entry_filter = parent.entry_filter
        if entry_filter is not None:
            files = {entry for entry, is_dir in entries if not is_dir}
            entry_filter = entry_filter.enter(name, fd, files)
        return _Level(
            fd,
            (info.st_dev, info.st_ino),
            name,
            parent.prefix + name + "/",
            entry_filter,
            _visit(entries, entry_filter),
        )
    except BaseException:
        os.close(fd)
        raise


def _trim(stack: list[_Level]) -> None:
    """Close the shallowest open descriptors until at most the allowed number stay open."""
    if len(stack) <= WALK_OPEN_DIRECTORIES + 1:
        return
    open_levels = [level for level in stack[1:] if level.fd is not None]
    for level in open_levels[: max(0, len(open_levels) - WALK_OPEN_DIRECTORIES)]:
        assert level.fd is not None
        os.close(level.fd)
        level.fd = None


def _reopen(stack: list[_Level]) -> bool:
    """Reopen the closed levels down to the top one from the deepest open ancestor.

    Each step is an ``O_NOFOLLOW`` open from the parent's descriptor and must find the
    directory first entered. When the tree has changed, the levels from the first
    mismatch up are dropped (their remaining entries are not visited) and the result is
    false.
    """
    first = max(index for index, level in enumerate(stack) if level.fd is not None) + 1
    for index in range(first, len(stack)):
        level, parent_fd = stack[index], stack[index - 1].fd
        assert parent_fd is not None
        try:
            fd = os.open(level.name, _DIRECTORY_STEP, dir_fd=parent_fd)
        except OSError:
            fd = None
        if fd is not None:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) == level.ident:
                level.fd = fd
                continue
            os.close(fd)
        for dropped in stack[index:]:
            _close_level(dropped, keep=-1)
        del stack[index:]
        return False
    _trim(stack)
    return True


def _close_level(level: _Level, *, keep: int) -> None:
    if level.fd is not None and level.fd != keep:
        with contextlib.suppress(OSError):
            os.close(level.fd)
    level.fd = None
