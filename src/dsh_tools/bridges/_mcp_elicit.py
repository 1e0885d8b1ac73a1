"""Elicitations from remote MCP servers, answered through the host's approval channel.

A remote server may ask the user something while one of its tools runs
(``elicitation/create``). :class:`~dsh_tools.bridges.mcp.McpToolSource` given
``approval=`` answers such a question through that channel: the channel gets an
:class:`~dsh_tools._models.ApprovalRequest` naming the agent, the remote tool and the call
that was running, with the server's message (made safe to show) as the reason. The
channel can only allow or refuse, so an answer accepts only a form it can fill: an
approval form (a ``decision`` offering ``allow-once``/``allow-always``/``reject``, such
as this project's own servers send, with the channel's feedback when the form has a
``feedback`` field), or, to allow, a form that requires nothing. Anything else, a
refusal the form cannot say, or a channel that fails, declines; a cancelled ask cancels.

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

from .._json import snapshot
from .._models import ApprovalOutcome, ApprovalRequest
from .._pipeline.approval import channel
from .._safetext import safe_text
from ..approvals import ApprovalAnswer, exact_outcome

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext

    from .._models import ApprovalChannel, ToolExecution

__all__ = ["calling_remote", "elicitation_answerer"]

logger = logging.getLogger("dsh_tools")

_RUNNING: contextvars.ContextVar[ToolExecution | None] = contextvars.ContextVar(
    "dsh_tools_remote_call", default=None
)
"""The local call of a remote tool, while it waits for the server (an elicitation that
arrives in the caller's task, as on the per-request protocol, names it)."""

_ALLOWING = frozenset({ApprovalOutcome.ALLOWED_ONCE, ApprovalOutcome.ALLOWED_ALWAYS})
_DECISIONS = {
    ApprovalOutcome.ALLOWED_ONCE: "allow-once",
    ApprovalOutcome.ALLOWED_ALWAYS: "allow-always",
    ApprovalOutcome.REJECTED: "reject",
    ApprovalOutcome.REJECTED_ALWAYS: "reject",
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


def _filled(answer: ApprovalAnswer, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The form ``answer`` fills in, or ``None`` when it cannot fill it."""
    properties = schema.get("properties") or {}
    properties = properties if isinstance(properties, dict) else {}
    offered = _offered(properties.get("decision"))
    allowing = answer.outcome in _ALLOWING
    if not isinstance(offered, list):
        return {} if allowing and not schema.get("required") else None
    wanted = _DECISIONS.get(answer.outcome)
    chosen = wanted if wanted in offered or not allowing else "allow-once"
    if chosen is None or chosen not in offered:
        return None
    filled = {"decision": chosen}
    if answer.feedback is not None and isinstance(properties.get("feedback"), dict):
        filled["feedback"] = answer.feedback
    return filled


def _offered(decision: object) -> list[object] | None:
    """The values a form's ``decision`` offers: its ``oneOf`` options' ``const`` (the
    current MCP spelling), else its ``enum``; ``None`` when it offers none."""
    if not isinstance(decision, dict):
        return None
    options = decision.get("oneOf")
    if isinstance(options, list):
        return [option.get("const") for option in options if isinstance(option, dict)]
    offered = decision.get("enum")
    return offered if isinstance(offered, list) else None


def _answer(reply: object) -> ApprovalAnswer | None:
    if isinstance(reply, ApprovalAnswer):
        return reply
    outcome = exact_outcome(reply)
    return None if outcome is None else ApprovalAnswer(outcome)


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
            given = _answer(await reply if inspect.isawaitable(reply) else reply)
        except Exception as error:
            logger.warning("the approval channel failed on an MCP elicitation: %s", error)
            return mcp_types.ElicitResult(action="decline")
        if given is not None and given.outcome is ApprovalOutcome.CANCELLED:
            return mcp_types.ElicitResult(action="cancel")
        filled = None if given is None else _filled(given, params.requested_schema)
        if filled is None:
            return mcp_types.ElicitResult(action="decline")
        return mcp_types.ElicitResult(action="accept", content=filled)

    return answer
