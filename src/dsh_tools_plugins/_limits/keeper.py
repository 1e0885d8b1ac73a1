"""The one thread per shared store and process that works for the limits kept there.

However many calls wait for a shared permit, a process has one :class:`Keeper` per store:
calls on an event loop hand it the store's work (they never wait on a database
themselves), it puts the waiting calls in the store's line and grants them their
permits in order, and it renews the leases of the permits and places in line this
process holds, so they last while the process lives and expire within a lease after it
dies. It looks again at the lines whenever a permit of this process comes back, when
another process announces one (PostgreSQL's ``NOTIFY``), and every ``poll_s`` seconds.
The thread runs while anything is held, waited for or to be done, and ends a few seconds
after the last of it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager

from dsh_tools._permits import _Waiter

from .._stores.limit_rows import LimitRows

__all__ = ["Keeper", "SharedWaiter"]

logger = logging.getLogger("dsh_tools")

Listening = Callable[[threading.Event], AbstractContextManager[object]]
"""Sets the event whenever another process may have given a permit back, while the
block runs (PostgreSQL's ``LISTEN``)."""


class SharedWaiter(_Waiter):
    """A call waiting for a permit of a shared ``pool``, as ``holder`` (its place in line,
    ``seq``, once the store gave it one)."""

    __slots__ = ("capacity", "holder", "pool", "seq")

    def __init__(self, wake: Callable[[], None], pool: str, capacity: int) -> None:
        super().__init__(wake)
        self.pool = pool
        self.capacity = capacity
        self.holder = uuid.uuid4().hex
        self.seq: int | None = None


class Keeper:
    """The thread that serves one shared store's limits in this process."""

    def __init__(
        self, rows: LimitRows, lease_s: float, poll_s: float, listening: Listening | None
    ) -> None:
        self.rows = rows
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._listening = listening
        self._lock = threading.Lock()
        self._jobs: deque[Callable[[], None]] = deque()
        self._lines: dict[str, deque[SharedWaiter]] = {}
        self._held: dict[str, set[str]] = {}
        self._wake = threading.Event()
        self._running = False
        self._busy = False
        self._done = threading.Condition(self._lock)
        self._listened = False
        atexit.register(_drain, weakref.ref(self))
        _KEEPERS.add(self)

    # -------------------------------------------------------------- called by the calls

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the keeper's thread, after the jobs before it."""
        with self._lock:
            self._jobs.append(job)
            self._start()
        self._wake.set()

    def wait(self, waiter: SharedWaiter) -> None:
        """Put ``waiter`` in this process's line for its pool: the keeper queues it in the
        store's (unless it is there already) and wakes it once it holds a permit."""
        with self._lock:
            self._lines.setdefault(waiter.pool, deque()).append(waiter)
            self._start()
        self._wake.set()

    def hold(self, pool: str, holder: str) -> None:
        """Keep ``holder``'s permit of ``pool`` alive until :meth:`let_go`."""
        with self._lock:
            self._held.setdefault(pool, set()).add(holder)
            self._start()

    def let_go(self, pool: str) -> str | None:
        """Stop renewing one permit of ``pool`` this process holds; its holder."""
        with self._lock:
            holders = self._held.get(pool)
            if not holders:
                return None
            holder = holders.pop()
            if not holders:
                del self._held[pool]
            return holder

    def abandon(self, waiter: SharedWaiter) -> bool:
        """Whether ``waiter`` was granted its permit; if not, it leaves the line."""
        with self._lock:
            waiter.abandoned = not waiter.granted
            line = self._lines.get(waiter.pool)
            if waiter.abandoned and line is not None and waiter in line:
                line.remove(waiter)
                if not line:
                    del self._lines[waiter.pool]
            return waiter.granted

    def held(self, pool: str) -> int:
        with self._lock:
            return len(self._held.get(pool, ()))

    def waiting(self, pool: str) -> int:
        with self._lock:
            return len(self._lines.get(pool, ()))

    def give_back(self, holder: str) -> None:
        """Give ``holder``'s permit back to the store (a failure is logged: the permit
        comes back when its lease ends), then serve this process's line at once."""
        try:
            self.rows.release(holder)
        except Exception as error:
            logger.warning("could not give a shared permit back (its lease ends it): %s", error)
        self._wake.set()

    def leave(self, holder: str) -> None:
        """Take ``holder`` out of the store's line (a failure is logged, as above)."""
        try:
            self.rows.leave(holder)
        except Exception as error:
            logger.warning("could not leave a shared permit's line (its lease ends it): %s", error)

    # -------------------------------------------------------------- the thread

    def _start(self) -> None:
        """Start the thread unless it runs (the caller holds the lock)."""
        if not self._running:
            self._running = True
            thread = threading.Thread(target=self._run, name="dsh-tools limits", daemon=True)
            thread.start()

    def _run(self) -> None:
        renew_at = time.monotonic() + self.lease_s / 3
        idle_until: float | None = None
        with contextlib.ExitStack() as listening:
            while True:
                with self._lock:
                    jobs = list(self._jobs)
                    self._jobs.clear()
                    self._busy = bool(jobs)
                    self._wake.clear()
                    idle = not (jobs or self._lines or self._held)
                    if idle and idle_until is not None and time.monotonic() >= idle_until:
                        self._running = False
                        return
                    lines = bool(self._lines)
                # Idle, the thread lingers a while: the next call need not start one.
                idle_until = (idle_until or time.monotonic() + _LINGER_S) if idle else None
                for job in jobs:
                    job()
                with self._lock:
                    self._busy = False
                    self._done.notify_all()
                if self._listening is not None and lines != self._listened:
                    self._listen(listening, lines)
                if time.monotonic() >= renew_at:
                    self._renew()
                    renew_at = time.monotonic() + self.lease_s / 3
                if lines:
                    self._serve()
                pause = min(renew_at - time.monotonic(), self.poll_s if lines else math.inf)
                self._wake.wait(max(pause, 0.0))

    def _listen(self, listening: contextlib.ExitStack, lines: bool) -> None:
        """Listen for other processes' permits while this process has a line."""
        assert self._listening is not None
        if lines:
            listening.enter_context(self._listening(self._wake))
        else:
            listening.close()
        self._listened = lines

    def _renew(self) -> None:
        with self._lock:
            holders = [holder for held in self._held.values() for holder in held]
            holders += [w.holder for line in self._lines.values() for w in line if w.seq]
        if not holders:
            return
        try:
            self.rows.renew(holders, self.lease_s)
        except Exception as error:
            logger.warning("could not renew the leases of shared permits: %s", error)

    def _serve(self) -> None:
        """Grant the waiters of each line in order while the store has permits, and put
        the others in the store's line."""
        with self._lock:
            lines = {pool: sorted(line, key=_in_store_order) for pool, line in self._lines.items()}
        for pool, line in lines.items():
            open_ = True
            for waiter in line:
                if waiter.abandoned or (not open_ and waiter.seq is not None):
                    continue
                try:
                    taken = self.rows.take(
                        pool, waiter.capacity, waiter.holder, self.lease_s, waiter.seq, True
                    )
                except Exception as error:
                    self._fail(pool, error)
                    break
                waiter.seq = taken.seq if waiter.seq is None else waiter.seq
                if taken.granted:
                    self._grant(waiter)
                else:
                    open_ = False

    def _grant(self, waiter: SharedWaiter) -> None:
        with self._lock:
            line = self._lines.get(waiter.pool, deque())
            if waiter in line:
                line.remove(waiter)
            if not line:
                self._lines.pop(waiter.pool, None)
            if not waiter.abandoned:
                waiter.granted = True
                self._held.setdefault(waiter.pool, set()).add(waiter.holder)
        if waiter.granted:
            try:
                waiter.wake()
                return
            except RuntimeError:  # its event loop has closed: nobody will take the permit
                self._forget(waiter.pool, waiter.holder)
        self.give_back(waiter.holder)

    def _forget(self, pool: str, holder: str) -> None:
        with self._lock:
            holders = self._held.get(pool, set())
            holders.discard(holder)
            if not holders:
                self._held.pop(pool, None)

    def _fail(self, pool: str, error: Exception) -> None:
        """Wake every waiter of ``pool`` with ``error``: the store cannot serve them."""
        with self._lock:
            line = self._lines.pop(pool, deque())
        for waiter in line:
            waiter.error = error
            with contextlib.suppress(RuntimeError):
                waiter.wake()


_KEEPERS: weakref.WeakSet[Keeper] = weakref.WeakSet()


def _forget_the_parent() -> None:
    """In a child process made by ``fork``: the parent's permits, waiters and thread are
    not the child's (the child must never renew the parent's leases)."""
    for keeper in list(_KEEPERS):
        keeper._lock = threading.Lock()
        keeper._done = threading.Condition(keeper._lock)
        keeper._wake = threading.Event()
        keeper._jobs.clear()
        keeper._lines.clear()
        keeper._held.clear()
        keeper._running = keeper._busy = keeper._listened = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parent)


