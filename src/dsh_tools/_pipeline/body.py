"""The body step: the innermost dispatch, and the one place a tool body is called.

:func:`run_body` resolves the tool (late: it may have changed since the call entered),
parses the arguments, makes the :class:`~dsh_tools.ToolRunContext`, calls the body under
its signal and deadline, and renders what it returned by the output contract. Both
runners use it: the direct runner is this step alone, the staged one reaches it through
the execute wrappers.

Where a body runs, and how its deadline holds (the earliest of the tool's ``timeout_ms``
or the registry's ``default_timeout_ms``, and the deadlines of the signals it runs under,
such as ``TimeoutPolicy``'s):

* an ``async def`` body is awaited on the loop under a cancel scope bound to its signal;
  at the deadline the signal fires and the body is interrupted at its next ``await``;
* a plain ``def`` body runs inline, on the calling thread; ``blocking=True`` moves it to a
  worker thread when a loop runs (a sync host's thread is blocked by the call anyway);
* a ``def`` body with a deadline runs in one worker thread; at the deadline its signal
  fires and the call ends ``TOOL_TIMEOUT`` at once. A thread cannot be interrupted: it is
  left to finish, and its late result is logged and dropped.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from ..cancel import NEVER_CANCELLED, CancelSignal, CancelSource, Deadline, linked_source
from ..context import ToolRunContext
from ..errors import ErrorCode
from ..lingering import left_running
from ..models import ToolExecutionFailure, ToolExecutionResult
from .call import Call
from .loops import NEVER_AWAITABLE, is_awaitable, on_event_loop, run_on_own_loop, stops_the_caller
from .render import render
from .results import code, error_result

if TYPE_CHECKING:
    from .plan import ToolEntry

logger = logging.getLogger("dsh_tools")

_DEADLINE = "deadline"
"""The reason the body's signal gives when its deadline passed."""


async def run_body(call: Call, replacement: CancelSignal | None = None) -> ToolExecutionResult:
    """Resolve the tool now, validate, run, render; ``replacement`` is the signal a
    wrapper passed to its inner dispatch (the body also keeps the caller's)."""
    parents = () if replacement is None and call.signal is None else _parents(call, replacement)
    if parents and any(parent.cancelled for parent in parents):
        result: ToolExecutionResult = call.aborted()
    elif (entry := call.entry if not call.plan.stale else call.resolve()) is None:
        result = call.unknown()
    else:
        definition = entry.definition
        timeout_ms = definition.timeout_ms or call.plan.default_timeout_ms
        if timeout_ms is None and not parents:
            signal: CancelSignal = NEVER_CANCELLED
            timer = unlink = None
        else:
            signal, timer, unlink = _fused(parents, timeout_ms)
        context = ToolRunContext(call, signal, call.stream, call.plan.recording)
        try:
            parsed = call.parsed if call.parsed_by is entry else call.parse(entry)
            call.started = True
            if (timer is not None and not entry.is_async) or (
                definition.blocking and on_event_loop()
            ):
                raw = await _in_thread(call, entry, parsed, context, timer)
            else:
                raw = definition.execute(parsed, context)
            kind = type(raw)  # is_awaitable, with the usual answers first
            if kind is CoroutineType or (kind not in NEVER_AWAITABLE and is_awaitable(raw)):
                # An async def body the call entered with runs on a loop (the sync driver
                # saw it in the plan); a plain callable's awaitable may not.
                loop = (entry.is_async and entry is call.entry) or on_event_loop()
                plain = loop and signal is NEVER_CANCELLED and timer is None
                raw = await (raw if plain else _awaited(raw, signal, timer))
        except BaseException as error:
            result = _failed(call, error, context, timer)
        else:
            result = _rendered(call, entry, parsed, raw, context, timer)
        finally:
            if context._stream is not None or context._counted:
                _close(call, context)
            if unlink is not None:
                unlink()
    if call.plan.traced:
        call.trace("body", None if call.started else "not started", code(result), result)
    return result


