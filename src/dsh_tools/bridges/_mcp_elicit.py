"""Elicitations from remote MCP servers, answered through the host's approval channel.

A remote server may ask the user something while one of its tools runs
(``elicitation/create``). :class:`~dsh_tools.bridges.mcp.McpToolSource` given
``approval=`` answers such a question through that channel: the channel gets an
:class:`~dsh_tools.models.ApprovalRequest` naming the agent, the remote tool and the call
that was running, with the server's message (made safe to show) as the reason. The
channel can only allow or refuse, so an allowing answer accepts only a form it can fill:
an approval form (a ``decision`` offering ``allow-once``/``allow-always``, such as this
project's own servers send) or a form that requires nothing. Anything else, a refusal,
or a channel that fails, declines; a cancelled ask cancels.

:mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mcp import types as mcp_types

from .._approval import channel
from ..approvals import ApprovalAnswer, exact_outcome
from ..json import snapshot
from ..models import ApprovalOutcome, ApprovalRequest
from ..safetext import safe_text

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext

    from ..models import ApprovalChannel, ToolExecution

__all__ = ["calling_remote", "elicitation_answerer"]

logger = logging.getLogger("dsh_tools")

_RUNNING: contextvars.ContextVar[ToolExecution | None] = contextvars.ContextVar(
    "dsh_tools_remote_call", default=None
)
"""The local call of a remote tool, while it waits for the server (an elicitation that
arrives in the caller's task, as on the per-request protocol, names it)."""

_ALLOWING = {
    ApprovalOutcome.ALLOWED_ONCE: "allow-once",
    ApprovalOutcome.ALLOWED_ALWAYS: "allow-always",
}


@contextlib.contextmanager
def calling_remote(execution: ToolExecution) -> Iterator[None]:
    """While the remote tool runs, an elicitation names ``execution``."""
    token = _RUNNING.set(execution)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def _request(params: mcp_types.ElicitRequestFormParams) -> ApprovalRequest:
    execution = _RUNNING.get()
    agent = "" if execution is None else execution.agent or ""
    tool = "mcp elicitation" if execution is None else execution.name
    call_id = "mcp-elicitation" if execution is None else execution.call_id
    arguments = snapshot({"message": params.message})
    message = safe_text(params.message, multiline=True)
    return ApprovalRequest(agent, tool, call_id, arguments, message, None)  # type: ignore[arg-type]


def _filled(outcome: ApprovalOutcome, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The form an allowing ``outcome`` fills in, or ``None`` when it cannot fill it."""
    properties = schema.get("properties") or {}
    decision = properties.get("decision") if isinstance(properties, dict) else None
    offered = decision.get("enum") if isinstance(decision, dict) else None
    if isinstance(offered, list):
        wanted = _ALLOWING[outcome]
        chosen = wanted if wanted in offered else "allow-once"
        return {"decision": chosen} if chosen in offered else None
    return None if schema.get("required") else {}


def _outcome(reply: object) -> ApprovalOutcome | None:
    if isinstance(reply, ApprovalAnswer):
        return reply.outcome
    return exact_outcome(reply)


def elicitation_answerer(approval: ApprovalChannel) -> Any:
    """The SDK client's ``elicitation_callback`` answering through ``approval``."""
    service = channel(approval)
    assert service is not None

    async def answer(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            return mcp_types.ElicitResult(action="decline")  # a URL to open: not ours to
        try:
            reply = service.request(_request(params))
            outcome = _outcome(await reply if inspect.isawaitable(reply) else reply)
        except Exception as error:
            logger.warning("the approval channel failed on an MCP elicitation: %s", error)
            return mcp_types.ElicitResult(action="decline")
        if outcome is ApprovalOutcome.CANCELLED:
            return mcp_types.ElicitResult(action="cancel")
        filled = None if outcome not in _ALLOWING else _filled(outcome, params.requested_schema)
        if filled is None:
            return mcp_types.ElicitResult(action="decline")
        return mcp_types.ElicitResult(action="accept", content=filled)

    return answer
