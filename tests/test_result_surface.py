"""Every result has the same read-only surface, and a call needs an id to key it on."""

from __future__ import annotations

import inspect

import attrs
import pytest

from dsh_tools import ToolRegistry
from dsh_tools._models import (
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
)


def _describe(result: ToolExecutionResult) -> tuple[object, ...]:
    """What generic host code logs of any result, without asking which kind it is."""
    return (result.is_error, result.code, result.value, result.error, result.concludes_turn)


def test_success_and_failure_answer_the_same_questions() -> None:
    success = ToolExecutionSuccess(value={"n": 1}, content=[])
    failure = ToolExecutionFailure(ToolFailure("no", ToolErrorInfo("Denied", "DENIED")), [])
    assert _describe(success) == (False, None, {"n": 1}, None, False)
    assert _describe(failure) == (True, "DENIED", None, failure.error, False)


@pytest.mark.parametrize("call_id", ["", 3, None, b"id"])
def test_a_call_without_a_usable_id_is_refused_naming_the_field(call_id: object) -> None:
    with pytest.raises(TypeError, match=r"ToolExecutionInput\.call_id must be a non-empty string"):
        ToolExecutionInput(call_id=call_id, name="echo")  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", 7, b"k"])
def test_an_unusable_idempotency_key_is_refused_naming_the_field(key: object) -> None:
    with pytest.raises(
        TypeError, match=r"ToolExecutionInput\.idempotency_key must be a non-empty string"
    ):
        ToolExecutionInput("c1", "echo", idempotency_key=key)  # type: ignore[arg-type]


def test_the_input_takes_exactly_its_fields_with_their_defaults() -> None:
    """The constructor is written by hand (it runs once per call): it must take every
    field, by name and in order, with the default the field declares."""
    parameters = list(inspect.signature(ToolExecutionInput).parameters.values())
    fields = attrs.fields(ToolExecutionInput)
    assert [p.name for p in parameters] == [f.name for f in fields]
    bare = ToolExecutionInput("c1", "echo")
    assert fields.arguments.default == attrs.Factory(dict)
    for field in fields[3:]:
        assert getattr(bare, field.name) == field.default, field.name
    assert bare.arguments == {}
    assert bare.arguments is not ToolExecutionInput("c2", "echo").arguments  # its own dict
    everything = {f.name: f"{f.name}-value" for f in fields}
    assert attrs.asdict(ToolExecutionInput(**everything)) == everything  # type: ignore[arg-type]
    assert attrs.evolve(bare, agent="a").agent == "a"


def test_a_refused_id_reaches_no_observer() -> None:
    seen: list[object] = []

    class Observer:
        def dsh_tools_result(self, record: object) -> None:
            seen.append(record)

    registry = ToolRegistry()
    registry.add_plugin(Observer(), name="observer")
    with pytest.raises(TypeError):
        registry.execute_sync(ToolExecutionInput(call_id="", name="echo"))
    assert seen == []
