r"""The approval step of stage 1: an ``Ask`` becomes a request to the approval service,
and its answer a decision.

:func:`approve` is the one place this happens. It first asks the approval store for a
remembered answer under the call's :class:`~dsh_tools.approvals.ApprovalKey`\ s (exact
arguments, then the tool; a rejection wins whichever is the narrower), asks the service
only when nothing is remembered, accepts only an exact outcome, and keeps an
``*-always`` answer before turning it into ``Allow`` or ``Deny``. What would refuse a
call whatever the answer (:func:`unrunnable`, the tool's preflight, :func:`refusal`)
is checked before it is asked (by stage 1), so a yes is never spent. ``explain`` shares
:func:`unrunnable`, :func:`refusal`, :func:`unroutable` and :func:`remembered`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from .._json import FrozenDict, snapshot
from .._models import (
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    ApprovalService,
    Ask,
    Deny,
    ToolExecutionFailure,
    failure_result,
)
from .._safetext import safe_text
from ..approvals import (
    ANSWERS,
    REMEMBERED_OUTCOMES,
    ApprovalAnswer,
    ApprovalKey,
    ApprovalStore,
    ApprovalTicket,
    TicketAnswer,
    TicketAnsweredError,
    TicketError,
    TicketState,
    TicketStore,
    exact_outcome,
)
from ..errors import ErrorCode, RegistrationError
from ..records import Origin
from .call import Call, Interrupted, StageFailed
from .journal import earlier_attempt, needs_no_answer
from .loops import is_awaitable
from .results import message, shown
from .tickets import (
    ALLOWING,
    TICKETS,
    answer_of,
    awaited,
    pending,
    stored,
    taken,
    ticket_store,
)

logger = logging.getLogger("dsh_tools")

ALLOW = Allow()
"""The allowance the call path hands on (stage 1 allows most calls)."""
APPROVAL = Origin("approval service")
STORE = Origin("approval store")


class FunctionChannel:
    """A plain function (sync or ``async def``) taking the request, as an approval
    service."""

    __slots__ = ("request",)

    def __init__(self, function: Callable[[ApprovalRequest], Any]) -> None:
        self.request = function


def channel(value: object) -> ApprovalService | None:
    """``value`` as the approval service a plan asks; refuses anything that cannot be."""
    if value is None or callable(getattr(value, "request", None)):
        return cast("ApprovalService | None", value)
    if callable(value):
        return FunctionChannel(value)
    raise RegistrationError(
        "approval must be an ApprovalService (an object with a request(request) method) or "
        f"a callable taking the ApprovalRequest (sync or async), got {type(value).__qualname__}"
    )


def unrunnable(call: Call, *, unknown: bool = True) -> ToolExecutionFailure | None:
    """Why the call could not run even if a person allowed it (its tool is unknown, its
    arguments do not validate, or a path it declares is one its tool refuses, such as
    one outside the workspace), or ``None``: nobody is asked about such a call, and a
    denial of one reports this instead (the error the model can correct from).
    ``unknown=False`` leaves an unknown tool to the policy's own words."""
    entry = call.resolve()
    if entry is None:
        return call.unknown() if unknown else None
    try:
        call.parse(entry)
    except BaseException as error:
        return call.contained(error, ErrorCode.INVALID_ARGS)
    paths = entry.definition.paths
    arguments = call.arguments
    if paths is None or not isinstance(arguments, FrozenDict):
        return None
    for argument in paths.arguments:
        value = arguments.get(argument.name)
        if argument.kind == "pattern" or not isinstance(value, str):
            continue
        try:
            paths.resolve(value)
        except BaseException as error:
            return call.contained(error, ErrorCode.TOOL_ERROR)
    return None


