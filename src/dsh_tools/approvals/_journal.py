"""The call journal: a durable record of each call of a tool that is not read-only.

An entry is keyed by the agent scope and the call's key (the host's idempotency key, or
the call id when it gave none) and records the tool and the arguments' digest. It is
``started`` by an owner holding a lease that the running call renews, ``finished`` with
the call's frozen JSON result, or seen ``unknown`` when its owner's lease ran out while
it was started (the owner died, or lost the store): the body may or may not have run.
Nothing ever turns an unknown entry into a finished one but a new owner that retook it
(:meth:`JournalStore.retake_call`: an idempotent tool running again, or a reconcile step)
and then finished it.

:meth:`JournalStore.begin_call` starts an entry and, given a ticket, takes the approved
ticket in the same transaction: an approval is never spent without a record.

Finished entries are kept for a retention (:data:`JOURNAL_RETENTION_S` unless the store
is given another) and then dropped (:meth:`JournalStore.prune_calls`): a repeat of a key
older than that runs again. Started and unknown entries are never dropped.
"""

from __future__ import annotations

import enum
import math
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from .._json import JsonValue
from ..errors import DshToolsError, ErrorCode
from ._tickets import ApprovalTicket

__all__ = [
    "JournalBegin",
    "JournalConflictError",
    "JournalEntry",
    "JournalState",
    "JournalStore",
    "JOURNAL_RETENTION_S",
    "begin_entry",
    "journal_owner",
    "retention",
]

JOURNAL_RETENTION_S = 7 * 24 * 3600.0
"""How long a store keeps a finished journal entry unless told otherwise: a week."""


class JournalState(enum.Enum):
    """Where a journaled call stands."""

    STARTED = "started"
    """Its owner runs it and renews its lease."""
    FINISHED = "finished"
    """It ended; its result is recorded."""
    UNKNOWN = "unknown"
    """Its owner's lease ran out while it was started: it may have run, or not."""


@attrs.frozen
class JournalEntry:
    """One journaled call (see the module's docstring); times in seconds since the epoch,
    by the store's clock."""

    agent: str
    key: str
    tool_name: str
    arguments_sha256: str
    call_id: str
    owner: str
    state: JournalState = JournalState.STARTED
    started_at: float = 0.0
    lease_expires_at: float = 0.0
    finished_at: float | None = None
    result: JsonValue = None
    ticket_id: str | None = None
    attempts: int = 1

    def same_call(self, other: JournalEntry) -> bool:
        """Whether ``other`` asks for the same tool with the same arguments."""
        return (self.tool_name, self.arguments_sha256) == (other.tool_name, other.arguments_sha256)


@attrs.frozen
class JournalBegin:
    """What :meth:`JournalStore.begin_call` found: ``entry`` as stored now, whether this
    caller ``started`` it (it owns it; else the entry is an earlier attempt's), and the
    ``ticket`` it took (``None`` when none was asked for, or another caller took it first,
    in which case ``entry`` is ``None`` too). ``earlier`` is an attempt of the same call
    under another key that never finished (running, or unknown), when the caller asked
    for one and it exists: then nothing began (``entry`` is ``None``), so the caller waits
    for that attempt, or settles it, first."""

    entry: JournalEntry | None
    started: bool
    ticket: ApprovalTicket | None = None
    earlier: JournalEntry | None = None


class JournalConflictError(DshToolsError):
    """A call reused a key the journal holds for another tool or other arguments."""

    default_code = ErrorCode.INVALID_ARGS.value

    def __init__(self, kept: JournalEntry, asked: JournalEntry) -> None:
        super().__init__(
            f"idempotency key {asked.key!r} of agent {asked.agent!r} was used by an earlier "
            f"call of {kept.tool_name!r} with other arguments (call {kept.call_id!r}); "
            f"a key names one call: use a new key for {asked.tool_name!r}"
        )
        self.kept = kept
        self.asked = asked


