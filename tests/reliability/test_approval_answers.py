"""Only an exact approval outcome allows a call (issue 16, reproduction r09).

An approval service answers with an ``ApprovalOutcome`` member, a plain ``str`` holding an
outcome's value, or an ``ApprovalAnswer``. Anything else (an object equal to everything, a
``str`` subclass, an object whose ``__eq__``, ``__hash__`` or ``__repr__`` raises) fails the
call closed with ``POLICY_ERROR``, and the body never runs.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from dsh_tools import (
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)


class _Equal:
    """Equal to everything, hashing like the outcome it imitates."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("allowed-once")


class _Raising:
    """Every comparison, hash and repr raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")

    def __repr__(self) -> str:
        raise RuntimeError("repr")


class _Str(str):
    """A str subclass with the value of an outcome and hostile equality."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _Disguised:
    """Claims to be an ApprovalOutcome through ``__class__``, which ``isinstance`` trusts."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return ApprovalOutcome

    value = "allowed-once"


HOSTILE = {
    "mock.ANY": mock.ANY,
    "equal to everything": _Equal(),
    "raising eq, hash and repr": _Raising(),
    "str subclass": _Str("allowed-once"),
    "disguised as an outcome": _Disguised(),
    "bytes": b"allowed-once",
    "None": None,
    "outcome in a list": [ApprovalOutcome.ALLOWED_ONCE],
    "unknown text": "yes",
    "outcome text with spaces": " allowed-once",
}


def _run(answer: object) -> tuple[Any, list[int]]:
    class Service:
        def request(self, request: ApprovalRequest) -> Any:
            return answer

    class AskFirst:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Ask:
            return Ask("dangerous")

    ran: list[int] = []
    registry = ToolRegistry(approval=Service())
    registry.register(
        define_tool(
            name="rm_rf",
            description="Delete everything.",
            parameters={},
            execute=lambda args, ctx: ran.append(1) or "deleted",
        )
    )
    registry.add_plugin(AskFirst())
    result = registry.execute_sync(ToolExecutionInput("1", "rm_rf", {}, agent="bot"))
    return result, ran


@pytest.mark.parametrize("answer", list(HOSTILE.values()), ids=list(HOSTILE))
def test_an_answer_that_is_not_an_exact_outcome_fails_closed(answer: object) -> None:
    result, ran = _run(answer)
    assert result.is_error
    assert result.error.info.code == "POLICY_ERROR"
    assert "approval service returned" in result.error.message
    assert ran == []


@pytest.mark.parametrize("answer", [ApprovalOutcome.ALLOWED_ONCE, "allowed-once"])
def test_an_exact_allowed_once_runs_the_body(answer: object) -> None:
    result, ran = _run(answer)
    assert not result.is_error
    assert ran == [1]
