"""The Agent Client Protocol (ACP) bridge: cards as editor tool calls, ``Ask`` as a dialog.

A host that speaks ACP to an editor (Zed, JetBrains, Neovim plugins ...) shows each tool
call as an ACP *tool call*: a ``tool_call`` session update when the call starts and a
``tool_call_update`` when it ends. This module turns the provider-neutral cards of
:mod:`dsh_tools.presentation` into those updates, as plain JSON (camelCase keys, ``None``
never written), and answers ``Ask`` decisions with ACP's ``session/request_permission``.

The mapping itself needs no ACP package: every function returns plain ``dict`` data that
a connection of the ``agent-client-protocol`` package (the ``acp`` extra:
``pip install '.[acp]'`` in a clone of dsh-tools) accepts where it takes a schema model,
and :class:`AcpApprovalService` / :func:`execute_with_acp` only call methods on the
connection they are given. Importing
``dsh_tools`` never imports this module.

How each card maps:

* ``generic``: title, ``kind`` (``other`` when absent), content blocks as ACP ``content``
  items, ``locations``; ``rawInput`` is the card's salient input, or the call's arguments.
* ``diff``: each :class:`~dsh_tools.presentation.FileDiff` becomes ACP diff content
  ``{"type": "diff", "path", "oldText", "newText"}``; ``kind`` is ``edit``.
* ``terminal``: ACP has no terminal card that a tool can fill on its own (its ``terminal``
  content embeds a terminal the *client* created with ``terminal/create``). Clients that
  advertise the ``_meta.terminal_output`` client capability (see
  :func:`client_supports_terminal_output`) get the ``_meta`` terminal convention: the
  content is ``{"type": "terminal", "terminalId": <tool call id>}`` and ``_meta`` carries
  ``terminal_info`` (``terminal_id``, ``cwd``) on the call, ``terminal_output``
  (``terminal_id``, ``data``) and ``terminal_exit`` (``terminal_id``, ``exit_code``,
  ``signal``) on the result. Every other client gets one text block: the output in a
  ```` ```console```` fence (longer when the output holds a fence) followed by
  ``Exited with code N`` or ``Killed by SIGNAL``.
* ``search``, ``read``, ``web``: ACP has no such cards, so they show text: the raw result
  content (what the model saw; a ``read`` card's own ``content`` when it has one), or a
  summary derived from the card when that content is empty. A ``read`` card also sets the
  location ``(path, offset)`` so a client can follow along.
* No card (``None``): the raw result content, and the pending title stays.

Paths: ACP wants absolute paths in ``locations`` and diff content (clients open them), so
a relative card path is resolved against the session ``cwd``; absolute paths are kept
verbatim. Titles of file cards (``diff``, ``read``, and a ``generic`` card with
locations) are shown relative to ``cwd`` when they name a path inside it; a path
outside the cwd, or a sibling that merely shares its prefix, stays as written.
"""

from __future__ import annotations

from ._acp_approval import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    REJECT_ALWAYS,
    REJECT_ONCE,
    AcpApprovalService,
    PermissionClient,
)
from ._acp_cards import (
    acp_content,
    call_view_to_acp,
    client_supports_terminal_output,
    console_text,
    result_view_to_acp,
)
from ._acp_session import (
    SessionUpdateClient,
    acp_tool_call,
    acp_tool_call_update,
    execute_with_acp,
)

__all__ = [
    "ALLOW_ALWAYS",
    "ALLOW_ONCE",
    "REJECT_ALWAYS",
    "REJECT_ONCE",
    "AcpApprovalService",
    "PermissionClient",
    "SessionUpdateClient",
    "acp_content",
    "acp_tool_call",
    "acp_tool_call_update",
    "call_view_to_acp",
    "client_supports_terminal_output",
    "console_text",
    "execute_with_acp",
    "result_view_to_acp",
]
