"""Calling ``run_command`` in tests: a registry holding it, one call, a call that must
succeed, the two cards a call produces (each checked to serialize), and looking for the
processes a command may have left behind."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from dsh_tools import CancelSource, PresentableResult, ToolExecutionInput, ToolRegistry
from dsh_tools._models import ToolDefinition, ToolExecutionSuccess
from dsh_tools.presentation import unstructure_view
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.workspace import Workspace


def command_registry(root: Path, **options: Any) -> ToolRegistry:
    """A registry with ``run_command_tool(Workspace(root), **options)`` and nothing else."""
    registry = ToolRegistry()
    registry.register(run_command_tool(Workspace(root), **options))
    return registry


def run(registry: ToolRegistry, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput("call-1", "run_command", arguments))


def ok(registry: ToolRegistry, **arguments: Any) -> ToolExecutionSuccess:
    result = run(registry, **arguments)
    assert isinstance(result, ToolExecutionSuccess), result.text
    return result


def cards(registry: ToolRegistry, result: Any, **arguments: Any) -> tuple[Any, Any]:
    """The pending card for ``arguments`` and the result card for ``result``."""
    definition: ToolDefinition[Any] | None = registry.get("run_command")
    assert definition is not None
    assert definition.present_call is not None
    assert definition.present_result is not None
    parsed = definition.arguments.parse(arguments)
    call_view = definition.present_call(parsed)
    result_view = definition.present_result(
        parsed, PresentableResult(result.content, result.is_error, result.meta)
    )
    for view in (call_view, result_view):
        if view is not None:
            unstructure_view(view)
    return call_view, result_view


def eventually(condition: Callable[[], bool], seconds: float = 1.0) -> bool:
    """Whether ``condition`` comes true within ``seconds`` (a SIGKILL is certain, but its
    delivery, and a namespace's teardown, take a moment)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name, or ``None`` when gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) is dead."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def live_processes(*, group: int | None = None, marker: str | None = None) -> list[int]:
    """Live host processes in process group ``group``, or whose command line contains
    ``marker`` (this test process excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not alive(int(entry)):
            continue
        if group is not None and (_stat(entry) or ["", "", "-1"])[2] != str(group):
            continue
        if marker is not None:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() not in handle.read():
                        continue
            except OSError:
                continue
        found.append(int(entry))
    return found


async def cancelled_call(
    registry: ToolRegistry, command: str, ready: Callable[[], bool], seconds: float = 10
) -> Any:
    """Run ``command``, cancel the call through its signal once ``ready()`` holds (checked
    every 10 ms, for at most ``seconds``), and return the call's result."""
    source = CancelSource()
    results: list[Any] = []

    async def call() -> None:
        results.append(
            await registry.execute(
                ToolExecutionInput("c", "run_command", {"command": command}, signal=source.signal)
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(seconds):
            while not ready():
                await anyio.sleep(0.01)
        source.cancel()
    [result] = results
    return result
