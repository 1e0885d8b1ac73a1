"""The consuming side of the MCP bridge: an MCP server's tools as raw tool definitions.

Each remote tool's body calls the server, so it runs behind this registry's policies and
guards like a local one. :mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any, TypeAlias

import anyio
import attrs
from mcp import Client, ClientSession, MCPError
from mcp import types as mcp_types
from mcp.shared.dispatcher import ProgressFnT

from .._content import ImageContent, TextContent, content_text
from .._context import ToolRunContext
from .._json import FrozenDict, JsonValue, dumps, snapshot, thaw
from .._models import ToolDefinition, ToolOutput
from .._registry import Disposer
from .._schema.subset import assert_supported_json_schema
from ..errors import DshToolsError, JsonSchemaError, ToolError
from ._mcp_elicit import calling_remote
from ._mcp_hints import imported_metadata
from ._mcp_serve import View

McpClient: TypeAlias = "Client | ClientSession"
"""A connected MCP client: the SDK's high-level ``mcp.Client`` or a ``ClientSession``."""

_MAX_LIST_PAGES = 100


class McpCallError(ToolError):
    """A ``tools/call`` to an MCP server failed at the protocol level (the server refused
    the request, or its reply broke the tool's advertised output schema)."""


class McpConnectionError(McpCallError):
    """The connection to the MCP server closed before the call's result arrived."""


class McpToolError(ToolError):
    """The remote tool ran and reported a failure (``isError: true``); the message is the
    text of its content."""


@attrs.frozen
class McpRemoteTool:
    """One tool listed by an MCP server, as a definition ready to register.

    ``name`` is the local name (``prefix + remote_name``); ``output_note`` says why an
    advertised ``outputSchema`` was not declared as the tool's output (``None`` when it
    was declared, or when the server advertised none).
    """

    name: str
    remote_name: str
    definition: ToolDefinition[FrozenDict]
    output_note: str | None = None


_PendingContent: TypeAlias = "tuple[JsonValue, list[TextContent | ImageContent]]"

_PENDING: contextvars.ContextVar[_PendingContent | None] = contextvars.ContextVar(
    "dsh_tools_mcp_pending_content", default=None
)
"""The content blocks of the remote result whose structured value is being rendered.

The body returns the frozen structured value; the pipeline renders it in the same task,
where ``render`` finds the blocks that came with exactly that value (compared by
identity). A value that a post-execute policy replaced is rendered as JSON text.
"""


def _describe_resource(block: mcp_types.EmbeddedResource) -> TextContent:
    resource = block.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return TextContent(resource.text)
    mime = f" ({resource.mime_type})" if resource.mime_type else ""
    return TextContent(f"[embedded resource {resource.uri}{mime}: binary data omitted]")


