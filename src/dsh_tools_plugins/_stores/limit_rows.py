"""What a shared store does for limits: permits that are rows with an owner and an expiry,
a first-in first-out queue of waiters, and the calls each budget's accounts have spent.

:class:`LimitRows` is the contract the SQLite and the PostgreSQL rows both keep
(:mod:`.sqlite_limits`, :mod:`.postgres_limits`). Every method is one transaction that
orders itself against every other process's (SQLite's write lock, PostgreSQL advisory
locks per pool and per budget account), so a pool never has more live permits than its
capacity, and a budget never admits more calls than its limit.

A permit or a queued waiter lives until its row's expiry (``lease_s`` after it was taken
or last renewed): the process holding it renews it while it holds it, and the rows of a
process that died expire, so its permits come back within one lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

__all__ = ["LimitRows", "Spend", "Taken"]


@attrs.frozen
class Spend:
    """One budget's check of one call: at most ``limit`` calls of ``account`` under
    ``rule``, counting those of the last ``window_s`` seconds (``None``: all of them)."""

    rule: str
    account: str
    limit: int
    window_s: float | None


@attrs.frozen
class Taken:
    """What :meth:`LimitRows.take` did: ``granted`` a permit, or queued the waiter as
    ``seq`` (its place in the pool's line; ``None`` when it was not queued)."""

    granted: bool
    seq: int | None = None


class LimitRows(Protocol):
    """Permits, waiters and budget spending in one shared store."""

    def take(
        self, pool: str, capacity: int, holder: str, lease_s: float, seq: int | None, queue: bool
    ) -> Taken:
        """A permit of ``pool`` for ``holder`` when fewer than ``capacity`` are held and
        no live waiter queued before ``seq`` (any live waiter, for ``seq=None``) would be
        passed; else, with ``queue``, ``holder`` joins the line. A granted waiter leaves it."""
        ...

    def release(self, holder: str) -> None:
        """Give ``holder``'s permit back (nothing when it has none)."""
        ...

    def leave(self, holder: str) -> None:
        """Take ``holder`` out of the line it waits in (nothing when it is in none)."""
        ...

    def renew(self, holders: Sequence[str], lease_s: float) -> None:
        """Move the expiry of ``holders``' permits and places in line ``lease_s`` ahead."""
        ...

    def spend(self, checks: Sequence[Spend], dry: bool) -> int | None:
        """Count one call against every check, or none: the index of the first check the
        call is over (nothing counted), else ``None`` (counted in each, unless ``dry``)."""
        ...

    def spent(self, check: Spend) -> int:
        """How many calls count against ``check`` now."""
        ...
