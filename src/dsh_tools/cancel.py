"""Cooperative cancellation: a signal the caller owns and tool bodies observe.

A :class:`CancelSource` is held by whoever may cancel (a host, a timeout); its
:attr:`~CancelSource.signal` travels with the call. Bodies poll ``signal.cancelled`` or
``await signal.wait()``; the pipeline also binds the signal to the async body's cancel
scope, so an ``async def`` body is interrupted at its next ``await``. Cancel from the
thread that runs the event loop (use ``anyio.from_thread.run_sync`` from other threads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import anyio

__all__ = ["NEVER_CANCELLED", "CancelSignal", "CancelSource", "linked_source"]

Callback = Callable[[], object]


class CancelSignal:
    """Read-only view of a cancellation: check it, wait on it, or be called back."""

    __slots__ = ("_callbacks", "_cancelled", "_event", "_reason")

    def __init__(self) -> None:
        self._cancelled = False
        self._reason: str | None = None
        self._callbacks: list[Callback] = []
        self._event: anyio.Event | None = None

    @property
    def cancelled(self) -> bool:
        """True once the owning source was cancelled; never turns back to False."""
        return self._cancelled

    @property
    def reason(self) -> str | None:
        """The reason given to :meth:`CancelSource.cancel`, if any."""
        return self._reason

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
        if self._cancelled:
            return
        self._cancelled = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        if self._event is not None:
            self._event.set()
        for callback in callbacks:
            callback()

    def __repr__(self) -> str:
        state = f"cancelled, reason={self._reason!r}" if self._cancelled else "active"
        return f"<CancelSignal {state}>"


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


def linked_source(*parents: CancelSignal) -> tuple[CancelSource, Callable[[], None]]:
    """A new source that cancels when any parent does; returns it and an unlinker.

    The reason of the parent that fired is copied. Cancelling the new source never
    cancels a parent.
    """
    source = CancelSource()
    removers = [parent.add_callback(_forward(parent, source)) for parent in parents]

    def unlink() -> None:
        for remove in removers:
            remove()

    return source, unlink