def _failed(
    call: Call, error: BaseException, context: ToolRunContext, timer: _Timer | None
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
    timer: _Timer | None,
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


def _close(call: Call, context: ToolRunContext) -> None:
    """The body is done: its context reports nothing more (a thread left running
    included), what waits is delivered, and the record notes what was streamed."""
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


def _fused(
    parents: tuple[CancelSignal, ...], timeout_ms: float | None
) -> tuple[CancelSignal, _Timer | None, Callable[[], None] | None]:
    """The signal the body sees (it fires when any parent does), the timer of its
    deadline (the earliest of the tool's timeout and the parents' deadlines), and how to
    unlink it from the parents."""
    own = None if timeout_ms is None else Deadline.after(timeout_ms)
    if own is None and len(parents) == 1 and parents[0].deadline is None:
        return parents[0], None, None  # the caller's (or the wrapper's) very signal
    source, unlink = linked_source(*parents, deadline=own)
    deadline = source.signal.deadline
    return source.signal, None if deadline is None else _Timer(source, deadline), unlink


async def _awaited(awaitable: Any, signal: CancelSignal, timer: _Timer | None) -> Any:
    """Await an ``async`` body (or what a plain one returned) under its signal and
    deadline; with no loop running (``execute_sync``), on a loop of its own."""
    if not on_event_loop():
        return run_on_own_loop(_awaited(awaitable, signal, timer))
    if signal is NEVER_CANCELLED and timer is None:
        return await awaitable
    import anyio

    with anyio.CancelScope() as scope:
        remove = signal.add_callback(scope.cancel)
        try:
            if timer is None:
                return await awaitable
            return await _with_watchdog(awaitable, timer)
        finally:
            remove()
    return None  # interrupted: the body's signal fired (the caller, or the deadline)


async def _with_watchdog(awaitable: Any, timer: _Timer) -> Any:
    """Await ``awaitable`` while a task fires the body's signal at the deadline."""
    import anyio

    async def watchdog() -> None:
        await anyio.sleep(timer.remaining())
        timer.expire()

    error: BaseException
    async with anyio.create_task_group() as group:
        group.start_soon(watchdog)
        try:
            return await awaitable
        except BaseException as raised:
            if stops_the_caller(raised):
                raise
            # Re-raised outside the task group, so it is not wrapped in an ExceptionGroup.
            error = raised
        finally:
            group.cancel_scope.cancel()
    raise error


class _Timer:
    """A body's deadline: fires the body's signal when it passes, and remembers it did
    (only that, not the caller's cancellation, makes ``TOOL_TIMEOUT``)."""

    __slots__ = ("deadline", "expired", "source")

    def __init__(self, source: CancelSource, deadline: Deadline) -> None:
        self.source = source
        self.deadline = deadline
        self.expired = False

    def remaining(self) -> float:
        return max(0.0, self.deadline.at - time.monotonic())

    def expire(self) -> None:
        if not self.source.cancelled:
            self.expired = True
            self.source.cancel(_DEADLINE)


async def _in_thread(
    call: Call, entry: ToolEntry, parsed: Any, context: ToolRunContext, timer: _Timer | None
) -> Any:
    """Run a plain body in one worker thread: to its end (``blocking=True`` on a loop,
    no deadline), or until its deadline passes (then it is left to finish)."""
    body = functools.partial(entry.definition.execute, parsed, context)
    if timer is None:
        import anyio
        import anyio.lowlevel

        raw = await anyio.to_thread.run_sync(body, abandon_on_cancel=False)
        # The thread is never abandoned, so a cancellation that arrived meanwhile was
        # deferred: deliver it now instead of after the rest of the pipeline.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return raw
    worker = _Worker(body, call)
    if on_event_loop():
        import anyio

        with anyio.move_on_after(timer.remaining()):
            await anyio.to_thread.run_sync(worker.run, abandon_on_cancel=True)
    else:
        threading.Thread(target=worker.run, name=f"dsh_tools body {call.name}", daemon=True).start()
        worker.done.wait(timer.remaining())
    return worker.outcome(timer)


class _Worker:
    """A body running in a worker thread; what it returns after its call timed out is
    logged and dropped."""

    def __init__(self, body: Callable[[], Any], call: Call) -> None:
        self.body = body
        self.name, self.call_id = call.name, call.input.call_id
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False
        self.raw: Any = None
        self.error: BaseException | None = None
        self.ended: list[Callable[[], None]] = []
        """What to call once the body returned (see :mod:`dsh_tools.lingering`)."""

    def run(self) -> None:
        try:
            self.raw = self.body()
        except BaseException as error:
            self.error = error
        with self.lock:
            self.done.set()
            ended, self.ended = self.ended, []
        for callback in ended:
            callback()
        with self.lock:
            if self.abandoned:
                logger.warning(
                    'tool "%s" (%s): the body returned after the call timed out; '
                    "its late %s was discarded",
                    self.name,
                    self.call_id,
                    "error" if self.error is not None else "result",
                )

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the body has returned: now, if it has."""
        with self.lock:
            if not self.done.is_set():
                self.ended.append(callback)
                return
        callback()

    def outcome(self, timer: _Timer) -> Any:
        """The body's value (or its exception, raised); ``None`` past the deadline."""
        with self.lock:
            self.abandoned = not self.done.is_set()
        if self.abandoned:
            timer.expire()
            left_running(self.when_done)
            return None
        if self.error is not None:
            raise self.error
        return self.raw
