"""The body step: the innermost dispatch, around the one place a tool body is called.

:func:`run_body` checks that the call may still run, resolves the tool (late: it may
have changed since the call entered), then parses the arguments, makes the
:class:`~dsh_tools.ToolRunContext`, runs the body (where, and under what deadline, is
:func:`dsh_tools._pipeline.running.run`'s to say) and renders what it returned by the
output contract. Both runners use it: the direct runner is this step
alone, the staged one reaches it through the execute wrappers.

When the plan traces, the step is one ``body`` step whose time is the body run's own
(from the step's start to the body's end), then one ``progress`` step when the body
reported (closing its stream).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._cancel import NEVER_CANCELLED, CancelSignal
from .._context import ToolRunContext
from .._models import ToolExecutionFailure, ToolExecutionResult
from ..errors import ErrorCode
from .call import Call
from .render import render
from .results import code, error_result
from .running import UNBOUND, Bounds, Timer, run

if TYPE_CHECKING:
    from .plan import ToolEntry


async def run_body(call: Call, replacement: CancelSignal | None = None) -> ToolExecutionResult:
    """Resolve the tool now, validate, run, render; ``replacement`` is the signal a
    wrapper passed to its inner dispatch (the body also keeps the caller's).

    One coroutine around the body's own (every call passes here, and each awaited frame
    costs it): parse, run and render inside the body's bounds, which end, and its stream
    with them, whatever happens."""
    since = time.perf_counter() if call.plan.traced else 0.0
    parents = () if replacement is None and call.signal is None else _parents(call, replacement)
    if parents and any(parent.cancelled for parent in parents):
        result: ToolExecutionResult = call.aborted()
    elif (entry := call.entry if not call.plan.stale else call.resolve()) is None:
        result = call.unknown()
    else:
        bounds, context = _bounded(call, entry, parents)
        timer = bounds.timer
        try:
            try:
                parsed = call.parsed if call.parsed_by is entry else call.parse(entry)
                call.started = True
                raw = await run(call, entry, parsed, context, timer)
            except BaseException as error:  # the caller's own is re-raised by _failed
                result = _failed(call, error, context, timer)
            else:
                result = _rendered(call, entry, parsed, raw, context, timer)
            _traced(call, result, since)
        finally:
            _ended(call, context, bounds)
        return result
    _traced(call, result, since)
    return result


def _bounded(
    call: Call, entry: ToolEntry, parents: tuple[CancelSignal, ...]
) -> tuple[Bounds, ToolRunContext]:
    """What holds one run of ``entry``'s body (``parents`` and its timeout), and the
    context it gets."""
    timeout_ms = entry.definition.timeout_ms or call.plan.default_timeout_ms
    bounds = UNBOUND if timeout_ms is None and not parents else Bounds(parents, timeout_ms)
    plan = call.plan
    streams = plan.recording or plan.listeners or call.input.on_progress is not None
    return bounds, ToolRunContext(call, bounds.signal, call.stream, bool(streams))


def _traced(call: Call, result: ToolExecutionResult, since: float) -> None:
    """The body step in the call's trace, when the plan traces."""
    if call.plan.traced:
        started = None if call.started else "not started"  # a wrapper may dispatch again
        call.trace("body", started, code(result), result, since=since)


def _failed(
    call: Call, error: BaseException, context: ToolRunContext, timer: Timer | None
) -> ToolExecutionFailure:
    """The failure of a body that raised (or whose arguments did not parse): a timeout
    when its deadline passed meanwhile."""
    call.caught(error)
    call.contexts = context._contexts
    if timer is not None and timer.expired:
        return call.timed_out(timer.deadline.budget_ms)
    return error_result(error, ErrorCode.TOOL_ERROR, contexts=call.contexts)


def _rendered(
    call: Call,
    entry: ToolEntry,
    parsed: Any,
    raw: Any,
    context: ToolRunContext,
    timer: Timer | None,
) -> ToolExecutionResult:
    """What the body returned, by the output contract; a timeout or the caller's abort
    instead when the body's signal fired."""
    call.contexts, call.concluded = context._contexts, context._concluded
    if timer is not None and timer.expired:
        return call.timed_out(timer.deadline.budget_ms)
    signal = context.signal
    if signal is not NEVER_CANCELLED and signal.cancelled:
        return call.aborted()
    try:
        return render(entry, raw, parsed, call.contexts, call.concluded, call.input.parent)
    except BaseException as error:
        return call.contained(error, ErrorCode.TOOL_ERROR, contexts=call.contexts)


def _ended(call: Call, context: ToolRunContext, bounds: Bounds) -> None:
    """The body is done: its signal leaves its parents, its context reports nothing more
    (a thread left running included), what waits is delivered, and the record notes what
    was streamed."""
    if bounds.unlink is not None:
        bounds.unlink()
    if context._stream is None and not context._on_demand:
        return
    stream = context._detach()
    if stream is None:
        return
    stream.close()
    if call.plan.traced and (summary := stream.summary()) is not None:
        call.trace("progress", None, "streamed", summary)


def _parents(call: Call, replacement: CancelSignal | None) -> tuple[CancelSignal, ...]:
    """The signals the body is bound by: the caller's (never detached) and a wrapper's."""
    if replacement is not None and not isinstance(replacement, CancelSignal):
        raise TypeError(f"dispatch() takes a CancelSignal or None, got {replacement!r}")
    parents = () if call.signal is None else (call.signal,)
    return parents if replacement is None else (*parents, replacement)
