"""One ``LISTEN`` per store for every thread of the process waiting on a ticket.

A waiter registers the ticket it waits for and sleeps on an event; one thread with a
connection of its own listens on the answers' channel and wakes the waiters of each
announced ticket. However many calls wait, a process holds one listening connection
(and the store's pool serves their short reads), so hundreds of calls waiting in a
handful of processes stay within the server's connection limit. The listener runs while
anyone waits; when it cannot listen, waiters still look at their tickets every few
moments (the store's recheck), so a lost connection slows answers down, never loses one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .postgres import Connections

__all__ = ["Listener"]

_LISTEN_WAIT_S = 0.5
"""How long a notification wait lasts before the listener looks whether anyone still
waits."""


class Listener:
    """Wakes the threads waiting on tickets when their answers are announced on
    ``channel`` (see the module docstring)."""

    def __init__(self, connections: Connections, channel: str) -> None:
        self._connections = connections
        self._channel = channel
        self._lock = threading.Lock()
        self._waiting: dict[str, list[threading.Event]] = {}
        self._running = False
        self._listening = threading.Event()
        """Set once the current listener listens (or gave up)."""

    @contextlib.contextmanager
    def watch(
        self, ticket_id: str, woken: threading.Event | None = None
    ) -> Iterator[threading.Event]:
        """An event (``woken``, or a new one) set whenever ``ticket_id`` is announced,
        while the block runs. On entry the listener listens (or could not start), so an
        announcement made after the caller's next look at the ticket is never missed."""
        woken = threading.Event() if woken is None else woken
        with self._lock:
            self._waiting.setdefault(ticket_id, []).append(woken)
            if not self._running:
                self._running = True
                self._listening = threading.Event()
                thread = threading.Thread(
                    target=self._listen, args=(self._listening,), name="dsh-tools LISTEN"
                )
                thread.daemon = True
                thread.start()
            listening = self._listening
        listening.wait(self._connections.timeout_s)
        try:
            yield woken
        finally:
            with self._lock:
                events = self._waiting[ticket_id]
                events.remove(woken)
                if not events:
                    del self._waiting[ticket_id]

    def _listen(self, listening: threading.Event) -> None:
        """Listen and wake waiters until nobody waits (or the connection fails)."""
        try:
            with contextlib.closing(self._connections.connect()) as connection:
                connection.execute(f"LISTEN {self._channel}")
                listening.set()
                while self._anyone_waits():
                    for notice in connection.notifies(timeout=_LISTEN_WAIT_S):
                        self._wake(notice.payload)
        except Exception:  # waiters fall back on looking at their tickets themselves
            with self._lock:
                self._running = False
        finally:
            listening.set()

    def _anyone_waits(self) -> bool:
        with self._lock:
            self._running = bool(self._waiting)
            return self._running

    def _wake(self, ticket_id: str) -> None:
        with self._lock:
            for woken in self._waiting.get(ticket_id, ()):
                woken.set()
