"""Checking, before its command starts, that a sandbox's extra mounts sit where they
belong. The public face is :mod:`dsh_tools_plugins.sandbox`.

The host opens each extra path by descriptor, but bubblewrap finds the *destination*
from its path text inside the new root. When that lies in the workspace (a read-only
``.git/hooks``), a command running at the same time can swap a folder above it for a
link between the host's check and the mount, and the protection lands elsewhere. So
while bwrap holds the sandbox on ``--block-fd``, the host looks into the sandbox's
mount table: each extra path, walked from the sandbox's root without following links,
must be the very file the host opened, on a mount of its own at exactly that path, and
read-only when it was asked to be.
"""

from __future__ import annotations

import os
import re

import anyio

from dsh_tools.errors import ToolError

from ._bwrap import Mount

__all__ = ["check_mounts"]

_SETUP_WAIT_S = 10.0
_STEP = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_ESCAPED = re.compile(rb"\\([0-7]{3})")


def _mount_table(pid: int) -> dict[int, tuple[bytes, bytes, set[bytes]]] | None:
    """``/proc/PID/mountinfo`` by mount id: the root within its filesystem, the mount
    point (as the process sees it) and the mount's options; ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    table = {}
    for line in lines:
        fields = line.split(b" ")
        root, point = (_ESCAPED.sub(lambda m: bytes([int(m[1], 8)]), f) for f in fields[3:5])
        table[int(fields[0])] = (root, point, set(fields[5].split(b",")))
    return table or None


def _moved_in(pid: int, host_root: os.stat_result) -> bool | None:
    """Whether bwrap has moved into the sandbox's new root (no mount changes after
    that): its root is no longer the host's, nor bwrap's scratch filesystem, which holds
    the ``newroot`` folder. ``None`` when the process is gone."""
    try:
        root = os.stat(f"/proc/{pid}/root/")
        scratch = os.path.lexists(f"/proc/{pid}/root/newroot")
    except OSError:
        return None
    return (root.st_dev, root.st_ino) != (host_root.st_dev, host_root.st_ino) and not scratch


async def _final_table(pid: int) -> dict[int, tuple[bytes, bytes, set[bytes]]] | None:
    """The sandbox's mount table once bwrap has moved into the new root, and taken the
    old one away: its ``/`` is then its ``newroot`` folder. ``None`` when bwrap died."""
    host_root = os.stat("/")
    with anyio.move_on_after(_SETUP_WAIT_S):
        while True:
            moved = _moved_in(pid, host_root)
            if moved is None:
                return None
            if moved:
                table = _mount_table(pid)
                if table is None:
                    return None
                top = [entry for entry in table.values() if entry[1] == b"/"]
                if top and top[-1][0] == b"/newroot":
                    return table
            await anyio.sleep(0.0005)
    raise ToolError("the sandbox did not finish setting up; the command did not run")


def _walk(root: int, path: str) -> int:
    """An ``O_PATH`` descriptor of ``path`` from ``root``, never following a link."""
    fd = os.dup(root)
    try:
        for name in path.strip("/").split("/"):
            step = os.open(name, _STEP, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mount_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as handle:
        for line in handle:
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    raise OSError(f"no mount id for descriptor {fd}")


def _misplaced(root: int, mount: Mount, table: dict[int, tuple[bytes, bytes, set[bytes]]]) -> bool:
    """Whether ``mount`` is missing from its place in the sandbox, or another file's."""
    try:
        fd = _walk(root, mount.path)
    except OSError:
        return True
    try:
        found, wanted = os.fstat(fd), os.fstat(mount.fd)
        if (found.st_dev, found.st_ino) != (wanted.st_dev, wanted.st_ino):
            return True
        entry = table.get(_mount_id(fd))
    except OSError:
        return True
    finally:
        os.close(fd)
    return (
        entry is None
        or entry[1] != os.fsencode(mount.path)
        or (b"ro" if not mount.writable else b"rw") not in entry[2]
    )


async def check_mounts(pid: int, mounts: tuple[Mount, ...]) -> None:
    """Raise unless every one of ``mounts`` sits at its path in the sandbox whose first
    process is ``pid`` (held by bwrap, so its command has not started). A sandbox that
    died while setting up passes: its command never runs."""
    if not mounts:
        return
    table = await _final_table(pid)
    if table is None:
        return
    try:
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # gone since
    try:
        misplaced = [mount for mount in mounts if _misplaced(root, mount, table)]
    finally:
        os.close(root)
    if misplaced:
        mount = misplaced[0]
        kind = "read-write" if mount.writable else "read-only"
        raise ToolError(
            f"the sandbox's {kind} path {mount.path} was not mounted at its place (a folder "
            "above it was moved or replaced by a link while the sandbox started, perhaps by "
            "another command); the command did not run"
        )
