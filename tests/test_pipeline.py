"""The call as a whole: input materialization, the execution token, sync and async driving,
where bodies run, and ``execution_mode``.

Behaviors B045-B056 and B162-B166 of ``/work/shared/spec/behaviors.md``; the stages are
covered in ``test_pipeline_policy.py``, ``test_pipeline_dispatch.py`` and
``test_cancellation.py``.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from dsh_tools._cancel import CancelSignal
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._json import FrozenDict
from dsh_tools._models import (
    ApprovalRequest,
    Ask,
    ExecutionToken,
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.hookspecs import hookimpl


def tool(
    body: Callable[[Any, ToolRunContext], Any] | None = None,
    *,
    name: str = "echo",
    **options: Any,
) -> ToolDefinition[Any]:
    return define_tool(
        name=name,
        description="A test tool.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body or (lambda args, ctx: args["text"]),
        **options,
    )


def call(name: str = "echo", **fields: Any) -> ToolExecutionInput:
    fields.setdefault("arguments", {"text": "hi"})
    fields.setdefault("call_id", "call-1")
    return ToolExecutionInput(name=name, **fields)


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


class EveryStage:
    """Records the execution each stage (and the body, finalizer) was handed."""

    def __init__(self) -> None:
        self.seen: dict[str, ToolExecution] = {}

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
        self.seen["pre"] = execution

    @hookimpl
    def dsh_tools_guard(self, execution: ToolExecution) -> None:
        self.seen["guard"] = execution

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> Any:
        self.seen["wrapper"] = execution
        return (yield)

    @hookimpl
    def dsh_tools_post_execute(self, execution: ToolExecution) -> None:
        self.seen["post"] = execution

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution) -> None:
        self.seen["result"] = execution

    def body(self, args: Any, ctx: ToolRunContext) -> str:
        self.seen["body"] = ctx.execution
        return "ok"

    def finalize(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        self.seen["finalize"] = execution


def every_stage_registry() -> tuple[ToolRegistry, EveryStage]:
    stages = EveryStage()
    registry = ToolRegistry()
    registry.register(tool(stages.body, finalize_content=stages.finalize))
    registry.add_plugin(stages)
    return registry, stages


# ------------------------------------------------------------------ input


def test_arguments_are_snapshotted_and_the_callers_object_is_untouched() -> None:
    # B047
    arguments: dict[str, Any] = {"text": "hi", "tags": ["a"]}
    received: list[Any] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="echo",
            description="",
            parameters={"text": {"type": "string"}, "tags": {"type": "array"}},
            execute=lambda args, ctx: received.append(args) or "ok",
        )
    )
    registry.execute_sync(call(arguments=arguments))
    arguments["tags"].append("b")
    arguments["text"] = "changed"
    [args] = received
    assert args == {"text": "hi", "tags": ["a"]}
    assert isinstance(args, FrozenDict)
    with pytest.raises(TypeError):
        args["text"] = "x"
    assert arguments == {"text": "changed", "tags": ["a", "b"]}


def _cycle() -> dict[str, Any]:
    data: dict[str, Any] = {}
    data["self"] = data
    return data


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"text": {1, 2}}, '"arguments.text" is a set'),
        ({"text": float("nan")}, '"arguments.text"'),
        ({"text": float("inf")}, '"arguments.text"'),
        ({"text": b"bytes"}, '"arguments.text"'),
        ({"text": object()}, '"arguments.text"'),
        ({"text": datetime.date(2024, 1, 1)}, '"arguments.text"'),
        ({1: "x"}, '"arguments'),
        ({"nested": [1, {"deep": print}]}, '"arguments.nested[1].deep"'),
        (_cycle(), '"arguments.self'),
        ([1, 2], '"arguments"'),
        ("text", '"arguments"'),
    ],
)
def test_non_json_arguments_fail_before_any_policy(arguments: Any, where: str) -> None:
    # B048, B049: INVALID_JSON naming the path; nothing but finalize and observers runs.
    log: list[str] = []

    class Everything:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            log.append("pre")

        @hookimpl
        def dsh_tools_guard(self) -> None:
            log.append("guard")

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self) -> Any:
            log.append("wrapper")
            return (yield)

        @hookimpl
        def dsh_tools_post_execute(self) -> None:
            log.append("post")

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            log.append(f"result arguments={execution.arguments}")

    registry = ToolRegistry()
    registry.register(
        tool(
            lambda args, ctx: log.append("body"),
            finalize_content=lambda execution, result: log.append("finalize"),  # type: ignore[func-returns-value]
        )
    )
    registry.add_plugin(Everything())
    result = failure(registry.execute_sync(call(arguments=arguments)))
    assert result.code == "INVALID_JSON"
    assert result.error.message.startswith(
        "tool execution arguments must be losslessly JSON-serializable: " + where
    )
    assert result.content == [{"type": "text", "text": f"Error: {result.error.message}"}]
    assert log == ["finalize", "result arguments=None"]


def test_none_arguments_are_not_a_json_object() -> None:
    # B048/B049 + ToolExecution's contract: arguments is None only after a rejection.
    seen: list[Any] = []
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="raw",
            description="",
            parameters={"type": "object"},
            execute=lambda args, ctx: seen.append(args) or "ran",
        )
    )
    result = failure(registry.execute_sync(call("raw", arguments=None)))
    assert result.code == "INVALID_JSON"
    assert seen == []


def test_non_json_arguments_win_over_an_unknown_name() -> None:
    # B051
    result = failure(ToolRegistry().execute_sync(call("ghost", arguments={"x": {1}})))
    assert result.code == "INVALID_JSON"


def test_tuples_are_json_arrays_in_arguments() -> None:
    # design.md §1.8: lists and tuples are arrays; only tuples-as-keys are rejected.
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="tags",
            description="",
            parameters={"tags": {"type": "array", "items": {"type": "string"}}},
            execute=lambda args, ctx: list(args["tags"]),
        )
    )
    assert registry.execute_sync(call("tags", arguments={"tags": ("a", "b")})).value == ["a", "b"]


def test_one_fresh_token_is_shared_by_every_phase() -> None:
    # B052, B055: the same execution object (hence token) in every hook and the body.
    registry, stages = every_stage_registry()
    registry.execute_sync(call())
    first = dict(stages.seen)
    assert set(first) == {"pre", "guard", "wrapper", "body", "post", "finalize", "result"}
    execution = first["pre"]
    assert all(seen is execution for seen in first.values())
    assert isinstance(execution.token, ExecutionToken)
    registry.execute_sync(call())
    assert stages.seen["pre"].token is not execution.token


def test_callers_cannot_choose_the_token() -> None:
    # B052
    with pytest.raises(TypeError):
        ToolExecutionInput(call_id="c", name="echo", token=ExecutionToken())  # type: ignore[call-arg]


def test_parent_and_agent_pass_through_to_every_phase() -> None:
    # B053: not validated, passed unchanged.
    registry, stages = every_stage_registry()
    parent = ExecutionToken()
    registry.scope("a").execute_sync(call(parent=parent))
    assert {seen.parent for seen in stages.seen.values()} == {parent}
    assert {seen.agent for seen in stages.seen.values()} == {"a"}


def test_root_call_id_defaults_to_the_call_id() -> None:
    # B054
    registry, stages = every_stage_registry()
    registry.execute_sync(call(call_id="c-2"))
    assert stages.seen["result"].root_call_id == "c-2"
    registry.execute_sync(call(call_id="c-3", root_call_id="root"))
    assert (stages.seen["result"].call_id, stages.seen["result"].root_call_id) == ("c-3", "root")


def test_execution_is_read_only_in_every_phase() -> None:
    # B055
    registry, stages = every_stage_registry()
    registry.execute_sync(call())
    import attrs

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stages.seen["body"].arguments = None  # type: ignore[misc]


def test_body_context_offers_defer_context_and_conclude_turn() -> None:
    # B056
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("later")
        ctx.conclude_turn()
        return "ok"

    registry = ToolRegistry()
    registry.register(tool(body))
    result = registry.execute_sync(call())
    assert result.concludes_turn is True  # type: ignore[union-attr]
    assert [c.content for c in result.additional_contexts] == [[{"type": "text", "text": "later"}]]


# ------------------------------------------------------------------ sync and async driving


def test_execute_sync_runs_a_synchronous_call_without_an_event_loop() -> None:
    loops: list[str] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            loops.append("no loop")
        else:
            loops.append("loop")
        return "ok"

    class SyncPolicy:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            return None

        @hookimpl
        def dsh_tools_result(self) -> None:
            return None

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(SyncPolicy())
    assert registry.execute_sync(call()).value == "ok"
    assert loops == ["no loop"]


def test_execute_sync_falls_back_to_one_event_loop_when_a_stage_is_async() -> None:
    loops: list[Any] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        loops.append(asyncio.get_running_loop())
        return "ok"

    class AsyncObserver:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            loops.append(asyncio.get_running_loop())

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(AsyncObserver())
    assert registry.execute_sync(call()).value == "ok"
    assert len(loops) == 2
    assert loops[0] is loops[1]


def test_execute_sync_runs_an_async_body() -> None:
    async def body(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0)
        return "awaited"

    registry = ToolRegistry()
    registry.register(tool(body))
    assert registry.execute_sync(call()).value == "awaited"


@pytest.mark.anyio
async def test_execute_sync_refuses_to_run_inside_an_event_loop(anyio_backend: str) -> None:
    registry = ToolRegistry()
    registry.register(tool())
    with pytest.raises(RuntimeError, match=f"running {anyio_backend} event loop"):
        registry.execute_sync(call())


@pytest.mark.parametrize("running", [False, True])
def test_execute_sync_asks_an_older_trio_whether_it_runs(
    monkeypatch: pytest.MonkeyPatch, running: bool
) -> None:
    # trio before 0.23 has no lowlevel.in_trio_run: the current token answers instead.
    def current_trio_token() -> object:
        if not running:
            raise RuntimeError("must be called from async context")
        return object()

    old_trio = types.SimpleNamespace(
        lowlevel=types.SimpleNamespace(current_trio_token=current_trio_token)
    )
    monkeypatch.setitem(sys.modules, "trio", old_trio)
    registry = ToolRegistry()
    registry.register(tool())
    if running:
        with pytest.raises(RuntimeError, match="running trio event loop"):
            registry.execute_sync(call())
    else:
        assert not registry.execute_sync(call()).is_error


@pytest.mark.anyio
async def test_await_runs_a_def_body_in_a_worker_thread_unless_it_never_blocks() -> None:
    threads: dict[str, int] = {}

    def body(args: Any, ctx: ToolRunContext) -> str:
        threads[ctx.execution.name] = threading.get_ident()
        return ctx.execution.name

    registry = ToolRegistry()
    registry.register(tool(body, name="default"))
    registry.register(tool(body, name="blocking", blocking=True))
    registry.register(tool(body, name="never-blocks", blocking=False))
    for name in ("default", "blocking", "never-blocks"):
        assert (await registry.execute(call(name))).value == name
    assert threads["never-blocks"] == threading.get_ident()
    assert threads["default"] != threading.get_ident()
    assert threads["blocking"] != threading.get_ident()


@pytest.mark.parametrize("needs_loop", [False, True])
def test_execute_sync_runs_a_def_body_on_the_calling_thread(needs_loop: bool) -> None:
    threads: list[int] = []

    class AsyncObserver:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            await anyio.sleep(0)

    def body(args: Any, ctx: ToolRunContext) -> str:
        threads.append(threading.get_ident())
        return "ran"

    registry = ToolRegistry()
    registry.register(tool(body, blocking=True))
    if needs_loop:  # the call runs on an event loop of its own; the body still inline
        registry.add_plugin(AsyncObserver())
    assert registry.execute_sync(call()).value == "ran"
    assert threads == [threading.get_ident()]


@pytest.mark.parametrize("timeout_ms", [None, 5000])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_def_body_sees_the_caller_s_context_variables_wherever_it_runs(
    driver: str, timeout_ms: float | None
) -> None:
    import contextvars

    request: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")
    seen: list[tuple[str, bool]] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append((request.get(), threading.current_thread() is threading.main_thread()))
        return "ok"

    registry = ToolRegistry()
    registry.register(tool(body, timeout_ms=timeout_ms))

    async def on_loop() -> None:
        request.set("async")
        assert (await registry.execute(call())).value == "ok"

    if driver == "sync":
        request.set("sync")
        assert registry.execute_sync(call()).value == "ok"
        request.set("none")
    else:
        anyio.run(on_loop)
    inline = driver == "sync" and timeout_ms is None
    assert seen == [(driver, inline)]


@pytest.mark.anyio
async def test_async_and_sync_stages_mix_in_one_call() -> None:
    # B082 with async listeners everywhere they are allowed.
    log: list[str] = []

    class Mixed:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            await anyio.sleep(0)
            log.append("pre")

        @hookimpl
        async def dsh_tools_post_execute(self) -> None:
            await anyio.sleep(0)
            log.append("post")

        @hookimpl
        async def dsh_tools_result(self) -> None:
            await anyio.sleep(0)
            log.append("result")

    async def body(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0)
        log.append("body")
        return "ok"

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(Mixed())
    assert (await registry.execute(call())).value == "ok"
    assert log == ["pre", "body", "post", "result"]


def test_body_without_a_signal_sees_one_that_never_fires() -> None:
    # B146 (Python: the signal is optional; bodies always get one).
    seen: list[CancelSignal] = []
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: seen.append(ctx.signal) or "ok"))
    registry.execute_sync(call())
    [signal] = seen
    assert not signal.cancelled
    assert signal.add_callback(lambda: None)() is None


# ------------------------------------------------------------------ execution_mode


def test_parallel_only_when_the_classifier_returns_exactly_true() -> None:
    # B162, B163
    registry = ToolRegistry()
    registry.register(tool(name="read", is_concurrency_safe=lambda args: args["text"] == "r"))
    registry.register(tool(name="truthy", is_concurrency_safe=lambda args: "yes"))
    registry.register(tool(name="plain"))

    def broken(args: Any) -> bool:
        raise RuntimeError("classifier broke")

    registry.register(tool(name="broken", is_concurrency_safe=broken))
    assert registry.execution_mode(call("read", arguments={"text": "r"})) == "parallel"
    assert registry.execution_mode(call("read", arguments={"text": "w"})) == "exclusive"
    assert registry.execution_mode(call("truthy")) == "exclusive"
    assert registry.execution_mode(call("plain")) == "exclusive"
    assert registry.execution_mode(call("broken")) == "exclusive"
    assert registry.execution_mode(call("ghost")) == "exclusive"
    assert registry.execution_mode(call("read", arguments={"text": 1})) == "exclusive"


def test_raw_classifier_receives_the_arguments_unvalidated() -> None:
    # B164
    seen: list[Any] = []
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="raw",
            description="",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            execute=lambda args, ctx: "ok",
            is_concurrency_safe=lambda args: seen.append(args) or True,
        )
    )
    assert registry.execution_mode(call("raw", arguments={"anything": 1})) == "parallel"
    assert seen == [{"anything": 1}]


def test_concurrency_classifier_never_appears_in_schemas() -> None:
    # B165
    registry = ToolRegistry()
    registry.register(tool(is_concurrency_safe=lambda args: True))
    [schema] = registry.schemas()
    assert "concurrency" not in repr(schema).lower()


def test_execution_mode_is_looked_up_through_the_callers_view() -> None:
    # B166: shadowing and restrictions of the agent's scope.
    registry = ToolRegistry()
    registry.register(tool(is_concurrency_safe=lambda args: True))
    registry.register(tool(name="other", is_concurrency_safe=lambda args: True))
    registry.scope("a").register(tool())
    registry.scope("b").restrict(deny=["other"])
    assert registry.execution_mode(call()) == "parallel"
    assert registry.scope("a").execution_mode(call()) == "exclusive"
    assert registry.scope("b").execution_mode(call("other")) == "exclusive"
    assert registry.scope("b").execution_mode(call()) == "parallel"


def test_execute_sync_awaits_an_object_with_async_call() -> None:
    class Body:
        async def __call__(self, args: Any, ctx: ToolRunContext) -> str:
            await anyio.sleep(0)
            return "async __call__"

    registry = ToolRegistry()
    registry.register(tool(Body()))
    assert registry.execute_sync(call()).value == "async __call__"


def test_execute_sync_awaits_awaitables_returned_by_plain_callables() -> None:
    # Body, pre-execute, approval and observers may be plain callables returning awaitables.
    log: list[str] = []

    async def later(value: Any) -> Any:
        await anyio.sleep(0)
        return value

    class Deferred:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Any:
            return later(Ask())

        @hookimpl
        def dsh_tools_result(self, result: ToolExecutionResult) -> Any:
            log.append(f"observed {result.value}")  # type: ignore[union-attr]
            return later(None)

    class Service:
        def request(self, request: ApprovalRequest) -> Any:
            return later("allowed-once")

    registry = ToolRegistry(approval=Service())
    registry.register(tool(lambda args, ctx: later("awaited")))
    registry.add_plugin(Deferred())
    assert registry.scope("a").execute_sync(call()).value == "awaited"
    assert log == ["observed awaited"]


# ------------------------------------------------------------------ the tool argument


def test_every_hook_gets_the_tool_the_call_entered_with() -> None:
    seen: list[tuple[str, object]] = []

    class Reader:
        @hookimpl
        def dsh_tools_pre_execute(self, tool: ToolDefinition[Any] | None) -> None:
            seen.append(("pre", tool))

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution, tool: Any) -> None:
            seen.append(("guard", tool))

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, tool: Any) -> Any:
            seen.append(("execute", tool))
            return (yield)

        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult, tool: Any) -> None:
            seen.append(("post", tool))

        @hookimpl
        def dsh_tools_result(self, tool: Any, execution: ToolExecution) -> None:
            seen.append(("result", tool))

    registry = ToolRegistry()
    definition = tool()
    registry.register(definition)
    scoped = tool(lambda args, ctx: "scoped")
    registry.scope("agent").register(scoped)
    registry.add_plugin(Reader())
    stages = ["pre", "guard", "execute", "post", "result"]

    registry.execute_sync(call())
    assert seen == [(stage, definition) for stage in stages]
    seen.clear()
    registry.scope("agent").execute_sync(call())
    assert seen == [(stage, scoped) for stage in stages]
    seen.clear()
    registry.execute_sync(call("missing"))
    assert seen == [(stage, None) for stage in stages]


def test_unreadable_arguments_take_the_final_path_and_are_observed() -> None:
    # Issue 16/18: a call whose arguments could not be read is still an event: the
    # finalizer and every observer see it, no policy is asked, the problem is named.
    from dsh_tools import UnreadableArguments

    log: list[str] = []

    class Everywhere:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            log.append("pre")

        @hookimpl
        def dsh_tools_guard(self) -> None:
            log.append("guard")

        @hookimpl
        def dsh_tools_post_execute(self) -> None:
            log.append("post")

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
            log.append(f"result {execution.call_id} {execution.arguments}")

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        log.append("finalize")

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="t",
            description="d",
            parameters={},
            execute=lambda a, c: log.append("body"),
            finalize_content=finalize,
        )
    )
    registry.add_plugin(Everywhere())
    arguments = UnreadableArguments('{"path": "a', "is not valid JSON text: Unterminated string")

    result = registry.execute_sync(ToolExecutionInput("c1", "t", arguments))

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "INVALID_JSON"
    assert result.error.message == (
        'tool "t" was called with unreadable arguments: is not valid JSON text: Unterminated string'
    )
    assert log == ["finalize", "result c1 None"]
