"""Approval tickets in the call path: a call that waits for a person, and the one call
that acts on the answer.

A channel that answers ``pending`` ends the call at once with ``APPROVAL_PENDING``
(after waiting ``approval_timeout_ms``, when the registry says so), holding an open
:class:`~dsh_tools.approvals.ApprovalTicket`. A later call finds the answer: the model
repeating the same call (same agent, tool and arguments), or ``registry.resume(ticket)``.
Either takes the answer by :meth:`~dsh_tools.approvals.TicketStore.consume_ticket`, which
exactly one caller wins. Every store failure fails the call closed (``POLICY_ERROR``
naming the store); nothing here ever allows on its own: :func:`taken` returns an answer,
and :mod:`dsh_tools._pipeline.approval` turns it into a decision.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..approvals import ApprovalAnswer, ApprovalKey, ApprovalTicket, TicketState, TicketStore
from ..errors import ErrorCode
from ..json import FrozenDict, snapshot
from ..models import Ask, ToolExecutionFailure, ToolExecutionInput, failure_result
from ..presentation import unstructure_view
from ..records import Origin
from .call import Call, Interrupted, StageFailed, Waiting
from .loops import on_event_loop
from .results import message

if TYPE_CHECKING:
    from anyio import CapacityLimiter
    from anyio.lowlevel import RunVar

T = TypeVar("T")
TICKETS = Origin("approval tickets")
_WAIT_SLICE_S = 0.5
"""How long one wait on the store lasts before the caller's signal is looked at again."""
_QUIET_SLICE_S = 5.0
"""How long one wait on the store lasts for a call without a signal: only a cancelled
caller's ``stop`` is looked at between waits (each wait costs the store a look at the
ticket, so hundreds of waiting calls look less often)."""
_WAITERS = 512
"""The most calls of one event loop that wait for an answer at once; more wait their turn
(anyio's shared pool of 40 threads would make the 41st wait, answered or not)."""


def ticket_store(call: Call) -> TicketStore | None:
    """The plan's approval store as a ticket store, or ``None`` when it keeps no tickets."""
    store = call.plan.approval_store
    return cast(TicketStore, store) if callable(getattr(store, "open_ticket", None)) else None


def stored(call: Call, what: str, operation: Callable[[], T]) -> T:
    """``operation`` on the ticket store; a store that fails fails the call closed."""
    try:
        return operation()
    except BaseException as error:
        store = type(call.plan.approval_store).__qualname__
        prefix = f'approval store {store} failed to {what} for tool "{call.name}": '
        failure = call.contained(
            error, ErrorCode.POLICY_ERROR, prefix, "approval", origin=TICKETS, doing=f"{what} "
        )
        raise StageFailed(failure) from None


def taken(call: Call, store: TicketStore, ticket: ApprovalTicket) -> ApprovalTicket:
    """``ticket`` answered and resumed by this call, once: pending, expired, already
    resumed, tampered with or another call's ticket ends the call (``StageFailed``)."""
    execution = call.execution
    arguments: FrozenDict = execution.arguments  # type: ignore[assignment]
    agent = execution.agent or ""
    if (ticket.agent, ticket.tool_name) != (agent, call.name):
        raise _stopped(
            call, "refused", ticket, _refused(ticket, f'belongs to agent "{ticket.agent}"')
        )
    if not ticket.intact() or ticket.key != ApprovalKey.for_call(agent, call.name, arguments):
        problem = "holds arguments that no longer match their hash"
        raise _stopped(call, "refused", ticket, _refused(ticket, problem))
    if ticket.state is TicketState.PENDING:
        raise _stopped(call, "pending", ticket, pending_result(call, ticket))
    if ticket.state is TicketState.EXPIRED:
        raise _stopped(call, "expired", ticket, expired_result(call, ticket))
    won = None
    if ticket.state is TicketState.ANSWERED:
        won = stored(call, "resume a ticket", lambda: store.consume_ticket(ticket.id))
    if won is None or won.answer is None:
        text = (
            f'approval ticket {ticket.id} of tool "{call.name}" was already resumed; '
            "its call does not run again"
        )
        raise _stopped(call, "already-resumed", ticket, failure_result(text, ErrorCode.DENIED))
    return won


def _stopped(
    call: Call, word: str, ticket: ApprovalTicket, failure: ToolExecutionFailure
) -> StageFailed:
    """The end of a call its ticket stopped, traced as ``word``."""
    if call.plan.traced:
        call.trace("approval", TICKETS.name, word, _seen(ticket), TICKETS)
    return StageFailed(failure)


async def pending(call: Call, store: TicketStore, ask: Ask, asker: Origin | None) -> ApprovalTicket:
    """Open (or find) the call's ticket, wait for an answer as long as the registry
    says, and take it; without one in time the call ends pending or expired."""
    timeout_ms, on_timeout, expiry_s = call.handle.waiting
    now = time.time()
    lifetime = ask.expires_in_s if ask.expires_in_s is not None else expiry_s
    if timeout_ms is not None and on_timeout == "expired":
        lifetime = min(lifetime, timeout_ms / 1000)
    made = _new_ticket(call, ask, asker, now, now + lifetime)
    ticket = stored(call, "open a ticket", lambda: store.open_ticket(made))
    return taken(call, store, await awaited(call, store, ticket))


