"""Calls through a registry, reported to an ACP client as ``tool_call`` updates.

:mod:`dsh_tools.bridges.acp` is the public import path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..json import snapshot, thaw
from ..models import PresentableResult, ToolExecutionInput, ToolExecutionResult
from ..presenting import present_call, present_result
from ._acp_cards import Json, call_view_to_acp, result_view_to_acp

if TYPE_CHECKING:
    from ..registry import ToolRegistry, ToolScope

logger = logging.getLogger("dsh_tools")


class SessionUpdateClient(Protocol):
    """The part of an ACP agent-side connection that sends ``session/update``."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> Any: ...


def acp_tool_call(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """The ``tool_call`` update of ``call``: its tool's pending card
    (:func:`~dsh_tools.presenting.present_call`), with the call's arguments as
    ``rawInput``. Never raises for a tool or presenter problem."""
    card = present_call(view, call)
    arguments = _json_or_none(call.arguments)
    return call_view_to_acp(
        call.call_id, card, raw_input=arguments, cwd=cwd, terminal_output=terminal_output
    )


def acp_tool_call_update(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    result: ToolExecutionResult | PresentableResult,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """The final ``tool_call_update`` of ``call``: its tool's completed card
    (:func:`~dsh_tools.presenting.present_result`) or the raw content."""
    card = present_result(view, call, result)
    return result_view_to_acp(call.call_id, card, result, cwd=cwd, terminal_output=terminal_output)


async def execute_with_acp(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    client: SessionUpdateClient,
    session_id: str,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> ToolExecutionResult:
    """Run ``call`` through ``view`` and report it to the ACP client: a ``tool_call`` before
    the pipeline runs (so a permission dialog has a card to show), the final
    ``tool_call_update`` after. A client that cannot be reached is logged; the call still
    runs and its result is returned."""
    await _notify(
        client, session_id, acp_tool_call(view, call, cwd=cwd, terminal_output=terminal_output)
    )
    result = await view.execute(call)
    update = acp_tool_call_update(view, call, result, cwd=cwd, terminal_output=terminal_output)
    await _notify(client, session_id, update)
    return result


async def _notify(client: SessionUpdateClient, session_id: str, update: Json) -> None:
    try:
        await client.session_update(session_id=session_id, update=update)
    except Exception:
        logger.warning(
            "ACP session/update for tool call %r failed", update["toolCallId"], exc_info=True
        )


def _json_or_none(value: object) -> Any:
    try:
        return thaw(snapshot(value, "arguments"))
    except Exception:
        return None
