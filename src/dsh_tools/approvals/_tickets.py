"""Approval tickets: a question a person answers later (:class:`ApprovalTicket`), bound to
one call, answered once (:class:`TicketAnswer`) and resumed once; the errors that say
why a ticket cannot be answered or resumed, and the protocol of the stores that keep
tickets (:class:`TicketStore`).

:mod:`dsh_tools.approvals` is the public import path.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._json import FrozenDict
from ..errors import DshToolsError, ErrorCode
from ._answers import (
    ANSWERS,
    ApprovalAnswer,
    ApprovalKey,
    ApprovalOutcome,
    exact_outcome,
    lifetime,
    optional_text,
    use_count,
)

__all__ = [
    "IDEMPOTENCY_KEY",
    "ApprovalTicket",
    "TicketAnswer",
    "TicketAnsweredError",
    "TicketError",
    "TicketExpiredError",
    "TicketNotFoundError",
    "TicketState",
    "TicketStore",
    "stamped",
    "unanswerable",
]


class TicketState(str, enum.Enum):
    """Where an approval ticket is in its life. A store reports a ticket that is pending
    or answered at or after its ``expires_at`` (by the store's clock) as ``EXPIRED``."""

    PENDING = "pending"
    """Waiting for a person's answer."""
    ANSWERED = "answered"
    """Answered (:attr:`ApprovalTicket.answer`), not yet resumed."""
    RESUMED = "resumed"
    """Its answer was taken by the one call that resumed it; it never applies again."""
    EXPIRED = "expired"
    """Not answered, or not resumed, before it expired; it never applies."""


def _answer_outcome(value: object) -> ApprovalOutcome:
    outcome = exact_outcome(value)
    if outcome not in ANSWERS:
        raise ValueError(
            "a ticket is answered with one of "
            + ", ".join(sorted(repr(o.value) for o in ANSWERS))
            + f", not {(outcome.value if outcome else type(value).__qualname__)!r}"
        )
    return outcome


_NAME = attrs.validators.and_(attrs.validators.instance_of(str), attrs.validators.min_len(1))


@attrs.frozen
class TicketAnswer:
    """A person's answer to a ticket: the outcome, who gave it (``by``), through which
    channel (``"cli"``, ``"inbox"``, ``"mcp"``, a service's name), optional feedback
    for the model, and whether an ``*-always`` answer covers any arguments of the tool.

    An ``allowed-always`` answer may end, as an :class:`ApprovalAnswer` may (same names,
    same checks): ``expires_in_s`` is the grant's lifetime from the moment the call that
    resumes the ticket keeps it, ``uses`` the number of later calls it allows at most
    (the resumed call itself runs on the answer)."""

    outcome: ApprovalOutcome = attrs.field(converter=_answer_outcome)
    by: str = attrs.field(validator=_NAME)
    channel: str = attrs.field(validator=_NAME)
    feedback: str | None = attrs.field(
        default=None, kw_only=True, validator=optional_text("feedback")
    )
    any_arguments: bool = attrs.field(default=False, kw_only=True)
    expires_in_s: float | None = attrs.field(default=None, kw_only=True, converter=lifetime)
    uses: int | None = attrs.field(default=None, kw_only=True, converter=use_count)

    def __attrs_post_init__(self) -> None:
        self.approval_answer()  # the checks an approval service's answer passes

    def approval_answer(self) -> ApprovalAnswer:
        """The same answer as an approval service gives it: what the call that resumes
        the ticket decides by and records."""
        return ApprovalAnswer(
            self.outcome,
            any_arguments=self.any_arguments,
            expires_in_s=self.expires_in_s,
            uses=self.uses,
            feedback=self.feedback,
            by=self.by,
            channel=self.channel,
        )

    def to_json(self) -> dict[str, Any]:
        """The answer as plain JSON data (what the stores keep and ``--json`` prints)."""
        return {
            "outcome": self.outcome.value,
            "by": self.by,
            "channel": self.channel,
            "feedback": self.feedback,
            "any_arguments": self.any_arguments,
            "expires_in_s": self.expires_in_s,
            "uses": self.uses,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TicketAnswer:
        """The answer :meth:`to_json` gave (an older store's, without the grant's end,
        too); a malformed one raises ``TypeError`` or ``ValueError``."""
        return cls(
            data["outcome"],
            data["by"],
            data["channel"],
            feedback=data.get("feedback"),
            any_arguments=data.get("any_arguments", False),
            expires_in_s=data.get("expires_in_s"),
            uses=data.get("uses"),
        )


IDEMPOTENCY_KEY = "idempotency_key"
"""The key of a ticket's ``asked_by`` that holds the host's idempotency key of its call
(see :attr:`ApprovalTicket.idempotency_key`)."""


@attrs.frozen
class ApprovalTicket:
    """One pending question to a person, bound to one call: the agent scope that asked,
    the tool, the call id, the frozen arguments and the SHA-256 of their canonical JSON
    (as :meth:`ApprovalKey.for_call`), the call's card (its JSON, for whoever answers),
    who asked (``asked_by``: the plugin, and for a permission rule the rule, its file and
    line), and when it was created and expires (seconds since the epoch).

    A ticket is answered once (:meth:`TicketStore.answer_ticket`) and resumed once
    (:meth:`TicketStore.consume_ticket`); its ``state`` says where it is."""

    id: str
    agent: str
    tool_name: str
    call_id: str
    arguments: FrozenDict
    arguments_sha256: str
    reason: str | None
    card: FrozenDict | None
    asked_by: FrozenDict | None
    created_at: float
    expires_at: float
    state: TicketState = TicketState.PENDING
    answer: TicketAnswer | None = None
    answered_at: float | None = None
    resumed_at: float | None = None

    @classmethod
    def new(
        cls,
        key: ApprovalKey,
        call_id: str,
        arguments: FrozenDict,
        *,
        created_at: float,
        expires_at: float,
        reason: str | None = None,
        card: FrozenDict | None = None,
        asked_by: FrozenDict | None = None,
    ) -> ApprovalTicket:
        """A new pending ticket for the call ``key`` names, with a fresh random id."""
        import secrets

        assert key.arguments_sha256 is not None, "a ticket is for exact arguments"
        return cls(
            "t-" + secrets.token_hex(12),
            key.agent,
            key.tool_name,
            call_id,
            arguments,
            key.arguments_sha256,
            reason,
            card,
            asked_by,
            created_at,
            expires_at,
        )

    @property
    def key(self) -> ApprovalKey:
        """The exact-arguments key of the ticket's call."""
        return ApprovalKey(self.agent, self.tool_name, self.arguments_sha256)

    @property
    def idempotency_key(self) -> str | None:
        """The host's idempotency key of the call that asked (``None``: it gave none), so
        that resuming the ticket journals the call under the key the host repeats it
        with. Kept in ``asked_by`` (under :data:`IDEMPOTENCY_KEY`): no store's schema
        changes for it."""
        key = None if self.asked_by is None else self.asked_by.get(IDEMPOTENCY_KEY)
        return key if isinstance(key, str) and key else None

    def intact(self) -> bool:
        """Whether the stored arguments still hash to ``arguments_sha256`` (a ticket whose
        arguments were changed where it is stored is never resumed)."""
        try:
            again = ApprovalKey.for_call(self.agent, self.tool_name, self.arguments)
        except (TypeError, ValueError):
            return False
        return again.arguments_sha256 == self.arguments_sha256


def store_name(store: object) -> str:
    """How messages name a store: its own ``repr`` when it has one (the first-party
    stores show their file or URL, never a password), else its class."""
    if type(store).__repr__ is not object.__repr__:
        return repr(store)
    return type(store).__qualname__


def stamped(ticket: ApprovalTicket, now: float) -> ApprovalTicket:
    """``ticket`` created ``now`` (a store's clock), with the same lifetime."""
    return attrs.evolve(
        ticket, created_at=now, expires_at=now + ticket.expires_at - ticket.created_at
    )


class TicketError(DshToolsError):
    """A ticket that cannot be answered or resumed; ``ticket_id`` names it. Subclasses
    say why; nothing runs because of it."""

    default_code = ErrorCode.POLICY_ERROR.value

    def __init__(self, ticket_id: str, problem: str, *, code: str | None = None) -> None:
        super().__init__(f"approval ticket {ticket_id!r} {problem}", code=code)
        self.ticket_id = ticket_id


class TicketNotFoundError(TicketError):
    """No ticket has that id in the store (code ``NOT_FOUND``); ``store``, when given,
    names the store that was read (a ticket of another store is not found)."""

    default_code = "NOT_FOUND"

    def __init__(self, ticket_id: str, store: object = None) -> None:
        where = "" if store is None else f" in the approval store {store_name(store)}"
        super().__init__(ticket_id, f"does not exist{where}")


class TicketAnsweredError(TicketError):
    """The ticket was answered already: this answer came too late and counts for nothing
    (code ``ALREADY_ANSWERED``)."""

    default_code = "ALREADY_ANSWERED"

    def __init__(self, ticket: ApprovalTicket) -> None:
        earlier = ticket.answer
        said = (
            f" ({earlier.outcome.value} by {earlier.by} via {earlier.channel})" if earlier else ""
        )
        super().__init__(ticket.id, f"was already answered{said}; this answer came too late")
        self.ticket = ticket


class TicketExpiredError(TicketError):
    """The ticket expired before this answer (code ``APPROVAL_EXPIRED``)."""

    default_code = ErrorCode.APPROVAL_EXPIRED.value

    def __init__(self, ticket: ApprovalTicket) -> None:
        super().__init__(ticket.id, "has expired; it can no longer be answered")
        self.ticket = ticket


def unanswerable(ticket_id: str, ticket: ApprovalTicket | None) -> TicketError:
    """Why ``ticket`` (``None``: not in the store) cannot take an answer: every store's
    ``answer_ticket`` raises it for a ticket that is missing, expired or answered."""
    if ticket is None:
        return TicketNotFoundError(ticket_id)
    if ticket.state is TicketState.EXPIRED:
        return TicketExpiredError(ticket)
    return TicketAnsweredError(ticket)


class TicketStore(Protocol):
    """Where approval tickets live, shared by every process that asks, answers or resumes
    (see ``docs/approvals.md``). Every method may be called from several threads and
    processes at once; one that raises fails closed (nothing runs). Expiry is judged by
    the store's own clock. ``tests/store_contract.py`` holds the behaviour every store
    must show."""

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        """Keep ``ticket`` (pending) and return it as kept; when an open ticket (pending
        or answered, unexpired) of the same agent, tool and ``arguments_sha256`` is
        stored, keep nothing and return that one instead. The store stamps
        ``created_at`` by its own clock and moves ``expires_at`` with it (the lifetime
        the caller gave is kept), so expiry never depends on the asking machine's clock."""
        ...

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        """The ticket ``ticket_id`` as it is now, or ``None``."""
        ...

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        """The open ticket (pending or answered, unexpired) of the call ``key`` names, or
        ``None``."""
        ...

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        """Tickets, oldest first: all, or those of ``agent`` and/or in ``state``."""
        ...

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        """Answer a pending ticket, atomically (compare-and-set on its state), and return
        it answered. Raises :class:`TicketNotFoundError`, :class:`TicketExpiredError`, or
        :class:`TicketAnsweredError` when another answer came first."""
        ...

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        """Mark an answered, unexpired ticket resumed, atomically, and return it: the
        caller that gets a ticket back is the one call that acts on its answer. ``None``
        for everyone else (already resumed, pending, expired or unknown)."""
        ...

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        """Block the calling thread until the ticket is no longer pending or ``timeout_s``
        passed, then return it as it is (``None`` when unknown). Returns at once for a
        ticket that is not pending. Needs no event loop."""
        ...

    def watch_ticket(self, ticket_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Call ``changed`` whenever the ticket may have stopped being pending, from any
        thread (it must not block), until the function returned is called. One watcher
        per store serves every ticket waited on in the process
        (:class:`~dsh_tools.approvals.TicketWatchers`), so the calls waiting for answers
        hold no thread each. ``changed`` may come when nothing changed: the waiter looks
        at the ticket. A store without this method still works: the pipeline then looks
        at its waited tickets with :meth:`get_ticket`, from one thread per store."""
        ...
