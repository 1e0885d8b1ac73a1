"""Remembered approvals: an approval service's answer kept for an agent's later calls.

An approval service may answer ``allowed-always`` or ``rejected-always``. The pipeline
keeps such an answer in the registry's ``approval_store``, under an :class:`ApprovalKey`:
the agent that asked, the tool, and a hash of the call's exact arguments. The same
agent's next call of the tool with the same arguments is then decided by the remembered
answer without asking again; another agent (a parent or child scope included) or another
argument value asks again. An :class:`ApprovalAnswer` with ``any_arguments=True`` widens
the memory to every call of the tool by that agent.

An ``allowed-always`` answer may end: ``ApprovalAnswer("allowed-always", expires_in_s=3600,
uses=10)`` is a grant that lasts an hour and allows ten calls at most (each optional).
An expired or used-up grant is no longer remembered, so the next call asks again. A use
is taken atomically when a call runs on the grant, so concurrent calls never share one.

A store is anything with :meth:`ApprovalStore.recall` and :meth:`ApprovalStore.remember`;
one that also keeps grants that end is a :class:`LimitedGrantStore`.
:class:`MemoryApprovalStore` (the default) forgets when the process ends;
``dsh_tools_plugins.approval_store.SqliteApprovalStore`` keeps answers in a file and
``dsh_tools_plugins.approval_postgres.PostgresApprovalStore`` in a PostgreSQL database. A
store that raises fails closed: a failed recall asks the service again, a failed write
fails the call with ``POLICY_ERROR``.

A question a person answers later is an :class:`ApprovalTicket`: bound to one call (the
agent, the tool, the frozen arguments and their hash), answered once
(:class:`TicketAnswer`, compare-and-set) and resumed once. Tickets live in a
:class:`TicketStore`; both first-party stores are one. A call that waits for an answer
holds no thread: the store's :class:`TicketWatchers` wake it.

The same stores keep the call journal (:class:`JournalStore`): one durable
:class:`JournalEntry` per call of a tool that is not read-only, started, finished with its
result, or unknown when its owner died; see ``docs/once.md``.
"""

from __future__ import annotations

from ._answers import (
    ANSWERS,
    REMEMBERED_OUTCOMES,
    ApprovalAnswer,
    ApprovalKey,
    ApprovalStore,
    LimitedGrantStore,
    call_digest,
    exact_outcome,
    grant_limits,
    remembered_outcome,
)
from ._journal import (
    JournalBegin,
    JournalConflictError,
    JournalEntry,
    JournalState,
    JournalStore,
    begin_entry,
    journal_owner,
)
from ._memory import MemoryApprovalStore
from ._tickets import (
    ApprovalTicket,
    TicketAnswer,
    TicketAnsweredError,
    TicketError,
    TicketExpiredError,
    TicketNotFoundError,
    TicketState,
    TicketStore,
    stamped,
)
from ._watch import TicketWatchers, wait_watched

__all__ = [
    "ANSWERS",
    "REMEMBERED_OUTCOMES",
    "ApprovalAnswer",
    "ApprovalKey",
    "ApprovalStore",
    "ApprovalTicket",
    "JournalBegin",
    "JournalConflictError",
    "JournalEntry",
    "JournalState",
    "JournalStore",
    "LimitedGrantStore",
    "MemoryApprovalStore",
    "TicketAnswer",
    "TicketAnsweredError",
    "TicketError",
    "TicketExpiredError",
    "TicketNotFoundError",
    "TicketState",
    "TicketStore",
    "TicketWatchers",
    "begin_entry",
    "call_digest",
    "exact_outcome",
    "grant_limits",
    "journal_owner",
    "remembered_outcome",
    "stamped",
    "wait_watched",
]
