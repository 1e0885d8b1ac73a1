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
:class:`TicketStore`; both first-party stores are one.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import attrs

from .errors import DshToolsError, ErrorCode
from .json import FrozenDict
from .models import ApprovalOutcome

__all__ = [
    "ANSWERS",
    "REMEMBERED_OUTCOMES",
    "ApprovalAnswer",
    "ApprovalKey",
    "ApprovalStore",
    "ApprovalTicket",
    "LimitedGrantStore",
    "MemoryApprovalStore",
    "TicketAnswer",
    "TicketError",
    "TicketState",
    "TicketStore",
    "call_digest",
    "exact_outcome",
    "grant_limits",
    "remembered_outcome",
    "stamped",
]

ANSWERS = frozenset(
    {
        ApprovalOutcome.ALLOWED_ONCE,
        ApprovalOutcome.ALLOWED_ALWAYS,
        ApprovalOutcome.REJECTED,
        ApprovalOutcome.REJECTED_ALWAYS,
    }
)
"""The outcomes a person may give a ticket."""

REMEMBERED_OUTCOMES = frozenset({ApprovalOutcome.ALLOWED_ALWAYS, ApprovalOutcome.REJECTED_ALWAYS})
"""The outcomes an approval store keeps; every other outcome applies to one call."""

_BY_VALUE = {outcome.value: outcome for outcome in ApprovalOutcome}


def exact_outcome(value: object) -> ApprovalOutcome | None:
    """``value`` as an outcome when it is one exactly: a member, or an object of exactly
    type ``str`` holding a member's value; ``None`` for anything else. ``value`` is never
    compared, hashed or printed (it may be hostile, equal to everything say), so a
    ``str`` subclass is refused too."""
    kind = type(value)
    if kind is ApprovalOutcome:
        return cast(ApprovalOutcome, value)
    if kind is str:
        return _BY_VALUE.get(cast(str, value))
    return None


def remembered_outcome(value: object) -> ApprovalOutcome:
    """``value`` as an outcome a store may keep (exactly one of
    :data:`REMEMBERED_OUTCOMES`); a store's ``remember`` checks what it is given with it."""
    outcome = exact_outcome(value)
    if outcome not in REMEMBERED_OUTCOMES:
        shown = outcome.value if outcome is not None else type(value).__qualname__
        raise ValueError(f"only always-outcomes are remembered, not {shown!r}")
    return outcome


def _outcome(value: object) -> ApprovalOutcome:
    outcome = exact_outcome(value)
    if outcome is None:
        raise TypeError(
            "ApprovalAnswer.outcome must be an ApprovalOutcome or one of its values, got "
            + type(value).__qualname__
        )
    return outcome


def _lifetime(value: object) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise TypeError(f"expires_in_s must be a number, got {type(value).__qualname__}")
    seconds = float(cast(float, value))
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expires_in_s must be a positive number of seconds, got {seconds!r}")
    return seconds


