"""How ``run_command`` starts and ends a process: in a bubblewrap sandbox, or plainly.

On Linux with bubblewrap (``bwrap``, found once in a system directory, never on the
host's ``PATH``) a command sees only what this module mounts:

* the workspace, read-write, bound from the workspace's *verified descriptor*
  (``--bind-fd``), so swapping the workspace path for a symlink cannot redirect it; the
  host's extra paths the same way, each opened without following a link;
* ``/usr``, ``/bin``, ``/sbin``, ``/lib*`` and ``/etc`` read-only, minus every entry of
  ``/etc`` that other users may not read (``shadow``, ssh host keys, ``ssl/private``...);
* a private, empty ``/tmp`` (``HOME`` is ``/tmp/home`` in it) and ``/dev/shm``, sized
  within the memory limit; a fresh ``/proc`` whose host-wide entries (``/proc/sys``...)
  are read-only; a read-only ``/dev``; nothing of the host's home directories, and a
  read-only root;
* its own user, PID, IPC, UTS, cgroup and (unless the network is allowed) network
  namespaces, no capabilities, and no way to make new user namespaces.

It dies with the call: bwrap runs with ``--die-with-parent`` and the command is PID 1's
child in a fresh PID namespace, so when the command exits or the call ends, the kernel
kills everything it left behind, daemons included. Limits (see :class:`SandboxLimits`)
are set on the sandbox's first process while bwrap holds it on ``--block-fd``, before
the command starts: the process count through a per-call ``pids`` cgroup where one can
be created (else ``RLIMIT_NPROC``, which binds non-root users only), memory, file size
and CPU time through rlimits that the command, without capabilities, cannot raise.

Without the sandbox (``mode="off"``, or ``"auto"`` where bwrap is missing or cannot run)
the command runs in its own session and the caller kills its process group; only a
process that leaves the group on purpose can outlive the call. Both ways, the command
gets an allowlisted environment (:data:`DEFAULT_ENV_NAMES` plus what the host adds),
never the host's secrets, and a ``HOME`` of its own.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import re
import resource
import shutil
import signal as signals
import stat
import subprocess
import sys
import tempfile
import typing
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Literal

import anyio
import anyio.abc
import attrs

from dsh_tools.errors import ErrorCode, ToolError

from ._host_programs import inside, system_program
from .workspace import Opened

__all__ = [
    "DEFAULT_ENV_NAMES",
    "INSTALL_HINT",
    "SANDBOX_HOME",
    "Launch",
    "Sandbox",
    "SandboxLimits",
    "SandboxMode",
    "SandboxSettings",
    "SandboxState",
    "command_environment",
    "end_leftovers",
    "enforces_process_limit",
]

logger = logging.getLogger("dsh_tools")

SandboxMode = Literal["required", "auto", "off"]
"""``required``: sandbox or refuse; ``auto``: sandbox where possible; ``off``: never."""

_MODES = typing.get_args(SandboxMode)

DEFAULT_ENV_NAMES = ("PATH", "LANG", "LC_*", "TERM")
"""Host variables a command always gets (a trailing ``*`` matches a prefix)."""

SANDBOX_HOME = "/tmp/home"
"""``HOME`` inside the sandbox: an empty directory in the private ``/tmp``."""

INSTALL_HINT = (  # how to get bwrap, for the "required" mode's refusal
    "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: "
    "dnf install bubblewrap; Arch: pacman -S bubblewrap)"
)

_GIB = 1024**3
_PROC_FD = "/proc/self/fd"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")
_CGROUP_WAIT_S = 2.0


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"sandbox limit {attribute.name} must be a positive integer, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class SandboxLimits:
    """Resource limits of a sandboxed command (each process, unless said otherwise).

    ``processes`` counts every process and thread of the call together (a ``pids``
    cgroup; where none can be made, ``RLIMIT_NPROC``, which does not bind root).
    ``memory_bytes`` caps each process's data (``RLIMIT_DATA``: heap and private
    writable mappings; address space reserved but not written does not count, so
    runtimes that reserve large regions still start). ``file_bytes`` caps the size of a
    file a process writes (``RLIMIT_FSIZE``). ``cpu_seconds`` caps each process's CPU
    time (``RLIMIT_CPU``); the call's timeout bounds wall time separately. Core dumps
    are off. The private ``/tmp`` and ``/dev/shm`` are memory too: together they hold at
    most ``memory_bytes`` (``/tmp`` three quarters of it).
    """

    processes: int = attrs.field(default=1024, validator=_positive)
    memory_bytes: int = attrs.field(default=8 * _GIB, validator=_positive)
    file_bytes: int = attrs.field(default=4 * _GIB, validator=_positive)
    cpu_seconds: int = attrs.field(default=3600, validator=_positive)


def _mode(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _MODES:
        raise ValueError(f'sandbox mode must be "required", "auto" or "off", got {value!r}')


def _boolean(instance: object, attribute: attrs.Attribute[bool], value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"sandbox {attribute.name} must be true or false, got {value!r}")


def _absolute_paths(value: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        raise ValueError(f"sandbox paths must be a list of paths, got the single path {value!r}")
    paths = []
    for item in value:
        path = os.fspath(item) if isinstance(item, (str, os.PathLike)) else item
        if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        paths.append(os.path.normpath(path))
    return tuple(paths)


def _env_names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ValueError(f"environment names must be a list of names, got the single {names!r}")
    checked = tuple(names)
    for name in checked:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(
                f"environment names are letters, digits and _ (with an optional trailing *), "
                f"got {name!r}"
            )
    return checked


@attrs.frozen(kw_only=True)
class SandboxSettings:
    """What a host allows ``run_command``'s commands to reach.

    ``mode``: ``"auto"`` (the default) sandboxes where bubblewrap works and says "not
    sandboxed" on the card and in the result where it does not; ``"required"`` refuses
    (``DENIED``) to run a command it cannot sandbox; ``"off"`` never sandboxes.
    ``network`` lets sandboxed commands use the host's network. ``read_only_paths`` and
    ``read_write_paths`` are absolute host paths mounted at the same place (missing ones
    are skipped), on top of the workspace; each is opened at every call without
    following links, and a call whose path is or passes through a link is refused.
    ``pass_env`` names host environment variables commands get besides
    :data:`DEFAULT_ENV_NAMES` (``NAME`` or ``PREFIX*``), with or without the sandbox.
    """

    mode: SandboxMode = attrs.field(default="auto", validator=_mode)
    network: bool = attrs.field(default=False, validator=_boolean)
    read_only_paths: tuple[str, ...] = attrs.field(default=(), converter=_absolute_paths)
    read_write_paths: tuple[str, ...] = attrs.field(default=(), converter=_absolute_paths)
    pass_env: tuple[str, ...] = attrs.field(default=(), converter=_env_names)
    limits: SandboxLimits = attrs.field(
        factory=SandboxLimits, validator=attrs.validators.instance_of(SandboxLimits)
    )

    @property
    def contained(self) -> bool:
        """Whether every command is sure to run in the sandbox, offline: the mode is
        ``required`` (a command that cannot be sandboxed is refused, never run) and the
        network is off. Permission rules can rely on this (``sandboxed = true``)."""
        return self.mode == "required" and not self.network


@attrs.frozen
class SandboxState:
    """Whether a command runs sandboxed, whether it can reach the network, and why not."""

    sandboxed: bool
    network: bool
    reason: str | None = None


# --------------------------------------------------------------------------- environment


def _env_values(values: Mapping[str, str] | None) -> dict[str, str]:
    checked = dict(values or {})
    for name, value in checked.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name) or name.endswith("*"):
            raise ValueError(f"environment names are letters, digits and _, got {name!r}")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"environment variable {name} must be text without NUL, got {value!r}")
    return checked


def command_environment(
    pass_env: Iterable[str], set_env: Mapping[str, str], home: str
) -> dict[str, str]:
    """The environment of a command: the host's values of :data:`DEFAULT_ENV_NAMES` and
    ``pass_env`` (``NAME`` or ``PREFIX*``), ``HOME`` set to ``home``, then ``set_env``."""
    patterns = (*DEFAULT_ENV_NAMES, *pass_env)
    exact = {name for name in patterns if not name.endswith("*")}
    prefixes = tuple(name[:-1] for name in patterns if name.endswith("*"))
    environment = {
        name: value
        for name, value in os.environ.items()
        if name in exact or (prefixes and name.startswith(prefixes))
    }
    environment.setdefault("PATH", os.defpath)
    environment["HOME"] = home
    environment.update(set_env)
    return environment


# --------------------------------------------------------------------------- bubblewrap


@attrs.frozen
class _Bubblewrap:
    """A bwrap that was seen to start a sandbox here, and what it mounts of the host."""

    path: str
    disable_userns: bool
    sized_tmpfs: bool  # takes --size (0.7 or later, and not setuid)
    system: tuple[str, ...]  # bwrap arguments for /usr, /bin, /lib* and /etc
    private_etc: tuple[str, ...]  # bwrap arguments that hide /etc's private entries
    kernel_state: tuple[str, ...]  # bwrap arguments that make /proc's host-wide entries read-only


_probed: dict[str, _Bubblewrap | str] = {}
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


def _probe(path: str) -> _Bubblewrap | str:
    """Start one real sandbox with every option a call uses; a reason string if it fails."""
    try:
        version = _version(path)
        setuid = bool(os.stat(path).st_mode & stat.S_ISUID)  # refuses --size
        candidate = _Bubblewrap(
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
                jail = _jail_arguments(
                    candidate,
                    SandboxSettings(),
                    root=_Mount(root, scratch, writable=True),
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
                reported = _exit_reported(_drain(status_r))
                os.close(status_r)
    except (OSError, subprocess.SubprocessError) as error:
        return f"bubblewrap at {path} could not be run: {error}"
    if done.returncode != 0 or not reported:
        message = (done.stderr or done.stdout).strip().splitlines()
        detail = message[-1] if message else f"exit status {done.returncode}"
        return f"bubblewrap at {path} cannot start a sandbox here: {detail}"
    return candidate


_NOT_INSTALLED = "bubblewrap (bwrap) is not installed"


def _find_bubblewrap(*, probe: bool = True) -> _Bubblewrap | str | None:
    """The working bwrap in a system directory (never the host's ``PATH``, which may lead
    into the workspace; see :mod:`dsh_tools_plugins._host_programs`), or why there is
    none. Its first sight is probed (cached per path); with ``probe=False`` that case
    returns ``None``."""
    if not sys.platform.startswith("linux"):
        return f"the bubblewrap sandbox needs Linux; this is {sys.platform}"
    path = system_program("bwrap")
    if path is None:
        return _NOT_INSTALLED
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
class _Mount:
    """A host directory or file opened by the host (``O_PATH``), to bind at ``path``."""

    fd: int
    path: str
    writable: bool


def _open_unlinked(path: str) -> int | None:
    """An ``O_PATH`` descriptor of the absolute ``path``, walked from ``/`` one component
    at a time without following a link; ``None`` when it does not exist. A component
    that is a symbolic link is refused: a command may have planted it."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        walked = ""
        for name in [part for part in path.split("/") if part]:
            walked += "/" + name
            try:
                child = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                os.close(fd)
                return None
            except OSError as error:
                raise ToolError(
                    f"cannot open the sandbox path {path} at {walked}: {error.strerror or error}"
                ) from None
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                where = "is" if walked == path else f"passes through {walked}, which is"
                raise ToolError(
                    f"the sandbox path {path} {where} a symbolic link; refusing to mount it "
                    "(give the real path in read_only_paths / read_write_paths)"
                )
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _extra_mounts(settings: SandboxSettings) -> typing.Iterator[tuple[_Mount, ...]]:
    """The settings' existing extra paths, opened for one call (closed after it)."""
    mounts: list[_Mount] = []
    try:
        wanted = [(path, True) for path in settings.read_write_paths]
        wanted += [(path, False) for path in settings.read_only_paths]
        for path, writable in wanted:
            fd = _open_unlinked(path)
            if fd is not None:
                mounts.append(_Mount(fd, path, writable))
        yield tuple(mounts)
    finally:
        for mount in mounts:
            os.close(mount.fd)


