"""The call journal of :class:`~dsh_tools.approvals.MemoryApprovalStore`: entries in a
dictionary of this process, changed under the store's ticket lock, so taking a ticket and
starting an entry are one step (see :mod:`._journal`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import attrs

from .._json import JsonValue
from ._journal import JournalBegin, JournalEntry, JournalState, begin_entry, retention
from ._tickets import ApprovalTicket

__all__ = ["MemoryJournal", "seen_now"]


def seen_now(entry: JournalEntry, now: float) -> JournalEntry:
    """``entry`` as of ``now``: unknown once the lease of a started entry ran out."""
    if entry.state is JournalState.STARTED and now >= entry.lease_expires_at:
        return attrs.evolve(entry, state=JournalState.UNKNOWN)
    return entry


class MemoryJournal:
    """The journal half of the memory store; the store provides the lock it shares with
    its tickets, its clock, and how a ticket is taken."""

    _ticket_lock: threading.RLock
    _clock: Callable[[], float]
    _journal: dict[tuple[str, str], JournalEntry]
    consume_ticket: Callable[[str], ApprovalTicket | None]
    journal_retention_s: float

    def begin_call(
        self,
        entry: JournalEntry,
        lease_s: float,
        ticket_id: str | None = None,
        *,
        earlier: bool = False,
    ) -> JournalBegin:
        def insert(started: JournalEntry) -> None:
            self._journal[started.agent, started.key] = started

        with self._ticket_lock:
            kept = self.get_call(entry.agent, entry.key)
            return begin_entry(
                entry,
                lease_s,
                ticket_id,
                kept=kept,
                take=self.consume_ticket,
                now=self._clock,
                insert=insert,
                earlier=self._earlier(entry) if earlier else None,
            )

    def _earlier(self, entry: JournalEntry) -> JournalEntry | None:
        """The oldest attempt of ``entry``'s call under another key that never finished."""
        found = self.list_calls(
            agent=entry.agent, tool=entry.tool_name, arguments_sha256=entry.arguments_sha256
        )
        return next(
            (e for e in found if e.key != entry.key and e.state is not JournalState.FINISHED),
            None,
        )

    def retake_call(self, agent: str, key: str, owner: str, lease_s: float) -> JournalEntry | None:
        with self._ticket_lock:
            kept = self.get_call(agent, key)
            if kept is None or kept.state is not JournalState.UNKNOWN:
                return None
            retaken = self._journal[agent, key] = attrs.evolve(
                kept,
                owner=owner,
                state=JournalState.STARTED,
                lease_expires_at=self._clock() + lease_s,
                attempts=kept.attempts + 1,
            )
            return retaken

    def renew_call(self, agent: str, key: str, owner: str, lease_s: float) -> bool:
        return self._changed(
            agent,
            key,
            owner,
            lambda kept: attrs.evolve(kept, lease_expires_at=self._clock() + lease_s),
        )

    def finish_call(self, agent: str, key: str, owner: str, result: JsonValue) -> bool:
        return self._changed(
            agent,
            key,
            owner,
            lambda kept: attrs.evolve(
                kept, state=JournalState.FINISHED, finished_at=self._clock(), result=result
            ),
        )

    def _changed(
        self, agent: str, key: str, owner: str, change: Callable[[JournalEntry], JournalEntry]
    ) -> bool:
        """Replace ``owner``'s started entry by ``change`` of it, under the lock; ``False``
        when the entry is no longer ``owner``'s."""
        with self._ticket_lock:
            kept = self._journal.get((agent, key))
            if kept is None or kept.owner != owner or kept.state is not JournalState.STARTED:
                return False
            self._journal[agent, key] = change(kept)
            return True

    def prune_calls(self, older_than_s: float | None = None) -> int:
        kept_s = self.journal_retention_s if older_than_s is None else older_than_s
        before = self._clock() - retention(kept_s, "older_than_s")
        with self._ticket_lock:
            old = [
                place
                for place, entry in self._journal.items()
                if entry.state is JournalState.FINISHED
                and entry.finished_at is not None
                and entry.finished_at <= before
            ]
            for place in old:
                del self._journal[place]
        return len(old)

    def get_call(self, agent: str, key: str) -> JournalEntry | None:
        with self._ticket_lock:
            kept = self._journal.get((agent, key))
            return None if kept is None else seen_now(kept, self._clock())

    def list_calls(
        self,
        *,
        agent: str | None = None,
        state: JournalState | None = None,
        tool: str | None = None,
        arguments_sha256: str | None = None,
    ) -> Sequence[JournalEntry]:
        wanted = {"agent": agent, "tool_name": tool, "arguments_sha256": arguments_sha256}
        asked = {name: value for name, value in wanted.items() if value is not None}
        with self._ticket_lock:
            now = self._clock()
            seen = [seen_now(entry, now) for entry in self._journal.values()]
        return [
            entry
            for entry in sorted(seen, key=lambda entry: entry.started_at)
            if all(getattr(entry, name) == value for name, value in asked.items())
            and (state is None or entry.state is state)
        ]
