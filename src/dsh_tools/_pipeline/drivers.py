"""How a call starts, runs its stages in order, and is driven to its end.

:func:`start` freezes the call's arguments and picks its runner from the plan: the body
step alone (:func:`dsh_tools._pipeline.body.run_body`) for a tool in ``plan.direct``, else
:func:`run_staged`, the five stages in order, each skipped when it is empty for the scope.
Both are coroutines: ``await registry.execute(call)`` runs it on the host's event loop;
:func:`execute_sync` drives it by hand when the plan says nothing in it awaits a loop,
else runs it on a loop of its own.

Order of the staged runner: pre-execute (and approval) → guards → execute wrappers around
the body → post-execute → ``finalize_content`` → result observers. Each outcome then takes
one of two paths: the *post path* (successes, body failures, denials, cancellation before
dispatch) still passes post-execute; the *final path* (non-JSON arguments, a pre-aborted
call, a failing policy stage or wrapper) skips it. Both end in the tool's finalizer and
the result observers. Nothing a tool or plugin raises escapes as an exception (not even
``SystemExit`` or a sub-task's ``CancelledError``): the caller's own native task
cancellation and ``KeyboardInterrupt`` alone propagate, after the observers ran.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .. import _cancel as cancel
from .._json import FrozenDict
from .._models import Deny, ToolExecutionInput, ToolExecutionResult, failure_result
from ..errors import ErrorCode, JsonValueError
from .approval import ALLOW, unrunnable
from .body import run_body
from .call import Call, Handle, Interrupted, StageFailed, frozen_arguments
from .journal import dispatched, finish, journal_of
from .loops import drive, on_event_loop, run_on_own_loop, stops_the_caller
from .results import code
from .stages import decide, finalize, guard, observe, post_execute
from .wrappers import execute as execute_stage

if TYPE_CHECKING:
    from .plan import Plan

Run = Coroutine[Any, Any, ToolExecutionResult]


def start(
    plan: Plan,
    handle: Handle,
    call: ToolExecutionInput,
    resumes: str | None = None,
    *,
    synchronous: bool = False,
) -> Run:
    """The call, ready to run: its arguments frozen now (so no later change by the caller
    reaches a stage), its runner chosen by the plan.

    Arguments the tool's model admits (a flat dict of scalars its schema accepts) are
    snapshotted and validated in one step; anything else is snapshotted here and
    validated by the body step. ``resumes`` names the approval ticket a resumed call
    takes its answer from (such a call is always staged); ``synchronous`` says that
    :func:`execute_sync` drives it (a plain body then runs on the caller's thread).
    """
    name, raw = call.name, call.arguments
    entry = plan.tools.get(name)
    admitted = None if entry is None else entry.admit(raw)
    arguments = admitted if admitted is not None else frozen_arguments(raw)
    state = Call(plan, handle, call, arguments, entry, admitted, resumes, synchronous)
    if (
        state.signal is None
        and name in plan.direct
        and type(arguments) is FrozenDict
        and resumes is None
        and call.idempotency_key is None
    ):
        return run_body(state)
    return run_staged(state)


def execute_sync(
    plan: Plan, handle: Handle, call: ToolExecutionInput, resumes: str | None = None
) -> ToolExecutionResult:
    """The sync driver: by hand, with no event loop, unless the plan or the tool has
    something ``async def`` to await (then on a loop of its own)."""
    run = start(plan, handle, call, resumes, synchronous=True)
    entry = plan.tools.get(call.name)
    if plan.needs_loop or (entry is not None and entry.is_async):
        return run_on_own_loop(run)
    return drive(run)


async def run_staged(call: Call) -> ToolExecutionResult:
    """Every stage of the call's plan, in order; see the module docstring."""
    call.begin()
    try:
        result = await _decided_and_dispatched(call)
        # The post path. A success is never reported for a call the caller cancelled.
        if call.cancelled() and not result.is_error:
            result = call.aborted(result.additional_contexts)
        if call.plan.post:
            result = await post_execute(call, result)
    except StageFailed as failed:
        result = failed.result
    except BaseException as error:
        if not stops_the_caller(error):
            raise  # a fault of the call path itself: the stages contain everything else
        await _observed_abort(call)
        raise
    if call.attempt is not None:  # it took its ticket, then ended before stage 3
        await finish(call, result)
    result = finalize(call, result)
    if call.plan.result:
        await observe(call, result)
    return result


async def _observed_abort(call: Call) -> None:
    """The caller stopped the call (its task was cancelled, or ``KeyboardInterrupt``):
    the observers still see it, aborted, shielded from the cancellation and bounded by
    the grace, before it propagates."""
    result = finalize(call, call.aborted())
    if not call.plan.result:
        return
    if not on_event_loop():
        await observe(call, result)
        return
    import anyio

    limit = anyio.current_time() + cancel.CANCEL_GRACE_S
    with anyio.CancelScope(shield=True):
        await observe(call, result, limit)


async def _decided_and_dispatched(call: Call) -> ToolExecutionResult:
    """Stages 1 to 3. A result returned here takes the post path; a failure of policy
    itself (the final path) raises :class:`StageFailed`."""
    plan, arguments = call.plan, call.arguments
    if plan.traced:
        not_json = isinstance(arguments, JsonValueError)
        call.trace("call", None, "arguments not JSON" if not_json else "entered")
    if isinstance(arguments, JsonValueError):
        raise StageFailed(call.not_json(arguments))
    if call.cancelled():
        raise StageFailed(call.aborted())
    try:
        decision = await decide(call) if plan.pre or call.resumes is not None else ALLOW
    except Interrupted:
        # The caller cancelled while a policy was still deciding: nothing allowed the
        # call, so no guard runs and the body never does.
        return call.aborted()
    reason = decision.reason if isinstance(decision, Deny) else None
    if reason is None and plan.guards:
        reason = guard(call)
    if reason is not None:
        # A call that could not run anyway gets the error the model can correct from.
        return unrunnable(call, unknown=False) or failure_result(reason, ErrorCode.DENIED)
    if call.cancelled():
        return call.aborted()
    stage = execute_stage if plan.wrappers else run_body
    if journal_of(call) is None:
        result = await stage(call)
    else:
        result = await dispatched(call, lambda: stage(call))
    if plan.traced:
        call.trace("execute", "wrappers" if plan.wrappers else None, code(result), result)
    return result
