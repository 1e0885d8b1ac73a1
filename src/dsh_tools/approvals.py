"""Remembered approvals: an approval service's answer kept for an agent's later calls.

An approval service may answer ``allowed-always`` or ``rejected-always``. The pipeline
keeps such an answer in the registry's ``approval_store``, under an :class:`ApprovalKey`:
the agent that asked, the tool, and a hash of the call's exact arguments. The same
agent's next call of the tool with the same arguments is then decided by the remembered
answer without asking again; another agent (a parent or child scope included) or another
argument value asks again. An :class:`ApprovalAnswer` with ``any_arguments=True`` widens
the memory to every call of the tool by that agent.

A store is anything with :meth:`ApprovalStore.recall` and :meth:`ApprovalStore.remember`.
:class:`MemoryApprovalStore` (the default) forgets when the process ends;
``dsh_tools_plugins.approval_store.SqliteApprovalStore`` keeps answers in a file. A store
that raises fails closed: a failed recall asks the service again, a failed write fails
the call with ``POLICY_ERROR``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Protocol, cast

import attrs

from .models import ApprovalOutcome

__all__ = [
    "REMEMBERED_OUTCOMES",
    "ApprovalAnswer",
    "ApprovalKey",
    "ApprovalStore",
    "MemoryApprovalStore",
    "call_digest",
    "exact_outcome",
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


@attrs.frozen
class ApprovalAnswer:
    """An approval service's answer with its reach.

    ``ApprovalAnswer("allowed-always", any_arguments=True)`` remembers the answer for
    every later call of the tool by the same agent, whatever its arguments. A plain outcome
    answer is ``ApprovalAnswer(outcome)``: an ``*-always`` outcome is then remembered for
    the exact arguments only.
    """

    outcome: ApprovalOutcome = attrs.field(converter=_outcome)
    any_arguments: bool = attrs.field(default=False, kw_only=True)

    @any_arguments.validator
    def _widened_only_when_remembered(self, attribute: object, value: object) -> None:
        if type(value) is not bool:
            raise TypeError(f"any_arguments must be a bool, got {type(value).__qualname__}")
        if value and self.outcome not in REMEMBERED_OUTCOMES:
            raise ValueError(
                f"any_arguments widens a remembered answer, and {self.outcome.value!r} is not "
                "remembered: use allowed-always or rejected-always"
            )


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


class ApprovalStore(Protocol):
    """Where remembered answers live. Both methods may be called from several threads at
    once; an exception from either fails closed (see the module docstring)."""

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        """The outcome remembered under exactly ``key`` (one of
        :data:`REMEMBERED_OUTCOMES`), or ``None``."""
        ...

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        """Keep ``outcome`` under ``key``, replacing what was there; return only once it
        is kept."""
        ...


class MemoryApprovalStore:
    """The default store: a dictionary per registry, gone when the process ends."""

    def __init__(self) -> None:
        self._answers: dict[ApprovalKey, ApprovalOutcome] = {}
        self._lock = threading.Lock()

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        with self._lock:
            return self._answers.get(key)

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        kept = remembered_outcome(outcome)
        with self._lock:
            self._answers[key] = kept

    def forget(self, agent: str | None = None) -> None:
        """Drop every remembered answer, or those of ``agent`` (and of no other scope)."""
        with self._lock:
            if agent is None:
                self._answers.clear()
            else:
                for key in [key for key in self._answers if key.agent == agent]:
                    del self._answers[key]
