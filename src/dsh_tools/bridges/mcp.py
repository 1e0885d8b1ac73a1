"""The Model Context Protocol in both directions, on the official MCP Python SDK.

**Serve.** :func:`build_mcp_server` exposes a :class:`~dsh_tools.ToolRegistry` or
:class:`~dsh_tools.ToolScope` as an MCP server: ``tools/list`` comes from the view's
schemas, and every ``tools/call`` runs through the registry's full pipeline (policies,
guards, approval, timeouts), so an MCP client gets exactly what an in-process host gets.
Tool failures, denials included, are ``isError`` results, never protocol errors.
:func:`serve_stdio` and :func:`serve_http` run it over stdio or streamable HTTP.

**Consume.** :class:`McpToolSource` (or :func:`register_mcp_server` for a client you
connected yourself) lists an MCP server's tools and registers each as a raw
:class:`~dsh_tools.models.ToolDefinition` whose body calls the server, so remote tools run
behind this registry's policies and guards like local ones.

Needs the ``mcp`` extra (``pip install '.[mcp]'`` in a clone of dsh-tools).
``import dsh_tools`` never imports this module; importing it imports the SDK.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeAlias

import anyio
import attrs

try:
    from mcp import Client, ClientSession, MCPError, StdioServerParameters
    from mcp import types as mcp_types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.transport_security import TransportSecuritySettings
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "dsh_tools.bridges.mcp needs the MCP Python SDK: install dsh-tools with its mcp "
        "extra (in a clone: pip install '.[mcp]')"
    ) from error
from pydantic import TypeAdapter, ValidationError

from .._version import __version__
from ..content import ImageContent, TextContent, content_text
from ..errors import DshToolsError, JsonSchemaError, RegistrationError, ToolError
from ..json import FrozenDict, JsonValue, dumps, snapshot, thaw
from ..jsonschema import assert_supported_json_schema
from ..models import ToolDefinition, ToolExecutionInput, ToolExecutionResult, ToolOutput
from ..registry import Disposer, ToolRegistry, ToolScope
from .wire import to_mcp_call_result, to_mcp_tools

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

View: TypeAlias = "ToolRegistry | ToolScope"

McpClient: TypeAlias = "Client | ClientSession"
"""A connected MCP client: the SDK's high-level ``mcp.Client`` or a ``ClientSession``."""

McpTarget: TypeAlias = "Client | ClientSession | StdioServerParameters | str | Server[Any]"
"""What :class:`McpToolSource` connects to: a connected client (used as is, not closed),
stdio server parameters (a subprocess), a streamable HTTP URL, or an in-process SDK
``Server`` (handy in tests, for example one made by :func:`build_mcp_server`)."""

_LOOPBACK_NAMES = ("localhost",)
_MAX_LIST_PAGES = 100


# =========================================================================== serve


def _serving_view(view: View, agent: str | None) -> View:
    """The view whose tools are listed and whose pipeline runs the calls."""
    if not isinstance(view, (ToolRegistry, ToolScope)):
        raise TypeError(
            f"expected a ToolRegistry or ToolScope to serve, got {type(view).__qualname__}"
        )
    if agent is None or agent == view.agent:
        return view
    if isinstance(view, ToolScope):
        raise RegistrationError(
            f"agent={agent!r} conflicts with the served scope {view.agent!r}; "
            "pass the registry with agent=..., or the scope without it"
        )
    target: View = view
    for key in agent.split("/"):
        target = target.scope(key)
    return target


def _object_output_schema(definition: ToolDefinition[Any] | None) -> FrozenDict | None:
    """The declared output schema when MCP can advertise it (root ``type: object``)."""
    if definition is None or definition.output is None:
        return None
    schema = definition.output.schema
    return schema if schema.get("type") == "object" else None


def mcp_tools(view: View) -> list[mcp_types.Tool]:
    """The MCP ``Tool`` list of every tool visible to ``view``.

    ``inputSchema`` is the tool's parameters; ``outputSchema`` is added for tools that
    declare an output whose schema root is ``type: object`` (MCP's structured-content
    contract); other output declarations are not advertised and their values travel as
    content only.
    """
    tools = []
    for declaration in to_mcp_tools(view.schemas()):
        schema = _object_output_schema(view.get(declaration["name"]))
        if schema is not None:
            declaration["outputSchema"] = thaw(schema)
        tools.append(mcp_types.Tool.model_validate(declaration))
    return tools


_CONTENT_BLOCK: TypeAdapter[mcp_types.ContentBlock] = TypeAdapter(mcp_types.ContentBlock)


def _content_block(block: object) -> mcp_types.ContentBlock:
    """An MCP content block; a block MCP has no type for is sent as its text."""
    try:
        return _CONTENT_BLOCK.validate_python(block)
    except ValidationError:
        return mcp_types.TextContent(text=content_text([block]))