async def refusal(call: Call) -> ToolExecutionFailure | None:
    """What the tool's ``preflight`` says would refuse a call that can run (its own
    checks that do not depend on a person: a program that is not installed, a sandbox
    that cannot start), or ``None``. Nobody is asked about a refused call."""
    entry = call.resolve()
    preflight = None if entry is None else entry.definition.preflight
    if preflight is None:
        return None
    assert entry is not None
    try:
        checked = preflight(call.parse(entry))
        if is_awaitable(checked):
            await call.settle(checked)
    except Interrupted:
        raise
    except BaseException as error:
        return call.contained(error, ErrorCode.TOOL_ERROR)
    return None


async def approve(call: Call, ask: Ask) -> Allow | Deny:
    """Route an ``Ask`` about a call that can run (stage 1 checked that first:
    :func:`~dsh_tools._pipeline.stages.refused_before_asking`) to the approval store (a
    remembered answer, then the call's open ticket), then to the approval service; only
    an allowed outcome allows, and only an ``*-always`` answer is remembered. A
    ``pending`` answer opens a ticket (:mod:`dsh_tools._pipeline.tickets`)."""
    name, execution, service = call.name, call.execution, call.plan.approval
    refused = unroutable(call, ask)
    if refused is not None:
        return refused
    agent = execution.agent
    # unroutable() denied a call without either:
    assert service is not None
    assert agent is not None
    if await needs_no_answer(call):  # the journal ends it without running: ask nobody
        return ALLOW
    keys = approval_keys(call)
    known = remembered(call, keys)
    if isinstance(known, Allow) and not _used(call, call.plan.approval_store, keys):
        known = None  # the grant ran out since it was recalled: ask again
    if known is not None:
        return known
    request = await _request(call, ask)
    tickets = ticket_store(call)
    if tickets is not None:
        ticket = stored(call, "find a ticket", lambda: tickets.find_ticket(keys[0]))
        if ticket is not None:  # the call repeated: it waits for (and takes) that answer
            now = await _asked_now(call, service, request, tickets, ticket)
            if now is not None:
                return now
            ticket = await awaited(call, tickets, ticket)
            return _answered(call, keys, taken(call, tickets, ticket))
    call.shown_earlier = _shown_key(service, request)  # (its yes settles that attempt)
    answer = await _answer(call, service, request)
    _said(call, APPROVAL, answer)
    if answer.outcome is ApprovalOutcome.PENDING:
        if tickets is None:
            kind = type(call.plan.approval_store).__qualname__
            raise StageFailed(
                failure_result(
                    f'approval service answered pending for tool "{name}", but the approval '
                    f"store {kind} keeps no tickets",
                    ErrorCode.POLICY_ERROR,
                )
            )
        return _answered(call, keys, await pending(call, tickets, ask, call.asker))
    return _kept(call, keys, answer)


def answers_now(service: object, request: ApprovalRequest) -> bool:
    """Whether ``service`` says it can answer ``request`` now (its optional
    ``answers_now(request)`` returns ``True``: a person is there), although a ticket of
    the same call is open; a service without the method, or whose method fails, cannot."""
    method = getattr(service, "answers_now", None)
    try:
        return callable(method) and method(request) is True
    except Exception as error:
        logger.warning("approval service %s failed to say whether it answers now: %s",
                       type(service).__qualname__, message(error))  # fmt: skip
        return False


async def _request(call: Call, ask: Ask) -> ApprovalRequest:
    """What the approval service is asked, with an unknown earlier attempt of the call
    (kept on the call for its ticket)."""
    execution = call.execution
    earlier = call.earlier = await earlier_attempt(call)
    shown = None if earlier is None else snapshot(earlier)
    assert execution.agent is not None  # a call with no agent is unroutable()
    arguments: FrozenDict = execution.arguments  # type: ignore[assignment]
    return ApprovalRequest(
        execution.agent, call.name, execution.call_id, arguments, ask.reason, call.signal,
        shown,  # type: ignore[arg-type]
    )  # fmt: skip


