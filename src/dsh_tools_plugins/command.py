"""``run_command``: run a program or a shell command in a workspace directory.

The body is an ``async def`` on :func:`anyio.open_process`, so it works on asyncio and
trio hosts and is interrupted at once when the call is cancelled (the pipeline binds the
call's signal, ``ctx.signal``, to the body's cancel scope; a tool-level timeout fires the
same way). How the process starts, what it can reach and how it is stopped is
:mod:`dsh_tools_plugins.sandbox`'s job: by default (``sandbox="auto"``) a bubblewrap
sandbox where one can be made; either way an allowlisted environment, and nothing the
command starts outlives the call.

stdout and stderr are captured together, in order. Output over the cap keeps its head
and its tail around a ``[... output truncated: N bytes omitted ...]`` marker. A non-zero
exit or a timeout is not a failed call: the result says what happened (``exit_code``,
``signal``, ``timed_out``) and whether the command ran sandboxed, so the model can react;
a command that cannot start fails. What would stop a command before it starts (its
arguments, its working directory, a program that is not installed, a sandbox that would
refuse it) is also the tool's ``preflight``, so nobody is asked to approve a command
that could not run.

While the command runs, its output is streamed as it arrives (``ctx.emit_output``, on
stream ``stdout``: stderr is merged into it, in order) and the elapsed time is reported
every second (``ctx.report_progress``), so a person watching sees a long build as it
goes; the result is the same as without anyone watching.
"""

from __future__ import annotations

import codecs
import shlex
import signal as signals
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs

from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import PresentableResult, ToolDefinition, ToolOutput
from dsh_tools._paths import PathArgument
from dsh_tools.errors import ToolArgsError, ToolError
from dsh_tools.presentation import TerminalCallView, TerminalResultView

from .files import fields
from .sandbox import Launch, Sandbox, SandboxMode, SandboxSettings, end_leftovers
from .workspace import Workspace

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "DEFAULT_KILL_GRACE_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "MAX_COMMAND_TIMEOUT_MS",
    "RunCommandArgs",
    "run_command_tool",
]

DEFAULT_COMMAND_TIMEOUT_MS = 120_000
"""How long a command may run when the call gives no ``timeout_ms`` (2 minutes)."""

MAX_COMMAND_TIMEOUT_MS = 600_000
"""The longest ``timeout_ms`` a call may ask for (10 minutes)."""

DEFAULT_KILL_GRACE_MS = 2_000
"""Time between ``SIGTERM`` and ``SIGKILL`` when a command is stopped."""

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
"""Captured output kept (head and tail) before the truncation marker."""

_DRAIN_S = 0.5  # after exit, how long to wait for output held open by an escaped process


@attrs.frozen
class RunCommandArgs:
    """Arguments of ``run_command``: exactly one of ``command`` and ``argv``."""

    command: str | None = attrs.field(
        default=None, metadata={"description": "Shell command line, run with /bin/sh -c"}
    )
    argv: list[str] | None = attrs.field(
        default=None,
        metadata={"description": "Program and arguments, run without a shell"},
    )
    cwd: str = attrs.field(
        default=".", metadata={"description": "Working directory, relative to the workspace root"}
    )
    timeout_ms: int | None = attrs.field(
        default=None,
        metadata={
            "description": f"Stop the command after this many milliseconds (default "
            f"{DEFAULT_COMMAND_TIMEOUT_MS}, at most {MAX_COMMAND_TIMEOUT_MS})"
        },
    )
    description: str | None = attrs.field(
        default=None, metadata={"description": "A short summary of what the command does"}
    )


def _title(args: RunCommandArgs) -> str:
    if args.command is not None:
        return args.command
    return shlex.join(args.argv or [])