def _jail_arguments(
    bwrap: _Bubblewrap,
    settings: SandboxSettings,
    *,
    root: _Mount,
    extra: tuple[_Mount, ...],
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


def _drain(fd: int) -> bytes:
    """Whatever a non-blocking pipe holds now."""
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
    return data


def _exit_reported(status: bytes) -> bool:
    """bwrap reports an exit code only for a command it got to start."""
    return b'"exit-code"' in status


async def _sandbox_pid(fd: int) -> int | None:
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


# --------------------------------------------------------------------------- cgroups


@functools.cache
def _pids_hierarchy() -> str | None:
    """A directory of this process's ``pids`` cgroup in which we may create children.

    cgroup v1: the ``pids`` hierarchy's mount plus our path in it. cgroup v2: our own
    cgroup, but only if it already delegates ``pids`` to children (a v2 cgroup holding
    processes cannot turn it on). ``None`` where neither is writable.
    """
    try:
        with open("/proc/self/cgroup") as handle:
            memberships = [line.rstrip("\n").split(":", 2) for line in handle]
        with open("/proc/self/mountinfo") as handle:
            mounts = [line.split() for line in handle]
    except OSError:
        return None
    for hierarchy, controllers, path in memberships:
        version_one = "pids" in controllers.split(",")
        if not version_one and (hierarchy, controllers) != ("0", ""):
            continue
        for fields in mounts:
            tail = fields[fields.index("-") + 1 :]
            if version_one:
                wanted = tail[0] == "cgroup" and "pids" in tail[2].split(",")
            else:
                wanted = tail[0] == "cgroup2"
            if not wanted or not (path + "/").startswith(fields[3].rstrip("/") + "/"):
                continue
            directory = os.path.join(fields[4], os.path.relpath(path, fields[3]))
            directory = os.path.normpath(directory)
            if not version_one and not _delegates_pids(directory):
                continue
            if os.access(directory, os.W_OK):
                return directory
    return None


def _delegates_pids(directory: str) -> bool:
    try:
        with open(os.path.join(directory, "cgroup.subtree_control")) as handle:
            return "pids" in handle.read().split()
    except OSError:
        return False


_cgroup_names = itertools.count()


class _PidsCgroup:
    """A ``pids`` cgroup for one call: the command's processes cannot exceed ``limit``."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> _PidsCgroup | None:
        """A fresh cgroup with ``pids.max = limit``, or ``None`` where none can be made."""
        parent = _pids_hierarchy()
        if parent is None:
            return None
        path = os.path.join(parent, f"dsh-tools-{os.getpid()}-{next(_cgroup_names)}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        cgroup = cls(path)
        try:
            cgroup._write("pids.max", str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cgroup

    def _write(self, name: str, text: str) -> None:
        with open(os.path.join(self.path, name), "w") as handle:
            handle.write(text)

    def join(self, pid: int) -> None:
        """Move ``pid`` in; its children are born inside."""
        self._write("cgroup.procs", str(pid))

    def _members(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as handle:
                return [int(line) for line in handle if line.strip()]
        except OSError:
            return []

    async def remove(self) -> None:
        """Wait for the members to go (the kernel empties a dead PID namespace), then
        remove the cgroup; stragglers are killed. A cgroup that stays is logged."""
        with anyio.move_on_after(_CGROUP_WAIT_S):
            while members := self._members():
                for pid in members:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signals.SIGKILL)
                await anyio.sleep(0.002)
        try:
            os.rmdir(self.path)
        except OSError as error:
            logger.warning("run_command: cannot remove cgroup %s: %s", self.path, error)


def enforces_process_limit() -> bool:
    """Whether sandboxed commands here get a process limit that binds them: a ``pids``
    cgroup can be created, or the host does not run as root (``RLIMIT_NPROC``)."""
    return _pids_hierarchy() is not None or os.geteuid() != 0


def _confine(pid: int, limits: SandboxLimits, cgroup: _PidsCgroup | None) -> None:
    """Limit the sandbox's first process before it starts the command (raises OSError).

    No limit is raised above the hard limit the process already has. CPU time gets one
    second between the soft limit (``SIGXCPU``, which a shell reports) and the hard one
    (``SIGKILL``).
    """
    if cgroup is not None:
        cgroup.join(pid)
    wanted = [
        (resource.RLIMIT_DATA, limits.memory_bytes, 0),
        (resource.RLIMIT_FSIZE, limits.file_bytes, 0),
        (resource.RLIMIT_CPU, limits.cpu_seconds, 1),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if cgroup is None:
        wanted.append((resource.RLIMIT_NPROC, limits.processes, 0))
    for which, soft, slack in wanted:
        hard = soft + slack
        current = resource.prlimit(pid, which)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.prlimit(pid, which, (soft, hard))


# --------------------------------------------------------------------------- starting


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _stop(process: anyio.abc.Process, grace_s: float) -> None:
    """SIGTERM the group, wait up to ``grace_s`` for the leader, then SIGKILL the group."""
    pgid = process.pid
    if process.returncode is None:
        _signal_group(pgid, signals.SIGTERM)
        with anyio.move_on_after(grace_s):
            await process.wait()
    _signal_group(pgid, signals.SIGKILL)  # stragglers, and a leader that ignored SIGTERM
    await process.wait()


def end_leftovers(process: anyio.abc.Process) -> None:
    """Kill what a command left in its process group once it has exited."""
    _signal_group(process.pid, signals.SIGKILL)


def _pidfd(pid: int) -> int | None:
    """A descriptor naming ``pid`` for good (no reuse race), where the kernel has them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill_by_pidfd(pidfd: int) -> None:
    with contextlib.suppress(OSError):
        signals.pidfd_send_signal(pidfd, signals.SIGKILL)
    os.close(pidfd)


@attrs.define
class Launch:
    """A started command, and what it runs in: ``sandboxed`` only once bubblewrap has
    reported the sandbox's first process (so the command runs inside it); ``network``
    whether it can reach the network. ``setup_failed`` is set after the ``start`` block
    when bwrap could not build the sandbox (its own message is then the output)."""

    process: anyio.abc.Process
    sandboxed: bool = False
    network: bool = True
    setup_failed: bool = False


async def _open_process(
    argv: list[str], *, env: dict[str, str], pass_fds: tuple[int, ...], cwd: str | None = None
) -> anyio.abc.Process:
    """Start ``argv`` in a new session, output and errors on one pipe, no input.

    Shielded: a cancellation that lands while asyncio is still setting the process up
    would otherwise lose the handle, and with it the only way to stop the process.
    """
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            pass_fds=pass_fds,
            env=env,
            start_new_session=True,
        )
    return process