def _shown_key(service: object, request: ApprovalRequest) -> str | None:
    """The journal key of ``request``'s earlier attempt when ``service`` says the person
    answering sees it (its optional ``shows_earlier_attempt(request)`` returns ``True``);
    ``None`` when there is none, or the service does not, or fails to say."""
    earlier = request.earlier_attempt
    method = getattr(service, "shows_earlier_attempt", None)
    if earlier is None or not callable(method):
        return None
    try:
        shows = method(request) is True
    except Exception as error:
        logger.warning("approval service %s failed to say whether it shows an earlier "
                       "attempt: %s", type(service).__qualname__, message(error))  # fmt: skip
        return None
    key = earlier.get("key")
    return key if shows and isinstance(key, str) else None


async def _asked_now(
    call: Call,
    service: ApprovalService,
    request: ApprovalRequest,
    tickets: TicketStore,
    ticket: ApprovalTicket,
) -> Allow | Deny | None:
    """A service that can answer now is asked although the call's ticket is still
    pending; a person's answer closes the ticket, and this call takes it (once).
    ``None``: the service cannot answer now, or answered pending or unavailable, and the
    call waits on the ticket as before."""
    if ticket.state is not TicketState.PENDING or not answers_now(service, request):
        return None
    answer = await _answer(call, service, request)
    _said(call, APPROVAL, answer, {"ticket": ticket.id})
    if answer.outcome in (ApprovalOutcome.PENDING, ApprovalOutcome.UNAVAILABLE):
        return None
    keys = approval_keys(call)
    if answer.outcome not in ANSWERS:  # cancelled: nothing was said; the ticket stays open
        return _kept(call, keys, answer)
    by, channel_name = answer.by or type(service).__qualname__, answer.channel or "service"
    closing = TicketAnswer(
        answer.outcome, by, channel_name, feedback=answer.feedback,
        any_arguments=answer.any_arguments, expires_in_s=answer.expires_in_s, uses=answer.uses,
    )  # fmt: skip
    closed = stored(call, "answer a ticket", lambda: _closed(tickets, ticket.id, closing))
    if isinstance(closed, TicketAnsweredError):  # another answer came first: it wins
        return _answered(call, keys, taken(call, tickets, closed.ticket))
    if isinstance(closed, ApprovalTicket):
        taken(call, tickets, closed, shown_now=True)  # it takes the answer it gave, once
    return _kept(call, keys, answer)  # (a ticket that expired meanwhile: the answer decides)


def _closed(
    tickets: TicketStore, ticket_id: str, answer: TicketAnswer
) -> ApprovalTicket | TicketError:
    """The ticket answered, or why it could not be (a store failure raises)."""
    try:
        return tickets.answer_ticket(ticket_id, answer)
    except TicketError as error:
        return error


def resumed(call: Call, decision: Allow | Ask) -> Allow | Deny:
    """A call that resumes an approval ticket (``registry.resume``): policy did not deny
    it now, so the ticket's answer, taken once, decides (a rejection still wins over a
    policy that allows now)."""
    if isinstance(decision, Ask):
        failure = unrunnable(call)
        if failure is not None:
            raise StageFailed(failure)
    tickets = ticket_store(call)
    ticket_id = call.resumes
    assert ticket_id is not None
    if tickets is None:
        kind = type(call.plan.approval_store).__qualname__
        raise StageFailed(
            failure_result(f"the approval store {kind} keeps no tickets", ErrorCode.POLICY_ERROR)
        )
    ticket = stored(call, "read a ticket", lambda: tickets.get_ticket(ticket_id))
    if ticket is None:
        raise StageFailed(
            failure_result(f"approval ticket {ticket_id} does not exist", ErrorCode.POLICY_ERROR)
        )
    return _answered(call, approval_keys(call), taken(call, tickets, ticket))


def _answered(
    call: Call, keys: tuple[ApprovalKey, ApprovalKey], ticket: ApprovalTicket
) -> Allow | Deny:
    """The answer to the call's ticket, which this call took: recorded as a service's
    answer is, then decided by."""
    answer, seen = answer_of(ticket)
    _said(call, TICKETS, answer, seen)
    return _kept(call, keys, answer)


