"""Approvals over MCP: each client its own agent, and an ask put to the client's user.

Serving gives every MCP client an agent scope of its own (``mcp-<hex>``; a client is known
by its bearer token, else by its connection: :mod:`dsh_tools.bridges._mcp_clients`), so
what one client's user answers "always" is never applied to another client's calls. An ``Ask`` of
a call that came over MCP is put to that client as an elicitation (``elicitation/create``,
form mode) when the client declared the capability: the message is the call's card, made
safe to show, and the form offers allow once, allow always or reject, with feedback for
the model. A client that cannot elicit gets what the server's ``approvals`` mode says:
``"deny"`` (nobody can be asked: the call is refused) or ``"pending"``. Asks of calls that
did not come over MCP go to the approval service the registry had before.

:mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
from mcp import types as mcp_types
from mcp.shared.exceptions import NoBackChannelError

from .._content import TextContent
from .._decisions import ApprovalReply
from .._models import (
    ApprovalOutcome,
    ApprovalRequest,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
)
from .._pipeline.approval import answers_now, channel
from .._registry import ToolScope
from .._safetext import safe_text
from ..approvals import ApprovalAnswer, ApprovalKey
from ..approvals._text import attempt_text
from ..errors import ErrorCode
from ..presentation._terminal import render_call_view
from ._mcp_clients import ClientScopes

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

    from .._models import ApprovalChannel
    from .._registry import ToolRegistry

__all__ = [
    "ANSWER_SCHEMA",
    "ApprovalsMode",
    "McpApprovals",
    "input_required",
    "with_approval_hint",
]

ApprovalsMode = Literal["pending", "deny"]
"""What an ask becomes when the client cannot elicit."""

CHANNEL = "mcp"
"""The channel an elicited answer is recorded as coming through."""
_DECISIONS = {
    "allow-once": ApprovalOutcome.ALLOWED_ONCE,
    "allow-always": ApprovalOutcome.ALLOWED_ALWAYS,
    "reject": ApprovalOutcome.REJECTED,
}

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "oneOf": [
                {"const": "allow-once", "title": "Allow once"},
                {"const": "allow-always", "title": "Allow always"},
                {"const": "reject", "title": "Reject"},
            ],
        },
        "feedback": {
            "type": "string",
            "title": "Feedback for the model",
            "description": "Why the call was rejected, or what to do instead",
        },
    },
    "required": ["decision"],
}
"""The form an elicited approval asks the user to fill in: a single choice with a label
for each value, as MCP's ``TitledSingleSelectEnumSchema`` (``oneOf`` of ``const`` and
``title``; the older ``enumNames`` is deprecated)."""


@attrs.define
class _Caller:
    """The MCP request a call came from, the scope that runs it, and, on the per-request
    protocol (no back-channel), the answer the request carries or the question it needs.
    While the call runs (``with``), the caller is found in ``calls`` by its call id."""

    calls: dict[str, _Caller] = attrs.field(repr=False, eq=False)
    call_id: str
    ctx: ServerRequestContext[Any]
    view: ToolRegistry | ToolScope
    answer: mcp_types.ElicitResult | None = None
    question: mcp_types.ElicitRequest | None = None
    shown: str | None = None
    """The key of the earlier attempt the question (asked, or answered in this retried
    request) showed the user."""

    def __enter__(self) -> _Caller:
        self.calls[self.call_id] = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        del self.calls[self.call_id]

    def decided(self, answer: mcp_types.ElicitResult) -> ApprovalAnswer:
        """The user's answer with what they wrote (the pipeline tells the model a
        rejection's feedback, and records it whatever the outcome)."""
        written = (answer.content or {}).get("feedback") if answer.action == "accept" else None
        feedback = written.strip() if isinstance(written, str) and written.strip() else None
        return ApprovalAnswer(_outcome(answer), feedback=feedback, channel=CHANNEL)