def _uses(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise TypeError(f"uses must be an int, got {type(value).__qualname__}")
    if value < 1:
        raise ValueError(f"uses must be at least 1, got {value!r}")
    return value


def _text(what: str) -> Callable[[Any, Any, Any], None]:
    """A validator of an optional text field: exactly a ``str`` (a hostile subclass could
    print as something else), or ``None``."""

    def check(instance: object, attribute: object, value: object) -> None:
        if value is not None and type(value) is not str:
            raise TypeError(f"{what} must be a str, got {type(value).__qualname__}")

    return check


@attrs.frozen
class ApprovalAnswer:
    """An approval service's answer with its reach.

    ``ApprovalAnswer("allowed-always", any_arguments=True)`` remembers the answer for
    every later call of the tool by the same agent, whatever its arguments. A plain outcome
    answer is ``ApprovalAnswer(outcome)``: an ``*-always`` outcome is then remembered for
    the exact arguments only.

    An ``allowed-always`` answer may end: ``expires_in_s`` is its lifetime in seconds from
    the moment it is stored (by the store's clock), ``uses`` the number of calls it allows
    at most. Once either runs out the next call asks again.

    ``feedback`` is what the person said, for the model (a rejection's reason reads it)
    and for the call's records; ``by`` and ``channel`` say who answered and through what,
    when the channel knows. All three are recorded in the call's decision record, the
    audit log and the OpenTelemetry decision events, whatever the outcome.
    """

    outcome: ApprovalOutcome = attrs.field(converter=_outcome)
    any_arguments: bool = attrs.field(default=False, kw_only=True)
    expires_in_s: float | None = attrs.field(default=None, kw_only=True, converter=_lifetime)
    uses: int | None = attrs.field(default=None, kw_only=True, converter=_uses)
    feedback: str | None = attrs.field(default=None, kw_only=True, validator=_text("feedback"))
    by: str | None = attrs.field(default=None, kw_only=True, validator=_text("by"))
    channel: str | None = attrs.field(default=None, kw_only=True, validator=_text("channel"))

    @any_arguments.validator
    def _widened_only_when_remembered(self, attribute: object, value: object) -> None:
        if type(value) is not bool:
            raise TypeError(f"any_arguments must be a bool, got {type(value).__qualname__}")
        if value and self.outcome not in REMEMBERED_OUTCOMES:
            raise ValueError(
                f"any_arguments widens a remembered answer, and {self.outcome.value!r} is not "
                "remembered: use allowed-always or rejected-always"
            )

    @uses.validator
    def _ends_only_when_allowed_always(self, attribute: object, value: object) -> None:
        grant_limits(self.outcome, self.expires_in_s, value)


def grant_limits(
    outcome: ApprovalOutcome, expires_in_s: object, uses: object
) -> tuple[float | None, int | None]:
    """``expires_in_s`` and ``uses`` of a grant of ``outcome``, checked as
    :class:`ApprovalAnswer` checks them; a store's ``remember`` checks what it is given
    with it."""
    limits = _lifetime(expires_in_s), _uses(uses)
    if limits != (None, None) and outcome is not ApprovalOutcome.ALLOWED_ALWAYS:
        raise ValueError(f"only an allowed-always answer may end, not {outcome.value!r}")
    return limits


def call_digest(tool_name: str, arguments: Mapping[str, object]) -> str:
    """The hex SHA-256 of the canonical JSON (sorted keys, no whitespace, ASCII) of
    ``[tool_name, arguments]``: what identifies a call's exact arguments (a remembered
    answer's key, a cached result's)."""
    canonical = _canonical([tool_name, arguments])
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


_canonical = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
).encode


@attrs.frozen
class ApprovalKey:
    """What a remembered answer is bound to: the agent scope that asked (its full id,
    ``"parent/child"`` for a nested scope), the tool, and the call's arguments.

    ``arguments_sha256`` is the hex SHA-256 of the canonical JSON (sorted keys, no
    whitespace, ASCII) of ``[tool_name, arguments]``; ``None`` stands for any arguments.
    """

    agent: str
    tool_name: str
    arguments_sha256: str | None

    @classmethod
    def for_call(cls, agent: str, tool_name: str, arguments: Mapping[str, object]) -> ApprovalKey:
        """The key of one call: these exact arguments."""
        return cls(agent, tool_name, call_digest(tool_name, arguments))

    @classmethod
    def for_tool(cls, agent: str, tool_name: str) -> ApprovalKey:
        """The key of an answer widened to every call of the tool by ``agent``."""
        return cls(agent, tool_name, None)


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
    feedback: str | None = attrs.field(default=None, kw_only=True, validator=_text("feedback"))
    any_arguments: bool = attrs.field(default=False, kw_only=True)
    expires_in_s: float | None = attrs.field(default=None, kw_only=True, converter=_lifetime)
    uses: int | None = attrs.field(default=None, kw_only=True, converter=_uses)

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

    def intact(self) -> bool:
        """Whether the stored arguments still hash to ``arguments_sha256`` (a ticket whose
        arguments were changed where it is stored is never resumed)."""
        try:
            again = ApprovalKey.for_call(self.agent, self.tool_name, self.arguments)
        except (TypeError, ValueError):
            return False
        return again.arguments_sha256 == self.arguments_sha256


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
    """No ticket has that id in the store."""

    def __init__(self, ticket_id: str) -> None:
        super().__init__(ticket_id, "does not exist")


class TicketAnsweredError(TicketError):
    """The ticket was answered already: this answer came too late and counts for nothing."""

    def __init__(self, ticket: ApprovalTicket) -> None:
        earlier = ticket.answer
        said = (
            f" ({earlier.outcome.value} by {earlier.by} via {earlier.channel})" if earlier else ""
        )
        super().__init__(ticket.id, f"was already answered{said}; this answer came too late")
        self.ticket = ticket


class TicketExpiredError(TicketError):
    """The ticket expired before this answer."""

    default_code = ErrorCode.APPROVAL_EXPIRED.value

    def __init__(self, ticket: ApprovalTicket) -> None:
        super().__init__(ticket.id, "has expired; it can no longer be answered")
        self.ticket = ticket


