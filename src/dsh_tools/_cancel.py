"""Cooperative cancellation: a signal the caller owns and tool bodies observe.

A :class:`CancelSource` is held by whoever may cancel (a host, a wrapper); its
:attr:`~CancelSource.signal` travels with the call. Bodies poll ``signal.cancelled`` or
``await signal.wait()``; the pipeline also binds the signal to an ``async`` body's cancel
scope, so an ``async def`` body is interrupted at its next ``await``. Cancel from the
thread that runs the event loop (use ``anyio.from_thread.run_sync`` from other threads).

A signal may carry a :class:`Deadline`: the body a dispatch runs under that signal must
finish by then, or the call ends ``TOOL_TIMEOUT`` at that moment. That is how every time
budget works (a tool's ``timeout_ms``, the registry's ``default_timeout_ms`` and
``TimeoutPolicy``): ``signal.with_timeout(ms)`` passed to the inner dispatch, enforced in
one place, where the pipeline runs the body.

:func:`sleep` waits without assuming an event loop: on one it awaits, under
``execute_sync`` (no loop) it blocks the calling thread, which that call blocks anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ._numbers import positive_finite
from ._pipeline.loops import on_event_loop

if TYPE_CHECKING:
    import anyio

__all__ = [
    "CANCEL_GRACE_S",
    "NEVER_CANCELLED",
    "CancelSignal",
    "CancelSource",
    "Deadline",
    "linked_source",
    "sleep",
]

Callback = Callable[[], object]

CANCEL_GRACE_S = 1.0
"""Seconds an awaited plugin stage (pre-execute, approval, wrapper, post-execute, result
observer) may still take to settle after the caller's signal fired (or, for observers, the
caller's deadline passed) before it is interrupted."""


class Deadline(NamedTuple):
    """When a body must have finished: ``at`` on the :func:`time.monotonic` clock, and
    the budget in milliseconds it was set from (what a ``TOOL_TIMEOUT`` message names)."""

    at: float
    budget_ms: float

    @classmethod
    def after(cls, timeout_ms: float) -> Deadline:
        """The deadline ``timeout_ms`` from now; raises ``ValueError`` for a budget that
        is not a positive finite number."""
        if not positive_finite(timeout_ms):
            raise ValueError(
                f"a timeout must be a positive finite number of ms, got {timeout_ms!r}"
            )
        return cls(time.monotonic() + timeout_ms / 1000, timeout_ms)


def _earliest(*deadlines: Deadline | None) -> Deadline | None:
    """The first of ``deadlines`` to come, ignoring ``None``."""
    present = [deadline for deadline in deadlines if deadline is not None]
    return min(present) if present else None


class CancelSignal:
    """Read-only view of a cancellation: check it, wait on it, or be called back."""

    __slots__ = ("_callbacks", "_cancelled", "_deadline", "_event", "_reason")

    def __init__(self) -> None:
        self._cancelled = False
        self._reason: str | None = None
        self._callbacks: list[Callback] = []
        self._event: anyio.Event | None = None
        self._deadline: Deadline | None = None

    @property
    def cancelled(self) -> bool:
        """True once the owning source was cancelled; never turns back to False."""
        return self._cancelled

    @property
    def reason(self) -> str | None:
        """The reason given to :meth:`CancelSource.cancel`, if any."""
        return self._reason

    @property
    def deadline(self) -> Deadline | None:
        """When a body run under this signal must finish (``None``: no deadline).

        Passing the deadline does not fire the signal by itself: the pipeline enforces it
        on the body, fires the signal the body sees, and reports ``TOOL_TIMEOUT``.
        """
        return self._deadline

    def with_timeout(self, timeout_ms: float) -> CancelSignal:
        """This signal with a deadline ``timeout_ms`` from now (an earlier deadline it
        already has wins). Hand it to the inner dispatch to bound the body.

        Raises ``ValueError`` for a budget that is not a positive finite number.
        """
        return _TimedSignal(self, _earliest(self.deadline, Deadline.after(timeout_ms)))

    def add_callback(self, callback: Callback) -> Callable[[], None]:
        """Call ``callback`` once on cancellation (at once if already cancelled).

        Returns a remover; call it when you no longer need the notification.
        """
        if self._cancelled:
            callback()
            return _nothing
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> None:
        """Return once cancelled."""
        if self._cancelled:
            return
        if self._event is None:
            import anyio

            self._event = anyio.Event()
        await self._event.wait()

    def _fire(self, reason: str | None) -> None:
        for callback in self._claim(reason):
            callback()

    def _claim(self, reason: str | None) -> list[Callback]:
        """Mark the signal cancelled for ``reason`` and hand over the callbacks to call
        (none if it was cancelled already): a subclass that guards its state with a lock
        calls them after letting go of it."""
        if self._cancelled:
            return []
        self._cancelled = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        if self._event is not None:
            self._event.set()
        return callbacks

    def __repr__(self) -> str:
        state = f"cancelled, reason={self.reason!r}" if self.cancelled else "active"
        if self.deadline is not None:
            state += f", deadline in {self.deadline.at - time.monotonic():.3f} s"
        return f"<CancelSignal {state}>"


