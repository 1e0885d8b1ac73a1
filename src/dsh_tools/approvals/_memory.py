"""The default approval store: remembered answers, grants that end and tickets in
dictionaries of one process (:class:`MemoryApprovalStore`).

:mod:`dsh_tools.approvals` is the public import path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import attrs

from ._answers import ApprovalKey, ApprovalOutcome, GrantKeeping
from ._journal import JOURNAL_RETENTION_S, JournalEntry, retention
from ._journal_memory import MemoryJournal
from ._tickets import (
    ApprovalTicket,
    TicketAnswer,
    TicketState,
    stamped,
    unanswerable,
)
from ._watch import TicketWatchers, wait_watched

__all__ = ["MemoryApprovalStore"]


@attrs.frozen
class _Grant:
    outcome: ApprovalOutcome
    expires_at: float | None
    uses_left: int | None

    def live(self, now: float) -> bool:
        return (self.expires_at is None or now < self.expires_at) and (
            self.uses_left is None or self.uses_left > 0
        )


class MemoryApprovalStore(MemoryJournal, GrantKeeping):
    """The default store: remembered answers, tickets and the call journal in dictionaries of this
    registry's process, gone when it ends. ``clock`` gives the time (seconds since the
    epoch) tickets are created, answered and expire by, and grants that end expire by.
    ``journal_retention_s`` is how long a finished journal entry is kept (see
    :meth:`~dsh_tools.approvals.JournalStore.prune_calls`)."""

    durable = False
    """Gone with its process: the call journal records only the calls a host gave an
    idempotency key (a crash loses the rest anyway), so memory does not grow per call."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        journal_retention_s: float = JOURNAL_RETENTION_S,
    ) -> None:
        self.journal_retention_s = retention(journal_retention_s, "journal_retention_s")
        self._answers: dict[ApprovalKey, _Grant] = {}
        self._lock = threading.Lock()
        self._tickets: dict[str, ApprovalTicket] = {}
        self._journal: dict[tuple[str, str], JournalEntry] = {}
        self._ticket_lock = threading.RLock()
        self._watchers = TicketWatchers()
        self._clock = clock

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            grant = self._answers.get(key)
            return grant.outcome if grant is not None and grant.live(self._clock()) else None

    def _keep(
        self, key: ApprovalKey, outcome: ApprovalOutcome, lifetime: float | None, uses: int | None
    ) -> None:
        expires_at = None if lifetime is None else self._clock() + lifetime
        with self._lock:
            self._answers[key] = _Grant(outcome, expires_at, uses)

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            grant = self._answers.get(key)
            if grant is None or grant.outcome is not ApprovalOutcome.ALLOWED_ALWAYS:
                return None
            if not grant.live(self._clock()):
                return None
            if grant.uses_left is not None:
                self._answers[key] = attrs.evolve(grant, uses_left=grant.uses_left - 1)
            return grant.outcome

    def forget(self, agent: str | None = None) -> None:
        """Drop every remembered answer, or those of ``agent`` (and of no other scope)."""
        with self._lock:
            if agent is None:
                self._answers.clear()
            else:
                for key in [key for key in self._answers if key.agent == agent]:
                    del self._answers[key]

    # ------------------------------------------------------------------ tickets

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        with self._ticket_lock:
            found = self._open(ticket.key)
            if found is not None:
                return found
            kept = self._tickets[ticket.id] = stamped(ticket, self._clock())
            return kept

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        with self._ticket_lock:
            ticket = self._tickets.get(ticket_id)
            return None if ticket is None else self._now_seen(ticket)

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        with self._ticket_lock:
            return self._open(key)

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        with self._ticket_lock:
            seen = [self._now_seen(ticket) for ticket in self._tickets.values()]
        return [
            ticket
            for ticket in sorted(seen, key=lambda ticket: ticket.created_at)
            if (agent is None or ticket.agent == agent) and (state is None or ticket.state is state)
        ]

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        with self._ticket_lock:
            ticket = self.get_ticket(ticket_id)  # the lock is reentrant
            if ticket is None or ticket.state is not TicketState.PENDING:
                raise unanswerable(ticket_id, ticket)
            answered = attrs.evolve(
                ticket, state=TicketState.ANSWERED, answer=answer, answered_at=self._clock()
            )
            self._tickets[ticket_id] = answered
        self._watchers.announce((ticket_id,))
        return answered

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        with self._ticket_lock:
            ticket = self.get_ticket(ticket_id)
            if ticket is None or ticket.state is not TicketState.ANSWERED:
                return None
            resumed = attrs.evolve(ticket, state=TicketState.RESUMED, resumed_at=self._clock())
            self._tickets[ticket_id] = resumed
            return resumed

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        return wait_watched(self.watch_ticket, self.get_ticket, ticket_id, timeout_s)

    def watch_ticket(self, ticket_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Its answers are this store's own: each tells the ticket's watchers."""
        return self._watchers.watch(ticket_id, changed)

    def _open(self, key: ApprovalKey) -> ApprovalTicket | None:
        for ticket in self._tickets.values():
            seen = self._now_seen(ticket)
            if seen.key == key and seen.state in _OPEN:
                return seen
        return None

    def _now_seen(self, ticket: ApprovalTicket) -> ApprovalTicket:
        """``ticket`` as of now: expired once its time is up, unless resumed."""
        if ticket.state in _OPEN and self._clock() >= ticket.expires_at:
            return attrs.evolve(ticket, state=TicketState.EXPIRED)
        return ticket


_OPEN = (TicketState.PENDING, TicketState.ANSWERED)
