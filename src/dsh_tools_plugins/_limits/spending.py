"""What each account spent of a budget kept in this process, kept only while it matters.

Behind MCP over HTTP every client is an agent scope, so a table per account would grow
with the clients a server ever saw. A windowed budget keeps the times of each account's
calls in the window and drops the older ones; an account with none left is dropped once
the table has doubled since it was last swept (amortized: a sweep costs one look at each
account, and the next comes after as many new ones). A budget without a window counts
for the life of the plugin, so it keeps one number per account that ever spent: dropping
it would give the account its budget again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

__all__ = ["Spending"]

_SWEEP_FLOOR = 64
"""The fewest accounts kept before a sweep looks for accounts with nothing in the window."""


class Spending:
    """The calls each account made that count against one budget now (see the module
    docstring); the caller serializes access."""

    def __init__(self, window_s: float | None, clock: Callable[[], float]) -> None:
        self.window_s = window_s
        self.clock = clock
        self._times: dict[str | None, deque[float]] = {}
        self._counts: dict[str | None, int] = {}
        self._sweep_at = _SWEEP_FLOOR

    def spent(self, account: str | None, now: float) -> int:
        """Calls of ``account`` that count at time ``now``."""
        if self.window_s is None:
            return self._counts.get(account, 0)
        times = self._times.get(account)
        if times is None:
            return 0
        _forget_before(times, now - self.window_s)
        return len(times)

    def add(self, account: str | None, now: float) -> None:
        """Count a call of ``account`` made at ``now``."""
        if self.window_s is None:
            self._counts[account] = self._counts.get(account, 0) + 1
            return
        times = self._times.get(account)
        if times is None:
            if len(self._times) >= self._sweep_at:
                self._sweep(now - self.window_s)
            times = self._times[account] = deque()
        times.append(now)

    def _sweep(self, since: float) -> None:
        for account, times in list(self._times.items()):
            _forget_before(times, since)
            if not times:
                del self._times[account]
        self._sweep_at = max(_SWEEP_FLOOR, 2 * len(self._times))


def _forget_before(times: deque[float], since: float) -> None:
    """Drop the calls made at or before ``since``: they left the window."""
    while times and times[0] <= since:
        times.popleft()
