"""The Model Context Protocol in both directions, on the official MCP Python SDK.

**Serve.** :func:`build_mcp_server` exposes a :class:`~dsh_tools.ToolRegistry` or
:class:`~dsh_tools.ToolScope` as an MCP server: ``tools/list`` comes from the view's
schemas, and every ``tools/call`` runs through the registry's full pipeline (policies,
guards, approval, timeouts), so an MCP client gets exactly what an in-process host gets.
Tool failures, denials included, are ``isError`` results, never protocol errors.
:func:`serve_stdio` and :func:`serve_http` run it over stdio or streamable HTTP.

**Consume.** :class:`McpToolSource` (or :func:`register_mcp_server` for a client you
connected yourself) lists an MCP server's tools and registers each as a raw
:class:`~dsh_tools._models.ToolDefinition` whose body calls the server, so remote tools run
behind this registry's policies and guards like local ones.

Needs the ``mcp`` extra (``pip install '.[mcp]'`` in a clone of dsh-tools).
``import dsh_tools`` never imports this module; importing it imports the SDK.
"""

from __future__ import annotations

try:
    import mcp.server.lowlevel  # noqa: F401 - the SDK, checked first for a clear message
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "dsh_tools.bridges.mcp needs the MCP Python SDK: install dsh-tools with its mcp "
        "extra (in a clone: pip install '.[mcp]')"
    ) from error

from ._mcp_http import is_loopback_host, serve_http
from ._mcp_remote import (
    McpCallError,
    McpConnectionError,
    McpRemoteTool,
    McpToolError,
    load_mcp_tools,
    register_mcp_server,
)
from ._mcp_serve import build_mcp_server, mcp_tools, serve_stdio
from ._mcp_source import McpTarget, McpToolSource

__all__ = [
    "McpCallError",
    "McpConnectionError",
    "McpRemoteTool",
    "McpTarget",
    "McpToolError",
    "McpToolSource",
    "build_mcp_server",
    "is_loopback_host",
    "load_mcp_tools",
    "mcp_tools",
    "register_mcp_server",
    "serve_http",
    "serve_stdio",
]
