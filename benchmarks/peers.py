"""The same ``add(a: int, b: int)`` tool, called in-process through each peer.

Each peer is built for the ``async def`` version (cases 1-2) or the plain ``def`` one
(case 3: every peer runs a plain tool in a worker thread).

Every candidate starts from the JSON text the model sent (``ARGS``) and ends with the
tool's result, validation included, so the work compared is the same. Peers that take a
JSON string get it as is; those whose in-process entry point takes a dict (MCP's
``call_tool``, langchain's ``ainvoke``, dsh-tools' ``ToolExecutionInput``) parse it with
``json.loads`` inside the timed call, as their host would.

A peer that is not installed raises :class:`Skip` and is reported as skipped.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from _harness import Skip

ARGS = '{"a": 1, "b": 2}'

AsyncCall = Callable[[], Awaitable[object]]


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def add_sync(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


add_sync.__name__ = add_sync.__qualname__ = "add"  # the peers name a tool after its function


Tool = Callable[..., object]


def _require(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise Skip(f"{module} is not installed (pip install -e '.[bench]')")


def openai_agents(function: Tool) -> AsyncCall:
    """``FunctionTool.on_invoke_tool(ToolContext, json_text)`` from ``@function_tool``."""
    _require("agents")
    from agents import function_tool
    from agents.tool_context import ToolContext

    tool = function_tool(function)
    invoke = tool.on_invoke_tool

    async def call() -> object:
        context: ToolContext[None] = ToolContext(
            context=None, tool_name="add", tool_call_id="c1", tool_arguments=ARGS
        )
        return await invoke(context, ARGS)

    return call


async def _pydantic_ai_manager(function: Tool) -> Callable[[], Awaitable[object]]:
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tool_manager import ToolManager
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import RunUsage

    context = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    manager = await ToolManager(toolset=FunctionToolset([function])).for_run_step(context)

    async def call() -> object:
        part = ToolCallPart(tool_name="add", args=ARGS, tool_call_id="c1")
        return await manager.handle_call(part)

    return call


def pydantic_ai(function: Tool) -> AsyncCall:
    """``ToolManager.handle_call(ToolCallPart)`` for a bare ``FunctionToolset`` and a
    ``RunContext`` on ``TestModel`` (the manager an agent run step builds, minus the run)."""
    _require("pydantic_ai")
    holder: list[Callable[[], Awaitable[object]]] = []

    async def call() -> object:
        # The manager is built lazily inside the benchmark's event loop.
        if not holder:
            holder.append(await _pydantic_ai_manager(function))
        return await holder[0]()

    return call


def mcp(function: Tool) -> AsyncCall:
    """``MCPServer.call_tool(name, arguments)`` in-process (mcp 2.x; FastMCP in 1.x)."""
    _require("mcp")
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]

    server = Server("bench")
    server.tool(name="add")(function)
    call_tool = server.call_tool

    async def call() -> object:
        return await call_tool("add", json.loads(ARGS))

    return call


def langchain(function: Tool) -> AsyncCall:
    """``StructuredTool.ainvoke(dict)`` from ``StructuredTool.from_function``."""
    _require("langchain_core")
    import inspect

    from langchain_core.tools import StructuredTool

    kind = "coroutine" if inspect.iscoroutinefunction(function) else "func"
    options = {kind: function, "name": "add", "description": "Add two integers."}
    tool = StructuredTool.from_function(**options)  # type: ignore[arg-type]
    ainvoke = tool.ainvoke

    async def call() -> object:
        return await ainvoke(json.loads(ARGS))

    return call


PEERS: dict[str, Callable[[Tool], AsyncCall]] = {
    "openai-agents on_invoke_tool": openai_agents,
    "pydantic-ai ToolManager.handle_call": pydantic_ai,
    "mcp MCPServer.call_tool": mcp,
    "langchain StructuredTool.ainvoke": langchain,
}


def installed_peers(function: Tool = add) -> tuple[dict[str, AsyncCall], dict[str, str]]:
    """(name -> call) of ``function`` for every peer that could be built, and
    (name -> reason) for the rest."""
    calls: dict[str, AsyncCall] = {}
    skipped: dict[str, str] = {}
    for name, build in PEERS.items():
        try:
            calls[name] = build(function)
        except Skip as reason:
            skipped[name] = str(reason)
        except Exception as error:  # a peer whose API moved is skipped, never a crash
            skipped[name] = f"could not be built: {type(error).__name__}: {error}"
    return calls, skipped
