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

import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from .._json import FrozenDict, snapshot
from .._models import (
    ApprovalOutcome,
    Ask,
    ToolExecutionFailure,
    ToolExecutionInput,
    failure_result,
)
from .._numbers import positive_finite
from ..approvals import (
    ApprovalAnswer,
    ApprovalKey,
    ApprovalTicket,
    TicketState,
    TicketStore,
    TicketWatchers,
)
from ..approvals._tickets import IDEMPOTENCY_KEY
from ..errors import ErrorCode
from ..presentation._cards import unstructure_view
from ..records import Origin
from .call import Call, Interrupted, StageFailed, Waiting
from .journal import journal_of, took, with_ticket
from .loops import on_event_loop, soon
from .results import message

T = TypeVar("T")
TICKETS = Origin("approval tickets")
ALLOWING = frozenset({ApprovalOutcome.ALLOWED_ONCE, ApprovalOutcome.ALLOWED_ALWAYS})
"""The outcomes that let a call run."""


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


def taken(
    call: Call, store: TicketStore, ticket: ApprovalTicket, *, shown_now: bool = False
) -> ApprovalTicket:
    """``ticket`` answered and resumed by this call, once: pending, expired, already
    resumed, tampered with or another call's ticket ends the call (``StageFailed``), and
    so does an allowance given for a card that is no longer the call's
    (:func:`_check_card`; ``shown_now``: the person answered a service that showed the
    card as it is now)."""
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
    if ticket.state is TicketState.ANSWERED and not shown_now:
        _check_card(call, store, ticket)
    won = None
    if ticket.state is TicketState.RESUMED and took(call, ticket):
        won = ticket  # this call took it before: the journal knows what became of it
    elif ticket.state is TicketState.ANSWERED:
        if journal_of(call) is not None:  # taken with its journal entry begun, at once
            won = with_ticket(call, store, ticket)
        else:
            won = stored(call, "resume a ticket", lambda: store.consume_ticket(ticket.id))
    if won is None or won.answer is None:
        text = (
            f'approval ticket {ticket.id} of tool "{call.name}" was already resumed; '
            "its call does not run again"
        )
        raise _stopped(call, "already-resumed", ticket, failure_result(text, ErrorCode.DENIED))
    call.ticket = won
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
    """The ticket once it is no longer pending or ``timeout_s`` passed. The call holds no
    thread while it waits: the store's watcher (``watch_ticket``) wakes it, as the
    caller's signal does; it looks at its ticket then, and when the ticket would expire.
    On an event loop it sleeps on the loop; without one (``execute_sync``), in the
    calling thread."""
    deadline = time.monotonic() + timeout_s
    waiter = _LoopWaiter() if on_event_loop() else _ThreadWaiter()
    watch = _watch(store)
    stop = stored(call, "wait for an answer", lambda: watch(ticket.id, waiter.wake))
    unhook = None if call.signal is None else call.signal.add_callback(waiter.wake)
    try:
        while True:
            seen = stored(call, "wait for an answer", lambda: store.get_ticket(ticket.id))
            left = deadline - time.monotonic()
            if seen is None or seen.state is not TicketState.PENDING or left <= 0:
                break
            if call.cancelled():
                raise Interrupted
            expires_in = max(seen.expires_at - time.time(), _MIN_WAIT_S)
            await waiter.wait(min(left, expires_in))
    finally:
        stop()
        if unhook is not None:
            unhook()
    if seen is None:
        raise StageFailed(_refused(ticket, "is gone from the approval store"))
    return seen


_MIN_WAIT_S = 0.05
"""The shortest wait for a ticket's expiry (the store's clock may be a little behind)."""


class _LoopWaiter:
    """Sleeps on the event loop until woken from any thread (or the time is up)."""

    def __init__(self) -> None:
        import anyio

        self._woken = anyio.Event()
        self.wake = soon(self._set)

    def _set(self) -> None:
        self._woken.set()

    async def wait(self, seconds: float) -> None:
        import anyio

        with anyio.move_on_after(seconds):
            await self._woken.wait()
        self._woken = anyio.Event()


class _ThreadWaiter:
    """Blocks the calling thread until woken (or the time is up): no loop runs."""

    def __init__(self) -> None:
        self._woken = threading.Event()
        self.wake = self._woken.set

    async def wait(self, seconds: float) -> None:
        self._woken.wait(seconds)
        self._woken.clear()


