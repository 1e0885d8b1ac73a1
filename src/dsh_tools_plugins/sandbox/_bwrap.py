"""bubblewrap: the one found and probed here, and the command line that builds a call's
sandbox from it (mounts, namespaces, the status and gate descriptors). The public face
is :mod:`dsh_tools_plugins.sandbox`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import subprocess
import sys
import tempfile
import typing
from pathlib import PurePosixPath

import anyio
import attrs

from dsh_tools._hostfiles import HostFileError, open_unlinked
from dsh_tools.errors import ToolError

from .._host_programs import system_program
from ._settings import SANDBOX_HOME, SandboxLimits, SandboxSettings

__all__ = [
    "NOT_INSTALLED",
    "Bubblewrap",
    "Mount",
    "drain",
    "exit_reported",
    "extra_mounts",
    "find_bubblewrap",
    "jail_arguments",
    "sandbox_pid",
]

logger = logging.getLogger("dsh_tools")

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@attrs.frozen
class Bubblewrap:
    """A bwrap that was seen to start a sandbox here, and what it mounts of the host."""

    path: str
    disable_userns: bool
    sized_tmpfs: bool  # takes --size (0.7 or later, and not setuid)
    system: tuple[str, ...]  # bwrap arguments for /usr, /bin, /lib* and /etc
    private_etc: tuple[str, ...]  # bwrap arguments that hide /etc's private entries
    kernel_state: tuple[str, ...]  # bwrap arguments that make /proc's host-wide entries read-only


_probed: dict[str, Bubblewrap | str] = {}
"""Per bwrap path: what the probe found, or why it cannot sandbox (once per process)."""


def _version(path: str) -> tuple[int, ...]:
    done = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=10, check=False
    )
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout)
    return tuple(int(part) for part in found.groups("0")) if found else (0,)


def _system_mounts() -> tuple[str, ...]:
    """Bind the system directories read-only; a merged-/usr symlink stays a symlink."""
    arguments: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            arguments += ["--ro-bind", path, path]
    return (*arguments, "--ro-bind", "/etc", "/etc")


def _private_etc(top: str = "/etc") -> tuple[str, ...]:
    """Cover every entry under ``top`` that other users may not read: that is where a
    system keeps its secrets (``shadow``, ``gshadow``, ssh host keys, ``ssl/private``,
    ``sudoers``). A command may run as root, which could read them otherwise."""
    arguments: list[str] = []
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if not mode & stat.S_IROTH:
                if stat.S_ISDIR(mode):
                    arguments += ["--tmpfs", entry.path, "--remount-ro", entry.path]
                else:
                    arguments += ["--ro-bind", "/dev/null", entry.path]
            elif stat.S_ISDIR(mode):
                pending.append(entry.path)
    return tuple(arguments)


def _kernel_state(top: str = "/proc") -> tuple[str, ...]:
    """Bind every host-wide entry of ``/proc`` that is a directory or writable (``sys``,
    ``sysrq-trigger``, ``irq``, ``bus``, ``fs``...) read-only over itself, after the
    sandbox's own ``/proc``. A command running as root (mapped to the host's root when the
    host is root) could otherwise change kernel settings: the kernel checks only the
    writer's user id there, not its capabilities."""
    arguments: list[str] = []
    for entry in sorted(os.scandir(top), key=lambda entry: entry.name):
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if entry.name.isdigit() or stat.S_ISLNK(mode):
            continue  # the sandbox's own processes, and self/thread-self/net/mounts
        if stat.S_ISDIR(mode) or mode & 0o222:
            arguments += ["--ro-bind-try", entry.path, entry.path]
    return tuple(arguments)


