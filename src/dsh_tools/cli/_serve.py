"""``serve-mcp``: the tools over MCP, with the approval store and the client scope said
on standard error before the first request, since an MCP host starts the server in an
environment of its own (another ``$XDG_STATE_HOME``, another current directory) and a
person answering tickets must look in the same store.

:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, TextIO

from ._exits import EXIT_OK, UsageError, needs_mcp_extra
from ._store import ChosenStore, chosen_store, store_location, ticket_store, workspace_root

if TYPE_CHECKING:
    from .._pipeline.call import Waiting
    from .._registry import ToolRegistry

__all__ = ["cmd_serve_mcp"]

_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def cmd_serve_mcp(registry: ToolRegistry, options: argparse.Namespace, err: TextIO) -> int:
    import functools

    import anyio

    try:
        from ..bridges.mcp import serve_stdio
    except ImportError as error:
        raise needs_mcp_extra("serve-mcp", error) from None
    store = _store(registry, options)
    if options.approval_wait_ms is not None:
        if options.approvals != "pending":
            raise UsageError("--approval-wait-ms needs --approvals pending")
        registry.approval_waiting = _waiting(options.approval_wait_ms, registry)
    if options.http:
        return _serve_http(registry, options, store, err)
    client = _client(options, store)
    _said(err, store, client)
    anyio.run(functools.partial(serve_stdio, registry, approvals=options.approvals, client=client))
    return EXIT_OK


def _serve_http(
    registry: ToolRegistry, options: argparse.Namespace, store: ChosenStore | None, err: TextIO
) -> int:
    """``serve-mcp --http``: on loopback unless ``--allow-remote``; its URL is printed."""
    import functools

    import anyio

    from ..bridges.mcp import serve_http

    if options.client is not None:
        raise UsageError(
            "--client names the one client of a stdio server; over HTTP a client is "
            "known by its bearer token (Authorization: Bearer <secret>)"
        )
    listen = listening(
        options,
        "the server has no authentication of its own, so serving other machines needs "
        "--allow-remote",
    )
    serve = functools.partial(serve_http, registry, **listen, approvals=options.approvals)
    host = f"[{options.host}]" if ":" in options.host else options.host
    _said(err, store, None)
    err.write(
        f"dsh-tools: serving MCP (streamable HTTP) at http://{host}:{options.port}/mcp\n"
        "dsh-tools: put this URL in your MCP client's server settings; Ctrl-C stops\n"
    )
    err.flush()
    anyio.run(serve)
    return EXIT_OK


def listening(options: argparse.Namespace, refusal: str) -> dict[str, Any]:
    """Where a server of the command listens (``--host``, ``--port``,
    ``--allow-remote``), as its keywords: on loopback unless ``--allow-remote``;
    ``refusal`` says why another host needs it. Needs the ``mcp`` extra."""
    from ..bridges._mcp_http import is_loopback_host

    if not options.allow_remote and not is_loopback_host(options.host):
        raise UsageError(f"--host {options.host!r} is not a loopback address; {refusal}")
    return {"host": options.host, "port": options.port, "allow_remote": options.allow_remote}


def _store(registry: ToolRegistry, options: argparse.Namespace) -> ChosenStore | None:
    """The store the server keeps tickets and remembered answers in: the one the command
    line names, else, with ``--approvals pending``, the workspace's (where
    ``dsh-tools approvals``, another process, answers them); ``None``: this run's memory."""
    chosen = chosen_store(options)
    if chosen is None and options.approvals == "pending":
        chosen = ticket_store(options)
    if chosen is not None:
        registry.approval_store = chosen.store
    return chosen


def _client(options: argparse.Namespace, store: ChosenStore | None) -> str:
    """The scope of the stdio server's one client: ``mcp-NAME`` for ``--client NAME``,
    else one named by the workspace and the store, the same after a restart (an editor
    that restarts the server, or a client that starts one per call, finds its tickets)."""
    from ..bridges._mcp_clients import stable_scope

    if options.client is not None:
        if _CLIENT_NAME.fullmatch(options.client) is None:
            raise UsageError(
                f"--client {options.client!r}: a name of letters, digits, '.', '_' and '-' "
                "(at most 64, starting with a letter or digit)"
            )
        return f"mcp-{options.client}"
    import os

    where = "memory" if store is None else store_location(store.store)
    return stable_scope(os.path.realpath(workspace_root()), where)


def _said(err: TextIO, store: ChosenStore | None, client: str | None) -> None:
    """Which store the server uses, and, over stdio, the agent its client calls as."""
    if store is None:
        err.write(
            "dsh-tools: approval store: none named, so remembered answers last for this "
            "run (--approvals-store FILE|URL keeps them)\n"
        )
    else:
        err.write(f"dsh-tools: approval store: {store}\n")
    if client is not None:
        err.write(f"dsh-tools: the stdio client calls as agent {client}\n")
    err.flush()


def _waiting(wait_ms: float, registry: ToolRegistry) -> Waiting:
    """The registry's approval waiting with ``--approval-wait-ms``; a bad value is a
    usage error."""
    from .._pipeline.tickets import waiting
    from ..errors import DefinitionError

    _, on_timeout, expiry_s = registry.approval_waiting
    try:
        return waiting(wait_ms, on_timeout, expiry_s)
    except DefinitionError as error:
        raise UsageError(f"--approval-wait-ms: {error}") from None
