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

On a root host bubblewrap itself is started as an unprivileged user (the settings'
``user``, else the workspace's owner; a workspace root owns is refused), so a command is
never the host's root unless the host says ``user="root"``. Extra mounts are checked in
place in the held sandbox before its command starts.

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
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping

import anyio
import anyio.abc
import attrs

from dsh_tools._hostfiles import add_writable_tree
from dsh_tools.errors import ErrorCode, ToolError

from .._host_programs import inside
from ..workspace import Opened
from ._bwrap import (
    NOT_INSTALLED,
    Bubblewrap,
    Mount,
    drain,
    exit_reported,
    extra_mounts,
    find_bubblewrap,
    jail_arguments,
    sandbox_pid,
)
from ._mounts import check_mounts
from ._process_limits import PidsCgroup, enforces_process_limit, limited_start, release
from ._processes import (
    Launch,
    cannot_start,
    end_leftovers,
    kill_by_pidfd,
    open_pidfd,
    open_process,
    stop_process,
)
from ._settings import (
    ENV_NAME,
    SANDBOX_HOME,
    SandboxLimits,
    SandboxMode,
    SandboxSettings,
    SandboxState,
)
from ._user import RunAs, check_reachable, sandbox_user, switch_to

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

DEFAULT_ENV_NAMES = ("PATH", "LANG", "LC_*", "TERM")
"""Host variables a command always gets (a trailing ``*`` matches a prefix)."""

INSTALL_HINT = (  # how to get bwrap, for the "required" mode's refusal
    "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: "
    "dnf install bubblewrap; Arch: pacman -S bubblewrap)"
)

_PROC_FD = "/proc/self/fd"


# --------------------------------------------------------------------------- environment


def _setup_failed(process: anyio.abc.Process, status: int) -> bool:
    """Whether bwrap ended without starting the command (it reports an exit code on
    ``status`` only for a command it started); its own message is then the output."""
    code = process.returncode
    return code is not None and code >= 0 and not exit_reported(drain(status))


@attrs.frozen
class _Jail:
    """What a sandboxed call runs with: the bwrap, the host's extra mounts (opened), and
    the user bwrap is started as (``None``: the host's own)."""

    bubblewrap: Bubblewrap
    extra: tuple[Mount, ...]
    run_as: RunAs | None


def _env_values(values: Mapping[str, str] | None) -> dict[str, str]:
    checked = dict(values or {})
    for name, value in checked.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or name.endswith("*"):
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


def _found(program: str, environment: Mapping[str, str]) -> None:
    """Raise when ``program`` (a name without ``/``) is not on the command's ``PATH``."""
    if "/" not in program and shutil.which(program, path=environment["PATH"]) is None:
        raise ToolError(f"command not found: {program}")


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
        for tree in settings.read_write_paths:  # commands write there: no host file may
            add_writable_tree(tree)
        self.set_env = _env_values(set_env)
        self._grace_s = kill_grace_ms / 1000

    def state(self) -> SandboxState:
        """Whether a command started now would be sandboxed. The first look at a bwrap
        starts a probe sandbox (some 10-20 ms, once per process)."""
        found = self._bubblewrap(probe=True)
        assert found is not None
        return self._state(found)

    async def prepare(self) -> tuple[SandboxState, Bubblewrap | None]:
        """The state for one call (a first probe runs in a worker thread) and the bwrap
        to use; ``DENIED`` when the sandbox is required and unavailable."""
        found = self._bubblewrap(probe=False)
        if found is None:
            found = await anyio.to_thread.run_sync(functools.partial(self._bubblewrap, probe=True))
        assert found is not None
        state = self._state(found)
        if self.settings.mode == "required" and state.reason is not None:
            hint = f"; {INSTALL_HINT}" if state.reason == NOT_INSTALLED else ""
            raise ToolError(
                f'commands must run sandboxed (sandbox = "required"), but {state.reason}{hint}',
                code=ErrorCode.DENIED,
            )
        return state, found if isinstance(found, Bubblewrap) else None

    def _bubblewrap(self, *, probe: bool) -> Bubblewrap | str | None:
        if self.settings.mode == "off":
            return "the host turned the sandbox off"
        return find_bubblewrap(probe=probe)

    def _state(self, found: Bubblewrap | str) -> SandboxState:
        if isinstance(found, str):
            return SandboxState(sandboxed=False, network=True, reason=found)
        return SandboxState(sandboxed=True, network=self.settings.network)

    @contextlib.asynccontextmanager
    async def start(
        self, argv: list[str], *, root: Opened, directory: Opened, bubblewrap: Bubblewrap | None
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
            with extra_mounts(self.settings) as extra:
                run_as = self._runs_as(bubblewrap, root, extra)
                async with self._jailed(
                    argv, root, directory, _Jail(bubblewrap, extra, run_as)
                ) as launch:
                    yield launch

    async def preflight(self, root: Opened, program: str | None) -> None:
        """Raise what would refuse a command ``program`` in the workspace ``root`` before
        it starts (``None``: any command), with the checks :meth:`prepare` and
        :meth:`start` run: a required sandbox that is unavailable, a bwrap commands can
        write, who the command would run as and the folders that user cannot pass, a
        program that is not installed. ``run_command`` runs it before anyone is asked."""
        _, bubblewrap = await self.prepare()
        if bubblewrap is not None:
            with extra_mounts(self.settings) as extra:
                self._runs_as(bubblewrap, root, extra)
        if program is not None:
            _found(program, command_environment(self.settings.pass_env, self.set_env, ""))

    def _runs_as(
        self, bubblewrap: Bubblewrap, root: Opened, extra: tuple[Mount, ...]
    ) -> RunAs | None:
        """Whom a sandboxed command in ``root`` runs as (``None``: the host's own user);
        ``DENIED`` for a bwrap commands can write, a user the settings or the host rule
        out, or a folder above a mount that user may not pass."""
        writable = inside(bubblewrap.path, (str(root.path), *self.settings.read_write_paths))
        if writable is not None:
            raise ToolError(
                f"bubblewrap at {bubblewrap.path} lies in {writable}, which commands can "
                "write: refusing to run it",
                code=ErrorCode.DENIED,
            )
        run_as = sandbox_user(self.settings.user, os.fstat(root.fd).st_uid)
        if run_as is not None:  # bwrap walks each mount's path as that user
            for path in (str(root.path), *(mount.path for mount in extra)):
                check_reachable(run_as, path)
        return run_as

    @contextlib.asynccontextmanager
    async def _plain(self, argv: list[str], directory: Opened, home: str) -> AsyncIterator[Launch]:
        by_fd = os.path.isdir(_PROC_FD)  # enter the verified descriptor, not a path
        try:
            process = await open_process(
                argv,
                cwd=f"{_PROC_FD}/{directory.fd}" if by_fd else str(directory.path),
                pass_fds=(directory.fd,) if by_fd else (),
                env=command_environment(self.settings.pass_env, self.set_env, home),
            )
        except OSError as error:
            raise cannot_start(argv[0], error) from None
        try:
            yield Launch(process)
        finally:
            with anyio.CancelScope(shield=True):
                await stop_process(process, self._grace_s)
                await process.aclose()

    def _jail_environment(self, program: str) -> dict[str, str]:
        """A sandboxed command's environment; raises when ``program`` is not on its
        ``PATH`` (bwrap's own message would be less clear)."""
        environment = command_environment(self.settings.pass_env, self.set_env, SANDBOX_HOME)
        _found(program, environment)
        return environment

    def _launcher(self, jail: _Jail, cgroup: PidsCgroup | None) -> list[str]:
        """What starts bwrap as another user, with its rlimits set on the way (a root
        host may not set them on another user's process from outside); nothing when bwrap
        runs as the host's own user."""
        if jail.run_as is None:
            return []
        return [*switch_to(jail.run_as), *limited_start(self.settings.limits, cgroup)]

    @contextlib.asynccontextmanager
    async def _jailed(
        self,
        argv: list[str],
        root: Opened,
        directory: Opened,
        jail: _Jail,
    ) -> AsyncIterator[Launch]:
        """bwrap reports the sandbox's first process (``--json-status-fd``) and holds it
        (``--block-fd``) until its extra mounts are seen in place and it is limited; then
        the exit code, if the command started."""
        environment = self._jail_environment(argv[0])
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        os.set_blocking(status_r, False)
        process: anyio.abc.Process | None = None
        init: int | None = None  # pidfd of the sandbox's first process
        cgroup: PidsCgroup | None = None
        try:
            cgroup = PidsCgroup.create(self.settings.limits.processes)
            arguments = self._launcher(jail, cgroup) + jail_arguments(
                jail.bubblewrap,
                self.settings,
                root=Mount(root.fd, str(root.path), writable=True),
                extra=jail.extra,
                cwd=str(directory.path),
                status_fd=status_w,
                block_fd=block_r,
            )
            descriptors = (root.fd, *(mount.fd for mount in jail.extra), status_w, block_r)
            try:
                process = await open_process(
                    [*arguments, *argv], pass_fds=descriptors, env=environment
                )
            except OSError as error:
                raise cannot_start(jail.bubblewrap.path, error) from None
            finally:
                os.close(status_w)
                os.close(block_r)
            child = await sandbox_pid(status_r)
            if child is not None:
                init = open_pidfd(child)
                await check_mounts(child, jail.extra)
                limits = self.settings.limits if jail.run_as is None else None
                release(child, limits, cgroup, gate=block_w)
            launch = Launch(process, sandboxed=child is not None, network=self.settings.network)
            yield launch
            launch.setup_failed = _setup_failed(process, status_r)
        finally:
            with anyio.CancelScope(shield=True):
                if process is not None:
                    await stop_process(process, self._grace_s)
                    await process.aclose()
                if init is not None:
                    kill_by_pidfd(init)  # the namespace dies with its first process
                os.close(block_w)  # after the kill: EOF on the gate would start the command
                os.close(status_r)
                if cgroup is not None:
                    await cgroup.remove()
