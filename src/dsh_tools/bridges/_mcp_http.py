"""Serving the MCP bridge over streamable HTTP: loopback by default, behind uvicorn.

:mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

import anyio
from mcp.server.transport_security import TransportSecuritySettings

from ._mcp_approval import ApprovalsMode
from ._mcp_serve import View, build_mcp_server

if TYPE_CHECKING:
    import uvicorn

_LOOPBACK_NAMES = ("localhost",)


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


def _checked_host(host: str, allow_remote: bool) -> bool:
    """Whether ``host`` is loopback; refuses any other host unless ``allow_remote``."""
    loopback = is_loopback_host(host)
    if not loopback and not allow_remote:
        raise ValueError(
            f"serve_http() refuses to listen on non-loopback host {host!r}: the server has no "
            "authentication; pass allow_remote=True to expose it deliberately"
        )
    return loopback


def _require_asyncio() -> None:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("serve_http() needs the asyncio event loop (uvicorn)") from None


def _loopback_security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection: only loopback ``Host`` and ``Origin`` headers get in."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", f"{host}:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


async def _run_until_cancelled(
    web: uvicorn.Server, sock: socket.socket, url: str, task_status: anyio.abc.TaskStatus[str]
) -> None:
    """Run the uvicorn server on ``sock``, report ``url`` once listening, stop gracefully."""
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
        task_status.started(url)
        try:
            await done.wait()
        finally:
            web.should_exit = True


async def serve_http(
    view: View,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    name: str = "dsh-tools",
    agent: str | None = None,
    approvals: ApprovalsMode = "deny",
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
    down gracefully. Needs uvicorn and starlette, which the MCP SDK installs. ``agent``
    and ``approvals`` are :func:`build_mcp_server`'s.
    """
    import uvicorn

    loopback = _checked_host(host, allow_remote)
    _require_asyncio()
    server = build_mcp_server(view, name=name, agent=agent, approvals=approvals)
    app = server.streamable_http_app(
        streamable_http_path=path,
        json_response=json_response,
        stateless_http=stateless,
        transport_security=_loopback_security(host) if loopback else None,
        host=host,
    )
    sock = _bound_socket(host, port)
    url = _url(host, sock.getsockname()[1], path)
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5)
    await _run_until_cancelled(uvicorn.Server(config), sock, url, task_status)