def _call_tool_result(result: ToolExecutionResult, structured: bool) -> mcp_types.CallToolResult:
    """The MCP answer; ``structured``: the tool advertises an ``outputSchema``.

    Such a tool's success must carry ``structuredContent`` matching it (clients reject one
    without). When a post-execute policy or ``finalize_content`` replaced the content, the
    value is withheld and nothing else may stand in for it, so the answer is sent as an
    error showing the replaced content: never the value the policy kept from the model.
    """
    data = to_mcp_call_result(result)
    structured_content = data.get("structuredContent") if structured else None
    withheld = structured and not data["isError"] and structured_content is None
    return mcp_types.CallToolResult(
        content=[_content_block(block) for block in data["content"]],
        structured_content=structured_content,
        is_error=data["isError"] or withheld,
    )


def build_mcp_server(
    view: View, *, name: str = "dsh-tools", agent: str | None = None
) -> Server[Any]:
    """An MCP SDK low-level ``Server`` exposing the tools visible to ``view``.

    ``tools/list`` is read from ``view`` on every request, so tools registered later
    appear. ``tools/call`` runs ``await view.execute(...)`` with a fresh call id
    (``mcp-<hex>``), so every call passes the view's policies, guards and timeouts;
    every outcome, unknown tools and invalid arguments included, is a ``CallToolResult``
    with ``isError`` set on failure. ``structuredContent`` carries the tool's value when
    the tool declares an object-rooted output schema and no post-execute policy or
    ``finalize_content`` replaced the content (then it is withheld).

    ``agent`` serves a registry as that agent (``"parent/child"`` for nested scopes):
    tools, guards and plugins are that scope's. A ``ToolScope`` serves as its own agent.
    """
    target = _serving_view(view, agent)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=mcp_tools(target))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        structured = _object_output_schema(target.get(params.name)) is not None
        call = ToolExecutionInput(
            call_id=f"mcp-{uuid.uuid4().hex}",
            name=params.name,
            arguments={} if params.arguments is None else params.arguments,
        )
        return _call_tool_result(await target.execute(call), structured)

    return Server(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(view: View, *, name: str = "dsh-tools", agent: str | None = None) -> None:
    """Serve ``view`` over this process's stdin/stdout until the client disconnects.

    Nothing else may write to stdout meanwhile (log to stderr). Synchronous callers:
    ``anyio.run(functools.partial(serve_stdio, registry))``.
    """
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(view, name=name, agent=agent)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.1``, ``::1``...):
    the one kind of address :func:`serve_http` listens on without ``allow_remote``."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _url(host: str, port: int, path: str) -> str:
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