def _in_store_order(waiter: SharedWaiter) -> tuple[bool, int]:
    """Waiters by their place in the store's line, those without one after them. A call
    waiting on its own thread takes its place before it joins this process's line, so
    the two orders may differ, and once one waiter is refused the ones behind it are not
    asked: served out of order, the first in the store's line would never be."""
    return (waiter.seq is None, waiter.seq or 0)


_LINGER_S = 5.0
"""How long the keeper's thread outlives its last work."""


def _drain(keeper_ref: weakref.ref[Keeper]) -> None:
    """At exit: let the jobs handed over finish, then give back every permit and place
    in line this process holds (nothing here will use them), so other processes need
    not wait for their leases to end."""
    keeper = keeper_ref()
    if keeper is None:
        return
    with keeper._lock:
        keeper._done.wait_for(lambda: not (keeper._busy or keeper._jobs), _DRAIN_S)
        jobs = list(keeper._jobs)
        keeper._jobs.clear()
        held = [holder for holders in keeper._held.values() for holder in holders]
        keeper._held.clear()
        waiting = [waiter.holder for line in keeper._lines.values() for waiter in line]
        keeper._lines.clear()
    for job in jobs:
        job()
    for holder in held:
        keeper.give_back(holder)
    for holder in waiting:
        keeper.leave(holder)


_DRAIN_S = 5.0
"""The longest the exit waits for the keeper's jobs in flight."""
