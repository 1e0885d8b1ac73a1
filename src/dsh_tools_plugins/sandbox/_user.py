"""Who a sandboxed command runs as: on a root host, never root unless the host says so.

Inside its user namespace a command is whoever started bubblewrap, mapped to the same
user on the host. A host running as root would hand every command the host's root
user: no capabilities, but the owner of every root-owned file in each writable mount.
So a root host starts bubblewrap as an unprivileged user instead: the ``[sandbox] user``
setting, else the workspace's owner. The public face is
:mod:`dsh_tools_plugins.sandbox`.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import PurePosixPath

import attrs

from dsh_tools.errors import ErrorCode, ToolError

from .._host_programs import system_program

__all__ = ["RunAs", "check_reachable", "sandbox_user", "switch_to"]


@attrs.frozen
class RunAs:
    """The user and group bubblewrap is started as (with no supplementary groups)."""

    uid: int
    gid: int


def _entry(user: str | int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(user) if isinstance(user, str) else pwd.getpwuid(user)
    except KeyError:
        return None


def _named(user: str | int) -> RunAs:
    """The user the setting names: a known name, or any numeric id (its passwd group
    if it has an entry, else a group of the same number)."""
    entry = _entry(user)
    if entry is not None:
        return RunAs(entry.pw_uid, entry.pw_gid)
    if isinstance(user, str):
        raise ToolError(
            f"[sandbox] user = {user!r}: there is no such user on this host",
            code=ErrorCode.DENIED,
        )
    return RunAs(user, user)


def sandbox_user(setting: str | int | None, workspace_owner: int) -> RunAs | None:
    """Whom to start bubblewrap as, or ``None`` to start it as the host's own user.

    Raises ``DENIED`` before anything runs: on a root host with no setting whose
    workspace belongs to root, and on any other host when the setting names someone
    else (an unprivileged process cannot switch users)."""
    host = os.geteuid()
    named = None if setting is None else _named(setting)
    if host != 0:
        if named is not None and named.uid != host:
            raise ToolError(
                f"[sandbox] user = {setting!r} names another user, but this host runs as "
                f"user id {host}, which cannot switch users: remove the setting, or run "
                "the host as root",
                code=ErrorCode.DENIED,
            )
        return None
    if named is not None:
        return None if named.uid == 0 else named
    if workspace_owner == 0:
        raise ToolError(
            "the host runs as root and the workspace belongs to root, so sandboxed "
            "commands would run as the host's root user: give the workspace to an "
            "unprivileged user (chown), or name one in the sandbox settings "
            '([sandbox] user = "name"); [sandbox] user = "root" keeps commands running '
            "as root",
            code=ErrorCode.DENIED,
        )
    owner = _entry(workspace_owner)
    return RunAs(workspace_owner, owner.pw_gid if owner is not None else workspace_owner)


def switch_to(user: RunAs) -> list[str]:
    """The ``setpriv`` command line (util-linux, from a system directory) that becomes
    ``user``, with no supplementary groups, then runs the program that follows. A program
    rather than ``subprocess``'s ``user=``, which makes Python fork the whole host
    process where it would otherwise use ``vfork`` (some 10 ms a call). Raises
    ``DENIED`` without ``setpriv``."""
    program = system_program("setpriv")
    if program is None:
        raise ToolError(
            "the host runs as root and starts sandboxed commands as another user with "
            "setpriv, which is not installed (it is part of util-linux)",
            code=ErrorCode.DENIED,
        )
    return [program, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]


def _has_acl(folder: str) -> bool:
    try:
        os.getxattr(folder, "system.posix_acl_access", follow_symlinks=False)
    except OSError as error:
        return error.errno not in (errno.ENODATA, errno.ENOTSUP)
    return True


def _passes(user: RunAs, folder: str) -> bool:
    """Whether ``user`` (no supplementary groups, no capabilities) may pass through
    ``folder``; a folder that cannot be read, or has an access ACL, is left to bwrap."""
    try:
        found = os.stat(folder, follow_symlinks=False)
    except OSError:
        return True
    if found.st_uid == user.uid:
        wanted = stat.S_IXUSR
    elif found.st_gid == user.gid:
        wanted = stat.S_IXGRP
    else:
        wanted = stat.S_IXOTH
    return bool(found.st_mode & wanted) or _has_acl(folder)


def check_reachable(user: RunAs, path: str) -> None:
    """Raise ``DENIED`` when ``user`` may not pass through a folder above ``path``.

    bubblewrap, started as that user, finds a mount's source by its path even when it
    is handed the host's descriptor (``--bind-fd`` resolves ``/proc/self/fd/N`` to the
    path and walks it), so every folder above must let the user pass; otherwise bwrap
    fails with ``Can't find source path /proc/self/fd/N: Permission denied``."""
    for parent in reversed(PurePosixPath(path).parents):
        folder = str(parent)
        if not _passes(user, folder):
            mode = stat.S_IMODE(os.stat(folder, follow_symlinks=False).st_mode)
            raise ToolError(
                f"sandboxed commands run as user id {user.uid}, who may not pass through "
                f"{folder} (mode {mode:04o}) to reach {path}: let that user pass (chmod "
                f"o+x {folder}), move the folder, or name another user in the sandbox "
                "settings ([sandbox] user)",
                code=ErrorCode.DENIED,
            )