def _probe(path: str) -> Bubblewrap | str:
    """Start one real sandbox with every option a call uses; a reason string if it fails."""
    try:
        version = _version(path)
        setuid = bool(os.stat(path).st_mode & stat.S_ISUID)  # refuses --size
        candidate = Bubblewrap(
            path,
            disable_userns=version >= (0, 8),
            sized_tmpfs=version >= (0, 7) and not setuid,
            system=_system_mounts(),
            private_etc=_private_etc(),
            kernel_state=_kernel_state(),
        )
        if not candidate.sized_tmpfs:
            logger.warning(
                "run_command: bubblewrap at %s cannot size the sandbox's /tmp (it needs "
                "version 0.7 or later, not setuid); /tmp and /dev/shm are not bounded",
                path,
            )
        with tempfile.TemporaryDirectory(prefix="dsh-tools-probe-") as scratch:
            root = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
            status_r, status_w = os.pipe()
            block_r, block_w = os.pipe()
            try:
                os.write(block_w, b"1")
                jail = jail_arguments(
                    candidate,
                    SandboxSettings(),
                    root=Mount(root, scratch, writable=True),
                    extra=(),
                    cwd=scratch,
                    status_fd=status_w,
                    block_fd=block_r,
                )
                done = subprocess.run(
                    [*jail, "true"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                    pass_fds=(root, status_w, block_r),
                    env={"PATH": os.defpath},
                )
            finally:
                for fd in (root, status_w, block_r, block_w):
                    os.close(fd)
                os.set_blocking(status_r, False)
                reported = exit_reported(drain(status_r))
                os.close(status_r)
    except (OSError, subprocess.SubprocessError) as error:
        return f"bubblewrap at {path} could not be run: {error}"
    if done.returncode != 0 or not reported:
        message = (done.stderr or done.stdout).strip().splitlines()
        detail = message[-1] if message else f"exit status {done.returncode}"
        return f"bubblewrap at {path} cannot start a sandbox here: {detail}"
    return candidate


NOT_INSTALLED = "bubblewrap (bwrap) is not installed"


def find_bubblewrap(*, probe: bool = True) -> Bubblewrap | str | None:
    """The working bwrap in a system directory (never the host's ``PATH``, which may lead
    into the workspace; see :mod:`dsh_tools_plugins._host_programs`), or why there is
    none. Its first sight is probed (cached per path); with ``probe=False`` that case
    returns ``None``."""
    if not sys.platform.startswith("linux"):
        return f"the bubblewrap sandbox needs Linux; this is {sys.platform}"
    path = system_program("bwrap")
    if path is None:
        return NOT_INSTALLED
    found = _probed.get(path)
    if found is None and probe:
        found = _probed[path] = _probe(path)
        if isinstance(found, str):
            logger.warning("run_command: %s; commands run without a sandbox", found)
    return found


def _ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` below ``/``, outermost first."""
    parents = [str(parent) for parent in PurePosixPath(path).parents if str(parent) != "/"]
    return parents[::-1]


def _resolver_mount() -> list[str]:
    """``/etc/resolv.conf`` often links into ``/run``; mount its target for DNS."""
    target = os.path.realpath("/etc/resolv.conf")
    if target.startswith("/etc/") or not os.path.exists(target):
        return []
    return ["--ro-bind-try", target, target]


@attrs.frozen
class Mount:
    """A host directory or file opened by the host (``O_PATH``), to bind at ``path``."""

    fd: int
    path: str
    writable: bool


def _open_unlinked(path: str) -> int | None:
    """An ``O_PATH`` descriptor of the absolute ``path``, opened without following a link
    at any component (:func:`dsh_tools._hostfiles.open_unlinked`); ``None`` when it does
    not exist. A component that is a symbolic link is refused: a command may have
    planted it."""
    try:
        return open_unlinked(path, what="the sandbox path")
    except HostFileError as error:
        if error.link is None:
            raise ToolError(str(error)) from None
        where = "is" if error.link == path else f"passes through {error.link}, which is"
        raise ToolError(
            f"the sandbox path {path} {where} a symbolic link; refusing to mount it "
            "(give the real path in read_only_paths / read_write_paths)"
        ) from None


@contextlib.contextmanager
def extra_mounts(settings: SandboxSettings) -> typing.Iterator[tuple[Mount, ...]]:
    """The settings' existing extra paths, opened for one call (closed after it)."""
    mounts: list[Mount] = []
    try:
        wanted = [(path, True) for path in settings.read_write_paths]
        wanted += [(path, False) for path in settings.read_only_paths]
        for path, writable in wanted:
            fd = _open_unlinked(path)
            if fd is not None:
                mounts.append(Mount(fd, path, writable))
        yield tuple(mounts)
    finally:
        for mount in mounts:
            os.close(mount.fd)


def jail_arguments(
    bwrap: Bubblewrap,
    settings: SandboxSettings,
    *,
    root: Mount,
    extra: tuple[Mount, ...],
    cwd: str,
    status_fd: int,
    block_fd: int,
) -> list[str]:
    """The bwrap command line up to ``--``; the command's own argv follows it.

    Mount order matters: ``/proc``'s host-wide entries read-only over the fresh
    ``/proc``; ``/dev`` read-only but for its own sized ``/dev/shm``; the private
    ``/tmp`` before the workspace (which may live under ``/tmp``), bound from its
    descriptor; then the host's extra paths, from descriptors too (they may lie inside
    the workspace); and the root made read-only last. The workspace's ancestors are
    created read-only, so ``cd ..`` finds nothing to write to.
    """
    arguments = [bwrap.path, "--die-with-parent", "--new-session", "--unshare-all"]
    arguments += ["--unshare-user", "--cap-drop", "ALL"]
    if bwrap.disable_userns:
        arguments.append("--disable-userns")
    if settings.network:
        arguments.append("--share-net")
    arguments += [*bwrap.system, *bwrap.private_etc, "--proc", "/proc", *bwrap.kernel_state]
    tmp, shm = _tmpfs_sizes(settings.limits) if bwrap.sized_tmpfs else ([], [])
    arguments += ["--dev", "/dev", *shm, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    arguments += [*tmp, "--tmpfs", "/tmp", "--dir", SANDBOX_HOME]
    for ancestor in _ancestors(root.path):
        arguments += ["--perms", "0555", "--dir", ancestor]
    for mount in (root, *extra):
        option = "--bind-fd" if mount.writable else "--ro-bind-fd"
        arguments += [option, str(mount.fd), mount.path]
    if settings.network:
        arguments += _resolver_mount()
    arguments += ["--remount-ro", "/", "--chdir", cwd]
    arguments += ["--json-status-fd", str(status_fd), "--block-fd", str(block_fd), "--"]
    return arguments


def _tmpfs_sizes(limits: SandboxLimits) -> tuple[list[str], list[str]]:
    """``--size`` for ``/tmp`` and ``/dev/shm``: memory, so together they hold at most
    ``memory_bytes`` (three quarters for ``/tmp``, the rest for ``/dev/shm``)."""
    shm = max(limits.memory_bytes // 4, 1)
    return ["--size", str(max(limits.memory_bytes - shm, 1))], ["--size", str(shm)]


def drain(fd: int) -> bytes:
    """Whatever a non-blocking pipe holds now."""
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
    return data


def exit_reported(status: bytes) -> bool:
    """bwrap reports an exit code only for a command it got to start."""
    return b'"exit-code"' in status


async def sandbox_pid(fd: int) -> int | None:
    """The host pid of the sandbox's first process, from the first JSON line bwrap writes
    to its status descriptor; ``None`` when bwrap ended before making one."""
    data = b""
    while b"\n" not in data:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not chunk:
            return None
        data += chunk
    line = data.split(b"\n", 1)[0]
    try:
        pid = json.loads(line).get("child-pid")
    except (ValueError, AttributeError):
        pid = None
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise ToolError(f"bubblewrap reported no sandbox process: {line!r}")
    return pid