_polled: weakref.WeakKeyDictionary[object, TicketWatchers] = weakref.WeakKeyDictionary()
"""The watchers of stores without ``watch_ticket``, one per store."""


def _watch(store: TicketStore) -> Callable[[str, Callable[[], None]], Callable[[], None]]:
    """How to watch ``store``'s tickets: its own ``watch_ticket``, else one thread per
    store that looks at every waited ticket with ``get_ticket`` every
    :data:`_POLL_S` seconds."""
    own = getattr(store, "watch_ticket", None)
    if callable(own):
        return cast("Callable[[str, Callable[[], None]], Callable[[], None]]", own)
    try:
        watchers = _polled[store]
    except KeyError:

        def settled(ticket_ids: Sequence[str]) -> list[str]:
            seen = [(ticket_id, store.get_ticket(ticket_id)) for ticket_id in ticket_ids]
            return [id for id, ticket in seen if ticket is None or ticket.state is not _PENDING]

        watchers = _polled[store] = TicketWatchers(settled, _POLL_S)
    return watchers.watch


_PENDING = TicketState.PENDING
_POLL_S = 0.5
"""How often a store without ``watch_ticket`` is looked at while calls wait on it."""


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
    if call.earlier is not None:  # the person's answer settles it: the ticket shows it
        asked_by["earlier_attempt"] = call.earlier
    asked_by.pop(IDEMPOTENCY_KEY, None)  # the host's alone to give
    if call.input.idempotency_key is not None:  # a resume journals under it
        asked_by[IDEMPOTENCY_KEY] = call.input.idempotency_key
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


def _check_card(call: Call, store: TicketStore, ticket: ApprovalTicket) -> None:
    """End the call ``APPROVAL_STALE`` (``StageFailed``) when ``ticket`` allows it but
    the call's card, drawn again now, differs from the card the ticket showed the person:
    what the call would do changed since (the file an edit's diff was drawn from, say).
    The ticket is spent first, and no journal entry begins, so the same call made again
    asks again. A ticket that holds no card showed the arguments alone, which its key
    pins; a rejection needs no check."""
    answer = ticket.answer
    if answer is None or answer.outcome not in ALLOWING or ticket.card is None:
        return
    if _card(call) == ticket.card:
        return
    stored(call, "resume a ticket", lambda: store.consume_ticket(ticket.id))
    text = (
        f'tool "{call.name}" did not run: what it would do changed after a person approved '
        f"it (approval ticket {ticket.id}; its card, drawn again now, differs from the one "
        "approved, for example because the file it changes was changed meanwhile). Make the "
        "same call again to ask the person about it as it is now."
    )
    raise _stopped(call, "stale", ticket, failure_result(text, ErrorCode.APPROVAL_STALE))


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

    if timeout_ms is not None and not (positive_finite(timeout_ms) or timeout_ms == 0):
        raise DefinitionError(
            f"approval_timeout_ms must be a finite number of milliseconds >= 0, got {timeout_ms!r}"
        )
    if on_timeout not in ("pending", "expired"):
        raise DefinitionError(
            f'approval_timeout must be "pending" or "expired", got {on_timeout!r}'
        )
    if not positive_finite(expiry_s):
        raise DefinitionError(f"approval_expiry_s must be a positive number, got {expiry_s!r}")
    return cast("float | None", timeout_ms), str(on_timeout), expiry_s


def resumed_call(
    store: object, ticket: object, agent: str | None
) -> tuple[ToolExecutionInput, str]:
    """The call a ticket holds, for ``registry.resume`` through a view of ``agent``
    (``None``: the registry, which may resume any agent's ticket). Raises
    :class:`~dsh_tools.approvals.TicketError` for an unknown ticket, another agent's, or
    a store that cannot be read; the pipeline checks the rest when the call runs."""
    from .._json import thaw
    from ..approvals import TicketError, TicketNotFoundError

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
    call = ToolExecutionInput(
        found.call_id,
        found.tool_name,
        arguments,
        agent=found.agent,
        idempotency_key=found.idempotency_key,  # journaled where the host's repeat looks
    )
    return call, ticket_id
