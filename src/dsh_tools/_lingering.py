"""Work a call leaves running after it ended, for wrappers that hold something for it.

A plain ``def`` body that passes its deadline is abandoned: the call ends
``TOOL_TIMEOUT`` at once, but Python cannot stop a thread, so the body's worker thread
runs on until the body returns. A wrapper that holds a resource for the body (a
``ConcurrencyLimit`` permit) must keep holding it until then, or a tool that times out
often would have more bodies running than its cap allows.

Such a wrapper dispatches inside :func:`watching` and hands its release to
:meth:`Lingering.then`, which runs it at once when nothing was left running and
otherwise when the last abandoned body returns::

    with watching() as lingering:
        try:
            return await dispatch(signal)
        finally:
            lingering.then(release)

The body step reports an abandoned body with :func:`left_running`; nothing else needs
to call it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType

__all__ = ["Lingering", "left_running", "watching"]

WhenDone = Callable[[Callable[[], None]], None]
"""Registers a callback to run once a piece of left-running work has ended (at once when
it already has)."""

_WATCHERS: ContextVar[tuple[Lingering, ...]] = ContextVar("dsh_tools_lingering", default=())


class Lingering:
    """What the calls dispatched inside one :func:`watching` block left running (the
    block's context manager: entering it starts collecting, leaving it stops)."""

    __slots__ = ("_lock", "_release", "_running", "_token")

    def __init__(self) -> None:
        self._lock: threading.Lock | None = None  # made by the first work left running
        self._running = 0
        self._release: Callable[[], None] | None = None
        self._token: Token[tuple[Lingering, ...]] | None = None

    def __enter__(self) -> Lingering:
        self._token = _WATCHERS.set((*_WATCHERS.get(), self))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _WATCHERS.reset(self._token)
            self._token = None

    def _add(self, when_done: WhenDone) -> None:
        # In the block's own context, so before any _ended or a then() that locks: most
        # blocks leave nothing running and never need the lock.
        if self._lock is None:
            self._lock = threading.Lock()
        with self._lock:
            self._running += 1
        when_done(self._ended)

    def _ended(self) -> None:
        assert self._lock is not None  # made by _add, which came first
        with self._lock:
            self._running -= 1
            release = self._release if self._running == 0 else None
            if release is not None:
                self._release = None
        if release is not None:
            release()

    def then(self, release: Callable[[], None]) -> None:
        """Run ``release`` now when nothing is left running, else when the last piece of
        left-running work ends (in the thread where it ends). Call it once."""
        if self._running:  # only work ending can lower it now: decide under the lock
            assert self._lock is not None
            with self._lock:
                if self._running:
                    self._release = release
                    return
        release()


def watching() -> Lingering:
    """Collect the work that calls dispatched in this block leave running (in this
    context: the task or thread that dispatches, and what it awaits)."""
    return Lingering()


def left_running(when_done: WhenDone) -> None:
    """Report work the current call leaves running to every :func:`watching` block around
    it; ``when_done`` registers the callback that says it ended."""
    for lingering in _WATCHERS.get():
        lingering._add(when_done)
