"""One call through the five stages. The only module that runs them.

Order: materialize arguments → pre-execute (+ approval for ``Ask``) → guards →
``dsh_tools_execute`` wrappers around the body → post-execute → ``finalize_content`` →
result observers. Each outcome takes one of two paths afterwards:

* the *post path* (successes, body failures, denials, cancellation before dispatch) still
  passes post-execute;
* the *final path* (non-JSON arguments, a pre-aborted call, a failing policy stage or
  wrapper) skips it.

Both end in ``finalize_content`` (once, when the tool was visible at entry) and the result
observers (exactly once). Nothing a tool or plugin does escapes as an exception except the
caller's own native task cancellation, which is re-raised after the observers ran.

The caller's signal bounds whatever the call awaits, so a plugin that ignores it cannot
keep a cancelled call pending. The body is interrupted at its next ``await`` at once; a
pending ``async`` pre-execute, approval request, execute wrapper (once no body is running:
a started body is drained first), post-execute listener or result observer may still
settle on its own for :data:`CANCEL_GRACE_S` seconds, then is interrupted at its next
``await``. An interrupted pre-execute, approval or wrapper ends the call aborted on the
post path; an interrupted post-execute never decided, so the call fails closed (aborted,
final path); an interrupted observer is logged. Result observers are shielded from the
caller's native cancellation, but not past the caller's deadline (``fail_after``,
``move_on_after``) plus the same grace.

Most calls have nothing to decide, observe, time or cancel: no plugin, guard or tracer
for their agent and no signal. Those run the same steps (validate, call the body, render)
in one frame, without the frames of the stages that would find nothing to do; the usual
flat arguments are snapshotted and validated in one step by the tool's admitter. This is
what keeps the per-call overhead of a plain tool call a fraction of its peers'.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import CoroutineType
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from .cancel import NEVER_CANCELLED, CancelSignal, CancelSource, linked_source
from .content import (
    ContentLike,
    ContextMessage,
    ImageContent,
    TextContent,
    content_blocks,
    content_text,
)
from .errors import DshToolsError, ErrorCode, JsonValueError, ToolOutputError
from .hookspecs import Dispatch
from .json import NEG_SMALL_INT, SMALL_INT, FrozenDict, JsonValue, dumps, is_unicode, snapshot
from .jsonschema import Admitter
from .models import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    ApprovalService,
    Ask,
    Block,
    Deny,
    ExecutionToken,
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
    text_success,
    trusted_success,
)
from .tracing import Stage, TraceEvent, Tracer

__all__ = [
    "CANCEL_GRACE_S",
    "Plan",
    "StageImpl",
    "ToolEntry",
    "ToolRunContext",
    "run_call",
    "run_call_sync",
]

logger = logging.getLogger("dsh_tools")

Validator = Callable[[object], list[str]]

_TIMEOUT = "timeout"
_ALLOW = Allow()

CANCEL_GRACE_S = 1.0
"""Seconds an awaited plugin stage (pre-execute, approval, wrapper, post-execute, result
observer) may still take to settle after the caller's signal fired (or, for observers, the
caller's deadline passed) before it is interrupted."""


@attrs.frozen
class ToolEntry:
    """A registered definition with what registration derived from it once."""

    definition: ToolDefinition[Any]
    output_validator: Validator | None
    schema: Any = attrs.field(init=False)
    synchronous: bool = attrs.field(init=False)
    direct: bool = attrs.field(init=False)
    admit: Admitter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        definition = self.definition
        object.__setattr__(self, "schema", definition.schema())
        object.__setattr__(self, "admit", definition.arguments.admit)
        object.__setattr__(
            self,
            "synchronous",
            not _is_async_callable(definition.execute) and definition.timeout_ms is None,
        )
        # No timer, no worker thread and no finalizer: a call may take the direct path.
        direct = (
            definition.timeout_ms is None
            and not definition.blocking
            and definition.finalize_content is None
        )
        object.__setattr__(self, "direct", direct)


@attrs.frozen
class StageImpl:
    """One implementation of a decision or observer stage, bound to positional args."""

    function: Callable[..., Any]
    label: str
    is_async: bool


@attrs.frozen
class Plan:
    """Everything a call by one agent needs, computed once until the registry changes."""

    agent_path: tuple[str, ...]
    tools: Mapping[str, ToolEntry]
    pre: tuple[StageImpl, ...]
    guards: tuple[StageImpl, ...]
    post: tuple[StageImpl, ...]
    result: tuple[StageImpl, ...]
    wrappers: tuple[StageImpl, ...]
    resolve: Callable[[str], ToolEntry | None]
    current: Mapping[tuple[str, ...], Plan]
    """The registry's plans now: this one is stale once it is not among them."""
    approval: ApprovalService | None
    approval_async: bool
    default_timeout_ms: float | None
    tracer: Tracer | None = None
    synchronous: bool = attrs.field(init=False)
    async_observers: bool = attrs.field(init=False)
    direct_tools: Mapping[str, ToolEntry] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "async_observers", any(impl.is_async for impl in self.result))
        # A call of these tools may run directly (see run_call): nothing to decide, wrap,
        # trace or observe, no default timer, and a tool with no timer, thread or finalizer.
        stageless = not (
            self.pre
            or self.guards
            or self.post
            or self.result
            or self.wrappers
            or self.tracer is not None
            or self.default_timeout_ms is not None
        )
        direct_tools = (
            {name: entry for name, entry in self.tools.items() if entry.direct} if stageless else {}
        )
        object.__setattr__(self, "direct_tools", direct_tools)
        stages = (*self.pre, *self.post, *self.result)
        synchronous = (
            not self.wrappers
            and not any(impl.is_async for impl in stages)
            and not self.approval_async
            and self.default_timeout_ms is None
        )
        object.__setattr__(self, "synchronous", synchronous)