def _said(
    call: Call, origin: Origin, answer: ApprovalAnswer, about: dict[str, Any] | None = None
) -> None:
    """Trace an answer: the one step every channel's answer (a service's, an elicited
    one, a ticket's) becomes in the call's records, with who gave it through what, what
    they said, and how far it reaches. ``about`` says more (the ticket it answered)."""
    if not call.plan.traced:
        return
    detail = dict(about or {})
    for field in ("by", "channel", "feedback", "expires_in_s", "uses"):
        value = getattr(answer, field)
        if value is not None:
            detail[field] = value
    if answer.any_arguments:
        detail["any_arguments"] = True
    call.trace("approval", origin.name, answer.outcome.value, detail or answer.outcome, origin)


def _kept(
    call: Call, keys: tuple[ApprovalKey, ApprovalKey], answer: ApprovalAnswer
) -> Allow | Deny:
    """An answer's decision, after keeping an ``*-always`` answer; a rejection tells the
    model the person's feedback."""
    if answer.outcome in REMEMBERED_OUTCOMES:
        if call.cancelled():
            raise Interrupted
        key = keys[1] if answer.any_arguments else keys[0]
        _remember(call, call.plan.approval_store, key, answer)
    decision = _decision(call, answer.outcome)
    if isinstance(decision, Deny) and answer.feedback:
        return Deny(f"{decision.reason}: {safe_text(answer.feedback, multiline=True)}")
    return decision


def approval_keys(call: Call) -> tuple[ApprovalKey, ApprovalKey]:
    """Where an answer about a routable call is remembered: for its exact arguments, and
    for any arguments of its tool."""
    agent, name = call.execution.agent, call.name
    assert agent is not None  # a call with no agent is unroutable()
    arguments: FrozenDict = call.execution.arguments  # type: ignore[assignment]
    return ApprovalKey.for_call(agent, name, arguments), ApprovalKey.for_tool(agent, name)


def remembered(call: Call, keys: tuple[ApprovalKey, ...]) -> Allow | Deny | None:
    """What the answer the approval store remembers under ``keys`` decides, or ``None``
    when it has none. Only reads the store (``explain`` asks it too)."""
    outcome = _recalled(call, call.plan.approval_store, keys)
    return None if outcome is None else _decision(call, outcome, remembered=True)


def unroutable(call: Call, ask: Ask) -> Deny | None:
    """The denial of an ``Ask`` nobody can be asked about: no approval service, or a call
    without an agent to route it through."""
    name = call.name
    if call.plan.approval is None:
        return Deny(
            ask.reason or f'tool "{name}" requires approval, but no approval service is configured'
        )
    if call.execution.agent is None:
        return Deny(
            f'tool "{name}" requires approval, but the call has no agent to route it through'
        )
    return None


async def _answer(call: Call, service: ApprovalService, request: ApprovalRequest) -> ApprovalAnswer:
    """The service's answer, exactly an outcome with its reach; anything else fails the
    call closed."""
    try:
        answer = service.request(request)
        if is_awaitable(answer):
            answer = await call.settle(answer)
    except Interrupted:
        call.trace("approval", "approval service", "interrupted", origin=APPROVAL)
        raise
    except BaseException as error:
        prefix = "approval service failed: "
        failure = call.contained(error, ErrorCode.POLICY_ERROR, prefix, "approval", origin=APPROVAL)
        raise StageFailed(failure) from None
    outcome = exact_outcome(answer.outcome if type(answer) is ApprovalAnswer else answer)
    if outcome is None:
        call.trace("approval", "approval service", f"returned {shown(answer)}", answer, APPROVAL)
        raise StageFailed(
            failure_result(
                f"approval service returned {shown(answer)}; expected an ApprovalAnswer or "
                "one of " + ", ".join(repr(o.value) for o in ApprovalOutcome),
                ErrorCode.POLICY_ERROR,
            )
        )
    return answer if type(answer) is ApprovalAnswer else ApprovalAnswer(outcome)