async def awaited(call: Call, store: TicketStore, ticket: ApprovalTicket) -> ApprovalTicket:
    """``ticket`` once answered, when it is pending and the registry waits for answers
    (``approval_timeout_ms``): as it is after the wait, or the call ends expired when
    the registry says so; otherwise ``ticket`` as it is."""
    timeout_ms, on_timeout, _ = call.handle.waiting
    if timeout_ms is None or ticket.state is not TicketState.PENDING:
        return ticket
    if call.plan.traced:
        call.trace("approval", TICKETS.name, "waiting", _seen(ticket), TICKETS)
    ticket = await _waited(call, store, ticket, timeout_ms / 1000)
    if ticket.state is TicketState.PENDING and on_timeout == "expired":
        raise _stopped(call, "expired", ticket, expired_result(call, ticket))
    return ticket


async def _waited(
    call: Call, store: TicketStore, ticket: ApprovalTicket, timeout_s: float
) -> ApprovalTicket:
    """The ticket once it is no longer pending or ``timeout_s`` passed, woken by the
    store. On an event loop the whole wait runs in one worker thread of a pool of its own
    (:data:`_WAITERS`), so waiting calls never hold up the loop's other work in threads;
    a cancelled caller leaves it, and the thread ends at its next slice."""
    deadline = time.monotonic() + timeout_s
    stop = threading.Event()
    if not on_event_loop():
        seen = _sliced(call, store, ticket.id, deadline, stop)
    else:
        import anyio.to_thread

        try:
            seen = await anyio.to_thread.run_sync(
                _sliced, call, store, ticket.id, deadline, stop,
                abandon_on_cancel=True, limiter=_waiters(),
            )  # fmt: skip
        finally:
            stop.set()
    if seen is None:
        raise StageFailed(_refused(ticket, "is gone from the approval store"))
    if seen.state is TicketState.PENDING and call.cancelled():
        raise Interrupted
    return seen


def _sliced(
    call: Call, store: TicketStore, ticket_id: str, deadline: float, stop: threading.Event
) -> ApprovalTicket | None:
    """Wait in slices until the ticket is no longer pending, the deadline passed, or the
    call was cancelled (its signal, or ``stop``): of :data:`_WAIT_SLICE_S` when the call
    has a signal to look at, else of :data:`_QUIET_SLICE_S`."""
    length = _WAIT_SLICE_S if call.signal is not None else _QUIET_SLICE_S
    while True:
        left = deadline - time.monotonic()
        slice_s = max(0.0, min(left, length))
        seen = _wait(call, store, ticket_id, slice_s)
        if seen is None or seen.state is not TicketState.PENDING or left <= slice_s:
            return seen
        if stop.is_set() or call.cancelled():
            return seen


def _waiters() -> CapacityLimiter:
    """The event loop's pool of threads that wait for answers."""
    from anyio import CapacityLimiter

    threads = _waiting_threads()
    try:
        return threads.get()
    except LookupError:
        limiter = CapacityLimiter(_WAITERS)
        threads.set(limiter)
        return limiter


@functools.cache
def _waiting_threads() -> RunVar[CapacityLimiter]:
    """Where each event loop keeps its :func:`_waiters` (anyio is imported on first use)."""
    from anyio.lowlevel import RunVar

    return RunVar("dsh_tools_approval_waiters")


def _wait(call: Call, store: TicketStore, ticket_id: str, slice_s: float) -> ApprovalTicket | None:
    return stored(call, "wait for an answer", lambda: store.wait_for_answer(ticket_id, slice_s))


def _new_ticket(
    call: Call, ask: Ask, asker: Origin | None, now: float, expires_at: float
) -> ApprovalTicket:
    execution = call.execution
    assert execution.agent is not None  # a call with no agent is never asked
    arguments: FrozenDict = execution.arguments  # type: ignore[assignment]
    key = ApprovalKey.for_call(execution.agent, call.name, arguments)
    asked_by: dict[str, Any] = {} if asker is None else _origin(asker)
    if ask.detail is not None:
        asked_by.update(ask.detail)
    return ApprovalTicket.new(
        key,
        execution.call_id,
        arguments,
        created_at=now,
        expires_at=expires_at,
        reason=ask.reason,
        card=_card(call),
        asked_by=snapshot(asked_by) if asked_by else None,  # type: ignore[arg-type]
    )


def _origin(origin: Origin) -> dict[str, Any]:
    shown: dict[str, Any] = {"plugin": origin.name}
    if origin.distribution is not None:
        shown["distribution"] = origin.distribution
    return shown


def _card(call: Call) -> FrozenDict | None:
    """The call's pending card as JSON, for whoever answers; ``None`` if it cannot be."""
    try:
        view = call.handle.present_call(call.input)
        card = snapshot(unstructure_view(view))
    except BaseException as error:  # a card is a courtesy: the ticket holds the arguments
        call.caught(error)
        return None
    return card if type(card) is FrozenDict else None


