"""``Ask`` answered with ACP's ``session/request_permission`` (:class:`AcpApprovalService`).

:mod:`dsh_tools.bridges.acp` is the public import path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._json import thaw
from .._models import ApprovalOutcome, ApprovalRequest, ToolExecutionInput
from .._safetext import safe_text
from ..approvals import REMEMBERED_OUTCOMES, ApprovalAnswer
from ._acp_cards import Json, plain_json
from ._acp_session import acp_tool_call

if TYPE_CHECKING:
    from .._registry import ToolRegistry, ToolScope

logger = logging.getLogger("dsh_tools")

ALLOW_ONCE = "allow-once"
"""``optionId`` of the permission option that lets the call run once."""
ALLOW_ALWAYS = "allow-always"
"""``optionId`` of the permission option that lets the call run and remembers that."""
REJECT_ONCE = "reject-once"
"""``optionId`` of the permission option that refuses the call."""
REJECT_ALWAYS = "reject-always"
"""``optionId`` of the permission option that refuses the call and remembers that."""

_CHOICES = {
    ALLOW_ONCE: ApprovalOutcome.ALLOWED_ONCE,
    ALLOW_ALWAYS: ApprovalOutcome.ALLOWED_ALWAYS,
    REJECT_ONCE: ApprovalOutcome.REJECTED,
    REJECT_ALWAYS: ApprovalOutcome.REJECTED_ALWAYS,
}
"""Each option this bridge offers, and the outcome choosing it means."""


class PermissionClient(Protocol):
    """The part of an ACP agent-side connection that sends ``session/request_permission``."""

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **kwargs: Any
    ) -> Any: ...


class AcpApprovalService:
    """Answers ``Ask`` with ACP's ``session/request_permission``: the editor shows the
    call with *Allow once* / *Always allow* / *Reject* / *Always reject* and the user's
    choice decides.

    :param client: the agent-side connection (anything with ``request_permission``).
    :param session_id: the ACP session to ask in, or a function of the request that picks
        it (for example from ``request.agent`` when each agent scope is one session).
    :param view: when given, the request describes the call with its tool's card (title,
        kind, locations), resolved for ``request.agent``; otherwise with the tool name.
    :param cwd: the session's working directory, for paths in that description.
    :param remember: offer the ``allow_always`` and ``reject_always`` options (the
        registry's approval store keeps the choice; see :mod:`dsh_tools.approvals`).
    :param always_for_tool: an *always* choice covers every later call of the tool by the
        same agent, not only calls with these exact arguments (the options say so).

    The answer maps to :class:`~dsh_tools.ApprovalOutcome`: *allow once* →
    ``allowed-once``, *always allow* → ``allowed-always``, *reject* (or an option this
    service did not offer) → ``rejected``, *always reject* → ``rejected-always`` (each
    *always* one as an :class:`~dsh_tools.ApprovalAnswer` with ``any_arguments`` when
    ``always_for_tool``); the client's ``cancelled`` outcome → ``cancelled``; an error, an
    unreachable client or an answer that is not an ACP permission outcome →
    ``unavailable``. Only the two *allow* outcomes let the call run.
    """

    def __init__(
        self,
        client: PermissionClient,
        session_id: str | Callable[[ApprovalRequest], str],
        *,
        view: ToolRegistry | ToolScope | None = None,
        cwd: str | None = None,
        remember: bool = True,
        always_for_tool: bool = False,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.view = view
        self.cwd = cwd
        self.remember = remember
        self.always_for_tool = always_for_tool

    def options(self) -> list[Json]:
        """The ``PermissionOption`` list this service offers, in the order shown."""
        reach = "this tool" if self.always_for_tool else "this call"
        options = [
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": f"Always allow {reach}", "kind": "allow_always"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
            {"optionId": REJECT_ALWAYS, "name": f"Always reject {reach}", "kind": "reject_always"},
        ]
        if self.remember:
            return options
        return [option for option in options if option["optionId"] in (ALLOW_ONCE, REJECT_ONCE)]

    def tool_call(self, request: ApprovalRequest) -> Json:
        """The ``toolCall`` the permission request describes (a ``ToolCallUpdate``).

        It carries no ``content``: in ACP an update's content replaces the call's, and the
        pending card sent with ``tool_call`` (a diff, say) should stay visible.
        """
        arguments = thaw(request.arguments)
        if self.view is None:
            return {
                "toolCallId": request.call_id,
                "title": safe_text(request.tool_name),
                "rawInput": arguments,
            }
        call = ToolExecutionInput(
            request.call_id, request.tool_name, request.arguments, agent=request.agent
        )
        card = acp_tool_call(self.view, call, cwd=self.cwd)
        keys = ("toolCallId", "title", "kind", "locations", "rawInput")
        return {key: card[key] for key in keys if key in card}

    async def request(self, request: ApprovalRequest) -> ApprovalOutcome | ApprovalAnswer:
        """Ask the client; see the class docstring for how its answer maps."""
        try:
            session_id = (
                self.session_id if isinstance(self.session_id, str) else self.session_id(request)
            )
            reason = request.reason
            extra = {} if reason is None else {"dsh_tools": {"reason": safe_text(reason)}}
            response = await self.client.request_permission(
                session_id=session_id,
                tool_call=self.tool_call(request),
                options=self.options(),
                **extra,
            )
        except Exception:
            logger.warning(
                "ACP permission request for tool %r (call %r) failed",
                request.tool_name,
                request.call_id,
                exc_info=True,
            )
            return ApprovalOutcome.UNAVAILABLE
        outcome = self._outcome(response, request)
        if self.always_for_tool and outcome in REMEMBERED_OUTCOMES:
            return ApprovalAnswer(outcome, any_arguments=True)
        return outcome

    def _outcome(self, response: object, request: ApprovalRequest) -> ApprovalOutcome:
        data = plain_json(response)
        outcome = data.get("outcome") if isinstance(data, dict) else None
        kind = outcome.get("outcome") if isinstance(outcome, dict) else None
        if kind == "cancelled":
            return ApprovalOutcome.CANCELLED
        if kind == "selected" and isinstance(outcome, dict):
            option = outcome.get("optionId")
            offered = {offer["optionId"] for offer in self.options()}
            if type(option) is str and option in offered:
                return _CHOICES[option]
            logger.warning(
                "ACP permission for call %r chose an option it was not offered, %r; rejecting",
                request.call_id,
                option,
            )
            return ApprovalOutcome.REJECTED
        logger.warning(
            "ACP permission for call %r got a malformed answer %r", request.call_id, response
        )
        return ApprovalOutcome.UNAVAILABLE
