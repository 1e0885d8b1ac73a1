"""An MCP server's tools for as long as a connection to it is open (:class:`McpToolSource`).

:mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeAlias

from mcp import Client, ClientSession, MCPError, StdioServerParameters
from mcp.server.lowlevel import Server

from .._models import ApprovalChannel
from .._registry import Disposer
from ._mcp_elicit import elicitation_answerer
from ._mcp_remote import McpClient, McpConnectionError, McpRemoteTool, load_mcp_tools, register_all
from ._mcp_serve import View

McpTarget: TypeAlias = "Client | ClientSession | StdioServerParameters | str | Server[Any]"
"""What :class:`McpToolSource` connects to: a connected client (used as is, not closed),
stdio server parameters (a subprocess), a streamable HTTP URL, or an in-process SDK
``Server`` (handy in tests, for example one made by :func:`build_mcp_server`)."""


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

    ``approval`` (an approval service or a function, as ``ToolRegistry(approval=...)``
    takes) answers what the server asks the user while its tools run (elicitations),
    through the host's own channel: it is asked about the remote tool's call, with the
    server's message as the reason (see :mod:`dsh_tools.bridges._mcp_elicit`). Without
    it, the client declares no elicitation capability. A connected client given as
    ``server`` keeps the callback it was made with.

    ``name`` is how a rules file's ``trusted_mcp_servers`` names the server; its tools'
    annotations are imported as claims (``mcp_hints`` in their metadata) that only a
    trusted server's can loosen a permission rule.
    """

    def __init__(
        self,
        server: McpTarget,
        *,
        prefix: str = "",
        timeout_ms: float | None = None,
        read_timeout_seconds: float | None = None,
        approval: ApprovalChannel | None = None,
        name: str | None = None,
    ) -> None:
        self._server = server
        self._elicit = None if approval is None else elicitation_answerer(approval)
        self.name = name
        """The name a rules file's ``trusted_mcp_servers`` knows this server by."""
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
            owned = Client(
                server, read_timeout_seconds=self._read_timeout, elicitation_callback=self._elicit
            )
            try:
                client = await owned.__aenter__()
            except Exception as error:
                raise McpConnectionError(
                    f"could not connect to the MCP server {_describe(server)}: {_cause(error)}"
                ) from error
            self._owned = owned
        try:
            self.tools = tuple(
                await load_mcp_tools(
                    client, prefix=self._prefix, timeout_ms=self._timeout_ms, server=self.name
                )
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
        dispose = register_all(view, self.tools)
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
