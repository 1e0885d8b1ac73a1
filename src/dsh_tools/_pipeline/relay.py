"""A call's progress events, carried to the caller's event loop: what a bridge listens with.

The pipeline delivers a call's events from whichever thread the body reported on (the
loop's own, a worker's, a timer's); a bridge sends them with ``await`` (an MCP
notification, an ACP update) or writes them to a terminal. A :class:`Relay` is the
call's ``on_progress`` listener: it keeps what arrives (the latest progress, output
joined per stream in order, bounded) and one task on the caller's loop hands each batch
to the bridge's ``send`` every :data:`TICK_S`, then a last batch once the call is done,
before its result is returned. So a bridge never sends more than a few messages a
second, and never anything after the result.

The task (:class:`_Pump`) starts with the call's first event: most calls report
nothing, and a task group per call would cost an MCP request more than the rest of the
call. It is a task of the loop itself (asyncio's ``create_task``, trio's system task),
which :meth:`Relay.run` ends and waits for before the last batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..progress import Output, Progress
from .loops import Home
from .results import message

if TYPE_CHECKING:
    from .._models import ToolExecution

logger = logging.getLogger("dsh_tools")

T = TypeVar("T")

TICK_S = 0.1
"""How often a relay hands a batch to its bridge."""

MAX_WAITING_CHARS = 64 * 1024
"""The most output characters waiting for the bridge; beyond them the oldest are cut."""

Event = Progress | Output
Send = Callable[[list[Event]], Awaitable[None]]


class Relay:
    """The ``on_progress`` listener of one call, and the task that sends what it heard."""

    __slots__ = ("_chars", "_events", "_home", "_lock", "_pump", "_send")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._chars = 0
        self._home: Home | None = None
        """The loop of the call :meth:`run` awaits, while it does."""
        self._pump: _Pump | None = None
        """The task sending the batches, once the call's first event started it."""

    def __call__(self, execution: ToolExecution, event: Event) -> None:
        """Keep ``event`` for the next batch (called from any thread)."""
        with self._lock:
            self._keep(event)
            pump = None
            if self._pump is None and self._home is not None:
                pump = self._pump = _Pump(self._flush, self._home)
        if pump is not None:
            pump.start()

    def _keep(self, event: Event) -> None:
        """Add ``event`` to the waiting batch (under the lock)."""
        events = self._events
        if type(event) is Progress:  # the latest progress wins, in its place
            if any(type(waiting) is Progress for waiting in events):
                events = self._events = [e for e in events if type(e) is not Progress]
            events.append(event)
            return
        assert type(event) is Output
        last = events[-1] if events else None
        if type(last) is Output and last.stream == event.stream:
            events[-1] = Output(last.text + event.text, event.stream)
        else:
            events.append(event)
        self._chars += len(event.text)
        if self._chars > MAX_WAITING_CHARS:
            self._cut()

    def _cut(self) -> None:
        """Drop the oldest waiting output beyond the bound (the newest is what a person
        watching wants to see)."""
        excess = self._chars - MAX_WAITING_CHARS
        for index, event in enumerate(self._events):
            if excess <= 0:
                break
            if type(event) is Output:
                cut = min(excess, len(event.text))
                self._events[index] = Output(event.text[cut:], event.stream)
                excess -= cut
                self._chars -= cut
        self._events = [e for e in self._events if type(e) is not Output or e.text]

    def _take(self) -> list[Event]:
        with self._lock:
            events, self._events, self._chars = self._events, [], 0
        return events

    async def _flush(self) -> None:
        """Send what waits; a bridge that fails to send is logged, and the call goes on
        (telling a person how a call goes is no reason to end it)."""
        events = self._take()
        if not events:
            return
        try:
            await self._send(events)
        except Exception as error:
            logger.warning("progress for a call could not be sent: %s", message(error))

    async def run(self, work: Awaitable[T]) -> T:
        """Await ``work`` (the call) while sending batches; send the last batch after it."""
        self._home = Home()
        try:
            result = await work
        except BaseException:
            pump = self._ended()
            if pump is not None:
                pump.stop()  # the caller's own: nothing more is sent
            raise
        pump = self._ended()
        if pump is not None:
            await pump.finish()
        if self._events:
            await self._flush()
        return result

    def _ended(self) -> _Pump | None:
        """The call is done: no event starts a task any more; the one started, if any."""
        with self._lock:
            self._home = None
            return self._pump


class _Pump:
    """The task that hands a relay's batches to its bridge every :data:`TICK_S`, started
    by the call's first event (from any thread) on the loop :meth:`Relay.run` runs on."""

    __slots__ = ("_ended", "_flush", "_home", "_stopping", "_task", "_wake")

    def __init__(self, flush: Callable[[], Awaitable[None]], home: Home) -> None:
        self._flush = flush
        self._home = home
        self._task: Any = None
        self._stopping = False
        self._wake: Any = None
        self._ended: Any = None

    def start(self) -> None:
        """Start the task on its loop (called once, from any thread)."""
        self._home.call(self._spawn)

    def _spawn(self) -> None:
        if self._stopping:
            return  # the call ended before its loop got to start the task
        import anyio

        self._wake, self._ended = anyio.Event(), anyio.Event()
        if self._home.library == "asyncio":
            import asyncio

            self._task = asyncio.get_running_loop().create_task(self._run())
        else:
            import trio

            trio.lowlevel.spawn_system_task(self._run)

    async def _run(self) -> None:
        import anyio

        try:
            while not self._stopping:
                with anyio.move_on_after(TICK_S):
                    await self._wake.wait()
                if not self._stopping:
                    await self._flush()
        finally:
            self._ended.set()

    def stop(self) -> None:
        """End the task at its next wake, without waiting for it."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    async def finish(self) -> None:
        """End the task and wait until it has (a batch it is sending is sent first)."""
        self.stop()
        if self._ended is not None:
            await self._ended.wait()