class JournalStore(Protocol):
    """A store that keeps the call journal; every method is one transaction."""

    def begin_call(
        self,
        entry: JournalEntry,
        lease_s: float,
        ticket_id: str | None = None,
        *,
        earlier: bool = False,
    ) -> JournalBegin:
        """Start ``entry`` (stamped by the store's clock, its lease ``lease_s`` long) unless
        its key is taken: then return the entry kept (not started), or raise
        :class:`JournalConflictError` when that one is of another tool or other arguments.
        With ``ticket_id``, take that answered ticket in the same transaction; when it
        cannot be taken, start nothing. With ``earlier``, first look (in the same
        transaction, so a call pays one round trip) for the oldest attempt of the same agent,
        tool and arguments under another key that never finished (a process killed less
        than a lease ago still looks running); when there is one, start nothing and return
        it as :attr:`JournalBegin.earlier`."""
        ...

    def retake_call(self, agent: str, key: str, owner: str, lease_s: float) -> JournalEntry | None:
        """Make ``owner`` the owner of the unknown entry ``agent``/``key`` (its attempts
        counted), or ``None`` when it is not unknown (finished, or retaken first)."""
        ...

    def renew_call(self, agent: str, key: str, owner: str, lease_s: float) -> bool:
        """Move the lease of ``owner``'s started entry ``lease_s`` ahead; ``False`` when
        the entry is no longer ``owner``'s to renew."""
        ...

    def finish_call(self, agent: str, key: str, owner: str, result: JsonValue) -> bool:
        """Record ``result`` and finish ``owner``'s started entry; ``False`` when it is no
        longer ``owner``'s (another owner retook it)."""
        ...

    def get_call(self, agent: str, key: str) -> JournalEntry | None:
        """The entry ``agent``/``key`` as of now, or ``None``."""
        ...

    def list_calls(
        self,
        *,
        agent: str | None = None,
        state: JournalState | None = None,
        tool: str | None = None,
        arguments_sha256: str | None = None,
    ) -> Sequence[JournalEntry]:
        """The entries (of ``agent``, in ``state``, of calls of ``tool`` with arguments of
        that digest) as of now, oldest first. The call path asks for one call's entries
        (an earlier attempt of it): the stores index them by agent, tool and digest."""
        ...

    def prune_calls(self, older_than_s: float | None = None) -> int:
        """Drop the finished entries that finished ``older_than_s`` seconds ago or more
        (default: the store's retention), by the store's clock, and say how many.
        Started and unknown entries stay, however old (an owner may be alive; an unknown
        outcome is for a reconcile step or a person to settle). Raises ``ValueError``
        for a negative, infinite or non-numeric ``older_than_s``."""
        ...


def retention(value: object, what: str) -> float:
    """``value`` as a number of seconds a finished entry is kept (0 or more, finite), or
    ``ValueError`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{what} must be a finite number of seconds, 0 or more; got {value!r}")
    return float(value)


def journal_owner() -> str:
    """A new owner of one attempt: this host, this process, and a token of its own."""
    return f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(6)}"


def begin_entry(
    entry: JournalEntry,
    lease_s: float,
    ticket_id: str | None,
    *,
    kept: JournalEntry | None,
    take: Callable[[str], ApprovalTicket | None],
    now: Callable[[], float],
    insert: Callable[[JournalEntry], None],
    earlier: JournalEntry | None = None,
) -> JournalBegin:
    """:meth:`JournalStore.begin_call` inside a store's transaction: ``kept`` is the entry
    its key holds, ``take`` takes a ticket, ``now`` reads the store's clock, ``insert``
    stores the started entry and ``earlier`` is the unfinished attempt the caller asked
    to meet first (``None``: none asked for, or none found)."""
    if earlier is not None:
        return JournalBegin(None, started=False, earlier=earlier)
    if kept is not None:
        if not kept.same_call(entry):
            raise JournalConflictError(kept, entry)
        return JournalBegin(kept, started=False)
    ticket = None if ticket_id is None else take(ticket_id)
    if ticket_id is not None and ticket is None:
        return JournalBegin(None, started=False)
    started_at = now()
    started = attrs.evolve(
        entry,
        state=JournalState.STARTED,
        started_at=started_at,
        lease_expires_at=started_at + lease_s,
        ticket_id=ticket_id,
    )
    insert(started)
    return JournalBegin(started, started=True, ticket=ticket)
