"""Where a tool body runs, and how its signal and deadline hold it there: the one place
a tool body is called.

The body step (:mod:`dsh_tools._pipeline.body`) calls :func:`run` once per body run,
with the body's :class:`Bounds`: the signal the body sees and the :class:`Timer` of its
deadline (the earliest of the tool's ``timeout_ms`` or the registry's
``default_timeout_ms``, and the deadlines of the signals it runs under, such as
``TimeoutPolicy``'s). Where a body runs:

* an ``async def`` body is awaited on the loop under a cancel scope bound to its signal;
  at the deadline the signal fires and the body is interrupted at its next ``await``;
* a plain ``def`` body runs in a worker thread under ``await registry.execute`` (anyio's
  default thread pool, where Starlette and the MCP SDK run sync handlers too), so it
  never stalls the event loop, and what it reports reaches the caller while it runs; a
  tool that says ``blocking=False`` (its body never blocks) runs inline on the loop;
* under ``execute_sync`` a plain ``def`` body runs inline on the calling thread (the sync
  host's thread waits for the call anyway), also when the call needed an event loop of
  its own (the call says which driver runs it: ``Call.synchronous``);
* a ``def`` body with a deadline runs in one worker thread wherever it is called; at the
  deadline its signal fires and the call ends ``TOOL_TIMEOUT`` at once. A thread cannot
  be interrupted: it is left to finish (:func:`dsh_tools._lingering.left_running` says
  so), and what it returns late is logged and dropped.

A body's worker thread runs in a copy of the caller's context variables, as anyio's
threads do.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from .._cancel import NEVER_CANCELLED, CancelSignal, CancelSource, Deadline, linked_source
from .._lingering import left_running
from .loops import (
    NEVER_AWAITABLE,
    is_awaitable,
    on_event_loop,
    run_on_own_loop,
    stops_the_caller,
)

if TYPE_CHECKING:
    from .._context import ToolRunContext
    from .call import Call
    from .plan import ToolEntry

logger = logging.getLogger("dsh_tools")

_DEADLINE = "deadline"
"""The reason the body's signal gives when its deadline passed."""


class Bounds:
    """What holds one body run: the signal it sees (it fires when any of ``parents``
    does), the :class:`Timer` of its deadline, and how to unlink that signal from the
    parents once the body is done."""

    __slots__ = ("signal", "timer", "unlink")

    def __init__(self, parents: tuple[CancelSignal, ...], timeout_ms: float | None) -> None:
        self.signal: CancelSignal = NEVER_CANCELLED
        self.timer: Timer | None = None
        self.unlink: Callable[[], None] | None = None
        own = None if timeout_ms is None else Deadline.after(timeout_ms)
        if own is None and len(parents) <= 1 and (not parents or parents[0].deadline is None):
            if parents:
                self.signal = parents[0]  # the caller's (or the wrapper's) very signal
            return
        source, self.unlink = linked_source(*parents, deadline=own)
        self.signal = source.signal
        deadline = source.signal.deadline
        if deadline is not None:
            self.timer = Timer(source, deadline)


UNBOUND = Bounds((), None)
"""The bounds of a body with no signal to obey and no deadline (most calls): shared."""


class Timer:
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


def run(
    call: Call, entry: ToolEntry, parsed: Any, context: ToolRunContext, timer: Timer | None
) -> Awaitable[Any]:
    """Start the body of ``entry`` on ``parsed``, where the module docstring says: await
    what this returns for the body's value (raises what the body raised). An ``async
    def`` body with no signal or deadline to obey is handed back as its own coroutine,
    so awaiting it costs no frame of ours; a ``def`` body run inline raises here."""
    if not entry.is_async and (
        timer is not None or (entry.definition.blocking and not call.synchronous)
    ):
        return _from_thread(call, entry, parsed, context, timer)
    return _value_of(call, entry, entry.definition.execute(parsed, context), context, timer)


def _value_of(
    call: Call, entry: ToolEntry, raw: Any, context: ToolRunContext, timer: Timer | None
) -> Awaitable[Any]:
    """What to await for the value of what a body returned: an awaitable it returned,
    under its signal and deadline, or the value itself."""
    kind = type(raw)  # is_awaitable, with the usual answers first
    if kind is CoroutineType or (kind not in NEVER_AWAITABLE and is_awaitable(raw)):
        # An async def body the call entered with runs on a loop (the sync driver saw it
        # in the plan); a plain callable's awaitable may not.
        signal = context.signal
        loop = (entry.is_async and entry is call.entry) or on_event_loop()
        plain = loop and signal is NEVER_CANCELLED and timer is None
        return raw if plain else _awaited(raw, signal, timer)
    return _returned(raw)


async def _returned(value: Any) -> Any:
    """What a plain body returned inline, to await like any other body's value."""
    return value


async def _from_thread(
    call: Call, entry: ToolEntry, parsed: Any, context: ToolRunContext, timer: Timer | None
) -> Any:
    """A plain body's value, run in a worker thread (and what it returned, awaited)."""
    raw = await _in_thread(call, entry, parsed, context, timer)
    return await _value_of(call, entry, raw, context, timer)


async def _awaited(awaitable: Any, signal: CancelSignal, timer: Timer | None) -> Any:
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


async def _with_watchdog(awaitable: Any, timer: Timer) -> Any:
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


async def _in_thread(
    call: Call, entry: ToolEntry, parsed: Any, context: ToolRunContext, timer: Timer | None
) -> Any:
    """Run a plain body in one worker thread: to its end (on the host's loop, no
    deadline), or until its deadline passes (then it is left to finish)."""
    body = functools.partial(entry.definition.execute, parsed, context)
    if timer is None:
        import anyio
        import anyio.lowlevel

        raw, error = await anyio.to_thread.run_sync(_boxed, body, abandon_on_cancel=False)
        # The thread is never abandoned, so a cancellation that arrived meanwhile was
        # deferred: deliver it now instead of after the rest of the pipeline.
        await anyio.lowlevel.checkpoint_if_cancelled()
        if error is not None:
            raise error
        return raw
    worker = _Worker(body, call)
    if on_event_loop():
        import anyio

        with anyio.move_on_after(timer.remaining()):
            await anyio.to_thread.run_sync(worker.run, abandon_on_cancel=True)
    else:
        caller = contextvars.copy_context()
        name = f"dsh_tools body {call.name}"
        threading.Thread(target=caller.run, args=(worker.run,), name=name, daemon=True).start()
        worker.done.wait(timer.remaining())
    return worker.outcome(timer)


def _boxed(body: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """What ``body`` returned or raised, as a value: an exception anyio's worker hands
    back is thrown into the awaiting coroutine, and a ``GeneratorExit`` thrown in closes
    the coroutine's awaits instead of reaching the body step, which contains it."""
    try:
        return body(), None
    except BaseException as error:
        return None, error


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
        """What to call once the body returned (see :mod:`dsh_tools._lingering`)."""

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

    def outcome(self, timer: Timer) -> Any:
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
