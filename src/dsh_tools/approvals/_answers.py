"""Remembered answers: how an approval ends (:class:`ApprovalOutcome`), the outcomes a
person gives, an approval service's answer with its reach (:class:`ApprovalAnswer`), what
an answer is remembered under (:class:`ApprovalKey`), and the protocols of the stores that
keep them.

:mod:`dsh_tools.approvals` is the public import path.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import attrs

from .._json import canonical

__all__ = [
    "ANSWERS",
    "REMEMBERED_OUTCOMES",
    "ApprovalAnswer",
    "ApprovalKey",
    "ApprovalOutcome",
    "ApprovalStore",
    "GrantKeeping",
    "LimitedGrantStore",
    "call_digest",
    "exact_outcome",
    "grant_limits",
    "lifetime",
    "optional_text",
    "remembered_outcome",
    "use_count",
]


class ApprovalOutcome(str, enum.Enum):
    """How an approval request ended; only the two ``ALLOWED_*`` outcomes let the call run.
    The ``*_ALWAYS`` ones are also remembered for the agent's later calls (see
    :mod:`dsh_tools.approvals`)."""

    ALLOWED_ONCE = "allowed-once"
    ALLOWED_ALWAYS = "allowed-always"
    REJECTED = "rejected"
    REJECTED_ALWAYS = "rejected-always"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"
    PENDING = "pending"
    """Nobody can answer now: the call ends ``APPROVAL_PENDING`` with an open approval
    ticket a person answers later (see :mod:`dsh_tools.approvals`)."""


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


def lifetime(value: object) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise TypeError(f"expires_in_s must be a number, got {type(value).__qualname__}")
    seconds = float(cast(float, value))
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expires_in_s must be a positive number of seconds, got {seconds!r}")
    return seconds


def use_count(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise TypeError(f"uses must be an int, got {type(value).__qualname__}")
    if value < 1:
        raise ValueError(f"uses must be at least 1, got {value!r}")
    return value


def optional_text(what: str) -> Callable[[Any, Any, Any], None]:
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
    expires_in_s: float | None = attrs.field(default=None, kw_only=True, converter=lifetime)
    uses: int | None = attrs.field(default=None, kw_only=True, converter=use_count)
    feedback: str | None = attrs.field(
        default=None, kw_only=True, validator=optional_text("feedback")
    )
    by: str | None = attrs.field(default=None, kw_only=True, validator=optional_text("by"))
    channel: str | None = attrs.field(
        default=None, kw_only=True, validator=optional_text("channel")
    )

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
    limits = lifetime(expires_in_s), use_count(uses)
    if limits != (None, None) and outcome is not ApprovalOutcome.ALLOWED_ALWAYS:
        raise ValueError(f"only an allowed-always answer may end, not {outcome.value!r}")
    return limits


def call_digest(tool_name: str, arguments: Mapping[str, object]) -> str:
    """The hex SHA-256 of the canonical JSON (sorted keys, no whitespace, ASCII) of
    ``[tool_name, arguments]``: what identifies a call's exact arguments (a remembered
    answer's key)."""
    text = canonical([tool_name, arguments])
    return hashlib.sha256(text.encode("ascii")).hexdigest()


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


class GrantKeeping:
    """The ``remember`` of the first-party stores (memory, SQLite, PostgreSQL): what it is
    given is checked once, here, as :class:`ApprovalAnswer` checks it, so no store keeps
    what another would refuse; the store's ``_keep`` then keeps it."""

    _keep: Callable[[ApprovalKey, ApprovalOutcome, float | None, int | None], None]
    """Keep a checked outcome under the key, replacing what was there, ending ``lifetime``
    seconds from now by the store's clock and after ``uses`` calls (``None``: never)."""

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
        self._keep(key, kept, lifetime, uses)
