"""The one thread per journal store and process that does the call journal's store work.

A store call is blocking I/O (a SQLite write, a round trip to PostgreSQL). A call on an
event loop hands its journal operations to its store's :class:`Scribe` and awaits the
answer, so it never blocks the loop and never holds a thread of its own (a hundred calls
waiting for a person hold none). The same thread renews the leases of the entries this
process runs, every third of a lease, so they last while the process lives and read
unknown within a lease after it dies. It runs while anything is to do or held, and ends
a few seconds after the last of it. While it runs it also prunes the journal (finished
entries older than the store's retention, :meth:`~dsh_tools.approvals.JournalStore.
prune_calls`): :data:`PRUNE_FIRST_S` after this process's first journaled call on the
store, then at most every :data:`PRUNE_EVERY_S`, so a long-running server's journal does
not grow for ever, no call waits for the prune, and a short-lived process leaves it be.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ..approvals import JournalEntry, JournalStore
from .loops import soon
from .results import message

__all__ = ["Scribe", "scribe"]

T = TypeVar("T")
logger = logging.getLogger("dsh_tools")

_IDLE_S = 5.0
"""How long the thread waits for more work, with nothing held, before it ends."""
PRUNE_EVERY_S = 3600.0
"""How often, at most, a process prunes a store's journal."""
PRUNE_FIRST_S = 60.0
"""How long after its first journaled call on a store a process first prunes it."""


class Scribe:
    """The journal's thread for one store (see the module's docstring)."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store
        self.lease_s = float("inf")
        self._held: dict[tuple[str, str, str], None] = {}
        self._jobs: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running = False
        self._renewed = 0.0
        self._pruned = time.monotonic() - PRUNE_EVERY_S + PRUNE_FIRST_S

    async def run(self, operation: Callable[[], T]) -> T:
        """``operation(store)``'s result (or exception), done on this thread; awaited on
        the caller's loop."""
        import anyio

        done = anyio.Event()
        box: list[Any] = []

        def job() -> None:
            try:
                box.append((operation(), None))
            except BaseException as error:  # the caller's to judge
                box.append((None, error))
            wake()

        wake = soon(done.set)
        self._submit(job)
        with anyio.CancelScope(shield=True):  # a store write, once begun, is awaited
            await done.wait()
        value, error = box[0]
        if error is not None:
            raise error
        return value  # type: ignore[no-any-return]

    def hold(self, entry: JournalEntry, lease_s: float) -> None:
        """Renew ``entry``'s lease from now on, until :meth:`release`."""
        with self._lock:
            self.lease_s = min(self.lease_s, lease_s)
            self._held[entry.agent, entry.key, entry.owner] = None
        self._start()

    def release(self, entry: JournalEntry) -> None:
        with self._lock:
            self._held.pop((entry.agent, entry.key, entry.owner), None)

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._jobs.append(job)
        self._wake.set()
        self._start()

    def _start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._serve, name="dsh-tools-journal", daemon=True).start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                jobs, held = list(self._jobs), list(self._held)
                self._jobs.clear()
                if not jobs and not held and not self._wake.is_set():
                    self._running = False
                    return
            for job in jobs:
                job()
            self._renew(held)
            self._prune()
            self._wake.clear()
            if not self._jobs:
                self._wake.wait(self.lease_s / 3 if held else _IDLE_S)

    def _renew(self, held: list[tuple[str, str, str]]) -> None:
        """Renew every held lease, at most every third of a lease."""
        now = time.monotonic()
        if not held or now - self._renewed < self.lease_s / 3:
            return
        self._renewed = now
        for agent, key, owner in held:
            try:
                self.store.renew_call(agent, key, owner, self.lease_s)
            except Exception as error:  # the next round tries again
                logger.warning("call journal: renewing %r failed: %s", key, message(error))

    def _prune(self) -> None:
        """Drop the journal's old finished entries, at most every :data:`PRUNE_EVERY_S`
        (a store without ``prune_calls`` keeps them all)."""
        now = time.monotonic()
        prune = getattr(self.store, "prune_calls", None)
        if prune is None or now - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = now
        try:
            prune()
        except Exception as error:  # tried again in an hour; the calls go on meanwhile
            logger.warning("call journal: pruning failed: %s", message(error))


_scribes: weakref.WeakKeyDictionary[object, Scribe] = weakref.WeakKeyDictionary()
_scribes_lock = threading.Lock()


def scribe(store: JournalStore) -> Scribe:
    """The store's scribe in this process (made on first use)."""
    with _scribes_lock:
        try:
            return _scribes[store]
        except KeyError:
            made = _scribes[store] = Scribe(store)
            return made