def _cannot_start(program: str, error: OSError) -> ToolError:
    if isinstance(error, FileNotFoundError):
        return ToolError(f"command not found: {program}")
    if isinstance(error, PermissionError):
        return ToolError(f"command is not executable: {program}")
    return ToolError(f"cannot start {program}: {error.strerror or error}")


class Sandbox:
    """Starts ``run_command``'s processes under one :class:`SandboxSettings`.

    ``set_env`` sets environment values (they win over everything, ``HOME`` included).
    ``kill_grace_ms`` is the time between ``SIGTERM`` and ``SIGKILL`` when a command is
    stopped.
    """

    def __init__(
        self,
        settings: SandboxSettings | SandboxMode = "auto",
        *,
        set_env: Mapping[str, str] | None = None,
        kill_grace_ms: int = 2_000,
    ) -> None:
        if not isinstance(settings, SandboxSettings):
            settings = SandboxSettings(mode=settings)
        self.settings = settings
        self.set_env = _env_values(set_env)
        self._grace_s = kill_grace_ms / 1000

    def state(self) -> SandboxState:
        """Whether a command started now would be sandboxed. The first look at a bwrap
        starts a probe sandbox (some 10-20 ms, once per process)."""
        found = self._bubblewrap(probe=True)
        assert found is not None
        return self._state(found)

    async def prepare(self) -> tuple[SandboxState, _Bubblewrap | None]:
        """The state for one call (a first probe runs in a worker thread) and the bwrap
        to use; ``DENIED`` when the sandbox is required and unavailable."""
        found = self._bubblewrap(probe=False)
        if found is None:
            found = await anyio.to_thread.run_sync(functools.partial(self._bubblewrap, probe=True))
        assert found is not None
        state = self._state(found)
        if self.settings.mode == "required" and state.reason is not None:
            hint = f"; {INSTALL_HINT}" if state.reason == _NOT_INSTALLED else ""
            raise ToolError(
                f'commands must run sandboxed (sandbox = "required"), but {state.reason}{hint}',
                code=ErrorCode.DENIED,
            )
        return state, found if isinstance(found, _Bubblewrap) else None

    def _bubblewrap(self, *, probe: bool) -> _Bubblewrap | str | None:
        if self.settings.mode == "off":
            return "the host turned the sandbox off"
        return _find_bubblewrap(probe=probe)

    def _state(self, found: _Bubblewrap | str) -> SandboxState:
        if isinstance(found, str):
            return SandboxState(sandboxed=False, network=True, reason=found)
        return SandboxState(sandboxed=True, network=self.settings.network)

    @contextlib.asynccontextmanager
    async def start(
        self, argv: list[str], *, root: Opened, directory: Opened, bubblewrap: _Bubblewrap | None
    ) -> AsyncIterator[Launch]:
        """Start ``argv`` in ``directory`` (both opened through the workspace), in the
        sandbox when ``bubblewrap`` is given (refused when that bwrap lies where commands
        write). Leaving the block stops the process group (``SIGTERM``, the grace
        period, ``SIGKILL``) and cleans up after it."""
        if bubblewrap is None:
            with tempfile.TemporaryDirectory(
                prefix="dsh-tools-home-", ignore_cleanup_errors=True
            ) as home:
                async with self._plain(argv, directory, home) as launch:
                    yield launch
        else:
            writable = inside(bubblewrap.path, (str(root.path), *self.settings.read_write_paths))
            if writable is not None:
                raise ToolError(
                    f"bubblewrap at {bubblewrap.path} lies in {writable}, which commands can "
                    "write: refusing to run it",
                    code=ErrorCode.DENIED,
                )
            with _extra_mounts(self.settings) as extra:
                async with self._jailed(argv, root, directory, bubblewrap, extra) as launch:
                    yield launch

    @contextlib.asynccontextmanager
    async def _plain(self, argv: list[str], directory: Opened, home: str) -> AsyncIterator[Launch]:
        by_fd = os.path.isdir(_PROC_FD)  # enter the verified descriptor, not a path
        try:
            process = await _open_process(
                argv,
                cwd=f"{_PROC_FD}/{directory.fd}" if by_fd else str(directory.path),
                pass_fds=(directory.fd,) if by_fd else (),
                env=command_environment(self.settings.pass_env, self.set_env, home),
            )
        except OSError as error:
            raise _cannot_start(argv[0], error) from None
        try:
            yield Launch(process)
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, self._grace_s)
                await process.aclose()

    @contextlib.asynccontextmanager
    async def _jailed(
        self,
        argv: list[str],
        root: Opened,
        directory: Opened,
        bubblewrap: _Bubblewrap,
        extra: tuple[_Mount, ...],
    ) -> AsyncIterator[Launch]:
        """bwrap holds the sandbox's first process on ``--block-fd`` until it is limited;
        it reports that process's pid, then (only if the command started) its exit code,
        on ``--json-status-fd``."""
        environment = command_environment(self.settings.pass_env, self.set_env, SANDBOX_HOME)
        if "/" not in argv[0] and shutil.which(argv[0], path=environment["PATH"]) is None:
            raise ToolError(f"command not found: {argv[0]}")
        limits = self.settings.limits
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        os.set_blocking(status_r, False)
        process: anyio.abc.Process | None = None
        init: int | None = None  # pidfd of the sandbox's first process
        cgroup: _PidsCgroup | None = None
        try:
            cgroup = _PidsCgroup.create(limits.processes)
            jail = _jail_arguments(
                bubblewrap,
                self.settings,
                root=_Mount(root.fd, str(root.path), writable=True),
                extra=extra,
                cwd=str(directory.path),
                status_fd=status_w,
                block_fd=block_r,
            )
            descriptors = (root.fd, *(mount.fd for mount in extra), status_w, block_r)
            try:
                process = await _open_process([*jail, *argv], pass_fds=descriptors, env=environment)
            except OSError as error:
                raise _cannot_start(bubblewrap.path, error) from None
            finally:
                os.close(status_w)
                os.close(block_r)
            child = await _sandbox_pid(status_r)
            if child is not None:
                init = _pidfd(child)
                try:
                    _confine(child, limits, cgroup)
                    os.write(block_w, b"1")  # the command may start now
                except ProcessLookupError:
                    pass  # bwrap died while setting up; its message is the output
                except OSError as error:
                    raise ToolError(f"cannot limit the sandbox: {error}") from None
            launch = Launch(process, sandboxed=child is not None, network=self.settings.network)
            yield launch
            launch.setup_failed = (
                process.returncode is not None
                and process.returncode >= 0
                and not _exit_reported(_drain(status_r))
            )
        finally:
            with anyio.CancelScope(shield=True):
                if process is not None:
                    await _stop(process, self._grace_s)
                    await process.aclose()
                if init is not None:
                    _kill_by_pidfd(init)  # the namespace dies with its first process
                os.close(block_w)  # after the kill: EOF on the gate would start the command
                os.close(status_r)
                if cgroup is not None:
                    await cgroup.remove()
