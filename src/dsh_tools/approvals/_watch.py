"""Waiting for answers without a thread per waiting call: one watcher per store.

A call that waits for a person's answer registers its ticket with the store's
:class:`TicketWatchers` (``store.watch_ticket(ticket_id, changed)``) and sleeps on its
own event loop (or thread); the watchers call ``changed`` when the ticket may have been
answered. What tells the watchers is the store's: its own answers (the memory store, and
a file store's answers made in this process), a ``LISTEN`` connection (PostgreSQL), and
one thread per store that looks at every watched ticket in one query every few moments
(a file written by other processes, and PostgreSQL's safety net for a notification
lost while reconnecting). However many calls wait, a store holds at most that one
thread, and only while someone waits.

:func:`wait_watched` is the blocking wait built on the same watchers (a store's
``wait_for_answer``).

:mod:`dsh_tools.approvals` is the public import path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from ._tickets import ApprovalTicket, TicketState

__all__ = ["TicketWatchers", "wait_watched"]

logger = logging.getLogger("dsh_tools")

Look = Callable[[Sequence[str]], Iterable[str]]
"""Which of the given ticket ids are no longer pending (answered, expired, gone)."""

Changed = Callable[[], None]
"""Told that a watched ticket may have changed: called from any thread, must not block."""


class TicketWatchers:
    """Who waits on which ticket of one store in this process, and the thread that looks.

    :param look: reads which watched tickets are settled, in one go; ``None``: the store
        announces every change itself (:meth:`announce`), and no thread runs.
    :param every_s: how often the thread looks while anyone waits.
    """

    def __init__(self, look: Look | None = None, every_s: float = 1.0) -> None:
        self._look = look
        self._every_s = every_s
        self._lock = threading.Lock()
        self._watching: dict[str, list[Changed]] = {}
        self._looking = False
        self._quiet = threading.Event()
        """Set when the last watcher leaves: the looking thread ends without waiting."""

    def watch(self, ticket_id: str, changed: Changed) -> Callable[[], None]:
        """Call ``changed`` whenever ``ticket_id`` may have been answered, until the
        function returned is called."""
        with self._lock:
            self._watching.setdefault(ticket_id, []).append(changed)
            self._quiet.clear()
            start = self._look is not None and not self._looking
            self._looking = self._looking or start
        if start:
            name = "dsh-tools ticket watcher"
            threading.Thread(target=self._keep_looking, name=name, daemon=True).start()

        def stop() -> None:
            with self._lock:
                callbacks = self._watching.get(ticket_id, [])
                if changed in callbacks:
                    callbacks.remove(changed)
                if not callbacks:
                    self._watching.pop(ticket_id, None)
                if not self._watching:
                    self._quiet.set()

        return stop

    def watched(self) -> list[str]:
        """The tickets someone waits on now."""
        with self._lock:
            return list(self._watching)

    def announce(self, ticket_ids: Iterable[str]) -> None:
        """Tell the watchers of ``ticket_ids`` that their tickets may have changed."""
        with self._lock:
            callbacks = [each for id in ticket_ids for each in self._watching.get(id, ())]
        for changed in callbacks:
            try:
                changed()
            except Exception as error:  # a waiter whose loop is gone: it waits no more
                logger.debug("a ticket watcher could not be told: %s", error)

    def _keep_looking(self) -> None:
        """Look at every watched ticket every ``every_s`` until nobody watches."""
        assert self._look is not None
        while True:
            self._quiet.wait(self._every_s)
            with self._lock:
                watched = list(self._watching)
                if not watched:
                    self._looking = False
                    return
            try:
                settled = list(self._look(watched))
            except Exception as error:  # tried again; every waiter has a deadline
                logger.debug("looking at waited tickets failed: %s", error)
                continue
            self.announce(settled)


def wait_watched(
    watch: Callable[[str, Changed], Callable[[], None]],
    get: Callable[[str], ApprovalTicket | None],
    ticket_id: str,
    timeout_s: float,
) -> ApprovalTicket | None:
    """Block until the ticket is no longer pending or ``timeout_s`` passed, woken by
    ``watch`` (a store's ``watch_ticket``); the ticket as ``get`` then reads it."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    woken = threading.Event()
    stop = watch(ticket_id, woken.set)
    try:
        while True:
            woken.clear()
            ticket = get(ticket_id)
            left = deadline - time.monotonic()
            if ticket is None or ticket.state is not TicketState.PENDING or left <= 0:
                return ticket
            woken.wait(left)
    finally:
        stop()
