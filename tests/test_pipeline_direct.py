"""A call with nothing to decide, observe, time or cancel takes the *direct* runner: the
body step alone, without the empty stages' frames. It must end exactly as the staged
runner would: every body outcome here runs both ways and the results must match, field
for field.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from dsh_tools import (
    CancelSource,
    ImageContent,
    TextContent,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolOutput,
    ToolRegistry,
    ToolRunContext,
    define_tool,
    hookimpl,
)
from dsh_tools._json import FrozenDict
from dsh_tools._models import result_to_json
from dsh_tools._pipeline import drivers as _drivers
from dsh_tools._schema.arguments import ArgumentsModel
from dsh_tools.errors import ToolError

PNG = "iVBORw0KGgo="


class Bystander:
    """A result observer that does nothing: its presence forces the staged runner."""

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        return None


def _sync_bodies() -> dict[str, Callable[[Any, ToolRunContext], Any]]:
    def defers(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("remember this")
        ctx.conclude_turn()
        return "done"

    def defers_an_int(args: Any, ctx: ToolRunContext) -> int:
        ctx.defer_context("the int keeps it")
        ctx.conclude_turn()
        return int(args["n"]) * 10

    def defers_then_raises(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("kept on the failure")
        raise ToolError("it broke", code="CUSTOM_CODE")

    def reads_execution(args: Any, ctx: ToolRunContext) -> Any:
        execution = ctx.execution
        return {
            "call": execution.call_id,
            "root": execution.root_call_id,
            "args": execution.arguments,
            "same": ctx.execution is execution,
        }

    async def later() -> str:
        return "awaited"

    return {
        "int": lambda args, ctx: args["n"] + 1,
        "text": lambda args, ctx: f"n={args['n']}",
        "object": lambda args, ctx: {"n": args["n"], "list": [1, "two", None]},
        "none": lambda args, ctx: None,
        "blocks": lambda args, ctx: [TextContent("a"), ImageContent(PNG, "image/png")],
        "not JSON": lambda args, ctx: {1, 2},
        "nan": lambda args, ctx: float("nan"),
        "raises": lambda args, ctx: 1 / 0,
        "defers": defers,
        "defers, returns an int": defers_an_int,
        "defers then raises": defers_then_raises,
        "reads execution": reads_execution,
        "returns an awaitable": lambda args, ctx: later(),
    }


def _async_version(body: Callable[[Any, ToolRunContext], Any]) -> Any:
    async def run(args: Any, ctx: ToolRunContext) -> Any:
        value = body(args, ctx)
        return (await value) if asyncio.iscoroutine(value) else value

    return run


def _registries(body: Any, output: ToolOutput | None = None) -> tuple[ToolRegistry, ToolRegistry]:
    direct, full = ToolRegistry(), ToolRegistry()
    full.add_plugin(Bystander())
    for registry in (direct, full):
        registry.register(
            define_tool(
                name="t",
                description="A test tool.",
                parameters={"n": {"type": "integer", "required": True}},
                execute=body,
                output=output,
            )
        )
    return direct, full


CALLS = {
    "valid": ToolExecutionInput("c1", "t", {"n": 1}, root_call_id="root"),
    # Valid, but not flat or not a plain dict: snapshotted, then parsed (not admitted).
    "valid, nested extra": ToolExecutionInput("c5", "t", {"n": 2, "note": [1, {"k": None}]}),
    "valid, already frozen": ToolExecutionInput("c6", "t", FrozenDict({"n": 3})),
    "invalid arguments": ToolExecutionInput("c2", "t", {"n": "one", "extra": True}),
    "non-JSON arguments": ToolExecutionInput("c3", "t", {"n": {1}}),
    "unknown tool": ToolExecutionInput("c4", "missing", {"n": 1}),
}


def _same(one: ToolExecutionResult, other: ToolExecutionResult) -> None:
    assert type(one) is type(other)
    assert result_to_json(one) == result_to_json(other)


@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
@pytest.mark.parametrize("name", list(_sync_bodies()))
def test_sync_bodies_end_the_same_both_ways(name: str, call: ToolExecutionInput) -> None:
    direct, full = _registries(_sync_bodies()[name])
    _same(direct.execute_sync(call), full.execute_sync(call))
    _same(asyncio.run(direct.execute(call)), asyncio.run(full.execute(call)))


@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
@pytest.mark.parametrize("name", list(_sync_bodies()))
def test_async_bodies_end_the_same_both_ways(name: str, call: ToolExecutionInput) -> None:
    direct, full = _registries(_async_version(_sync_bodies()[name]))
    _same(asyncio.run(direct.execute(call)), asyncio.run(full.execute(call)))
    _same(direct.execute_sync(call), full.execute_sync(call))


@pytest.mark.parametrize(
    ("value", "code"),
    [(3, None), (-1, "INVALID_TOOL_OUTPUT"), ("three", "INVALID_TOOL_OUTPUT")],
    ids=["valid", "render raises", "breaks the schema"],
)
def test_output_contracts_end_the_same_both_ways(value: Any, code: str | None) -> None:
    def render(args: Any, produced: Any) -> Any:
        if produced < 0:
            raise ValueError("cannot render a negative value")
        return f"value {produced}"

    output = ToolOutput(schema={"type": "integer"}, render=render)
    direct, full = _registries(lambda args, ctx: value, output)
    call = CALLS["valid"]
    result = direct.execute_sync(call)
    _same(result, full.execute_sync(call))
    _same(asyncio.run(direct.execute(call)), asyncio.run(full.execute(call)))
    assert getattr(result, "code", None) == code


@pytest.fixture(autouse=True)
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each call went through (the staged runner, a parse of frozen arguments), so
    the comparisons above are known to compare both ways."""
    seen: list[str] = []

    def spy(label: str, original: Any) -> Any:
        def record(*args: Any) -> Any:
            seen.append(label)
            return original(*args)

        return record

    monkeypatch.setattr(_drivers, "run_staged", spy("full", _drivers.run_staged))
    monkeypatch.setattr(ArgumentsModel, "parse", spy("parse", ArgumentsModel.parse))
    return seen


