"""The workflow side of a tool call on Temporal: :func:`call_tool`.

Workflow code: it imports ``temporalio`` and the engine-neutral steps, never
``dsh_tools``; the five stages run in the activities (``_temporal_worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from ._waiting import ANSWERED, EXECUTE, RESUME, TICKET_STATE, WAITING, Waiting, request, steps

_NO_TIMEOUT = timedelta(days=1)
"""How long a call without a time budget may run as one activity attempt."""
_GRACE = timedelta(seconds=30)
"""Beyond a call's time budget, for its post-execute and observers to finish."""
_LOOK = timedelta(seconds=30)
"""How long one look at a ticket may take."""

_nudged: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


async def call_tool(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    agent: str | None = None,
    timeout: timedelta | None = None,
    heartbeat_timeout: timedelta = timedelta(seconds=30),
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    waiting: Waiting = WAITING,
) -> dict[str, Any]:
    """Run one tool call from a workflow and return its result as JSON
    (``result_to_json``'s form: ``isError``, ``content``, ``value`` or ``error``, ...).

    The call runs as the ``dsh_tools.execute`` activity (the five stages, in a worker).
    ``timeout`` is the call's time budget: the body's deadline (``TOOL_TIMEOUT``), and
    the activity's start-to-close timeout with a grace for the later stages. The
    activity heartbeats the call's progress every third of ``heartbeat_timeout``; a
    worker that stops is noticed after it, and the engine retries per ``retry_policy``
    (Temporal's default: until it succeeds). A retried attempt of a tool that is not
    idempotent ends ``OUTCOME_UNKNOWN`` instead of running again. Cancelling the
    workflow (or the task awaiting this) fires the call's signal: the call ends
    ``ABORTED`` and that result is returned.

    A call that waits for a person (``APPROVAL_PENDING``) waits here, durably, with no
    worker busy: it looks at its ticket as ``waiting`` says, or at once on the
    ``dsh_tools.ticket_answered`` signal (the ticket id as its argument), and resumes it
    once answered, from whichever channel (``dsh-tools approvals approve``, the inbox,
    MCP). A rejection ends ``DENIED`` with the person's feedback; an expired ticket
    ``APPROVAL_EXPIRED``.
    """
    timeout_s = None if timeout is None else timeout.total_seconds()
    options: dict[str, Any] = {
        "start_to_close_timeout": _NO_TIMEOUT if timeout is None else timeout + _GRACE,
        "heartbeat_timeout": heartbeat_timeout,
        "retry_policy": retry_policy,
        "task_queue": task_queue,
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }
    run = steps(request(name, arguments, agent, timeout_s), waiting)
    outcome: Any = None
    try:
        while True:
            kind, argument = run.send(outcome)
            outcome = await _perform(kind, argument, options)
    except StopIteration as done:
        result: dict[str, Any] = done.value
        return result


async def _perform(kind: str, argument: Any, options: dict[str, Any]) -> Any:
    if kind == "execute":
        return await workflow.execute_activity(EXECUTE, argument, **options)
    if kind == "resume":
        return await workflow.execute_activity(RESUME, argument, **options)
    if kind == "state":
        return await workflow.execute_activity(
            TICKET_STATE, argument, start_to_close_timeout=_LOOK, task_queue=options["task_queue"]
        )
    ticket, seconds = argument
    nudged = _nudges()
    with contextlib.suppress(asyncio.TimeoutError):
        await workflow.wait_condition(lambda: ticket in nudged, timeout=seconds)
    nudged.discard(ticket)
    return None


def _nudges() -> set[str]:
    """The tickets this workflow run was told to look at (the ``dsh_tools.ticket_answered``
    signal, whose handler is set on the first wait)."""
    instance = workflow.instance()
    nudged = _nudged.get(instance)
    if nudged is None:
        nudged = _nudged[instance] = set()

        def nudge(ticket: str) -> None:
            nudged.add(ticket)

        workflow.set_signal_handler(ANSWERED, nudge)
    return nudged
