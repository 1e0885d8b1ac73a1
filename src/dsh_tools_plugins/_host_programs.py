"""Programs the host runs for itself (bubblewrap, ripgrep): found once, in system places.

The host's ``PATH`` is no guide: an activated virtualenv inside the workspace puts a
directory that every sandboxed command can write in front of it, and a command could
plant a ``bwrap`` or ``rg`` there for the host to run next. So a host program is looked
for only in :data:`SYSTEM_DIRECTORIES`, once per process, and kept as the absolute path
of the real file, and only if neither the file nor any directory above it can be changed
by anyone but root or the host's own user (see :func:`untrusted`).
"""

from __future__ import annotations

import functools
import logging
import os
import stat

__all__ = ["SYSTEM_DIRECTORIES", "inside", "system_program", "untrusted"]

logger = logging.getLogger("dsh_tools")

SYSTEM_DIRECTORIES = (
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
)
"""Where host programs are looked for, in this order."""

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def untrusted(path: str) -> str | None:
    """Why the file at the real, absolute ``path`` could be replaced by someone other
    than root or this process's user, or ``None`` when it cannot.

    Every component from ``/`` down must be owned by root or this user and writable by
    no group or other user; a directory that others may write is accepted only when it
    is root's and sticky (as ``/tmp``): there, only an entry's owner may rename it.
    """
    owners = {0, os.geteuid()}
    current = "/"
    parts = [part for part in path.split("/") if part]
    for index in range(len(parts) + 1):
        if index:
            current = os.path.join(current, parts[index - 1])
        try:
            info = os.lstat(current)
        except OSError as error:
            return f"{current} cannot be checked: {error.strerror or error}"
        if stat.S_ISLNK(info.st_mode):
            return f"{current} is a symbolic link"
        if info.st_uid not in owners:
            return f"{current} belongs to user {info.st_uid}"
        sticky = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX and info.st_uid == 0
        if info.st_mode & _OTHERS_WRITE and not sticky:
            return f"{current} is writable by other users"
    return None


@functools.cache
def system_program(name: str) -> str | None:
    """The real path of the executable ``name`` in :data:`SYSTEM_DIRECTORIES`, looked up
    once per process; ``None`` when there is none that only root or this user can change
    (a candidate left out for that is logged)."""
    for directory in SYSTEM_DIRECTORIES:
        candidate = os.path.join(directory, name)
        if not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
            continue
        path = os.path.realpath(candidate)
        problem = untrusted(path)
        if problem is None:
            return path
        logger.warning("not running %s: %s", candidate, problem)
    return None


def inside(path: str, trees: tuple[str, ...]) -> str | None:
    """The first of ``trees`` (absolute paths) that holds ``path``, compared by their
    real paths, or ``None``."""
    real = os.path.realpath(path)
    for tree in trees:
        top = os.path.realpath(tree)
        if os.path.commonpath((real, top)) == top:
            return tree
    return None