class ToolRunContext:
    """What a tool body gets besides its arguments: the call, its signal, and two levers.

    ``signal`` fires when the caller cancels (or a timeout or wrapper does); an ``async``
    body is also interrupted at its next ``await``.
    """

    __slots__ = ("_arguments", "_call", "_concluded", "_contexts", "_execution", "signal")

    def __init__(
        self,
        call: ToolExecutionInput,
        arguments: FrozenDict,
        signal: CancelSignal,
        execution: ToolExecution | None = None,
    ) -> None:
        self._call = call
        self._arguments = arguments
        self._execution = execution
        self.signal = signal
        self._contexts: tuple[ContextMessage, ...] = ()
        self._concluded = False

    @property
    def execution(self) -> ToolExecution:
        """The call as every stage sees it: identity, frozen arguments, caller's signal."""
        execution = self._execution
        if execution is None:
            # A direct call (no stage saw it) makes it only if its body asks; most never do.
            execution = self._execution = _new_execution(self._call, self._arguments)
        return execution

    def defer_context(self, message: str | ContentLike | ContextMessage) -> None:
        """Queue a user-role message for the next model turn (kept on the result)."""
        if not isinstance(message, ContextMessage):
            blocks = message if isinstance(message, str) else [message]
            message = ContextMessage(
                id=f"{self.execution.call_id}:context:{len(self._contexts) + 1}",
                content=blocks,
                source=self.execution.name,
            )
        self._contexts = (*self._contexts, message)

    def conclude_turn(self) -> None:
        """Ask the host to end the agent's turn after this call, if it succeeds."""
        self._concluded = True


class _Interrupted(Exception):
    """Internal: the caller's cancellation interrupted an awaited plugin stage."""


class _StageFailed(Exception):
    """Internal: a policy stage failed; carries the finished failure (final path)."""

    def __init__(self, result: ToolExecutionFailure) -> None:
        super().__init__(result.error.message)
        self.result = result


def _message(error: BaseException) -> str:
    try:
        text = error.message if isinstance(error, DshToolsError) else str(error)
    except Exception:
        return "<unprintable thrown value>"
    return text or type(error).__name__


def _from_exception(
    error: BaseException,
    default_code: ErrorCode,
    prefix: str = "",
    contexts: tuple[ContextMessage, ...] = (),
) -> ToolExecutionFailure:
    code = error.code if isinstance(error, DshToolsError) else default_code.value
    return failure_result(
        prefix + _message(error), code, name=type(error).__name__, contexts=contexts
    )


def _is_native_cancellation(error: BaseException) -> bool:
    return not isinstance(error, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))


