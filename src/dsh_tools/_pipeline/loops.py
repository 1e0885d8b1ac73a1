"""Event loops, or none: how the one async call path also runs for synchronous hosts.

Every stage is written once: those that can wait as ``async def``, those that never do
(the guards, the finalizer) as plain functions. ``await registry.execute(call)`` awaits
the call's coroutine on the host's loop (asyncio or trio, through anyio).
``registry.execute_sync(call)`` drives the very same coroutine by hand (:func:`drive`)
when its plan says nothing in it awaits a loop, and on a loop of its own otherwise. The
few places that wait ask :func:`on_event_loop` which of the two they are in, so no stage
branches on it.
Whether an escaping exception is the caller's own cancellation is a question about the
running loop too: :func:`stops_the_caller` answers it for every stage.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, TypeVar

T = TypeVar("T")

_modules = sys.modules


def on_event_loop() -> bool:
    """Whether an asyncio or trio loop runs in this thread (asked without raising: it is
    asked on every ``execute_sync``, and only a library that was imported can run)."""
    return _running_library() is not None


def refuse_inside_a_loop() -> None:
    """``execute_sync`` cannot block a running loop's thread: say what to use instead."""
    library = _running_library()
    if library is not None:
        raise RuntimeError(
            f"execute_sync() was called inside a running {library} event loop; "
            "use `await registry.execute(call)` there"
        )


def _running_library() -> str | None:
    """``"asyncio"`` or ``"trio"`` when its loop runs in this thread, else ``None``.

    A module another thread is still importing sits in ``sys.modules`` half made, without
    the functions read here; no loop of it can run yet, so that means none.
    """
    asyncio = _modules.get("asyncio")
    running = getattr(asyncio, "_get_running_loop", None)
    if running is not None and running() is not None:
        return "asyncio"
    trio = _modules.get("trio")
    if trio is not None and _in_trio_run(trio):
        return "trio"
    return None


def _in_trio_run(trio: Any) -> bool:
    """Whether a trio run is active in this thread; trio before 0.23 has no in_trio_run."""
    lowlevel = getattr(trio, "lowlevel", None)
    if lowlevel is None or not hasattr(lowlevel, "current_trio_token"):
        return False  # trio is still being imported (by another thread)
    if hasattr(lowlevel, "in_trio_run"):
        return bool(lowlevel.in_trio_run())
    try:
        lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


def stops_the_caller(error: BaseException) -> bool:
    """Whether ``error`` belongs to the caller, not to the tool or plugin it came through:
    ``KeyboardInterrupt`` (the user), or the native cancellation of the caller's own task.
    These propagate (after the result observers); anything else is contained as a failure.

    trio raises ``Cancelled`` only for a cancel scope, so it is always the caller's (a
    scope of the pipeline catches its own). An asyncio ``CancelledError`` is the caller's
    when the current task is being cancelled (``Task.cancelling()``, Python 3.11+): one
    from awaiting a cancelled sub-task is not. Python 3.10 cannot tell them apart, so
    there every ``CancelledError`` on a loop is taken as the caller's.
    """
    if isinstance(error, KeyboardInterrupt):
        return True
    if isinstance(error, Exception):
        return False
    asyncio = _modules.get("asyncio")
    if asyncio is not None and isinstance(error, asyncio.CancelledError):
        if _running_library() != "asyncio":
            return False  # no loop in this thread: it cannot be the caller's task
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)
        return cancelling is None or cancelling() > 0
    trio = _modules.get("trio")
    return trio is not None and isinstance(error, getattr(trio, "Cancelled", ()))


NEVER_AWAITABLE = frozenset({type(None), str, int, float, bool, dict, list, tuple})
"""Types of the values bodies and hookimpls usually return, none of them awaitable."""


def is_awaitable(value: object) -> bool:
    """``inspect.isawaitable`` with the common answers (coroutines, plain data) first:
    it runs several times per call."""
    kind = type(value)
    if kind is CoroutineType:
        return True
    if kind in NEVER_AWAITABLE:
        return False
    return inspect.isawaitable(value)


class NeedsEventLoop(RuntimeError):
    """Something awaited an event loop while ``execute_sync`` drove the call without one."""


_NO_LOOP_MESSAGES = ("no running event loop", "must be called from async context")


def is_missing_loop(error: BaseException) -> bool:
    """Whether ``error`` says that code awaited an event loop where none runs: ours, or
    what anyio, asyncio and trio raise then."""
    if isinstance(error, NeedsEventLoop):
        return True
    if not isinstance(error, RuntimeError) or on_event_loop():
        return False
    kind = type(error).__name__
    return (
        kind in ("NoEventLoopError", "AsyncLibraryNotFoundError") or str(error) in _NO_LOOP_MESSAGES
    )


_MAX_THROWS = 100
"""How often :func:`drive` throws into a call that keeps suspending before it gives up
(each throw lets one more ``finally`` or stage finish; a call needs a handful)."""


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end in this thread, with no event loop.

    For a call whose plan awaits nothing that needs a loop. If something suspends anyway
    (a wrapper awaiting ``asyncio.sleep``, say), :class:`NeedsEventLoop` is thrown in at
    that point, so the stage that awaited fails closed like any raising stage.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    for _ in range(_MAX_THROWS):
        try:
            coroutine.throw(
                NeedsEventLoop(
                    "it awaited an event loop, and execute_sync runs this call without one"
                )
            )
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError(
        "a call kept suspending without an event loop; use `await registry.execute(call)`"
    )


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def run_on_own_loop(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on an event loop started for it (none may run in this thread)."""
    import anyio

    return anyio.run(_awaited, awaitable)


class Home:
    """The event loop running in this thread (made on it), to run callbacks on from any
    thread: at once on the loop's own thread, else through the loop's thread-safe
    scheduling (asyncio's ``call_soon_threadsafe``, trio's token)."""

    __slots__ = ("_loop", "_thread", "_token")

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        asyncio = _modules.get("asyncio")
        running = getattr(asyncio, "_get_running_loop", None)
        self._loop = None if running is None else running()
        self._token: Any = None
        if self._loop is None:
            self._token = _modules["trio"].lowlevel.current_trio_token()

    @property
    def library(self) -> str:
        return "asyncio" if self._loop is not None else "trio"

    def call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop (called from any thread)."""
        if threading.get_ident() == self._thread:
            callback()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(callback)
        else:
            self._token.run_sync_soon(callback)


def soon(callback: Callable[[], None]) -> Callable[[], None]:
    """A function that runs ``callback`` on the running loop, called from any thread
    (see :class:`Home`). Make it on the loop."""
    home = Home()
    return lambda: home.call(callback)
