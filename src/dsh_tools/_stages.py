"""Stages 1, 2, 4 and 5, each one loop over its implementations, and the finalizer.

The pipeline walks the implementations itself, in pluggy's order, instead of calling
pluggy's hook: an ``async def`` implementation is awaited before the next one runs (with
pluggy's ``firstresult`` loop an unawaited coroutine would "win"), one raising observer
cannot silence the others, and a policy that fails fails the call closed. Stage 3 (the
execute wrappers) is :mod:`dsh_tools._wrappers`; the body is :mod:`dsh_tools._body`.

Every function here takes the :class:`~dsh_tools._call.Call` and returns what its stage
decided; a failing policy raises :class:`~dsh_tools._call.StageFailed` carrying the
failure (the final path), an interrupted one :class:`~dsh_tools._call.Interrupted`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from . import cancel
from ._call import Call, Interrupted, StageFailed
from ._loops import is_awaitable, stops_the_caller
from ._render import render
from ._results import error_result, message, shown
from .approvals import (
    REMEMBERED_OUTCOMES,
    ApprovalAnswer,
    ApprovalKey,
    ApprovalStore,
    exact_outcome,
)
from .content import content_blocks, content_text
from .errors import ErrorCode
from .json import FrozenDict, FrozenList
from .models import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    ApprovalService,
    Ask,
    Block,
    Deny,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
)
from .records import Origin

logger = logging.getLogger("dsh_tools")

ALLOW = Allow()
_ALLOWING = frozenset({ApprovalOutcome.ALLOWED_ONCE, ApprovalOutcome.ALLOWED_ALWAYS})
APPROVAL = Origin("approval service")
STORE = Origin("approval store")


async def decide(call: Call) -> Allow | Deny:
    """Stage 1, pre-execute: the first decision wins; an ``Ask`` goes to the approval
    service. Raises :class:`Interrupted` when the caller cancels meanwhile."""
    decision = await first_decision(call)
    if isinstance(decision, Ask):
        return await _approve(call, decision)
    return decision


async def first_decision(call: Call) -> Allow | Deny | Ask:
    """The pre-execute loop: the first implementation that decides, else ``ALLOW``
    (what ``explain`` runs: an ``Ask`` is returned, not sent for approval)."""
    execution, tool = call.execution, call.tool
    for impl in call.plan.pre:
        try:
            if impl.arity == 2:
                decision = impl.function(execution, tool)
            else:
                decision = impl.function(execution)
            if decision is not None and is_awaitable(decision):
                decision = await call.settle(decision)
        except Interrupted:
            call.trace("pre_execute", impl.label, "interrupted", origin=impl.origin)
            raise
        except BaseException as error:
            if stops_the_caller(error):
                raise
            call.trace("pre_execute", impl.label, f"raised {message(error)}", error, impl.origin)
            prefix = f"pre-execute {impl.label} failed: "
            raise StageFailed(error_result(error, ErrorCode.POLICY_ERROR, prefix)) from None
        if call.plan.traced:
            call.trace("pre_execute", impl.label, outcome(decision), decision, impl.origin)
        if decision is None:
            continue
        if isinstance(decision, (Allow, Deny, Ask)):
            return decision
        raise StageFailed(
            failure_result(
                f"pre-execute {impl.label} returned {shown(decision)}; "
                "expected Allow(), Deny(reason), Ask(reason) or None",
                ErrorCode.POLICY_ERROR,
            )
        )
    return ALLOW


async def _approve(call: Call, ask: Ask) -> Allow | Deny:
    """Route an ``Ask`` to the approval store, then to the approval service; only an
    allowed outcome allows, and only an ``*-always`` answer is remembered."""
    name, execution, service = call.name, call.execution, call.plan.approval
    refused = unroutable(call, ask)
    if refused is not None:
        return refused
    agent = execution.agent
    # unroutable() denied a call without either:
    assert service is not None
    assert agent is not None
    arguments: FrozenDict = execution.arguments  # type: ignore[assignment]
    store = call.plan.approval_store
    keys = approval_keys(call)
    known = remembered(call, keys)
    if isinstance(known, Allow) and not _used(call, store, keys):
        known = None  # the grant ran out since it was recalled: ask again
    if known is not None:
        return known
    request = ApprovalRequest(agent, name, execution.call_id, arguments, ask.reason, call.signal)
    answer = await _answer(call, service, request)
    if answer.outcome in REMEMBERED_OUTCOMES:
        if call.cancelled():
            raise Interrupted
        _remember(call, store, keys[1] if answer.any_arguments else keys[0], answer)
    return _decision(call, answer.outcome)


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
        if stops_the_caller(error):
            raise
        call.trace("approval", "approval service", f"raised {message(error)}", error, APPROVAL)
        prefix = "approval service failed: "
        raise StageFailed(error_result(error, ErrorCode.POLICY_ERROR, prefix)) from None
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
    if call.plan.traced:
        call.trace("approval", "approval service", outcome.value, answer, APPROVAL)
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
            if stops_the_caller(error):
                raise
            call.trace(
                "approval", "approval store", f"recall raised {message(error)}", error, STORE
            )
            logger.warning(
                'tool "%s" (%s): approval store %s failed to recall; asking again: %s',
                call.name,
                call.execution.call_id,
                type(store).__qualname__,
                message(error),
            )
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
        if stops_the_caller(error):
            raise
        call.trace("approval", "approval store", f"remember raised {message(error)}", error, STORE)
        prefix = f'approval store failed to remember {outcome.value} for tool "{call.name}": '
        raise StageFailed(error_result(error, ErrorCode.POLICY_ERROR, prefix)) from None
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
            if stops_the_caller(error):
                raise
            call.trace("approval", "approval store", f"use raised {message(error)}", error, STORE)
            logger.warning(
                'tool "%s" (%s): approval store %s failed to use a grant; asking again: %s',
                call.name,
                call.execution.call_id,
                type(store).__qualname__,
                message(error),
            )
            return False
        if outcome is ApprovalOutcome.ALLOWED_ALWAYS:
            return True
    call.trace("approval", "approval store", "grant ran out", keys, STORE)
    return False


def _decision(call: Call, outcome: ApprovalOutcome, *, remembered: bool = False) -> Allow | Deny:
    """What an outcome means for the call; an allowance (or a cancelled request) for a
    call the caller cancelled meanwhile is an interruption."""
    name = call.name
    if outcome in _ALLOWING or outcome is ApprovalOutcome.CANCELLED:
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


def guard(call: Call) -> str | None:
    """Stage 2, guards: the first reason denies; a failing guard denies too."""
    execution, tool = call.execution, call.tool
    for impl in call.plan.guards:
        try:
            if impl.arity == 2:
                verdict = impl.function(execution, tool)
            else:
                verdict = impl.function(execution)
        except BaseException as error:
            if stops_the_caller(error):
                raise
            call.trace("guard", impl.label, f"raised {message(error)}", error, impl.origin)
            prefix = f"guard {impl.label} failed: "
            raise StageFailed(error_result(error, ErrorCode.DENIED, prefix)) from None
        if call.plan.traced:
            call.trace("guard", impl.label, outcome(verdict), verdict, impl.origin)
        if verdict is None:
            continue
        if isinstance(verdict, str):
            return verdict
        raise StageFailed(
            failure_result(
                f"guard {impl.label} returned {shown(verdict)}; guards return a reason or None",
                ErrorCode.DENIED,
            )
        )
    return None


async def post_execute(call: Call, result: ToolExecutionResult) -> ToolExecutionResult:
    """Stage 4, post-execute: a fold; each implementation sees the result as the previous
    ones left it. A success reported after the caller cancelled becomes aborted."""
    execution, tool = call.execution, call.tool
    for impl in call.plan.post:
        try:
            if impl.arity == 3:
                decision = impl.function(execution, result, tool)
            else:
                decision = impl.function(execution, result)
            if decision is not None and is_awaitable(decision):
                decision = await call.settle(decision)
            if call.plan.traced:
                call.trace("post_execute", impl.label, outcome(decision), decision, impl.origin)
            if decision is not None:
                result = _folded(call, result, decision)
        except StageFailed:
            raise
        except Interrupted:
            # A policy that never decided: fail closed, keeping nothing it did not review.
            call.trace("post_execute", impl.label, "interrupted", origin=impl.origin)
            raise StageFailed(call.aborted(())) from None
        except BaseException as error:
            if stops_the_caller(error):
                raise
            call.trace("post_execute", impl.label, f"raised {message(error)}", error, impl.origin)
            prefix = f"post-execute {impl.label} failed: "
            raise StageFailed(error_result(error, ErrorCode.POLICY_ERROR, prefix)) from None
    if call.cancelled() and not result.is_error:
        result = call.aborted(result.additional_contexts)
    return result


def _folded(call: Call, result: ToolExecutionResult, decision: object) -> ToolExecutionResult:
    """The result after one post-execute decision."""
    if isinstance(decision, Accept):
        return _accepted(call, result, decision)
    if isinstance(decision, Block):
        text = content_text(decision.feedback) or "tool result blocked by post-execute policy"
        return ToolExecutionFailure(
            error=failure_result(text, ErrorCode.BLOCKED).error,
            content=decision.feedback,
            additional_contexts=decision.additional_contexts,
        )
    raise TypeError(f"returned {shown(decision)}; expected Accept(...), Block(feedback) or None")


def _accepted(call: Call, result: ToolExecutionResult, decision: Accept) -> ToolExecutionResult:
    contexts = result.additional_contexts + decision.additional_contexts
    if decision.replaces_value:
        if isinstance(result, ToolExecutionFailure):
            raise ValueError("cannot replace the value of a failed result")
        replaced = rerender(call, decision.value)
        return attrs.evolve(replaced, additional_contexts=contexts)
    if decision.content is not None:
        return attrs.evolve(shown_as(result, decision.content), additional_contexts=contexts)
    return attrs.evolve(result, additional_contexts=contexts) if contexts else result


def shown_as(result: ToolExecutionResult, content: FrozenList) -> ToolExecutionResult:
    """``result`` showing ``content`` instead of its own (a redaction, an output limit).

    When the content changed, the ``value`` and ``meta`` it was rendered from are withheld
    (``None``): every bridge, card and log reads them, and a redaction that a second wire
    (MCP's ``structuredContent``, a read card, the audit log) bypasses is no redaction.
    """
    if content == result.content:
        return result
    if isinstance(result, ToolExecutionSuccess):
        return attrs.evolve(result, content=content, value=None, meta=None)
    return attrs.evolve(result, content=content, meta=None)


def rerender(call: Call, value: object) -> ToolExecutionSuccess:
    """A value a wrapper or post-execute supplied, through the output contract of the
    tool as it is now; an unknown tool or a broken contract fails on the final path."""
    entry = call.resolve()
    if entry is None:
        raise StageFailed(call.unknown())
    try:
        parsed = call.parse(entry)
        return render(entry, value, parsed, call.contexts, call.concluded, call.input.parent)
    except BaseException as error:
        if stops_the_caller(error):
            raise
        raise StageFailed(error_result(error, ErrorCode.INVALID_TOOL_OUTPUT)) from None


def finalize(call: Call, result: ToolExecutionResult) -> ToolExecutionResult:
    """The end of every path, before the observers: a conclusion only the body may ask
    for, then the tool's ``finalize_content`` (once, when the tool was visible at entry)."""
    if isinstance(result, ToolExecutionSuccess) and result.concludes_turn and not call.concluded:
        result = attrs.evolve(result, concludes_turn=False)
    finalize_content = call.entry.definition.finalize_content if call.entry is not None else None
    if finalize_content is not None:
        result = _finalized(call, finalize_content, result)
        if call.plan.traced:
            call.trace("finalize", None, code(result), result)
    if call.plan.traced:
        call.trace("result", None, code(result), result)
    return result


def observe(
    call: Call, result: ToolExecutionResult, limit: float | None = None
) -> Coroutine[Any, Any, None]:
    """Stage 5: every observer sees the final result, exactly once; failures are logged
    and contained. ``limit`` bounds a pending ``async`` observer (default: the caller's
    deadline plus the grace). The caller's signal does not: it asks the tool to stop
    working, and an observer (an audit log) records that it did; cut short on a timer
    started by the signal, whether a cancelled call is recorded would depend on load."""
    if call.plan.async_observers:
        return _shielded(call, result, limit)
    return _observers(call, result, math.inf)


async def _shielded(call: Call, result: ToolExecutionResult, limit: float | None) -> None:
    """Observers that may await: each sees the result even if the caller is cancelled
    meanwhile (the cancellation is delivered at the caller's next checkpoint)."""
    import anyio

    if limit is None:
        limit = anyio.current_effective_deadline()
        if limit != math.inf:
            limit = max(limit, anyio.current_time()) + cancel.CANCEL_GRACE_S
    with anyio.CancelScope(shield=True):
        await _observers(call, result, limit)


async def _observers(call: Call, result: ToolExecutionResult, limit: float) -> None:
    execution, tool = call.execution, call.tool
    record = call.decision_record() if call.plan.recording else None
    for impl in call.plan.result:
        try:
            if impl.takes_record:
                arguments = (execution, result, tool)[: impl.arity]
                observed = impl.function(*arguments, record=record)
            elif impl.arity == 3:
                observed = impl.function(execution, result, tool)
            else:
                observed = impl.function(execution, result)
            if observed is not None and is_awaitable(observed):
                await call.settle(observed, limit, by_signal=False)
        except Interrupted:
            logger.warning(
                'tool "%s" (%s): result observer %s was interrupted at the deadline of the caller',
                call.name,
                execution.call_id,
                impl.label,
            )
        except BaseException as error:
            if stops_the_caller(error):
                raise
            logger.warning(
                'tool "%s" (%s): result observer %s failed: %s',
                call.name,
                execution.call_id,
                impl.label,
                message(error),
            )


def _finalized(
    call: Call, finalize: Callable[..., Any], result: ToolExecutionResult
) -> ToolExecutionResult:
    try:
        content = finalize(call.execution, result)
    except BaseException as error:
        if stops_the_caller(error):
            raise
        return error_result(error, ErrorCode.TOOL_ERROR, "finalize_content failed: ")
    if content is None:
        return result
    try:
        return shown_as(result, content_blocks(content))
    except BaseException as error:
        if stops_the_caller(error):
            raise
        return failure_result(
            f"tool result must be losslessly JSON-serializable: {message(error)}",
            ErrorCode.INVALID_JSON,
        )


def outcome(decision: object) -> str:
    """How a trace shows a decision: ``abstained``, a guard's reason as is, else its repr."""
    if decision is None:
        return "abstained"
    if isinstance(decision, str):
        return str.__str__(decision)
    return shown(decision)


def code(result: ToolExecutionResult) -> str:
    """A result's code for traces: ``ok`` for a success."""
    return result.error.info.code if isinstance(result, ToolExecutionFailure) else "ok"