class _TimedSignal(CancelSignal):
    """Another signal seen with a deadline: it fires exactly when that signal does."""

    __slots__ = ("_parent",)

    def __init__(self, parent: CancelSignal, deadline: Deadline | None) -> None:
        super().__init__()
        self._parent = parent
        self._deadline = deadline

    @property
    def cancelled(self) -> bool:
        return self._parent.cancelled

    @property
    def reason(self) -> str | None:
        return self._parent.reason

    def add_callback(self, callback: Callback) -> Callable[[], None]:
        return self._parent.add_callback(callback)

    async def wait(self) -> None:
        await self._parent.wait()


class _NeverSignal(CancelSignal):
    """A signal nobody can cancel; what bodies see when the caller passed none."""

    __slots__ = ()

    def add_callback(self, callback: Callback) -> Callable[[], None]:
        return _nothing


def _nothing() -> None:
    return None


NEVER_CANCELLED: CancelSignal = _NeverSignal()
"""The shared signal of calls that were given none; it never fires."""


class CancelSource:
    """Owns one :class:`CancelSignal` and may cancel it, once."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = CancelSignal()

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the signal; later calls change nothing."""
        self.signal._fire(reason)

    @property
    def cancelled(self) -> bool:
        return self.signal.cancelled


def _forward(parent: CancelSignal, child: CancelSource) -> Callback:
    return lambda: child.cancel(parent.reason)


def linked_source(
    *parents: CancelSignal, deadline: Deadline | None = None
) -> tuple[CancelSource, Callable[[], None]]:
    """A new source that cancels when any parent does; returns it and an unlinker.

    The reason of the parent that fired is copied. Its signal's deadline is the earliest
    of ``deadline`` and the parents'. Cancelling the new source never cancels a parent.
    """
    source = CancelSource()
    source.signal._deadline = _earliest(deadline, *(parent.deadline for parent in parents))
    removers = [parent.add_callback(_forward(parent, source)) for parent in parents]

    def unlink() -> None:
        for remove in removers:
            remove()

    return source, unlink


async def sleep(seconds: float, *signals: CancelSignal | None) -> bool:
    """Sleep ``seconds``, or less: return ``False`` as soon as one of ``signals`` fires.

    Runs on any event loop, and with none: under ``execute_sync`` (driven without a loop)
    it blocks the calling thread, which ``execute_sync`` blocks anyway. Returns ``True``
    when it slept the whole time.
    """
    live = [signal for signal in signals if signal is not None]
    if any(signal.cancelled for signal in live):
        return False
    if on_event_loop():
        import anyio

        with anyio.CancelScope() as scope:
            removers = [signal.add_callback(scope.cancel) for signal in live]
            try:
                await anyio.sleep(seconds)
            finally:
                for remove in removers:
                    remove()
    else:
        woken = threading.Event()
        removers = [signal.add_callback(woken.set) for signal in live]
        try:
            woken.wait(seconds)
        finally:
            for remove in removers:
                remove()
    return not any(signal.cancelled for signal in live)
