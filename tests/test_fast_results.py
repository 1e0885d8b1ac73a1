"""The call path's fast constructors cannot rot: they are derived from ``attrs.fields``.

Found in the first version: the fast success constructors wrote a hand-kept list of
fields straight into ``__dict__`` (twice), so one defaulted field added to
``ToolExecutionSuccess`` would have broken ``repr``, ``==`` and ``attrs.evolve`` of every
result the usual call returns, with no test noticing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from dsh_tools import hookimpl
from dsh_tools._content import ImageContent, TextContent, text_blocks
from dsh_tools._define import define_tool
from dsh_tools._json import FrozenDict, FrozenList
from dsh_tools._models import (
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
)
from dsh_tools._pipeline.results import success_result, trusted_constructor
from dsh_tools._registry import ToolRegistry

SUCCESS_PARTS = ("value", "content", "meta", "additional_contexts", "concludes_turn")


def test_a_field_added_to_the_result_class_gets_its_default_on_the_fast_path() -> None:
    @attrs.frozen(slots=False)
    class Extended(ToolExecutionSuccess):
        elapsed_ms: float = 0.0

    make = trusted_constructor(Extended, SUCCESS_PARTS)
    fast = make(3, text_blocks("3"), None, (), False)
    slow = Extended(value=3, content=["3"])

    assert fast == slow
    assert repr(fast) == repr(slow)
    assert attrs.evolve(fast) == fast
    assert attrs.evolve(fast, elapsed_ms=1.5).elapsed_ms == 1.5


def test_a_field_the_fast_path_cannot_default_is_refused_when_it_is_made() -> None:
    @attrs.frozen(slots=False)
    class Required(ToolExecutionSuccess):
        trace_id: str = attrs.field(kw_only=True)

    @attrs.frozen(slots=False)
    class Factory(ToolExecutionSuccess):
        tags: list[str] = attrs.field(factory=list)

    with pytest.raises(TypeError, match=r"Required\.trace_id has no plain default"):
        trusted_constructor(Required, SUCCESS_PARTS)
    with pytest.raises(TypeError, match=r"Factory\.tags has no plain default"):
        trusted_constructor(Factory, SUCCESS_PARTS)
    with pytest.raises(TypeError, match="has no field"):
        trusted_constructor(ToolExecutionSuccess, (*SUCCESS_PARTS, "valeu"))


def _bodies() -> dict[str, Any]:
    return {
        "int": lambda args, ctx: 7,
        "str": lambda args, ctx: "text",
        "blocks": lambda args, ctx: [TextContent("a"), ImageContent("iVBORw0KGgo=", "image/png")],
        "object": lambda args, ctx: {"n": [1, None]},
    }


class Observer:
    """Its presence makes calls take the staged runner (and records their executions)."""

    def __init__(self) -> None:
        self.executions: list[ToolExecution] = []

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution) -> None:
        self.executions.append(execution)


@pytest.mark.parametrize("runner", ["direct", "staged"])
@pytest.mark.parametrize("body", list(_bodies()))
def test_every_result_the_call_path_makes_has_every_field(body: str, runner: str) -> None:
    registry = ToolRegistry()
    observer = Observer()
    if runner == "staged":
        registry.add_plugin(observer)
    execute = _bodies()[body]
    registry.register(define_tool(name="t", description="t", parameters={}, execute=execute))
    names = ["t"]
    if body != "blocks":  # a tool with an output contract returns a JSON value
        output = ToolOutput(schema={}, render=lambda args, value: "shown")
        registry.register(
            define_tool(name="out", description="o", parameters={}, execute=execute, output=output)
        )
        names.append("out")
    results: list[ToolExecutionResult] = []
    for name in names:
        call = ToolExecutionInput("c1", name)
        results.append(registry.execute_sync(call))
        results.append(asyncio.run(registry.execute(call)))  # type: ignore[arg-type]
    for result in results:
        assert isinstance(result, ToolExecutionSuccess)
        assert set(vars(result)) == {field.name for field in attrs.fields(ToolExecutionSuccess)}
        rebuilt = ToolExecutionSuccess(
            value=result.value,
            content=list(result.content),
            meta=result.meta,
            additional_contexts=result.additional_contexts,
            concludes_turn=result.concludes_turn,
        )
        assert (result, repr(result)) == (rebuilt, repr(rebuilt))
        assert attrs.evolve(result) == result
    for execution in observer.executions:
        assert set(vars(execution)) == {field.name for field in attrs.fields(ToolExecution)}
        assert attrs.evolve(execution) == execution


def test_frozen_containers_built_without_a_snapshot_equal_the_checked_ones() -> None:
    # FrozenDict.__init__ only snapshots; the trusted paths skip it for values that are
    # already frozen. That is only sound while a frozen container holds no other state.
    assert FrozenDict.__slots__ == ()
    assert FrozenList.__slots__ == ()
    blocks = text_blocks("hi")
    checked = FrozenList([FrozenDict({"type": "text", "text": "hi"})])
    assert (blocks, type(blocks), type(blocks[0])) == (checked, FrozenList, FrozenDict)
    admitted = define_tool(
        name="a", description="a", parameters={"n": {"type": "integer"}}, execute=lambda a, c: 1
    ).arguments.admit({"n": 1})
    assert (admitted, type(admitted)) == (FrozenDict({"n": 1}), FrozenDict)
    made = success_result("hi", blocks, None, (), False)
    assert made == ToolExecutionSuccess(value="hi", content=["hi"])