class _Call:
    """The state of one ``execute()``: read once at entry, shared by every stage."""

    # State every call starts with; an instance only stores what changes.
    arguments_error: JsonValueError | None = None
    body_started = False
    bodies_running = 0
    wrappers_expire: Callable[[], None] | None = None
    concluded = False
    contexts: tuple[ContextMessage, ...] = ()
    produced: tuple[ToolExecutionResult, ...] = ()
    parsed: Any = None

    def __init__(
        self,
        plan: Plan,
        call: ToolExecutionInput,
        asynchronous: bool,
        arguments: FrozenDict | JsonValueError,
        entry: ToolEntry | None,
    ) -> None:
        self.plan = plan
        self.asynchronous = asynchronous
        self.name = call.name
        self.signal = call.signal
        self.entry = entry
        self.tracer = plan.tracer
        self.call = call
        if type(arguments) is FrozenDict:
            self.arguments: FrozenDict | None = arguments
        else:
            self.arguments = None
            self.arguments_error = arguments  # type: ignore[assignment]
        self.execution = _new_execution(call, self.arguments)

    # -------------------------------------------------------------- helpers

    def trace(self, stage: Stage, source: str | None, outcome: str, detail: object = None) -> None:
        """Tell the registry's tracer about one step; a failing tracer is only logged."""
        if self.tracer is None:
            return
        try:
            self.tracer(TraceEvent(stage, self.execution, source, outcome, detail))
        except Exception as error:
            logger.warning("tracer failed on %s of %r: %s", stage, self.name, _message(error))

    async def settle(self, value: Any, deadline: float = math.inf) -> Any:
        """Await a plugin's awaitable, interrupted :data:`CANCEL_GRACE_S` after the caller's
        signal fires (or at ``deadline``): raises :class:`_Interrupted` then."""
        if not _is_awaitable(value):
            return value
        if not self.asynchronous:
            # execute_sync drives this call without an event loop (nothing was planned to
            # await), but a plain callable returned an awaitable: give it a loop of its own.
            return anyio.run(_awaited, value)
        signal = self.signal
        if signal is None and deadline == math.inf:
            return await value
        with anyio.CancelScope(deadline=deadline) as scope:
            remove = None if signal is None else signal.add_callback(_expire(scope))
            try:
                return await value
            finally:
                if remove is not None:
                    remove()
        raise _Interrupted

    def interrupt_wrappers(self) -> None:
        """The caller's signal fired: bound the wrappers, once no body is running (a
        running body stops through its own scope and is drained first)."""
        if self.wrappers_expire is not None and not self.bodies_running:
            self.wrappers_expire()

    def cancelled(self) -> bool:
        return self.signal is not None and self.signal.cancelled

    def aborted(self, contexts: tuple[ContextMessage, ...] | None = None) -> ToolExecutionFailure:
        """The cancellation failure; it keeps ``contexts`` (default: the body's deferred)."""
        kept = self.contexts if contexts is None else contexts
        if self.body_started:
            return failure_result("tool call aborted", ErrorCode.ABORTED, contexts=kept)
        return failure_result(
            "tool call aborted before dispatch",
            ErrorCode.ABORTED_BEFORE_DISPATCH,
            contexts=kept,
        )

    def denied(self, reason: str) -> ToolExecutionFailure:
        return failure_result(reason, ErrorCode.DENIED)

    # -------------------------------------------------------------- the run

    async def run(self) -> ToolExecutionResult:
        try:
            result, post = await self.decide_and_dispatch()
            if post and self.plan.post:
                result = await self.post_execute(result)
            elif post and self.cancelled() and not result.is_error:
                result = self.aborted(result.additional_contexts)
        except _StageFailed as failed:
            result = failed.result
        except BaseException as error:
            if not _is_native_cancellation(error):
                raise
            result = self.aborted()
            limit = anyio.current_time() + CANCEL_GRACE_S
            with anyio.CancelScope(shield=True):
                result = await self.finish(result, limit)
            raise
        return await self.finish(result)

    async def decide_and_dispatch(self) -> tuple[ToolExecutionResult, bool]:
        if self.tracer is not None:
            self.trace("call", None, "arguments not JSON" if self.arguments_error else "entered")
        if self.arguments_error is not None:
            message = (
                "tool execution arguments must be losslessly JSON-serializable: "
                f"{self.arguments_error.message}"
            )
            return failure_result(message, ErrorCode.INVALID_JSON), False
        if self.cancelled():
            return self.aborted(), False
        try:
            decision = await self.pre_execute() if self.plan.pre else _ALLOW
            if isinstance(decision, Ask):
                answer = await self.ask(decision)
                if answer is None:
                    return self.aborted(), True
                decision = answer
        except _Interrupted:
            # The caller cancelled while a policy was still deciding: nothing allowed the
            # call, so no guard runs and the body never does.
            return self.aborted(), True
        if isinstance(decision, Deny):
            return self.denied(decision.reason), True
        reason = self.guards() if self.plan.guards else None
        if reason is not None:
            return self.denied(reason), True
        if self.cancelled():
            return self.aborted(), True
        if self.plan.wrappers:
            result = await self.wrapped_dispatch()
        else:
            result = await self.body(None)
        if self.tracer is not None:
            source = "wrappers" if self.plan.wrappers else None
            self.trace("execute", source, _code(result), result)
        if self.cancelled() and not result.is_error:
            result = self.aborted(result.additional_contexts)
        return result, True

    async def pre_execute(self) -> Allow | Deny | Ask:
        for impl in self.plan.pre:
            try:
                decision = impl.function(self.execution)
                if decision is not None and _is_awaitable(decision):
                    decision = await self.settle(decision)
            except _Interrupted:
                self.trace("pre_execute", impl.label, "interrupted")
                raise
            except Exception as error:
                self.trace("pre_execute", impl.label, f"raised {_message(error)}", error)
                raise _StageFailed(
                    _from_exception(
                        error, ErrorCode.POLICY_ERROR, f"pre-execute {impl.label} failed: "
                    )
                ) from None
            if self.tracer is not None:
                self.trace("pre_execute", impl.label, _outcome(decision), decision)
            if decision is None:
                continue
            if isinstance(decision, (Allow, Deny, Ask)):
                return decision
            raise _StageFailed(
                failure_result(
                    f"pre-execute {impl.label} returned {_shown(decision)}; "
                    "expected Allow(), Deny(reason), Ask(reason) or None",
                    ErrorCode.POLICY_ERROR,
                )
            )
        return _ALLOW

    async def ask(self, ask: Ask) -> Allow | Deny | None:
        """Route an ``Ask`` to the approval service; ``None`` means the caller cancelled."""
        name = self.name
        service = self.plan.approval
        if service is None:
            return Deny(
                ask.reason
                or f'tool "{name}" requires approval, but no approval service is configured'
            )
        if self.execution.agent is None:
            return Deny(
                f'tool "{name}" requires approval, but the call has no agent to route it through'
            )
        request = ApprovalRequest(
            agent=self.execution.agent,
            tool_name=name,
            call_id=self.execution.call_id,
            arguments=self.execution.arguments,  # type: ignore[arg-type]
            reason=ask.reason,
            signal=self.signal,
        )
        try:
            outcome = await self.settle(service.request(request))
        except _Interrupted:
            self.trace("approval", "approval service", "interrupted")
            raise
        except Exception as error:
            self.trace("approval", "approval service", f"raised {_message(error)}", error)
            raise _StageFailed(
                _from_exception(error, ErrorCode.POLICY_ERROR, "approval service failed: ")
            ) from None
        if self.tracer is not None:
            shown = outcome.value if isinstance(outcome, ApprovalOutcome) else None
            self.trace("approval", "approval service", shown or _shown(outcome), outcome)
        try:
            outcome = ApprovalOutcome(outcome)
        except Exception:  # not an outcome (its repr may even raise while Enum complains)
            raise _StageFailed(
                failure_result(
                    f"approval service returned {_shown(outcome)}; expected one of "
                    + ", ".join(repr(o.value) for o in ApprovalOutcome),
                    ErrorCode.POLICY_ERROR,
                )
            ) from None
        if outcome is ApprovalOutcome.ALLOWED_ONCE:
            return None if self.cancelled() else Allow()
        if outcome is ApprovalOutcome.REJECTED:
            return Deny(f'the user rejected tool "{name}"')
        if outcome is ApprovalOutcome.CANCELLED:
            return None if self.cancelled() else Deny(f'approval for tool "{name}" was cancelled')
        return Deny(f'tool "{name}" requires approval, but no approval channel is available')

    def guards(self) -> str | None:
        for impl in self.plan.guards:
            try:
                verdict = impl.function(self.execution)
            except Exception as error:
                self.trace("guard", impl.label, f"raised {_message(error)}", error)
                raise _StageFailed(
                    _from_exception(error, ErrorCode.DENIED, f"guard {impl.label} failed: ")
                ) from None
            if self.tracer is not None:
                self.trace("guard", impl.label, _outcome(verdict), verdict)
            if verdict is None:
                continue
            if isinstance(verdict, str):
                return verdict
            raise _StageFailed(
                failure_result(
                    f"guard {impl.label} returned {_shown(verdict)}; "
                    "guards return a reason or None",
                    ErrorCode.DENIED,
                )
            )
        return None

    # -------------------------------------------------------------- dispatch

    async def wrapped_dispatch(self) -> ToolExecutionResult:
        wrappers = self.plan.wrappers
        signal = self.signal if self.asynchronous else None
        remove = None
        interrupted = False
        try:
            if signal is None:
                # Nobody can cancel this call: no scope is needed to bound the wrappers.
                dispatch = _wrapped(wrappers, self.execution, self.body)
                result: object = await dispatch(None)
            else:
                with anyio.CancelScope() as scope:
                    self.wrappers_expire = _expire(scope)
                    remove = signal.add_callback(self.interrupt_wrappers)
                    dispatch = _wrapped(wrappers, self.execution, self.body)
                    result = await dispatch(None)
                interrupted = scope.cancelled_caught
        except Exception as error:
            raise _StageFailed(
                _from_exception(error, ErrorCode.POLICY_ERROR, "execute wrapper failed: ")
            ) from None
        finally:
            self.wrappers_expire = None
            if remove is not None:
                remove()
        if interrupted:
            # A wrapper was still pending when the caller cancelled: aborted, post path.
            return self.aborted()
        for produced in self.produced:
            if result is produced:
                return produced
        return self.authored(result)

    def authored(self, result: object) -> ToolExecutionResult:
        """Normalize a result a wrapper made itself (not the one the body produced)."""
        if isinstance(result, ToolExecutionFailure):
            return result
        if not isinstance(result, ToolExecutionSuccess):
            raise _StageFailed(
                failure_result(
                    f"execute wrapper returned {type(result).__qualname__}; "
                    "expected ToolExecutionSuccess or ToolExecutionFailure",
                    ErrorCode.POLICY_ERROR,
                )
            )
        entry = self.plan.resolve(self.name)
        if entry is None:
            raise _StageFailed(
                failure_result(f'unknown tool "{self.name}"', ErrorCode.UNKNOWN_TOOL)
            )
        try:
            if self.parsed is None:
                self.parsed = entry.definition.arguments.parse(self.execution.arguments)
            rendered = self.render(entry, result.value)
        except Exception as error:
            raise _StageFailed(_from_exception(error, ErrorCode.INVALID_TOOL_OUTPUT)) from None
        return attrs.evolve(rendered, additional_contexts=result.additional_contexts)

    async def body(self, replacement: CancelSignal | None) -> ToolExecutionResult:
        """The innermost dispatch: resolve the tool now, validate, run, render."""
        self.bodies_running += 1
        try:
            if replacement is not None and not isinstance(replacement, CancelSignal):
                raise TypeError(f"dispatch() takes a CancelSignal or None, got {replacement!r}")
            if replacement is None:
                parents: tuple[CancelSignal, ...] = () if self.signal is None else (self.signal,)
            else:
                parents = (replacement,) if self.signal is None else (self.signal, replacement)
            if parents and any(parent.cancelled for parent in parents):
                return self.keep(self.aborted())
            entry = self.plan.resolve(self.name)
            if entry is None:
                return self.keep(
                    failure_result(f'unknown tool "{self.name}"', ErrorCode.UNKNOWN_TOOL)
                )
            definition = entry.definition
            timeout_ms = definition.timeout_ms or self.plan.default_timeout_ms
            source: CancelSource | None = None
            unlink: Callable[[], None] | None = None
            if self.asynchronous and (len(parents) > 1 or timeout_ms):
                # Fuse the caller's and the wrapper's signals (and the timer) for the body;
                # with one signal and no timer the body sees that very signal.
                source, unlink = linked_source(*parents)
                signal: CancelSignal = source.signal
            else:
                signal = parents[0] if parents else NEVER_CANCELLED
            arguments: Any = self.arguments  # a JSON object: see decide_and_dispatch
            context = ToolRunContext(self.call, arguments, signal, self.execution)
            expired: list[bool] = []
            try:
                self.parsed = definition.arguments.parse(self.execution.arguments)
                self.body_started = True
                if signal is NEVER_CANCELLED and self.asynchronous and not definition.blocking:
                    raw = definition.execute(self.parsed, context)
                    if _is_awaitable(raw):
                        raw = await raw
                    cancelled = False
                elif not self.asynchronous or signal is NEVER_CANCELLED:
                    raw = await self.invoke(definition, context)
                    cancelled = signal.cancelled
                else:
                    with anyio.CancelScope() as scope:
                        remove = signal.add_callback(scope.cancel)
                        try:
                            if source is not None and timeout_ms:
                                raw = await self.invoke_with_timeout(
                                    definition, context, source, timeout_ms, expired
                                )
                            else:
                                raw = await self.invoke(definition, context)
                        finally:
                            remove()
                    cancelled = scope.cancelled_caught or signal.cancelled
            except Exception as error:
                self.contexts = context._contexts
                if expired:
                    result: ToolExecutionResult = self.timeout(timeout_ms)
                else:
                    result = _from_exception(error, ErrorCode.TOOL_ERROR, contexts=self.contexts)
            else:
                self.contexts = context._contexts
                self.concluded = context._concluded
                if expired or cancelled:
                    result = self.timeout(timeout_ms) if expired else self.aborted()
                else:
                    try:
                        result = self.render(entry, raw)
                    except Exception as error:
                        result = _from_exception(
                            error, ErrorCode.TOOL_ERROR, contexts=self.contexts
                        )
            finally:
                if unlink is not None:
                    unlink()
            return self.keep(result)
        finally:
            self.bodies_running -= 1
            if self.cancelled():
                self.interrupt_wrappers()

    def timeout(self, timeout_ms: float | None) -> ToolExecutionFailure:
        return failure_result(
            f'tool "{self.name}" timed out after {timeout_ms:g} ms',
            ErrorCode.TOOL_TIMEOUT,
            contexts=self.contexts,
        )

    def keep(self, result: ToolExecutionResult) -> ToolExecutionResult:
        self.produced += (result,)
        if self.tracer is not None:
            source = None if self.body_started else "not started"
            self.trace("body", source, _code(result), result)
        return result

    async def invoke(self, definition: ToolDefinition[Any], context: ToolRunContext) -> Any:
        if not self.asynchronous:
            return await self.settle(definition.execute(self.parsed, context))
        if definition.blocking:
            raw = await anyio.to_thread.run_sync(
                functools.partial(definition.execute, self.parsed, context),
                abandon_on_cancel=False,
            )
            # The thread is never abandoned, so a cancellation that arrived meanwhile
            # was deferred: deliver it now instead of after the rest of the pipeline.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return raw
        raw = definition.execute(self.parsed, context)
        if _is_awaitable(raw):
            raw = await raw
        return raw

    async def invoke_with_timeout(
        self,
        definition: ToolDefinition[Any],
        context: ToolRunContext,
        source: CancelSource,
        timeout_ms: float,
        expired: list[bool],
    ) -> Any:
        """Run the body with a timer that cancels ``source`` (appending to ``expired``)."""

        async def watchdog() -> None:
            await anyio.sleep(timeout_ms / 1000)
            if not source.cancelled:
                expired.append(True)
                source.cancel(_TIMEOUT)

        error: Exception
        async with anyio.create_task_group() as group:
            group.start_soon(watchdog)
            try:
                return await self.invoke(definition, context)
            except Exception as raised:
                # Re-raised outside the task group, so it is not wrapped in an ExceptionGroup.
                error = raised
            finally:
                group.cancel_scope.cancel()
        raise error

    # -------------------------------------------------------------- output

    def render(self, entry: ToolEntry, raw: object) -> ToolExecutionSuccess:
        """Turn a value a wrapper or post-execute supplied into a success."""
        return _render(entry, raw, self.parsed, self.contexts, self.concluded, self.call.parent)

    # -------------------------------------------------------------- post

    async def post_execute(self, result: ToolExecutionResult) -> ToolExecutionResult:
        for impl in self.plan.post:
            try:
                decision = impl.function(self.execution, result)
                if decision is not None and _is_awaitable(decision):
                    decision = await self.settle(decision)
                if self.tracer is not None:
                    self.trace("post_execute", impl.label, _outcome(decision), decision)
                if decision is None:
                    continue
                if isinstance(decision, Accept):
                    result = self.accept(result, decision)
                elif isinstance(decision, Block):
                    message = content_text(decision.feedback) or (
                        "tool result blocked by post-execute policy"
                    )
                    result = ToolExecutionFailure(
                        error=failure_result(message, ErrorCode.BLOCKED).error,
                        content=decision.feedback,
                        additional_contexts=decision.additional_contexts,
                    )
                else:
                    raise TypeError(
                        f"returned {_shown(decision)}; "
                        "expected Accept(...), Block(feedback) or None"
                    )
            except _StageFailed:
                raise
            except _Interrupted:
                # A policy that never decided: fail closed, keeping nothing it did not review.
                self.trace("post_execute", impl.label, "interrupted")
                raise _StageFailed(self.aborted(())) from None
            except Exception as error:
                self.trace("post_execute", impl.label, f"raised {_message(error)}", error)
                raise _StageFailed(
                    _from_exception(
                        error, ErrorCode.POLICY_ERROR, f"post-execute {impl.label} failed: "
                    )
                ) from None
        if self.cancelled() and not result.is_error:
            result = self.aborted(result.additional_contexts)
        return result

    def accept(self, result: ToolExecutionResult, decision: Accept) -> ToolExecutionResult:
        contexts = result.additional_contexts + decision.additional_contexts
        if decision.replaces_value:
            if isinstance(result, ToolExecutionFailure):
                raise ValueError("cannot replace the value of a failed result")
            entry = self.plan.resolve(self.name)
            if entry is None:
                raise _StageFailed(
                    failure_result(f'unknown tool "{self.name}"', ErrorCode.UNKNOWN_TOOL)
                )
            try:
                replaced = self.render(entry, decision.value)
            except ToolOutputError as error:
                raise _StageFailed(_from_exception(error, ErrorCode.INVALID_TOOL_OUTPUT)) from None
            return attrs.evolve(replaced, additional_contexts=contexts)
        if decision.content is not None:
            return attrs.evolve(result, content=decision.content, additional_contexts=contexts)
        return attrs.evolve(result, additional_contexts=contexts) if contexts else result

    # -------------------------------------------------------------- final

    async def finish(
        self, result: ToolExecutionResult, limit: float | None = None
    ) -> ToolExecutionResult:
        if (
            isinstance(result, ToolExecutionSuccess)
            and not self.concluded
            and result.concludes_turn
        ):
            result = attrs.evolve(result, concludes_turn=False)
        finalize = self.entry.definition.finalize_content if self.entry else None
        if finalize is not None:
            result = self.finalize(finalize, result)
            if self.tracer is not None:
                self.trace("finalize", None, _code(result), result)
        if self.tracer is not None:
            self.trace("result", None, _code(result), result)
        if not self.plan.result:
            return result
        if self.asynchronous and self.plan.async_observers:
            # Every observer sees the result, even if the caller is cancelled meanwhile;
            # the cancellation is delivered at the caller's next checkpoint. A pending
            # observer is interrupted only past the caller's deadline plus a grace.
            if limit is None:
                limit = anyio.current_effective_deadline()
                if limit != math.inf:
                    limit = max(limit, anyio.current_time()) + CANCEL_GRACE_S
            with anyio.CancelScope(shield=True):
                await self.observe(result, limit)
        else:
            await self.observe(result)
        return result

    async def observe(self, result: ToolExecutionResult, limit: float = math.inf) -> None:
        for impl in self.plan.result:
            try:
                observed = impl.function(self.execution, result)
                if observed is not None and _is_awaitable(observed):
                    await self.settle(observed, limit)
            except _Interrupted:
                logger.warning(
                    'tool "%s" (%s): result observer %s was interrupted after the call was '
                    "cancelled",
                    self.name,
                    self.execution.call_id,
                    impl.label,
                )
            except Exception as error:
                logger.warning(
                    'tool "%s" (%s): result observer %s failed: %s',
                    self.name,
                    self.execution.call_id,
                    impl.label,
                    _message(error),
                )

    def finalize(
        self, finalize: Callable[..., Any], result: ToolExecutionResult
    ) -> ToolExecutionResult:
        try:
            content = finalize(self.execution, result)
        except Exception as error:
            return _from_exception(error, ErrorCode.TOOL_ERROR, "finalize_content failed: ")
        if content is None:
            return result
        try:
            return attrs.evolve(result, content=content_blocks(content))
        except Exception as error:
            return failure_result(
                f"tool result must be losslessly JSON-serializable: {_message(error)}",
                ErrorCode.INVALID_JSON,
            )


