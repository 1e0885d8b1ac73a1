"""One ``LISTEN`` per store for every call of the process waiting on a ticket.

The calls waiting for answers register their tickets with the store's
:class:`~dsh_tools.approvals.TicketWatchers`; one thread with a connection of its own
listens on the answers' channel while anyone waits, and tells the watchers of each
announced ticket. However many calls wait, a process holds one listening connection
(and the store's pool serves their short reads), so hundreds of calls waiting in a
handful of processes stay within the server's connection limit. Once it listens, the
listener tells every waiter to look once (an answer given while it connected is not
missed). When it cannot listen, the watchers' own look at every waited ticket (once a
second, one statement) still finds the answers: a lost connection slows answers down,
never loses one. After a failure (the server restarting) it tries again at most twice a
second.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_tools.approvals import TicketWatchers

    from .postgres import Connections

__all__ = ["Listener"]

_LISTEN_WAIT_S = 0.5
"""How long a notification wait lasts before the listener looks whether anyone still
waits."""


class Listener:
    """Tells ``watchers`` of the keys (ticket ids) announced on ``channel`` while anyone
    waits."""

    def __init__(
        self, connections: Connections, channel: str, watchers: TicketWatchers | None = None
    ) -> None:
        self._connections = connections
        self._channel = channel
        if watchers is None:
            from dsh_tools.approvals import TicketWatchers

            watchers = TicketWatchers()
        self._watchers = watchers
        self._lock = threading.Lock()
        self._running = False

    @contextlib.contextmanager
    def watch(self, key: str, woken: threading.Event | None = None) -> Iterator[threading.Event]:
        """An event (``woken``, or a new one) set whenever ``key`` is announced, while the
        block runs (for a waiting thread; the shared limits wait so for a freed permit)."""
        woken = threading.Event() if woken is None else woken
        stop = self._watchers.watch(key, woken.set)
        self.ensure()
        try:
            yield woken
        finally:
            stop()

    def ensure(self) -> None:
        """Listen, unless already listening (never waits for the connection)."""
        with self._lock:
            if self._running:
                return
            self._running = True
        thread = threading.Thread(target=self._listen, name="dsh-tools LISTEN", daemon=True)
        thread.start()

    def _listen(self) -> None:
        """Listen and tell the watchers until nobody waits (or the connection fails)."""
        watchers = self._watchers
        try:
            with contextlib.closing(self._connections.connect()) as connection:
                connection.execute(f"LISTEN {self._channel}")
                watchers.announce(watchers.watched())  # answers given while connecting
                while watchers.watched():
                    for notice in connection.notifies(timeout=_LISTEN_WAIT_S):
                        watchers.announce((notice.payload,))
        except Exception:  # the watchers' own look finds the answers meanwhile
            time.sleep(_LISTEN_WAIT_S)  # a server that is down is not asked in a loop
        finally:
            with self._lock:
                self._running = False
        if watchers.watched():
            self.ensure()  # someone came while this listener was ending