class _Capture:
    """Keeps the head and the tail of a byte stream within ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit // 2
            if len(self.tail) > 2 * keep + 4096:
                del self.tail[: len(self.tail) - keep]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        if not self.truncated:
            return self.head.decode("utf-8", errors="replace")
        tail_size = self.limit // 2
        head_size = self.limit - tail_size
        tail = bytes(self.head + self.tail)[-tail_size:] if tail_size else b""
        omitted = self.total - head_size - len(tail)
        return (
            self.head[:head_size].decode("utf-8", errors="replace")
            + f"\n[... output truncated: {omitted} bytes omitted ...]\n"
            + tail.decode("utf-8", errors="replace")
        )


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"SIG{number}"


class _Live:
    """What a person watching sees while the command runs: its output as it arrives
    (decoded across chunk boundaries) and the time it has been running."""

    def __init__(self, ctx: ToolRunContext) -> None:
        self.ctx = ctx
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.started = time.monotonic()

    def output(self, chunk: bytes, final: bool = False) -> None:
        text = self.decoder.decode(chunk, final)
        if text:
            self.ctx.emit_output(text)

    async def tick(self) -> None:
        while True:
            await anyio.sleep(1)
            elapsed = round(time.monotonic() - self.started)
            self.ctx.report_progress(elapsed, None, f"running for {elapsed}s")


async def _pump(
    process: anyio.abc.Process, capture: _Capture, live: _Live, done: anyio.Event
) -> None:
    try:
        if process.stdout is not None:
            async for chunk in process.stdout:
                capture.add(chunk)
                live.output(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        live.output(b"", final=True)
        done.set()


async def _supervise(
    process: anyio.abc.Process, capture: _Capture, live: _Live, timeout_s: float
) -> bool:
    """Collect output until the command exits, or its time is up (then return True)."""
    done = anyio.Event()
    with anyio.move_on_after(timeout_s) as deadline:
        async with anyio.create_task_group() as group:
            group.start_soon(_pump, process, capture, live, done)
            group.start_soon(live.tick)
            await process.wait()
            end_leftovers(process)  # nothing outlives the call
            with anyio.move_on_after(_DRAIN_S):
                await done.wait()
            group.cancel_scope.cancel()
    return deadline.cancelled_caught


_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string"},
        "cwd": {"type": "string"},
        "output": {"type": "string"},
        "exit_code": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
        "signal": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "timed_out": {"type": "boolean"},
        "truncated": {"type": "boolean"},
        "output_bytes": {"type": "integer"},
        "sandboxed": {"type": "boolean"},
        "network": {"type": "boolean"},
    },
    "required": [
        "command",
        "cwd",
        "output",
        "exit_code",
        "signal",
        "timed_out",
        "truncated",
        "output_bytes",
        "sandboxed",
        "network",
    ],
    "additionalProperties": False,
}


def _render(args: RunCommandArgs, value: Any) -> str:
    value = fields(value)
    output = value["output"] or "(no output)"
    if value["timed_out"]:
        status = f"timed out; the process group was killed ({value['signal'] or 'SIGKILL'})"
    elif value["signal"] is not None:
        status = f"killed by {value['signal']}"
    else:
        status = f"exit code {value['exit_code']}"
    if not value["sandboxed"]:
        status += "; not sandboxed"
    return f"{output.rstrip(chr(10))}\n[{status}]"


def _present_result(args: RunCommandArgs, result: PresentableResult) -> TerminalResultView | None:
    if result.is_error or result.meta is None:
        return None
    meta = fields(result.meta)
    killed = meta["signal"]
    return TerminalResultView(
        output=meta["output"],
        exit_code=None if killed is not None else meta["exit_code"],
        signal=killed,
        sandboxed=meta["sandboxed"],
        network=meta["network"],
    )


def _value(
    args: RunCommandArgs,
    cwd: str,
    capture: _Capture,
    launch: Launch,
    timed_out: bool,
) -> dict[str, Any]:
    """The result value; ``sandboxed`` says what the command actually ran in."""
    code = launch.process.returncode
    assert code is not None
    killed = _signal_name(-code) if code < 0 else None
    return {
        "command": _title(args),
        "cwd": cwd,
        "output": capture.text(),
        "exit_code": None if killed is not None else code,
        "signal": killed,
        "timed_out": timed_out,
        "truncated": capture.truncated,
        "output_bytes": capture.total,
        "sandboxed": launch.sandboxed,
        "network": launch.network,
    }


def _description(default_timeout_ms: int, settings: SandboxSettings) -> str:
    text = (
        "Run a command in the workspace and return its combined stdout and stderr with "
        "the exit code. Pass `command` (a shell command line, run with /bin/sh -c) or "
        "`argv` (no shell). The command is killed, with everything it started, when "
        f"it runs longer than timeout_ms (default {default_timeout_ms} ms)."
    )
    if settings.mode == "off":
        return text
    network = "with" if settings.network else "without"
    text += (
        f" It runs in a sandbox {network} network access: only the workspace is "
        "writable, system directories are read-only, /tmp and HOME are private and "
        "start empty, and the environment holds few variables."
    )
    if settings.mode == "auto":
        text += " A result marked `not sandboxed` ran directly on the host."
    return text


def _checked(
    args: RunCommandArgs, shell: str, default_timeout_ms: int, max_timeout_ms: int
) -> tuple[list[str], int]:
    """The argv a call runs and its timeout in milliseconds; its arguments checked first."""
    if (args.command is None) == (args.argv is None):
        raise ToolArgsError(['pass exactly one of "command" (a shell string) and "argv"'])
    if args.argv is not None and not args.argv:
        raise ToolArgsError(['"argv" must name a program'])
    timeout_ms = default_timeout_ms if args.timeout_ms is None else args.timeout_ms
    if not 0 < timeout_ms <= max_timeout_ms:
        raise ToolArgsError(
            [f'"timeout_ms" must be between 1 and {max_timeout_ms}, got {timeout_ms}']
        )
    argv = [shell, "-c", args.command] if args.command is not None else list(args.argv or [])
    return argv, timeout_ms


def _preflight(
    workspace: Workspace, starter: Sandbox, shell: str, default_timeout_ms: int, max_timeout_ms: int
) -> Callable[[RunCommandArgs | None], Awaitable[None]]:
    """The body's checks that do not depend on a person, for the approval step: a call's
    arguments, its working directory, and whether the sandbox would start its program
    (``None``: any program, in the workspace's root)."""

    async def preflight(args: RunCommandArgs | None) -> None:
        program = None
        if args is not None:
            program = _checked(args, shell, default_timeout_ms, max_timeout_ms)[0][0]
        with (
            workspace.open(".", directory=True) as root,
            workspace.open("." if args is None else args.cwd, directory=True),
        ):
            await starter.preflight(root, program)

    return preflight


def _call_presenter(starter: Sandbox) -> Callable[[RunCommandArgs], TerminalCallView]:
    """The call card, which says whether ``starter`` would run the command sandboxed."""

    def present_call(args: RunCommandArgs) -> TerminalCallView:
        cwd = None if args.cwd in (".", "") else args.cwd
        state = starter.state()
        return TerminalCallView(
            _title(args),
            description=args.description,
            cwd=cwd,
            sandboxed=state.sandboxed,
            network=state.network,
        )

    return present_call


def run_command_tool(
    workspace: Workspace,
    *,
    default_timeout_ms: int = DEFAULT_COMMAND_TIMEOUT_MS,
    max_timeout_ms: int = MAX_COMMAND_TIMEOUT_MS,
    kill_grace_ms: int = DEFAULT_KILL_GRACE_MS,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    shell: str = "/bin/sh",
    sandbox: SandboxSettings | SandboxMode = "auto",
    env: Mapping[str, str] | None = None,
) -> ToolDefinition[RunCommandArgs]:
    """The ``run_command`` tool: run ``argv`` or a shell ``command`` in the workspace.

    ``sandbox`` says what commands may reach (:class:`~dsh_tools_plugins.sandbox.
    SandboxSettings`, or just its mode: ``"auto"``, ``"required"`` or ``"off"``).
    Commands get only ``PATH``, ``LANG``, ``LC_*`` and ``TERM`` from the host's
    environment, plus the names in the settings' ``pass_env``; ``HOME`` is an empty
    private directory; ``env`` sets further variables (and wins).
    The definition's own ``timeout_ms`` is a backstop above ``max_timeout_ms`` plus the
    grace period: the per-call timeout normally fires first and keeps the output.
    """
    if not 0 < default_timeout_ms <= max_timeout_ms:
        raise ValueError("need 0 < default_timeout_ms <= max_timeout_ms")
    starter = Sandbox(sandbox, set_env=env, kill_grace_ms=kill_grace_ms)

    async def execute(args: RunCommandArgs, ctx: ToolRunContext) -> dict[str, Any]:
        argv, timeout_ms = _checked(args, shell, default_timeout_ms, max_timeout_ms)
        _, bubblewrap = await starter.prepare()
        capture = _Capture(max_output_bytes)
        with (
            workspace.open(".", directory=True) as root,
            workspace.open(args.cwd, directory=True) as directory,
        ):
            async with starter.start(
                argv, root=root, directory=directory, bubblewrap=bubblewrap
            ) as launch:
                live = _Live(ctx)
                timed_out = await _supervise(launch.process, capture, live, timeout_ms / 1000)
        if launch.setup_failed:
            raise ToolError(f"the sandbox could not start the command: {capture.text().strip()}")
        return _value(args, directory.display, capture, launch, timed_out)

    return define_tool(
        name="run_command",
        description=_description(default_timeout_ms, starter.settings),
        parameters=RunCommandArgs,
        execute=execute,
        output=ToolOutput(_OUTPUT_SCHEMA, _render, lambda args, value: value),
        timeout_ms=max_timeout_ms + kill_grace_ms + 5_000,
        present_call=_call_presenter(starter),
        present_result=_present_result,
        # Closed world only where commands run sandboxed and offline, or not at all.
        metadata={
            "read_only": False,
            "open_world": not starter.settings.contained,
            "title": "Run command",
        },
        paths=workspace.tool_paths(PathArgument("cwd", "directory")),
        preflight=_preflight(workspace, starter, shell, default_timeout_ms, max_timeout_ms),
    )