def _local_block(block: mcp_types.ContentBlock) -> TextContent | ImageContent:
    """Our content block for an MCP one; kinds we have no block for become text."""
    if isinstance(block, mcp_types.TextContent):
        return TextContent(block.text)
    if isinstance(block, mcp_types.ImageContent):
        try:
            return ImageContent(block.data, block.mime_type)
        except ValueError:
            return TextContent(f"[image ({block.mime_type}): data is not base64, omitted]")
    if isinstance(block, mcp_types.AudioContent):
        return TextContent(f"[audio ({block.mime_type}): {len(block.data)} base64 chars omitted]")
    if isinstance(block, mcp_types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return TextContent(f"[resource link {block.name} <{block.uri}>{about}]")
    return _describe_resource(block)


def _render_remote(arguments: object, value: JsonValue) -> list[TextContent | ImageContent] | str:
    pending = _PENDING.get()
    _PENDING.set(None)
    if pending is not None and pending[0] is value:
        return pending[1]
    return dumps(value)


def _output_declaration(tool: mcp_types.Tool) -> tuple[ToolOutput | None, str | None]:
    schema = tool.output_schema
    if schema is None:
        return None, None
    try:
        assert_supported_json_schema(schema)
    except JsonSchemaError as error:
        return None, (
            f"outputSchema not declared as the tool's output (structured content is "
            f"ignored; the content is kept): {error.message}"
        )
    return ToolOutput(schema=schema, render=_render_remote), None


async def _call_remote(
    client: McpClient, name: str, arguments: dict[str, Any], context: ToolRunContext
) -> Any:
    if isinstance(client, Client):
        try:
            client.session  # noqa: B018 - raises RuntimeError once the client has closed
        except RuntimeError:
            raise McpConnectionError(
                f'the MCP client is closed; tool "{name}" cannot be called'
            ) from None
    try:
        return await client.call_tool(name, arguments, progress_callback=_relayed(context))
    except MCPError as error:
        if error.code == mcp_types.CONNECTION_CLOSED:
            raise McpConnectionError(
                f'the connection to the MCP server closed; tool "{name}" got no result'
            ) from None
        raise McpCallError(
            f'the MCP server refused the call of tool "{name}": {error.error.message} '
            f"(code {error.code})"
        ) from None
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        raise McpConnectionError(
            f'the MCP server connection is closed; tool "{name}" cannot be called'
        ) from None
    except DshToolsError:
        raise
    except Exception as error:
        raise McpCallError(
            f'the MCP call of tool "{name}" failed: {type(error).__name__}: {error}'
        ) from None


def _relayed(context: ToolRunContext) -> ProgressFnT:
    """The server's ``notifications/progress`` for a call, as the local call's progress (so
    a proxied tool streams through this registry's filters to its own listeners)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        context.report_progress(progress, total, message)

    return relay


def _remote_tool(
    client: McpClient,
    tool: mcp_types.Tool,
    prefix: str,
    timeout_ms: float | None,
    server: str | None = None,
) -> McpRemoteTool:
    remote_name = tool.name
    output, note = _output_declaration(tool)

    async def execute(arguments: FrozenDict, context: ToolRunContext) -> object:
        with calling_remote(context.execution):
            result: mcp_types.CallToolResult = await _call_remote(
                client, remote_name, thaw(arguments), context
            )
        blocks = [_local_block(block) for block in result.content]
        if result.is_error:
            # Servers (this bridge among them) often start the text with "Error: "; the
            # failure content adds that prefix again.
            text = content_text([block.to_json() for block in blocks]).removeprefix("Error: ")
            raise McpToolError(text or f'remote tool "{remote_name}" reported an error')
        if output is None:
            return blocks or ""
        if result.structured_content is None:
            raise McpCallError(
                f'tool "{remote_name}" advertises an outputSchema but returned no structuredContent'
            )
        value = snapshot(result.structured_content, "structuredContent")
        _PENDING.set((value, blocks))
        return value

    definition: ToolDefinition[FrozenDict] = ToolDefinition(
        name=prefix + remote_name,
        description=tool.description or tool.title or "",
        parameters=tool.input_schema,
        execute=execute,
        output=output,
        timeout_ms=timeout_ms,
        metadata=imported_metadata(
            None if tool.annotations is None else tool.annotations.model_dump(by_alias=True),
            server,
        ),
    )
    return McpRemoteTool(prefix + remote_name, remote_name, definition, note)


async def _list_all(client: McpClient) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        if isinstance(client, ClientSession):
            page = await client.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor))
        else:
            page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise McpCallError(f"tools/list did not end after {_MAX_LIST_PAGES} pages")


async def load_mcp_tools(
    client: McpClient,
    *,
    prefix: str = "",
    timeout_ms: float | None = None,
    server: str | None = None,
) -> list[McpRemoteTool]:
    """List every tool of a connected MCP server (all pages) as definitions to register.

    Each definition is *raw*: its parameters are the server's ``inputSchema`` as given
    (the server validates arguments), and its body calls ``client.call_tool``. An
    ``outputSchema`` inside the enforced subset becomes the tool's output declaration
    (the body returns ``structuredContent``, validated here again, and the server's
    content is kept as the model-facing content); otherwise the tool has none and
    :attr:`McpRemoteTool.output_note` says why. ``timeout_ms`` becomes each tool's
    timeout, a backstop for a server that stops answering.

    The server's tool annotations are claims, kept in the metadata as ``mcp_hints``
    (``{"read_only": True, "destructive": False, ...}``) with ``mcp_server`` = ``server``,
    the name a rules file may trust it by; they never set ``read_only`` or ``idempotent``
    themselves, so no local plugin acts on them.
    """
    if not isinstance(client, (Client, ClientSession)):
        raise TypeError(
            f"expected a connected mcp.Client or ClientSession, got {type(client).__qualname__}"
        )
    return [
        _remote_tool(client, tool, prefix, timeout_ms, server) for tool in await _list_all(client)
    ]


def register_all(view: View, tools: Sequence[McpRemoteTool]) -> Disposer:
    disposers: list[Disposer] = []
    try:
        for tool in tools:
            disposers.append(view.register(tool.definition))
    except BaseException:
        for dispose in reversed(disposers):
            dispose()
        raise

    def dispose_all() -> None:
        for dispose in reversed(disposers):
            dispose()

    return dispose_all


async def register_mcp_server(
    view: View, client: McpClient, *, prefix: str = "", timeout_ms: float | None = None
) -> Disposer:
    """Register every tool of a connected MCP server in ``view``; returns one disposer.

    All or nothing: when one name is already taken, none stays registered. The client
    stays yours to close; calls after it closed fail with :class:`McpConnectionError`.
    See :func:`load_mcp_tools` for how each tool is defined.
    """
    return register_all(view, await load_mcp_tools(client, prefix=prefix, timeout_ms=timeout_ms))
