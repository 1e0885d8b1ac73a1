"""A first-in first-out pool of permits that waits with or without an event loop.

:class:`Permits` is what a wrapper uses to cap how many calls run at once. Like
:func:`dsh_tools._cancel.sleep`, :meth:`Permits.acquire` awaits on an event loop (asyncio
or trio) and blocks the calling thread without one (a call ``execute_sync`` drives by
hand), so a capped call never needs a loop of its own. Waiters of both kinds share one
queue and are served strictly in the order they arrived. A waiter whose signal fires, or
whose deadline passes, leaves the queue holding nothing; a permit granted to it at that
very moment goes on to the next waiter.

A pool can be *retired* when nobody holds or waits for a permit (:meth:`Permits.retire`):
its owner drops it (a table of pools that grows per agent stays small), and an acquirer
that still reaches it gets :class:`Retired` and asks its owner for the current pool.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ._cancel import CancelSignal, Deadline
from ._pipeline.loops import _running_library, soon
from .errors import DshToolsError

__all__ = ["Permits", "Retired", "waker"]


class Retired(DshToolsError):
    """The pool was retired (see :meth:`Permits.retire`): take a permit of its successor."""


class _Waiter:
    """One queued acquirer: granted (under the pool's lock), abandoned by its owner, or
    (for a pool kept elsewhere) told the ``error`` that keeps it from a permit."""

    __slots__ = ("abandoned", "error", "granted", "wake")

    def __init__(self, wake: Callable[[], None]) -> None:
        self.granted = False
        self.abandoned = False
        self.error: Exception | None = None
        self.wake = wake


class Permits:
    """``capacity`` permits, handed out first-in first-out.

    :param capacity: how many holders at once (an integer >= 1).

    Raises ``ValueError`` for a capacity that is not a positive integer.

    A subclass may keep its permits elsewhere (the shared limits of
    ``dsh_tools_plugins.limits`` keep them in a database): it overrides
    :meth:`try_acquire`, :meth:`release`, ``_enqueue`` (queue a waiter, or ``None`` for a
    permit taken at once) and ``_finish`` (whether the waiter keeps what it was granted),
    and wakes a waiter it cannot serve with the waiter's ``error`` set, which ``_finish``
    raises.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"a permit pool needs a capacity of at least 1, got {capacity!r}")
        self.capacity = capacity
        # One token per free permit. Only a holder of the lock adds one, and only when no
        # live waiter is queued; a waiter queues only when it finds none (under the lock).
        # So a free token means nobody waits, and taking one needs no lock: ``pop`` is
        # atomic, and whoever pops the last one wins it.
        self._free: list[None] = [None] * capacity
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()
        self.retired = False

    @property
    def in_use(self) -> int:
        """Permits held right now."""
        return self.capacity - len(self._free)

    @property
    def waiting(self) -> int:
        """Acquirers queued right now (abandoned ones not yet skipped included)."""
        return sum(not waiter.abandoned for waiter in self._waiters)

    def try_acquire(self) -> bool:
        """Take a permit if one is free and nobody waits; never waits."""
        try:
            self._free.pop()
        except IndexError:
            return False
        return True

    async def acquire(
        self, *signals: CancelSignal | None, deadline: Deadline | None = None
    ) -> bool:
        """Wait for a permit; ``True`` once held, ``False`` (holding nothing) as soon as
        one of ``signals`` fires or ``deadline`` passes first. Raises :class:`Retired`
        when the pool was retired."""
        live = [signal for signal in signals if signal is not None]
        if any(signal.cancelled for signal in live):
            return False
        if self.try_acquire():
            return True
        if _running_library() is None:
            return self._acquire_blocking(live, deadline)
        return await self._acquire_on_loop(live, deadline)

    def release(self) -> None:
        """Give a permit back: to the first live waiter, or to the pool."""
        with self._lock:
            waiter = self._next_waiter() if self._waiters else None
            if waiter is None:
                self._free.append(None)
                return
            waiter.granted = True
        try:
            waiter.wake()
        except RuntimeError:  # its event loop has closed: nobody will take the permit
            self.release()

    def retire(self) -> bool:
        """Take every permit for good when nobody holds or waits for one; ``True`` then.
        A retired pool grants nothing: its acquirers get :class:`Retired`."""
        with self._lock:
            if self.waiting:
                return False
            taken = 0
            while taken < self.capacity and self.try_acquire():
                taken += 1
            if taken < self.capacity:
                self._free.extend([None] * taken)
                return False
            self.retired = True
            return True

    def _next_waiter(self) -> _Waiter | None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.abandoned:
                return waiter
        return None

    def _enqueue(self, wake: Callable[[], None]) -> _Waiter | None:
        """Queue a waiter, or take a permit at once when one came free meanwhile."""
        with self._lock:
            if self.try_acquire():
                return None
            if self.retired:
                raise Retired("the permit pool was retired; take a permit of its successor")
            waiter = _Waiter(wake)
            self._waiters.append(waiter)
            return waiter

    def _acquire_blocking(self, live: list[CancelSignal], deadline: Deadline | None) -> bool:
        woken = threading.Event()
        waiter = self._enqueue(woken.set)
        if waiter is None:
            return True
        removers = [signal.add_callback(woken.set) for signal in live]
        waited = False
        try:
            while not (waiter.granted or waiter.error or any(s.cancelled for s in live)):
                if not woken.wait(_remaining(deadline)):
                    break
                woken.clear()
            waited = True
        finally:
            for remove in removers:
                remove()
            kept = self._finish(waiter, live, waited)
        return kept

    async def _acquire_on_loop(self, live: list[CancelSignal], deadline: Deadline | None) -> bool:
        import anyio

        event = anyio.Event()
        waiter = self._enqueue(waker(event))
        if waiter is None:
            return True
        waited = False
        try:
            with anyio.CancelScope(deadline=_loop_deadline(deadline)) as scope:
                removers = [signal.add_callback(scope.cancel) for signal in live]
                try:
                    await event.wait()
                finally:
                    for remove in removers:
                        remove()
            waited = True
        finally:
            kept = self._finish(waiter, live, waited)
        return kept

    def _finish(self, waiter: _Waiter, live: list[CancelSignal], waited: bool) -> bool:
        """Whether the waiter keeps a permit: granted, its wait ended normally (no
        exception is leaving it) and no signal fired; a permit it will not keep goes on."""
        with self._lock:
            granted = waiter.granted
            waiter.abandoned = not granted
        kept = granted and waited and not any(signal.cancelled for signal in live)
        if granted and not kept:
            self.release()
        return kept


def _remaining(deadline: Deadline | None) -> float | None:
    return None if deadline is None else max(0.0, deadline.at - time.monotonic())


def _loop_deadline(deadline: Deadline | None) -> float:
    """``deadline`` on the running loop's clock (anyio's ``current_time``)."""
    import math

    import anyio

    if deadline is None:
        return math.inf
    return anyio.current_time() + (deadline.at - time.monotonic())


def waker(event: Any) -> Callable[[], None]:
    """A function that sets ``event`` (an ``anyio.Event`` of the running loop) from any
    thread: directly on the loop's thread, else through the loop's thread-safe scheduling
    (asyncio's ``call_soon_threadsafe``, trio's token). Call it on the loop's thread; a
    thread of your own that hands results to tasks wakes them with it."""
    return soon(event.set)
