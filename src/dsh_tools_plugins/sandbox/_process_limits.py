"""The limits set on a sandbox's first process before its command starts: a per-call
``pids`` cgroup where one can be made, and rlimits. The public face is
:mod:`dsh_tools_plugins.sandbox`."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import resource
import signal as signals
import typing

import anyio

from dsh_tools.errors import ErrorCode, ToolError

from .._host_programs import system_program
from ._settings import SandboxLimits

__all__ = ["PidsCgroup", "confine", "enforces_process_limit", "limited_start", "release"]

logger = logging.getLogger("dsh_tools")

_CGROUP_WAIT_S = 2.0


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


class PidsCgroup:
    """A ``pids`` cgroup for one call: the command's processes cannot exceed ``limit``."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
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


def _rlimits(
    limits: SandboxLimits, cgroup: PidsCgroup | None, hard_now: typing.Callable[[int], int]
) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` for each rlimit a sandbox gets, never above the hard
    limit its process has now (``hard_now``). CPU time gets one second between the soft
    limit (``SIGXCPU``, which a shell reports) and the hard one (``SIGKILL``)."""
    wanted = [
        (resource.RLIMIT_DATA, limits.memory_bytes, 0),
        (resource.RLIMIT_FSIZE, limits.file_bytes, 0),
        (resource.RLIMIT_CPU, limits.cpu_seconds, 1),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if cgroup is None:
        wanted.append((resource.RLIMIT_NPROC, limits.processes, 0))
    chosen = []
    for which, soft, slack in wanted:
        hard = soft + slack
        current = hard_now(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        chosen.append((which, soft, hard))
    return chosen


def confine(pid: int, limits: SandboxLimits, cgroup: PidsCgroup | None) -> None:
    """Limit the sandbox's first process before it starts the command (raises OSError)."""
    if cgroup is not None:
        cgroup.join(pid)
    for which, soft, hard in _rlimits(
        limits, cgroup, lambda which: resource.prlimit(pid, which)[1]
    ):
        resource.prlimit(pid, which, (soft, hard))


_PRLIMIT_NAMES = {
    resource.RLIMIT_DATA: "data",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_NPROC: "nproc",
}


def limited_start(limits: SandboxLimits, cgroup: PidsCgroup | None) -> list[str]:
    """The ``prlimit`` command line (util-linux, from a system directory) that sets the
    rlimits on itself and then runs the program that follows: for a sandbox started as
    another user, whose first process the host, without ``CAP_SYS_RESOURCE``, may not
    limit from outside. Raises ``DENIED`` without ``prlimit``."""
    program = system_program("prlimit")
    if program is None:
        raise ToolError(
            "the host runs sandboxed commands as another user, and limits them with "
            "prlimit, which is not installed (it is part of util-linux)",
            code=ErrorCode.DENIED,
        )
    chosen = _rlimits(limits, cgroup, lambda which: resource.getrlimit(which)[1])
    return [
        program,
        *(f"--{_PRLIMIT_NAMES[which]}={soft}:{hard}" for which, soft, hard in chosen),
        "--",
    ]


def release(
    pid: int, limits: SandboxLimits | None, cgroup: PidsCgroup | None, *, gate: int
) -> None:
    """Limit the sandbox's first process (only its cgroup when ``limits`` is ``None``:
    :func:`limited_start` set them), then write to its ``gate`` (bwrap's ``--block-fd``)
    so the command starts. A process already gone (bwrap died while setting up; its
    message is the output) is left to end the call."""
    try:
        if limits is not None:
            confine(pid, limits, cgroup)
        elif cgroup is not None:
            cgroup.join(pid)
        os.write(gate, b"1")
    except (ProcessLookupError, BrokenPipeError):
        pass  # the gate's other end closed with it
    except OSError as error:
        raise ToolError(f"cannot limit the sandbox: {error}") from None