def _recalled(
    call: Call, store: ApprovalStore, keys: tuple[ApprovalKey, ...]
) -> ApprovalOutcome | None:
    """The answer the store remembers for this call (a rejection wins over an allowance),
    or ``None``: nothing remembered, or the store failed, and then the service is asked."""
    found: ApprovalOutcome | None = None
    for key in keys:
        try:
            value = store.recall(key)
            outcome = exact_outcome(value)
            if value is not None and outcome not in REMEMBERED_OUTCOMES:
                raise TypeError(f"recall() returned {shown(value)}; expected an always-outcome")
        except BaseException as error:
            _asking_again(call, store, error, "recall")
            return None
        if outcome is ApprovalOutcome.REJECTED_ALWAYS or found is None:
            found = outcome
    if found is not None and call.plan.traced:
        call.trace("approval", "approval store", f"remembered {found.value}", keys, STORE)
    return found


def _remember(call: Call, store: ApprovalStore, key: ApprovalKey, answer: ApprovalAnswer) -> None:
    """Keep an ``*-always`` answer (with its end, if it has one); a store that cannot fails
    the call closed."""
    outcome = answer.outcome
    limits = {
        name: value
        for name, value in (("expires_in_s", answer.expires_in_s), ("uses", answer.uses))
        if value is not None
    }
    try:
        if limits and not callable(getattr(store, "use", None)):
            raise TypeError(
                f"{type(store).__qualname__} keeps no grants that end (it has no use()), "
                f"and this answer ends ({', '.join(limits)})"
            )
        store.remember(key, outcome, **limits)
    except BaseException as error:
        prefix = f'approval store failed to remember {outcome.value} for tool "{call.name}": '
        failure = call.contained(
            error, ErrorCode.POLICY_ERROR, prefix, "approval", origin=STORE, doing="remember "
        )
        raise StageFailed(failure) from None
    if call.plan.traced:
        call.trace("approval", "approval store", f"stored {outcome.value}", key, STORE)


def _used(call: Call, store: ApprovalStore, keys: tuple[ApprovalKey, ...]) -> bool:
    """Whether a use of a remembered allowance under ``keys`` was taken for this call (a
    store without grants that end has nothing to take: always). False when the grant
    expired or was used up since it was recalled, or the store failed: then the service
    is asked."""
    use = getattr(store, "use", None)
    if not callable(use):
        return True
    for key in keys:
        try:
            outcome = exact_outcome(use(key))
        except BaseException as error:
            _asking_again(call, store, error, "use", " a grant")
            return False
        if outcome is ApprovalOutcome.ALLOWED_ALWAYS:
            return True
    call.trace("approval", "approval store", "grant ran out", keys, STORE)
    return False


def _asking_again(
    call: Call, store: ApprovalStore, error: BaseException, doing: str, what: str = ""
) -> None:
    """A store that failed to ``doing`` (recall, use) what it remembers: the error is
    recorded and logged, and the service is asked instead."""
    call.caught(error, "approval", origin=STORE, doing=f"{doing} ")
    store_name, failure = type(store).__qualname__, message(error)
    template = 'tool "%s" (%s): approval store %s failed to %s%s; asking again: %s'
    logger.warning(template, call.name, call.execution.call_id, store_name, doing, what, failure)


def _decision(call: Call, outcome: ApprovalOutcome, *, remembered: bool = False) -> Allow | Deny:
    """What an outcome means for the call; an allowance (or a cancelled request) for a
    call the caller cancelled meanwhile is an interruption."""
    name = call.name
    if outcome in ALLOWING or outcome is ApprovalOutcome.CANCELLED:
        if call.cancelled():
            raise Interrupted
        if outcome is not ApprovalOutcome.CANCELLED:
            return ALLOW
        return Deny(f'approval for tool "{name}" was cancelled')
    if outcome is ApprovalOutcome.REJECTED_ALWAYS and remembered:
        return Deny(f'the user rejected tool "{name}" (a remembered answer)')
    if outcome is ApprovalOutcome.REJECTED or outcome is ApprovalOutcome.REJECTED_ALWAYS:
        return Deny(f'the user rejected tool "{name}"')
    return Deny(f'tool "{name}" requires approval, but no approval channel is available')
