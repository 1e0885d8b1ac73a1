"""Who a sandboxed command runs as: on a root host, never root unless the host says so.

Inside its user namespace a command is whoever started bubblewrap, mapped to the same
user on the host. A host running as root would hand every command the host's root
user: no capabilities, but the owner of every root-owned file in each writable mount.
So a root host starts bubblewrap as an unprivileged user instead: the ``[sandbox] user``
setting, else the workspace's owner. The public face is
:mod:`dsh_tools_plugins.sandbox`.
"""

from __future__ import annotations

import os
import pwd

import attrs

from dsh_tools.errors import ErrorCode, ToolError

from .._host_programs import system_program

__all__ = ["RunAs", "sandbox_user", "switch_to"]


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
