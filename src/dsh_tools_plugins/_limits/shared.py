"""Limits that hold across processes: permits and budget spending kept in the database of
an approval store (a SQLite file shared by the processes of one machine, or PostgreSQL
shared by machines).

:class:`SharedLimits` is what ``ConcurrencyLimit(store=...)`` and ``CallBudget(store=...)``
take; :mod:`dsh_tools_plugins.limits` is its public import path. A permit is a row with
its holder, its owner (host and process) and an expiry ``lease_s`` ahead, which the
holding process renews while it holds it (:class:`~.keeper.Keeper`), so the permits of a
process that died come back within one lease. Waiters are served first in, first out
across every process, through a line kept in the store too.

No call on an event loop touches the database: it hands the work to the store's one
keeper thread and awaits its answer. A call without a loop (``execute_sync``) does its
own work on its own thread, which it blocks anyway.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dsh_tools._cancel import CancelSignal, Deadline
from dsh_tools._numbers import positive_finite
from dsh_tools._permits import Permits, _Waiter, waker
from dsh_tools._pipeline.loops import on_event_loop
from dsh_tools.errors import DefinitionError

from .._stores.limit_rows import LimitRows, Spend
from .keeper import Keeper, Listening, SharedWaiter

if TYPE_CHECKING:
    import os

    from ..approval_postgres import PostgresApprovalStore
    from ..approval_store import SqliteApprovalStore

__all__ = ["SharedLimits", "SharedPermits"]

_SQLITE_POLL_S = 0.05
"""How often a process waiting on a SQLite file looks for permits other processes gave
back (nothing announces them)."""
_POSTGRES_POLL_S = 1.0
"""The same on PostgreSQL, where ``NOTIFY`` announces them: a backstop."""


class SharedLimits:
    """Permits and budget spending kept in the database of an approval store, shared by
    every process (and, on PostgreSQL, every machine) that uses it.

    :param store: a :class:`~dsh_tools_plugins.approval_store.SqliteApprovalStore` or a
        :class:`~dsh_tools_plugins.approval_postgres.PostgresApprovalStore`.
    :param lease_s: how long a permit outlives the last sign of life of the process
        holding it; the process renews it every third of that.

    Raises :class:`~dsh_tools.DefinitionError` for another kind of store or a lease that
    is not a positive finite number of seconds.
    """

    def __init__(
        self, store: SqliteApprovalStore | PostgresApprovalStore, *, lease_s: float = 30.0
    ):
        if not positive_finite(lease_s):
            raise DefinitionError(
                f"SharedLimits lease_s must be a positive finite number, got {lease_s!r}"
            )
        rows, poll_s, listening = _rows_of(store)
        self.store = store
        self.lease_s = float(lease_s)
        self.keeper = Keeper(rows, self.lease_s, poll_s, listening)

    @classmethod
    def open(
        cls,
        location: str,
        *,
        workspace: str | os.PathLike[str] | None = None,
        lease_s: float = 30.0,
    ) -> SharedLimits:
        """The shared limits in the store at ``location`` (a ``postgresql://`` URL or a
        SQLite file outside ``workspace``), checked now: see
        :func:`~dsh_tools_plugins.approval_store.open_approval_store`."""
        from ..approval_store import open_approval_store

        return cls(open_approval_store(location, workspace=workspace), lease_s=lease_s)

    def __repr__(self) -> str:
        return f"SharedLimits({self.store!r}, lease_s={self.lease_s:g})"

    def permits(self, pool: str, capacity: int) -> SharedPermits:
        """The pool named ``pool`` of ``capacity`` permits (every process naming it with
        this store shares it)."""
        return SharedPermits(self.keeper, pool, capacity)

    def spend(self, checks: Sequence[Spend], dry: bool) -> Any:
        """:meth:`LimitRows.spend <dsh_tools_plugins._stores.limit_rows.LimitRows.spend>`:
        done at once without an event loop, else an awaitable of it (done by the keeper)."""
        if not on_event_loop():
            return self.keeper.rows.spend(checks, dry)
        return self._spent_by_keeper(checks, dry)

    def spent(self, check: Spend) -> int:
        """How many calls count against ``check`` now (read from the store)."""
        return self.keeper.rows.spent(check)

    async def _spent_by_keeper(self, checks: Sequence[Spend], dry: bool) -> int | None:
        import anyio

        done = anyio.Event()
        wake = waker(done)
        outcome: list[int | Exception | None] = []

        def job() -> None:
            try:
                outcome.append(self.keeper.rows.spend(checks, dry))
            except Exception as error:
                outcome.append(error)
            # RuntimeError: the caller's loop has closed, nobody wants the answer.
            with contextlib.suppress(RuntimeError):
                wake()

        self.keeper.submit(job)
        await done.wait()
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]


class SharedPermits(Permits):
    """A pool of permits kept in a shared store (see the module docstring): the same
    interface as :class:`~dsh_tools._permits.Permits`, where ``in_use`` and ``waiting``
    count this process's holders and waiters."""

    def __init__(self, keeper: Keeper, pool: str, capacity: int) -> None:
        super().__init__(capacity)
        self.pool = pool
        self._keeper = keeper

    @property
    def in_use(self) -> int:
        return self._keeper.held(self.pool)

    @property
    def waiting(self) -> int:
        return self._keeper.waiting(self.pool)

    def try_acquire(self) -> bool:
        """A permit if the store has one free and nobody waits; ``False`` at once on an
        event loop (there the store is asked only through :meth:`acquire`)."""
        if on_event_loop() or self._keeper.waiting(self.pool):
            return False
        waiter = SharedWaiter(_nothing, self.pool, self.capacity)
        return self._took(waiter, queue=False)

    async def acquire(
        self, *signals: CancelSignal | None, deadline: Deadline | None = None
    ) -> bool:
        live = [signal for signal in signals if signal is not None]
        if any(signal.cancelled for signal in live):
            return False
        if on_event_loop():
            return await self._acquire_on_loop(live, deadline)
        return self._acquire_blocking(live, deadline)

    def release(self) -> None:
        holder = self._keeper.let_go(self.pool)
        if holder is None:
            return
        if on_event_loop():
            self._keeper.submit(lambda: self._keeper.give_back(holder))
        else:
            self._keeper.give_back(holder)

    def retire(self) -> bool:
        """Always: this object only names the pool, which lives in the store."""
        return True

    def _enqueue(self, wake: Any) -> _Waiter | None:
        waiter = SharedWaiter(wake, self.pool, self.capacity)
        if not on_event_loop() and self._took(waiter, queue=True):
            return None
        self._keeper.wait(waiter)
        return waiter

    def _took(self, waiter: SharedWaiter, queue: bool) -> bool:
        """Ask the store on this thread: ``True`` once ``waiter`` holds a permit; else
        it has its place in the store's line when ``queue``."""
        keeper = self._keeper
        taken = keeper.rows.take(
            self.pool, self.capacity, waiter.holder, keeper.lease_s, None, queue
        )
        if taken.granted:
            keeper.hold(self.pool, waiter.holder)
        waiter.seq = taken.seq
        return taken.granted

    def _finish(self, waiter: _Waiter, live: list[CancelSignal], waited: bool) -> bool:
        assert isinstance(waiter, SharedWaiter)
        granted = self._keeper.abandon(waiter)
        if not granted:
            holder = waiter.holder
            self._keeper.submit(lambda: self._keeper.leave(holder))
            if waiter.error is not None:
                raise waiter.error
            return False
        kept = waited and not any(signal.cancelled for signal in live)
        if not kept:
            self.release()
        return kept


def _nothing() -> None:
    """The wake of a waiter that never waits."""


def _rows_of(store: object) -> tuple[LimitRows, float, Listening | None]:
    """The limit rows of ``store``, how often to look for freed permits, and how to hear
    of them at once (``None``: no way)."""
    from ..approval_store import SqliteApprovalStore

    if isinstance(store, SqliteApprovalStore):
        from .._stores.sqlite_limits import SqliteLimitRows

        return SqliteLimitRows(store._transaction, store._clock), _SQLITE_POLL_S, None
    from ..approval_postgres import PostgresApprovalStore

    if isinstance(store, PostgresApprovalStore):
        from .._stores.postgres_limits import CHANNEL, RELEASED, PostgresLimitRows
        from .._stores.postgres_listen import Listener

        listener = Listener(store._connections, CHANNEL)
        rows = PostgresLimitRows(store._connections)
        return rows, _POSTGRES_POLL_S, lambda wake: listener.watch(RELEASED, wake)
    raise DefinitionError(
        "SharedLimits needs a SqliteApprovalStore or a PostgresApprovalStore, got "
        f"{type(store).__qualname__}"
    )