def _seen(ticket: ApprovalTicket) -> dict[str, Any]:
    """What a trace step (and so a decision record) shows of a ticket: its id, when it
    expires, and when it was answered and resumed (the answer itself is one step of
    :mod:`dsh_tools._pipeline.approval`, shown as every channel's answer is)."""
    seen: dict[str, Any] = {"ticket": ticket.id, "expires_at": _time(ticket.expires_at)}
    if ticket.answered_at is not None:
        seen["answered_at"] = ticket.answered_at
    if ticket.resumed_at is not None:
        seen["resumed_at"] = ticket.resumed_at
    return seen


def answer_of(ticket: ApprovalTicket) -> tuple[ApprovalAnswer, dict[str, Any]]:
    """The answer a call took from ``ticket`` (see :func:`taken`), as an approval
    service would have given it, and what its trace step shows of the ticket."""
    assert ticket.answer is not None  # taken() returns answered tickets only
    return ticket.answer.approval_answer(), _seen(ticket)


def _time(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) else None


def pending_result(call: Call, ticket: ApprovalTicket) -> ToolExecutionFailure:
    """``APPROVAL_PENDING``: the call waits for a person; it concludes the turn."""
    text = (
        f'tool "{call.name}" is waiting for a person to approve it (approval ticket '
        f"{ticket.id}); it has not run. Once it is approved, make the same call again."
    )
    return _with_ticket(failure_result(text, ErrorCode.APPROVAL_PENDING), ticket)


def expired_result(call: Call, ticket: ApprovalTicket) -> ToolExecutionFailure:
    """``APPROVAL_EXPIRED``: nobody answered (and resumed) in time; it did not run."""
    text = (
        f'the approval of tool "{call.name}" expired before it was given (approval ticket '
        f"{ticket.id}); it has not run"
    )
    return _with_ticket(failure_result(text, ErrorCode.APPROVAL_EXPIRED), ticket)


def _with_ticket(failure: ToolExecutionFailure, ticket: ApprovalTicket) -> ToolExecutionFailure:
    import attrs

    expires = ticket.expires_at
    meta = {
        "approval": {"ticket": ticket.id, "expires_at": expires if math.isfinite(expires) else None}
    }
    return attrs.evolve(failure, meta=meta, concludes_turn=True)


def _refused(ticket: ApprovalTicket, problem: str) -> ToolExecutionFailure:
    return failure_result(
        f"approval ticket {ticket.id} {problem}; nothing ran", ErrorCode.POLICY_ERROR
    )


def waiting(timeout_ms: object, on_timeout: object, expiry_s: object) -> Waiting:
    """The registry's approval waiting options, checked; raises ``DefinitionError``."""
    from ..errors import DefinitionError

    def positive(value: object) -> bool:
        return type(value) in (int, float) and 0 < cast(float, value) < math.inf

    if timeout_ms is not None and not (positive(timeout_ms) or timeout_ms == 0):
        raise DefinitionError(
            f"approval_timeout_ms must be a finite number of milliseconds >= 0, got {timeout_ms!r}"
        )
    if on_timeout not in ("pending", "expired"):
        raise DefinitionError(
            f'approval_timeout must be "pending" or "expired", got {on_timeout!r}'
        )
    if not positive(expiry_s):
        raise DefinitionError(f"approval_expiry_s must be a positive number, got {expiry_s!r}")
    return cast("float | None", timeout_ms), str(on_timeout), cast(float, expiry_s)


def resumed_call(
    store: object, ticket: object, agent: str | None
) -> tuple[ToolExecutionInput, str]:
    """The call a ticket holds, for ``registry.resume`` through a view of ``agent``
    (``None``: the registry, which may resume any agent's ticket). Raises
    :class:`~dsh_tools.approvals.TicketError` for an unknown ticket, another agent's, or
    a store that cannot be read; the pipeline checks the rest when the call runs."""
    from ..approvals import TicketError, TicketNotFoundError
    from ..json import thaw

    if isinstance(ticket, ApprovalTicket):
        ticket_id = ticket.id
    elif type(ticket) is str:
        ticket_id = ticket
    else:
        raise TypeError(
            f"resume() takes an ApprovalTicket or its id, got {type(ticket).__qualname__}"
        )
    if not callable(getattr(store, "get_ticket", None)):
        raise TicketError(
            ticket_id,
            f"cannot be read: the approval store {type(store).__qualname__} keeps no tickets",
        )
    try:
        found = cast(TicketStore, store).get_ticket(ticket_id)
    except Exception as error:
        raise TicketError(
            ticket_id,
            f"could not be read from the approval store {type(store).__qualname__}: "
            + message(error),
        ) from None
    if found is None:
        raise TicketNotFoundError(ticket_id, store)
    if agent is not None and found.agent != agent:
        raise TicketError(ticket_id, f'belongs to agent "{found.agent}", not "{agent}"')
    arguments = (
        thaw(found.arguments) if isinstance(found.arguments, FrozenDict) else found.arguments
    )
    call = ToolExecutionInput(found.call_id, found.tool_name, arguments, agent=found.agent)
    return call, ticket_id
