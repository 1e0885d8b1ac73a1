"""Stages 1, 2, 4 and 5, each one loop over its implementations, and the finalizer
(stage 1's approval step, for an ``Ask``, is :mod:`dsh_tools._pipeline.approval`).

The pipeline walks the implementations itself, in pluggy's order, instead of calling
pluggy's hook: an ``async def`` implementation is awaited before the next one runs (with
pluggy's ``firstresult`` loop an unawaited coroutine would "win"), one raising observer
cannot silence the others, and a policy that fails fails the call closed. Stage 3 (the
execute wrappers) is :mod:`dsh_tools._pipeline.wrappers`; the body is
:mod:`dsh_tools._pipeline.body`.

Every function here takes the :class:`~dsh_tools._pipeline.call.Call` and returns what its stage
decided; a failing policy raises :class:`~dsh_tools._pipeline.call.StageFailed` carrying the
failure (the final path), an interrupted one :class:`~dsh_tools._pipeline.call.Interrupted`. What
an implementation raises is contained by :meth:`~dsh_tools._pipeline.call.Call.contained`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from .. import _cancel as cancel
from .._content import content_blocks, content_text
from .._json import FrozenList
from .._models import (
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
)
from .._tracing import Stage
from ..errors import ErrorCode
from .approval import ALLOW, approve, refusal, resumed, unrunnable
from .call import Call, Interrupted, StageFailed
from .loops import is_awaitable
from .plan import Impl
from .render import rerender
from .results import code, message, shown

logger = logging.getLogger("dsh_tools")


async def decide(call: Call) -> Allow | Deny:
    """Stage 1, pre-execute: the first decision wins; an ``Ask`` goes to the approval
    service, unless the call would be refused whatever the answer (see
    :func:`refused_before_asking`). A call that resumes an approval ticket takes the
    ticket's answer unless policy now denies. Raises :class:`Interrupted` when the caller
    cancels meanwhile."""
    decision = await first_decision(call)
    if call.resumes is not None and not isinstance(decision, Deny):
        return resumed(call, decision)
    if isinstance(decision, Ask):
        return await refused_before_asking(call) or await approve(call, decision)
    return decision


async def refused_before_asking(call: Call) -> Deny | None:
    """Never waste a yes: what would refuse the call after a person allowed it, checked
    before anyone is asked. A call that cannot run (:func:`unrunnable`) or that its
    tool's preflight refuses (:func:`refusal`) fails with that error (raises
    :class:`StageFailed`); one a guard would deny is denied with the guard's reason (the
    guards run on a dry run of the call, ``execution.dry_run``, so one with a side effect
    skips it; they run again for real once the call is allowed)."""
    failure = unrunnable(call) or await refusal(call)
    if failure is not None:
        call.trace("approval", None, "not asked: " + failure.code, failure)
        raise StageFailed(failure)
    reason = guard(call, dry_run=True) if call.plan.guards else None
    return None if reason is None else Deny(reason)


async def first_decision(call: Call) -> Allow | Deny | Ask:
    """The pre-execute loop: the first implementation that decides, else ``ALLOW``
    (what ``explain`` runs: an ``Ask`` is returned, not sent for approval)."""
    execution, tool = call.execution, call.tool
    for impl in call.plan.pre:
        try:
            decision = impl.call(execution, tool)
            if decision is not None and is_awaitable(decision):
                decision = await call.settle(decision)
        except Interrupted:
            call.trace("pre_execute", impl.label, "interrupted", origin=impl.origin)
            raise
        except BaseException as error:
            raise _failed(call, "pre_execute", impl, error, ErrorCode.POLICY_ERROR) from None
        if call.plan.traced:
            call.trace("pre_execute", impl.label, outcome(decision), decision, impl.origin)
        if decision is None:
            continue
        if isinstance(decision, (Allow, Deny)):
            return decision
        if isinstance(decision, Ask):
            call.asker = impl.origin
            return decision
        raise _misreturned(
            "pre-execute",
            impl,
            decision,
            "expected Allow(), Deny(reason), Ask(reason) or None",
            ErrorCode.POLICY_ERROR,
        )
    return ALLOW


def guard(call: Call, *, dry_run: bool = False) -> str | None:
    """Stage 2, guards: the first reason denies; a failing guard denies too. ``dry_run``
    shows the guards a dry run of the call (before a person is asked, and ``explain``)."""
    execution, tool = call.execution, call.tool
    if dry_run and not execution.dry_run:
        execution = attrs.evolve(execution, dry_run=True)
    for impl in call.plan.guards:
        try:
            verdict = impl.call(execution, tool)
        except BaseException as error:
            raise _failed(call, "guard", impl, error, ErrorCode.DENIED) from None
        if call.plan.traced:
            call.trace("guard", impl.label, outcome(verdict), verdict, impl.origin)
        if verdict is None:
            continue
        if isinstance(verdict, str):
            return verdict
        raise _misreturned(
            "guard", impl, verdict, "guards return a reason or None", ErrorCode.DENIED
        )
    return None


def _failed(
    call: Call, stage: Stage, impl: Impl, error: BaseException, error_code: ErrorCode
) -> StageFailed:
    """What ends the call when a policy of ``stage`` raised: the error, contained."""
    prefix = f"{stage.replace('_', '-')} {impl.label} failed: "
    return StageFailed(call.contained(error, error_code, prefix, stage, impl.label, impl.origin))


def _misreturned(
    stage: str, impl: Impl, value: object, wanted: str, error_code: ErrorCode
) -> StageFailed:
    """What ends the call when a policy returned ``value``, which its stage cannot use."""
    return StageFailed(
        failure_result(f"{stage} {impl.label} returned {shown(value)}; {wanted}", error_code)
    )


async def post_execute(call: Call, result: ToolExecutionResult) -> ToolExecutionResult:
    """Stage 4, post-execute: a fold; each implementation sees the result as the previous
    ones left it. A success reported after the caller cancelled becomes aborted."""
    execution, tool = call.execution, call.tool
    for impl in call.plan.post:
        try:
            decision = impl.call(execution, result, tool)
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
            raise _failed(call, "post_execute", impl, error, ErrorCode.POLICY_ERROR) from None
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
        shown = shown_as(result, decision.content, bounded=decision.bounded)
        return attrs.evolve(shown, additional_contexts=contexts)
    return attrs.evolve(result, additional_contexts=contexts) if contexts else result


def shown_as(
    result: ToolExecutionResult, content: FrozenList, *, bounded: bool = False
) -> ToolExecutionResult:
    """``result`` showing ``content`` instead of its own (a redaction, an output limit).

    When the content changed, the ``value`` and ``meta`` it was rendered from are withheld
    (``None``): every bridge, card and log reads them, and a redaction that a second wire
    (MCP's ``structuredContent``, a read card, the audit log) bypasses is no redaction.
    ``bounded`` content only shortens the same answer (an output limit): both are kept.
    """
    if content == result.content:
        return result
    if bounded:
        return attrs.evolve(result, content=content)
    if isinstance(result, ToolExecutionSuccess):
        return attrs.evolve(result, content=content, value=None, meta=None)
    return attrs.evolve(result, content=content, meta=None)


def finalize(call: Call, result: ToolExecutionResult) -> ToolExecutionResult:
    """The end of every path, before the observers: the turn ends only where it may
    (:func:`_concludes`), then the tool's ``finalize_content`` (once, when the tool was
    visible at entry)."""
    if result.concludes_turn and not _concludes(call, result):
        result = attrs.evolve(result, concludes_turn=False)
    finalize_content = call.entry.definition.finalize_content if call.entry is not None else None
    if finalize_content is not None:
        result = _finalized(call, finalize_content, result)
        if call.plan.traced:
            call.trace("finalize", None, code(result), result)
    if call.plan.traced:
        call.trace("result", None, code(result), result)
    return result


def _concludes(call: Call, result: ToolExecutionResult) -> bool:
    """Whether ``result`` may end the model's turn: a success only when the body asked
    for it, a failure only while it waits for a person (``APPROVAL_PENDING``). A wrapper
    or post-execute that sets it otherwise does not end the turn."""
    if isinstance(result, ToolExecutionSuccess):
        return call.concluded
    return result.code == ErrorCode.APPROVAL_PENDING


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
            observed = impl.call(execution, result, tool, record)
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
            call.caught(error)
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
        return call.contained(error, ErrorCode.TOOL_ERROR, "finalize_content failed: ")
    if content is None:
        return result
    try:
        return shown_as(result, content_blocks(content))
    except BaseException as error:
        call.caught(error)
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