class ApprovalStore(Protocol):
    """Where remembered answers live. Both methods may be called from several threads at
    once; an exception from either fails closed (see the module docstring)."""

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        """The outcome remembered under exactly ``key`` (one of
        :data:`REMEMBERED_OUTCOMES`), or ``None``; only reads the store."""
        ...

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        """Keep ``outcome`` under ``key``, replacing what was there; return only once it
        is kept."""
        ...


class LimitedGrantStore(ApprovalStore, Protocol):
    """A store that also keeps grants that end (an ``allowed-always`` answer with
    ``expires_in_s`` or ``uses``). Its :meth:`recall` no longer finds a grant that expired
    or is used up; the pipeline calls :meth:`use` before a call runs on a grant. A store
    without ``use`` is given only grants that never end (an answer that ends fails the call
    with ``POLICY_ERROR``)."""

    def remember(
        self,
        key: ApprovalKey,
        outcome: ApprovalOutcome,
        *,
        expires_in_s: float | None = None,
        uses: int | None = None,
    ) -> None:
        """Keep ``outcome`` under ``key`` as :meth:`ApprovalStore.remember` does, ending
        ``expires_in_s`` seconds from now by the store's clock and after ``uses`` calls
        (``None``: never)."""
        ...

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        """Take one use of the allowance remembered under exactly ``key``, atomically (two
        callers never take the last use both), and return ``allowed-always``; ``None`` when
        there is no allowance there, or it expired or is used up. A grant without a use
        count is returned without change."""
        ...


@attrs.frozen
class _Grant:
    outcome: ApprovalOutcome
    expires_at: float | None
    uses_left: int | None

    def live(self, now: float) -> bool:
        return (self.expires_at is None or now < self.expires_at) and (
            self.uses_left is None or self.uses_left > 0
        )


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
        ticket that is not pending. Needs no event loop; the pipeline calls it from a
        worker thread when one runs."""
        ...


class MemoryApprovalStore:
    """The default store: remembered answers and tickets in dictionaries of this
    registry's process, gone when it ends. ``clock`` gives the time (seconds since the
    epoch) tickets are created, answered and expire by, and grants that end expire by."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._answers: dict[ApprovalKey, _Grant] = {}
        self._lock = threading.Lock()
        self._tickets: dict[str, ApprovalTicket] = {}
        self._changed = threading.Condition()
        self._clock = clock

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            grant = self._answers.get(key)
            return grant.outcome if grant is not None and grant.live(self._clock()) else None

    def remember(
        self,
        key: ApprovalKey,
        outcome: ApprovalOutcome,
        *,
        expires_in_s: float | None = None,
        uses: int | None = None,
    ) -> None:
        kept = remembered_outcome(outcome)
        lifetime, uses = grant_limits(kept, expires_in_s, uses)
        expires_at = None if lifetime is None else self._clock() + lifetime
        with self._lock:
            self._answers[key] = _Grant(kept, expires_at, uses)

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
        with self._changed:
            found = self._open(ticket.key)
            if found is not None:
                return found
            kept = self._tickets[ticket.id] = stamped(ticket, self._clock())
            return kept

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        with self._changed:
            ticket = self._tickets.get(ticket_id)
            return None if ticket is None else self._now_seen(ticket)

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        with self._changed:
            return self._open(key)

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        with self._changed:
            seen = [self._now_seen(ticket) for ticket in self._tickets.values()]
        return [
            ticket
            for ticket in sorted(seen, key=lambda ticket: ticket.created_at)
            if (agent is None or ticket.agent == agent) and (state is None or ticket.state is state)
        ]

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        with self._changed:
            ticket = self.get_ticket(ticket_id)  # the condition's lock is reentrant
            if ticket is None:
                raise TicketNotFoundError(ticket_id)
            if ticket.state is TicketState.EXPIRED:
                raise TicketExpiredError(ticket)
            if ticket.state is not TicketState.PENDING:
                raise TicketAnsweredError(ticket)
            answered = attrs.evolve(
                ticket, state=TicketState.ANSWERED, answer=answer, answered_at=self._clock()
            )
            self._tickets[ticket_id] = answered
            self._changed.notify_all()
            return answered

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        with self._changed:
            ticket = self.get_ticket(ticket_id)
            if ticket is None or ticket.state is not TicketState.ANSWERED:
                return None
            resumed = attrs.evolve(ticket, state=TicketState.RESUMED, resumed_at=self._clock())
            self._tickets[ticket_id] = resumed
            return resumed

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        def settled() -> bool:
            ticket = self.get_ticket(ticket_id)
            return ticket is None or ticket.state is not TicketState.PENDING

        with self._changed:
            self._changed.wait_for(settled, timeout=max(timeout_s, 0.0))
            return self.get_ticket(ticket_id)

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
