"""``execute_with_acp`` reports a running tool as ``tool_call_update``s with status
``in_progress`` (terminal data for commands), in order, then the final card."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools import ToolExecutionInput, ToolRegistry, ToolRunContext, define_tool
from dsh_tools.bridges.acp import execute_with_acp
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.workspace import Workspace
from streaming import TICKING

pytestmark = pytest.mark.anyio


class _Client:
    def __init__(self, go: Path | None = None) -> None:
        self.updates: list[dict[str, Any]] = []
        self.go = go

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if self.go is not None and "line 0" in str(update):
            self.go.touch()


def _streamed(update: dict[str, Any]) -> str:
    meta = update.get("_meta") or {}
    if "terminal_output" in meta:
        return str(meta["terminal_output"]["data"])
    return str(update["content"][0]["content"]["text"])


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("terminal", [True, False])
async def test_a_running_command_streams_in_progress_updates_in_order(
    tmp_path: Path, terminal: bool
) -> None:
    registry = ToolRegistry()
    registry.register(run_command_tool(Workspace(tmp_path), sandbox="off"))
    client = _Client(tmp_path / "go")
    call = ToolExecutionInput("r1", "run_command", {"command": TICKING})
    with anyio.fail_after(20):
        result = await execute_with_acp(registry, call, client, "s1", terminal_output=terminal)
    first, *running, final = client.updates
    assert (first["sessionUpdate"], first["status"]) == ("tool_call", "pending")
    assert running
    assert {update["status"] for update in running} == {"in_progress"}
    assert final["status"] == "completed"
    if terminal:
        text = "".join(_streamed(update) for update in running)
        assert "terminal_output" not in final.get("_meta", {})  # not sent twice
        assert final["_meta"]["terminal_exit"]["exit_code"] == 0
    else:
        text = _streamed(running[-1])  # each card shows the output so far
        assert final["content"] != running[-1]["content"]
    lines = [line for line in text.splitlines() if line.startswith(("line", "no go"))]
    assert lines == [f"line {n}" for n in range(30)]
    assert result.value["output"] == "".join(f"line {n}\n" for n in range(30))


async def test_progress_lines_are_shown_safely_on_a_text_card() -> None:
    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "step \x1b]0;owned\x07 one")
        await anyio.sleep(0.3)
        return "ok"

    registry = ToolRegistry()
    registry.register(define_tool(name="step", description="Step.", parameters={}, execute=body))
    client = _Client()
    own: list[Any] = []
    call = ToolExecutionInput("r2", "step", on_progress=lambda _, event: own.append(event))
    result = await execute_with_acp(registry, call, client, "s1")
    assert result.text == "ok"
    [running] = [update for update in client.updates if update["status"] == "in_progress"]
    assert _streamed(running) == "1 of 2: step \\x1b]0;owned\\x07 one"
    assert len(own) == 1  # the host's own listener still hears the call


async def test_a_def_body_s_progress_is_sent_while_it_runs() -> None:
    heard = threading.Event()

    class Client(_Client):
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            await super().session_update(session_id, update, **kwargs)
            if update.get("status") == "in_progress":
                heard.set()

    def waits(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "half way")
        return "heard" if heard.wait(5) else "nobody heard while it ran"

    registry = ToolRegistry()
    registry.register(define_tool(name="waits", description="W.", parameters={}, execute=waits))
    client = Client()
    with anyio.fail_after(20):
        result = await execute_with_acp(registry, ToolExecutionInput("r3", "waits"), client, "s1")
    assert result.text == "heard"
    [running] = [update for update in client.updates if update["status"] == "in_progress"]
    assert _streamed(running) == "1 of 2: half way"