async def serve_http(
    view: View,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    name: str = "dsh-tools",
    agent: str | None = None,
    allow_remote: bool = False,
    json_response: bool = False,
    stateless: bool = False,
    log_level: str = "warning",
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``view`` over streamable HTTP at ``http://host:port/path`` (asyncio only).

    Listens on loopback only: any other ``host`` raises :class:`ValueError` unless
    ``allow_remote=True`` (the server has no authentication of its own; put one in front
    of it). On loopback, DNS-rebinding protection only accepts loopback ``Host`` and
    ``Origin`` headers. ``port=0`` picks a free port; started with ``task_group.start``
    the call reports the URL once it is listening. Runs until cancelled, then shuts
    down gracefully. Needs uvicorn and starlette, which the MCP SDK installs.
    """
    import asyncio

    import uvicorn

    loopback = is_loopback_host(host)
    if not loopback and not allow_remote:
        raise ValueError(
            f"serve_http() refuses to listen on non-loopback host {host!r}: the server has no "
            "authentication; pass allow_remote=True to expose it deliberately"
        )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("serve_http() needs the asyncio event loop (uvicorn)") from None
    security = None
    if loopback:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", f"{host}:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    server = build_mcp_server(view, name=name, agent=agent)
    app = server.streamable_http_app(
        streamable_http_path=path,
        json_response=json_response,
        stateless_http=stateless,
        transport_security=security,
        host=host,
    )
    sock = _bound_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5)
    web = uvicorn.Server(config)
    done = anyio.Event()

    async def run() -> None:
        # Shielded so a cancelled caller gets uvicorn's graceful shutdown (lifespan
        # included) instead of abandoned tasks; should_exit below ends it.
        try:
            with anyio.CancelScope(shield=True):
                await web.serve(sockets=[sock])
        finally:
            sock.close()
            done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        task_status.started(_url(host, bound_port, path))
        try:
            await done.wait()
        finally:
            web.should_exit = True


# =========================================================================== consume


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


async def _call_remote(client: McpClient, name: str, arguments: dict[str, Any]) -> Any:
    if isinstance(client, Client):
        try:
            client.session  # noqa: B018 - raises RuntimeError once the client has closed
        except RuntimeError:
            raise McpConnectionError(
                f'the MCP client is closed; tool "{name}" cannot be called'
            ) from None
    try:
        return await client.call_tool(name, arguments)
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


def _remote_tool(
    client: McpClient, tool: mcp_types.Tool, prefix: str, timeout_ms: float | None
) -> McpRemoteTool:
    remote_name = tool.name
    output, note = _output_declaration(tool)

    async def execute(arguments: FrozenDict, context: Any) -> object:
        result: mcp_types.CallToolResult = await _call_remote(client, remote_name, thaw(arguments))
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
    client: McpClient, *, prefix: str = "", timeout_ms: float | None = None
) -> list[McpRemoteTool]:
    """List every tool of a connected MCP server (all pages) as definitions to register.

    Each definition is *raw*: its parameters are the server's ``inputSchema`` as given
    (the server validates arguments), and its body calls ``client.call_tool``. An
    ``outputSchema`` inside the enforced subset becomes the tool's output declaration
    (the body returns ``structuredContent``, validated here again, and the server's
    content is kept as the model-facing content); otherwise the tool has none and
    :attr:`McpRemoteTool.output_note` says why. ``timeout_ms`` becomes each tool's
    timeout, a backstop for a server that stops answering.
    """
    if not isinstance(client, (Client, ClientSession)):
        raise TypeError(
            f"expected a connected mcp.Client or ClientSession, got {type(client).__qualname__}"
        )
    return [_remote_tool(client, tool, prefix, timeout_ms) for tool in await _list_all(client)]


def _register_all(view: View, tools: Sequence[McpRemoteTool]) -> Disposer:
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
    return _register_all(view, await load_mcp_tools(client, prefix=prefix, timeout_ms=timeout_ms))


def _describe(server: object) -> str:
    if isinstance(server, StdioServerParameters):
        return " ".join([server.command, *server.args])
    if isinstance(server, str):
        return server
    return type(server).__qualname__


def _cause(error: BaseException) -> str:
    """The message of the one error inside nested task-group exception groups."""
    inner: Any = error
    while len(getattr(inner, "exceptions", ())) == 1:
        inner = inner.exceptions[0]
    if isinstance(inner, MCPError):
        return inner.error.message
    return f"{type(inner).__name__}: {inner}"


class McpToolSource:
    """An MCP server's tools for as long as a connection to it is open.

    ::

        async with McpToolSource(StdioServerParameters(command="server")) as source:
            source.register(registry)
            ...  # remote tools run through registry.execute, behind its policies

    Entering connects (unless given a connected client, which is used as is and never
    closed here) and lists the tools; :meth:`register` adds them to a view; leaving
    removes every registration made through the source, then closes the connection it
    opened. ``read_timeout_seconds`` bounds each request to the server.
    """

    def __init__(
        self,
        server: McpTarget,
        *,
        prefix: str = "",
        timeout_ms: float | None = None,
        read_timeout_seconds: float | None = None,
    ) -> None:
        self._server = server
        self._prefix = prefix
        self._timeout_ms = timeout_ms
        self._read_timeout = read_timeout_seconds
        self._owned: Client | None = None
        self._client: McpClient | None = None
        self._disposers: list[Disposer] = []
        self.tools: tuple[McpRemoteTool, ...] = ()
        """The server's tools, listed on entering."""

    @property
    def client(self) -> McpClient:
        """The connected client (only inside ``async with``)."""
        if self._client is None:
            raise RuntimeError("McpToolSource is not connected; use it as `async with`")
        return self._client

    async def __aenter__(self) -> McpToolSource:
        if self._client is not None:
            raise RuntimeError("McpToolSource is already entered")
        server = self._server
        if isinstance(server, (Client, ClientSession)):
            client: McpClient = server
        else:
            owned = Client(server, read_timeout_seconds=self._read_timeout)
            try:
                client = await owned.__aenter__()
            except Exception as error:
                raise McpConnectionError(
                    f"could not connect to the MCP server {_describe(server)}: {_cause(error)}"
                ) from error
            self._owned = owned
        try:
            self.tools = tuple(
                await load_mcp_tools(client, prefix=self._prefix, timeout_ms=self._timeout_ms)
            )
        except BaseException as error:
            await self._close(type(error), error, error.__traceback__)
            raise
        self._client = client
        return self

    def register(self, view: View) -> Disposer:
        """Register every listed tool in ``view`` (all or nothing); returns a disposer.

        The registrations are also undone when the source closes.
        """
        self.client  # noqa: B018 - raises when not connected
        dispose = _register_all(view, self.tools)
        self._disposers.append(dispose)
        return dispose

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for dispose in reversed(self._disposers):
            dispose()
        self._disposers.clear()
        self._client = None
        await self._close(exc_type, exc, tb)

    async def _close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.__aexit__(exc_type, exc, tb)