def _elicits(session: ServerSession) -> bool:
    """Whether the client declared form elicitation (an empty ``elicitation`` object, the
    2025-06-18 spelling, means form)."""
    capabilities = session.client_capabilities
    elicitation = None if capabilities is None else capabilities.elicitation
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _message(request: ApprovalRequest, view: ToolRegistry | ToolScope) -> str:
    """The elicitation's text: the call's card and why it asks, safe to show."""
    call = ToolExecutionInput(request.call_id, request.tool_name, request.arguments)
    card = render_call_view(view.present_call(call))
    reason = f"Why it asks: {request.reason}\n" if request.reason else ""
    earlier = attempt_text(request.earlier_attempt)
    attempt = f"Earlier attempt: {earlier}\n" if earlier else ""
    return safe_text(
        f'Allow the tool "{request.tool_name}" to run this call?\n\n{card}\n{reason}{attempt}',
        multiline=True,
    )


def _outcome(answer: mcp_types.ElicitResult) -> ApprovalOutcome:
    """What the user's answer decides: only an accepted form with a known decision allows."""
    if answer.action == "cancel":
        return ApprovalOutcome.CANCELLED
    if answer.action != "accept":
        return ApprovalOutcome.REJECTED
    decision = (answer.content or {}).get("decision")
    return _DECISIONS.get(decision, ApprovalOutcome.REJECTED)  # type: ignore[arg-type]


class McpApprovals:
    """The approval service of a registry served over MCP (see the module docstring).

    :param fallback: answers asks of calls that did not come over MCP.
    :param mode: what an ask becomes when the client cannot elicit.
    :param one_client: every request comes from the server's one client (stdio).
    :param client: that client's scope key (see
        :class:`~dsh_tools.bridges._mcp_clients.ClientScopes`).
    """

    def __init__(
        self,
        fallback: ApprovalChannel | None,
        mode: ApprovalsMode = "deny",
        *,
        one_client: bool = False,
        client: str | None = None,
    ) -> None:
        if mode not in ("pending", "deny"):
            raise ValueError(f"approvals mode must be 'pending' or 'deny', got {mode!r}")
        self.fallback = channel(fallback)
        self.mode = mode
        self.clients = ClientScopes(one_client=one_client, client=client)
        self._calls: dict[str, _Caller] = {}

    def session_view(
        self, view: ToolRegistry | ToolScope, ctx: ServerRequestContext[Any]
    ) -> ToolScope:
        """The agent scope under ``view`` of the client behind the request ``ctx``: the
        same for every request of that client, another for every other client (see
        :mod:`dsh_tools.bridges._mcp_clients` for how a client is known). Raises
        :class:`~dsh_tools.bridges._mcp_clients.ClientIdentityError` for a request whose
        token cannot name its client."""
        # Made directly, not through view.scope(): the key is a valid scope key.
        return ToolScope(view._registry, (*view._path, self.clients.key(ctx)))

    def calling(
        self,
        call: ToolExecutionInput,
        ctx: ServerRequestContext[Any],
        params: mcp_types.CallToolRequestParams,
        view: ToolRegistry | ToolScope,
    ) -> _Caller:
        """While the call runs (``with``), an ask about it goes to the client of ``ctx``;
        the caller's ``question`` is set when the answer must come in a retried request."""
        answer, shown = _carried_answer(params, call)
        return _Caller(self._calls, call.call_id, ctx, view, answer, shown=shown)

    def answers_now(self, request: ApprovalRequest) -> bool:
        """Whether the call's client can answer now (its request carries an answer, or it
        can be asked: elicitation), so that it is asked although a ticket of an earlier
        run of the same call is open; another call's, as the service replaced says."""
        caller = self._calls.get(request.call_id)
        if caller is None:
            return answers_now(self.fallback, request)
        return caller.answer is not None or _elicits(caller.ctx.session)

    def shows_earlier_attempt(self, request: ApprovalRequest) -> bool:
        """Whether the call's client is asked by elicitation now (its message shows the
        request's earlier attempt), or answered a question that showed that attempt."""
        caller = self._calls.get(request.call_id)
        if caller is None:
            return False
        if caller.answer is not None:
            return caller.shown is not None and caller.shown == _key(request.earlier_attempt)
        return _elicits(caller.ctx.session)

    async def request(self, request: ApprovalRequest) -> ApprovalReply:
        caller = self._calls.get(request.call_id)
        if caller is None:
            if self.fallback is None:
                return ApprovalOutcome.UNAVAILABLE
            reply = self.fallback.request(request)
            return await reply if inspect.isawaitable(reply) else reply
        session = caller.ctx.session
        if caller.answer is not None:
            return caller.decided(caller.answer)
        if not _elicits(session):
            return self._unasked()
        message = _message(request, caller.view)
        try:
            answer = await session.elicit_form(message, ANSWER_SCHEMA, caller.ctx.request_id)
        except NoBackChannelError:
            # The per-request protocol: the call ends unrun, and the client retries it
            # with the user's answer (see input_required).
            params = mcp_types.ElicitRequestFormParams(
                message=message, requested_schema=ANSWER_SCHEMA
            )
            caller.question = mcp_types.ElicitRequest(params=params)
            caller.shown = _key(request.earlier_attempt)
            return ApprovalOutcome.UNAVAILABLE
        return caller.decided(answer)

    def _unasked(self) -> ApprovalOutcome:
        """The answer for a client that cannot be asked: pending (a ticket a person
        answers elsewhere) or unavailable (the call is refused)."""
        return ApprovalOutcome.PENDING if self.mode == "pending" else ApprovalOutcome.UNAVAILABLE


