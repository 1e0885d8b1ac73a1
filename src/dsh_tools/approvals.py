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
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from typing import Protocol, cast

import attrs

from .models import ApprovalOutcome

__all__ = [
    "REMEMBERED_OUTCOMES",
    "ApprovalAnswer",
    "ApprovalKey",
    "ApprovalStore",
    "LimitedGrantStore",
    "MemoryApprovalStore",
    "exact_outcome",
    "grant_limits",
    "remembered_outcome",
]

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
    """

    outcome: ApprovalOutcome = attrs.field(converter=_outcome)
    any_arguments: bool = attrs.field(default=False, kw_only=True)
    expires_in_s: float | None = attrs.field(default=None, kw_only=True, converter=_lifetime)
    uses: int | None = attrs.field(default=None, kw_only=True, converter=_uses)

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
        import hashlib

        canonical = json.dumps(
            [tool_name, arguments],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
        return cls(agent, tool_name, hashlib.sha256(canonical.encode("ascii")).hexdigest())

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


@attrs.frozen
class _Grant:
    outcome: ApprovalOutcome
    expires_at: float | None
    uses_left: int | None

    def live(self, now: float) -> bool:
        return (self.expires_at is None or now < self.expires_at) and (
            self.uses_left is None or self.uses_left > 0
        )


class MemoryApprovalStore:
    """The default store: a dictionary per registry, gone when the process ends. Grants
    that end are timed by ``time.monotonic``."""

    def __init__(self) -> None:
        self._answers: dict[ApprovalKey, _Grant] = {}
        self._lock = threading.Lock()

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            grant = self._answers.get(key)
            return grant.outcome if grant is not None and grant.live(time.monotonic()) else None

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
        expires_at = None if lifetime is None else time.monotonic() + lifetime
        with self._lock:
            self._answers[key] = _Grant(kept, expires_at, uses)

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            grant = self._answers.get(key)
            if grant is None or grant.outcome is not ApprovalOutcome.ALLOWED_ALWAYS:
                return None
            if not grant.live(time.monotonic()):
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
