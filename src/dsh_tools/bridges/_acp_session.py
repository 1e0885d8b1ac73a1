"""Calls through a registry, reported to an ACP client as ``tool_call`` updates.

:mod:`dsh_tools.bridges.acp` is the public import path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .._json import snapshot, thaw
from .._models import PresentableResult, ToolExecution, ToolExecutionInput, ToolExecutionResult
from .._pipeline.relay import Relay
from .._safetext import safe_text
from ..presentation._presenting import present_call, present_result
from ..progress import Output, Progress, ProgressListener
from ._acp_cards import Json, call_view_to_acp, result_view_to_acp

if TYPE_CHECKING:
    from .._registry import ToolRegistry, ToolScope

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
    (:func:`~dsh_tools.presentation.present_call`), with the call's arguments as
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
    (:func:`~dsh_tools.presentation.present_result`) or the raw content."""
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
    the pipeline runs (so a permission dialog has a card to show), ``tool_call_update``s
    with status ``in_progress`` while the tool streams (see :class:`_Streamed`), the final
    ``tool_call_update`` after. A client that cannot be reached is logged; the call still
    runs and its result is returned."""
    pending = acp_tool_call(view, call, cwd=cwd, terminal_output=terminal_output)
    await _notify(client, session_id, pending)
    terminal = any(item.get("type") == "terminal" for item in pending.get("content") or ())
    streamed = _Streamed(client, session_id, call.call_id, terminal)
    relay = Relay(streamed.send)
    result = await relay.run(view.execute(attrs.evolve(call, on_progress=_both(call, relay))))
    update = acp_tool_call_update(view, call, result, cwd=cwd, terminal_output=terminal_output)
    meta = update.get("_meta")
    if streamed.sent and isinstance(meta, dict) and "terminal_output" in meta:
        del meta["terminal_output"]  # the terminal already has every byte of it
    await _notify(client, session_id, update)
    return result


def _both(call: ToolExecutionInput, relay: Relay) -> ProgressListener:
    """The relay, after the host's own ``on_progress`` when the call has one."""
    own = call.on_progress
    if own is None:
        return relay

    def both(execution: ToolExecution, event: Progress | Output) -> None:
        own(execution, event)
        relay(execution, event)

    return both


MAX_SHOWN_CHARS = 16 * 1024
"""The most characters of streamed output an ``in_progress`` text card shows (the newest)."""


class _Streamed:
    """A running call's events as ``tool_call_update``s with status ``in_progress``.

    For a command card with terminal content (the ``_meta`` terminal convention) each
    batch of output is ``_meta.terminal_output`` with the new ``data``, and the final
    card then leaves it out. Otherwise the card's content is the output so far (the
    newest :data:`MAX_SHOWN_CHARS`) followed by the latest progress line ("3 of 10:
    message"). Text is made safe to show."""

    def __init__(self, client: SessionUpdateClient, session_id: str, call_id: str, terminal: bool):
        self.client, self.session_id, self.call_id = client, session_id, call_id
        self.terminal = terminal
        self.output = ""
        self.progress: Progress | None = None
        self.sent = False

    async def send(self, events: list[Progress | Output]) -> None:
        new = "".join(event.text for event in events if isinstance(event, Output))
        for event in events:
            if isinstance(event, Progress):
                self.progress = event
        update: Json = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.call_id,
            "status": "in_progress",
        }
        if self.terminal:
            if not new:
                return
            data = safe_text(new, multiline=True)
            update["_meta"] = {"terminal_output": {"terminal_id": self.call_id, "data": data}}
        else:
            self.output = (self.output + new)[-MAX_SHOWN_CHARS:]
            line = None if self.progress is None else self.progress.line()
            text = "\n".join(filter(None, [self.output.rstrip("\n"), line]))
            block = {"type": "text", "text": safe_text(text, multiline=True)}
            update["content"] = [{"type": "content", "content": block}]
        self.sent = True
        await _notify(self.client, self.session_id, update)


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