def _way(events: list[str], run: Callable[[], object]) -> str:
    """``full``, ``parsed`` (direct, arguments snapshotted then parsed) or ``admitted``
    (direct, arguments admitted in one step) for the call ``run`` makes."""
    del events[:]
    run()
    if "full" in events:
        return "full"
    return "parsed" if "parse" in events else "admitted"


def test_each_registry_takes_the_way_it_should(events: list[str]) -> None:
    direct, full = _registries(lambda args, ctx: 1)

    def ways(registry: ToolRegistry, call: ToolExecutionInput) -> set[str]:
        return {
            _way(events, lambda: registry.execute_sync(call)),
            _way(events, lambda: asyncio.run(registry.execute(call))),
        }

    assert ways(direct, CALLS["valid"]) == {"admitted"}
    assert ways(full, CALLS["valid"]) == {"full"}
    # Arguments the tool's model cannot vouch for in one step are snapshotted and parsed.
    for name in ("invalid arguments", "valid, nested extra", "valid, already frozen"):
        assert ways(direct, CALLS[name]) == {"parsed"}
    # Anything that must run makes the call take the staged runner.
    source = CancelSource()
    for call in (
        CALLS["non-JSON arguments"],
        CALLS["unknown tool"],
        attrs.evolve(CALLS["valid"], signal=source.signal),
    ):
        assert ways(direct, call) == {"full"}


def test_a_direct_body_makes_its_execution_once_on_request() -> None:
    seen: list[ToolExecution] = []

    def body(args: Any, ctx: ToolRunContext) -> int:
        seen.append(ctx.execution)
        seen.append(ctx.execution)
        return 1

    direct, _ = _registries(body)
    direct.execute_sync(CALLS["valid"])
    first, second = seen
    assert first is second
    assert (first.call_id, first.root_call_id, first.arguments) == ("c1", "root", {"n": 1})


@pytest.mark.parametrize("way", ["direct", "full"])
def test_a_call_resolves_its_tool_when_it_starts_not_when_it_is_made(way: str) -> None:
    # Both ways resolve late: a tool removed or replaced between execute() and the first
    # await is the one the call finds.
    registry = ToolRegistry()
    if way == "full":
        registry.add_plugin(Bystander())

    def register(value: str) -> Callable[[], None]:
        return registry.register(
            define_tool(
                name="t",
                description="A test tool.",
                parameters={"n": {"type": "integer"}},
                execute=lambda args, ctx: value,
            )
        )

    async def replaced() -> ToolExecutionResult:
        dispose = register("old")
        pending = registry.execute(CALLS["valid"])
        dispose()
        register("new")
        return await pending

    async def removed() -> ToolExecutionResult:
        dispose = registry.register(
            define_tool(name="gone", description="d", parameters={}, execute=lambda a, c: 1)
        )
        pending = registry.execute(ToolExecutionInput("c9", "gone", {}))
        dispose()
        return await pending

    assert asyncio.run(replaced()).value == "new"  # type: ignore[union-attr]
    assert asyncio.run(removed()).code == "UNKNOWN_TOOL"  # type: ignore[union-attr]