def with_approval_hint(result: ToolExecutionResult) -> ToolExecutionResult:
    """The result the client gets: an ``APPROVAL_PENDING`` result with a line saying how
    a person approves its ticket; any other result as it is."""
    if not isinstance(result, ToolExecutionFailure) or result.code != ErrorCode.APPROVAL_PENDING:
        return result
    meta = result.meta
    approval = meta.get("approval") if isinstance(meta, Mapping) else None
    ticket = approval.get("ticket") if isinstance(approval, Mapping) else None
    if not isinstance(ticket, str):
        return result
    hint = TextContent(
        f"A person approves it with `dsh-tools approvals approve {ticket}` (or rejects it "
        f"with `dsh-tools approvals reject {ticket}`), or in the web inbox "
        "(`dsh-tools approvals serve`)."
    )
    return attrs.evolve(result, content=(*result.content, hint))


_ANSWER_KEY = "dsh-tools/approval"


def _state(call: ToolExecutionInput, shown: str | None = None) -> str:
    """What binds a retried request's answer to the call it was asked about, and to the
    earlier attempt its question ``shown`` (a journal key)."""
    arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
    digest = ApprovalKey.for_call("", call.name, arguments).arguments_sha256 or ""
    return digest if shown is None else f"{digest}:{shown}"


def _key(earlier: object) -> str | None:
    """The journal key of a request's earlier attempt, or ``None``."""
    key = earlier.get("key") if isinstance(earlier, Mapping) else None
    return key if isinstance(key, str) else None


def _carried_answer(
    params: mcp_types.CallToolRequestParams, call: ToolExecutionInput
) -> tuple[mcp_types.ElicitResult | None, str | None]:
    """The answer a retried request carries for this very call (same tool, same
    arguments), and the earlier attempt its question showed; ``None`` for what it does
    not carry."""
    answer = (params.input_responses or {}).get(_ANSWER_KEY)
    if not isinstance(answer, mcp_types.ElicitResult):
        return None, None  # most requests: no arguments' digest to compute
    state, digest = params.request_state or "", _state(call)
    if state.split(":", 1)[0] != digest:
        return None, None
    return answer, state[len(digest) + 1 :] or None


def input_required(
    call: ToolExecutionInput, caller: _Caller
) -> mcp_types.InputRequiredResult | None:
    """What the request returns instead of its result when the ask must go to the user
    in a retried request (the per-request protocol), or ``None``."""
    if caller.question is None:
        return None
    return mcp_types.InputRequiredResult(
        input_requests={_ANSWER_KEY: caller.question}, request_state=_state(call, caller.shown)
    )
