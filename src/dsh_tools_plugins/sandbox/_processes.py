"""Starting a command's process (in its own session, output and errors on one pipe) and
stopping it with everything in its process group. The public face is
:mod:`dsh_tools_plugins.sandbox`."""

from __future__ import annotations

import contextlib
import os
import signal as signals
import subprocess

import anyio
import anyio.abc
import attrs

from dsh_tools.errors import ToolError

__all__ = [
    "Launch",
    "cannot_start",
    "end_leftovers",
    "kill_by_pidfd",
    "open_pidfd",
    "open_process",
    "stop_process",
]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def stop_process(process: anyio.abc.Process, grace_s: float) -> None:
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


def open_pidfd(pid: int) -> int | None:
    """A descriptor naming ``pid`` for good (no reuse race), where the kernel has them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def kill_by_pidfd(pidfd: int) -> None:
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


async def open_process(
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


def cannot_start(program: str, error: OSError) -> ToolError:
    if isinstance(error, FileNotFoundError):
        return ToolError(f"command not found: {program}")
    if isinstance(error, PermissionError):
        return ToolError(f"command is not executable: {program}")
    return ToolError(f"cannot start {program}: {error.strerror or error}")