_NEVER_AWAITABLE = frozenset({type(None), str, int, float, bool, dict, list, tuple})
_PLAIN_JSON = frozenset({type(None), str, int, float, bool, dict})
"""Types of values a body returns that can never be typed content blocks."""


def _is_awaitable(value: object) -> bool:
    """``inspect.isawaitable`` with the common answers (coroutines, plain data) first:
    it runs several times per call."""
    kind = type(value)
    if kind is CoroutineType:
        return True
    if kind in _NEVER_AWAITABLE:
        return False
    return inspect.isawaitable(value)


def _outcome(decision: object) -> str:
    """How a trace shows a decision: ``abstained``, a guard's reason as is, else its repr."""
    if decision is None:
        return "abstained"
    if isinstance(decision, str):
        return str.__str__(decision)
    return _shown(decision)


def _shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` for messages, shortened; a plugin's object whose ``repr`` raises
    must not turn a clean failure into an escaping exception."""
    try:
        text = repr(value)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(result: ToolExecutionResult) -> str:
    return result.error.info.code if isinstance(result, ToolExecutionFailure) else "ok"


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _expire(scope: anyio.CancelScope) -> Callable[[], None]:
    """A signal callback that cancels ``scope`` :data:`CANCEL_GRACE_S` seconds later."""
    # The event loop's clock, read through the monotonic clock: a callback must not fail
    # whichever thread (wrongly) fires the signal.
    offset = anyio.current_time() - time.monotonic()

    def expire() -> None:
        scope.deadline = min(scope.deadline, time.monotonic() + offset + CANCEL_GRACE_S)

    return expire


def _is_async_callable(function: object) -> bool:
    """True for ``async def`` functions, partials of them and objects with ``async __call__``."""
    while isinstance(function, functools.partial):
        function = function.func
    if inspect.iscoroutinefunction(function):
        return True
    return callable(function) and inspect.iscoroutinefunction(function.__call__)


def _is_typed_content(raw: object) -> bool:
    """True for a typed block or a non-empty list of them (content, not a JSON value)."""
    if isinstance(raw, (TextContent, ImageContent)):
        return True
    return (
        isinstance(raw, (list, tuple))
        and bool(raw)
        and all(isinstance(block, (TextContent, ImageContent)) for block in raw)
    )


def _call_output(
    tool: str,
    label: str,
    function: Callable[[Any, JsonValue], Any],
    arguments: Any,
    value: JsonValue,
    as_json: bool = False,
) -> Any:
    try:
        produced = function(arguments, value)
    except Exception as error:
        raise ToolOutputError(tool, [f"output.{label} failed: {_message(error)}"]) from None
    try:
        return snapshot(produced) if as_json else content_blocks(produced)
    except JsonValueError as error:
        raise ToolOutputError(
            tool, [f"output.{label} returned non-lossless JSON: {error.message}"]
        ) from None


def _wrapped(wrappers: tuple[StageImpl, ...], execution: ToolExecution, body: Dispatch) -> Any:
    """The dispatch that the ``dsh_tools_execute`` wrappers build around ``body``.

    Called the way pluggy calls ``wrapper=True`` implementations (outermost first; an
    error before or after a wrapper's ``yield`` is thrown into the wrappers outside it),
    without pluggy's per-call bookkeeping: this runs on every wrapped call.
    """
    started: list[tuple[StageImpl, Any]] = []
    error: BaseException | None = None
    for wrapper in wrappers:
        try:
            generator = wrapper.function(execution)
            next(generator)
        except StopIteration:
            error = RuntimeError(f"execute wrapper {wrapper.label} did not yield")
            break
        except BaseException as raised:
            error = raised
            break
        started.append((wrapper, generator))
    result: Any = body
    for wrapper, generator in reversed(started):
        try:
            if error is None:
                generator.send(result)
            else:
                generator.throw(error)
            generator.close()
            error = RuntimeError(f"execute wrapper {wrapper.label} yielded twice")
        except StopIteration as done:
            result, error = done.value, None
        except BaseException as raised:
            error = raised
    if error is not None:
        raise error
    return result


def _render(
    entry: ToolEntry,
    raw: object,
    parsed: Any,
    contexts: tuple[ContextMessage, ...],
    concluded: bool,
    parent: ExecutionToken | None,
) -> ToolExecutionSuccess:
    """Turn a body's (or a replacement) value into a success, by the output contract;
    raises :class:`ToolOutputError` when the value breaks it."""
    definition = entry.definition
    output = definition.output
    if output is None:
        # The usual returns first, exactly as snapshot() and dumps() treat them.
        if type(raw) is str and (raw.isascii() or is_unicode(raw)):
            return text_success(raw, raw, contexts, concluded)
        if type(raw) is int and NEG_SMALL_INT < raw < SMALL_INT:
            return text_success(raw, int.__repr__(raw), contexts, concluded)
        if type(raw) not in _PLAIN_JSON and _is_typed_content(raw):
            content = content_blocks(raw)  # type: ignore[arg-type]
            return trusted_success(content, content, None, contexts, concluded)
    name = definition.name
    try:
        value = snapshot(raw)
    except JsonValueError as error:
        raise ToolOutputError(name, [f"value is not lossless JSON: {error.message}"]) from None
    if output is None:
        text = value if type(value) is str else dumps(value)
        return text_success(value, text, contexts, concluded)
    assert entry.output_validator is not None
    violations = entry.output_validator(value)
    if violations:
        raise ToolOutputError(name, violations)
    content = _call_output(name, "render", output.render, parsed, value)
    meta: JsonValue = None
    if output.presentation_meta is not None and parent is None:
        meta = _call_output(
            name, "presentation_meta", output.presentation_meta, parsed, value, True
        )
    return trusted_success(value, content, meta, contexts, concluded)


def _new_execution(call: ToolExecutionInput, arguments: FrozenDict | None) -> ToolExecution:
    """The call as every stage sees it, with a fresh token."""
    call_id = call.call_id
    return ToolExecution(
        ExecutionToken(),
        call_id,
        call.name,
        arguments,
        call.agent,
        call.parent,
        call.root_call_id or call_id,
        call.signal,
    )


def _frozen_arguments(value: object) -> FrozenDict | JsonValueError:
    """The call's arguments snapshotted once, or the error saying why they are not a JSON
    object (the call then fails before any policy runs)."""
    try:
        frozen = snapshot(value, "arguments")
    except JsonValueError as error:
        return error
    if type(frozen) is FrozenDict:
        return frozen
    return JsonValueError("arguments", "must be a JSON object")


async def _run_direct(
    plan: Plan, entry: ToolEntry, call: ToolExecutionInput, arguments: FrozenDict, parsed: Any
) -> ToolExecutionResult:
    """A call with nothing to decide, observe, time or cancel (see :func:`run_call`):
    what :meth:`_Call.body` does, without the stages around it and the cancellation work
    in it. ``parsed`` is the admitted arguments, or ``None`` to parse them first."""
    if plan.current.get(plan.agent_path) is not plan:
        # The registry changed between execute() and this first step: resolve the tool
        # now, as the full pipeline does inside its dispatch.
        return await _Call(plan, call, True, arguments, entry).run()
    definition = entry.definition
    context = ToolRunContext(call, arguments, NEVER_CANCELLED)
    try:
        if parsed is None:
            parsed = definition.arguments.parse(arguments)
        raw = definition.execute(parsed, context)
        if _is_awaitable(raw):
            raw = await raw
        return _render(entry, raw, parsed, context._contexts, context._concluded, call.parent)
    except Exception as error:
        return _from_exception(error, ErrorCode.TOOL_ERROR, contexts=context._contexts)


def run_call(plan: Plan, call: ToolExecutionInput) -> Coroutine[Any, Any, ToolExecutionResult]:
    """Run ``call`` through every stage of ``plan``; see the module docstring.

    A call with nothing to decide, observe, time or cancel (a tool in the plan's
    ``direct_tools``, no signal, arguments that are a JSON object) runs the same steps
    without the frames of stages that would find nothing to do. Its arguments, when the
    tool's model admits them (see :class:`~dsh_tools.arguments.ArgumentsModel`), are
    snapshotted and validated in one step.
    """
    direct = plan.direct_tools.get(call.name)
    if direct is not None and call.signal is None:
        admitted = direct.admit(call.arguments)
        if admitted is not None:
            return _run_direct(plan, direct, call, admitted, admitted)
    arguments = _frozen_arguments(call.arguments)
    if direct is not None and call.signal is None and type(arguments) is FrozenDict:
        return _run_direct(plan, direct, call, arguments, None)
    return _Call(plan, call, True, arguments, plan.tools.get(call.name)).run()


def run_call_sync(plan: Plan, call: ToolExecutionInput) -> ToolExecutionResult:
    """:func:`run_call` for synchronous hosts: with no event loop when neither the plan nor
    the tool has anything to await, else in one event loop of its own.

    A direct call (see :func:`run_call`) runs here, in this frame, as :func:`_run_direct`
    does: this path's budget is a few times a bare function call. A plain callable that
    returns an awaitable gets an event loop of its own for it.
    """
    entry = plan.direct_tools.get(call.name)
    if entry is None or call.signal is not None:
        return _run_full_sync(plan, call, _frozen_arguments(call.arguments))
    arguments = parsed = entry.admit(call.arguments)
    if arguments is None:
        frozen = _frozen_arguments(call.arguments)
        if type(frozen) is not FrozenDict:
            return _run_full_sync(plan, call, frozen)
        arguments = frozen
    definition = entry.definition
    context = ToolRunContext(call, arguments, NEVER_CANCELLED)
    try:
        if parsed is None:
            parsed = definition.arguments.parse(arguments)
        raw = definition.execute(parsed, context)
        kind = type(raw)
        if definition.output is None and (kind is str or kind is int):
            # The usual returns, rendered as _render would, without its frame.
            if kind is str:
                if raw.isascii() or is_unicode(raw):
                    return text_success(raw, raw, context._contexts, context._concluded)
            elif NEG_SMALL_INT < raw < SMALL_INT:
                text = int.__repr__(raw)
                return text_success(raw, text, context._contexts, context._concluded)
        if kind not in _NEVER_AWAITABLE and _is_awaitable(raw):
            raw = anyio.run(_awaited, raw)
        return _render(entry, raw, parsed, context._contexts, context._concluded, call.parent)
    except Exception as error:
        return _from_exception(error, ErrorCode.TOOL_ERROR, contexts=context._contexts)


def _run_full_sync(
    plan: Plan, call: ToolExecutionInput, arguments: FrozenDict | JsonValueError
) -> ToolExecutionResult:
    """Every stage of ``plan`` for ``execute_sync``: driven by hand when every part is
    synchronous, else in one event loop of its own."""
    entry = plan.tools.get(call.name)
    if not plan.synchronous or (entry is not None and not entry.synchronous):
        return anyio.run(_Call(plan, call, True, arguments, entry).run)
    coroutine = _Call(plan, call, False, arguments, entry).run()
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: ToolExecutionResult = done.value
        return result
    coroutine.close()
    raise RuntimeError(  # pragma: no cover - the plan said every part was synchronous
        "a synchronous call suspended; use `await registry.execute(call)`"
    )
