"""Pipeline stages 3-5: execute wrappers and the body, the output contract, post-execute,
``finalize_content``, result observers, error normalization and deferred contexts.

Behaviors B082-B145 of ``/work/shared/spec/behaviors.md`` (Code Mode items skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from dsh_tools._cancel import CancelSignal, CancelSource
from dsh_tools._content import ContextMessage
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    Accept,
    Block,
    Deny,
    ExecutionToken,
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
    failure_result,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ToolArgsError, ToolError, ToolNotFoundError
from dsh_tools.hookspecs import hookimpl

Body = Callable[[Any, ToolRunContext], Any]


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def context(id: str) -> ContextMessage:
    return ContextMessage(id=id, content=id, source="test")


def tool(
    body: Body | None = None,
    *,
    name: str = "echo",
    output: ToolOutput | None = None,
    **options: Any,
) -> ToolDefinition[Any]:
    return define_tool(
        name=name,
        description="A test tool.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body or (lambda args, ctx: args["text"]),
        output=output,
        **options,
    )


def call(name: str = "echo", **fields: Any) -> ToolExecutionInput:
    fields.setdefault("arguments", {"text": "hi"})
    return ToolExecutionInput(call_id="call-1", name=name, **fields)


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


def success(result: ToolExecutionResult) -> ToolExecutionSuccess:
    assert isinstance(result, ToolExecutionSuccess), result
    return result


def string_output(log: list[str] | None = None, **options: Any) -> ToolOutput:
    def render(args: Any, value: Any) -> str:
        if log is not None:
            log.append("render")
        return str(value)

    return ToolOutput(schema={"type": "string"}, render=render, **options)


class Observed:
    """Logs post-execute and result hooks; keeps what the result observers saw."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.post_seen: list[ToolExecutionResult] = []
        self.results: list[ToolExecutionResult] = []
        self.executions: list[ToolExecution] = []

    @hookimpl
    def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
        self.log.append("post")
        self.post_seen.append(result)

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        self.log.append("result")
        self.executions.append(execution)
        self.results.append(result)


def wrapper(
    around: Callable[[Any, Any], Any],
) -> object:
    """A plugin whose execute wrapper runs ``around(dispatch, signal)``."""

    class Wrapper:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            dispatch = yield

            async def wrapped(signal: CancelSignal | None = None) -> Any:
                return await around(dispatch, signal)

            return wrapped

    return Wrapper()


# ------------------------------------------------------------------ wrappers and body


def test_allowed_call_runs_pre_wrapper_body_wrapper_post_result_in_order() -> None:
    # B082
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body") or "ok"))

    class Pre:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            log.append("pre")

    async def around(dispatch: Any, signal: Any) -> Any:
        log.append("before")
        result = await dispatch(signal)
        log.append("after")
        return result

    registry.add_plugin(Pre())
    registry.add_plugin(wrapper(around))
    registry.add_plugin(Observed(log))
    assert registry.execute_sync(call()).value == "ok"
    assert log == ["pre", "before", "body", "after", "post", "result"]


def test_inner_dispatch_returns_a_failure_for_a_raising_body() -> None:
    # B083: the wrapper sees a normalized failure, never the exception.
    seen: list[ToolExecutionResult] = []

    def boom(args: Any, ctx: Any) -> str:
        raise ToolError("kaboom", code="BOOM")

    async def around(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(signal)
        seen.append(result)
        return result

    registry = ToolRegistry()
    registry.register(tool(boom))
    registry.add_plugin(wrapper(around))
    result = failure(registry.execute_sync(call()))
    assert seen == [result]
    assert result.error.message == "kaboom"
    assert (result.error.info.name, result.code) == ("ToolError", "BOOM")


def test_results_from_dispatch_are_deep_frozen() -> None:
    # B084
    problems: list[type[BaseException]] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(signal)
        for mutate in (
            lambda: setattr(result, "value", "changed"),
            lambda: setattr(result, "content", []),
            lambda: result.value.__setitem__("k", 1),
            lambda: result.content[0].__setitem__("text", "changed"),
        ):
            try:
                mutate()
            except (TypeError, attrs.exceptions.FrozenInstanceError) as error:
                problems.append(type(error))
        return result

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: {"k": 0}))
    registry.add_plugin(wrapper(around))
    result = success(registry.execute_sync(call()))
    assert len(problems) == 4
    assert result.value == {"k": 0}


def test_wrapper_cannot_change_the_execution() -> None:
    # B085: identity fields are read-only; trying fails the wrapper (POLICY_ERROR).
    ran: list[str] = []

    class Rename:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            execution.name = "other"  # type: ignore[misc]
            return (yield)

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: ran.append("echo") or "x"))
    registry.add_plugin(Rename())
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert ran == []


def test_dispatch_refuses_anything_but_a_signal() -> None:
    # B085: setting the signal to a non-signal is refused.
    ran: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch("not a signal")

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: ran.append("body") or "x"))
    registry.add_plugin(wrapper(around))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "CancelSignal" in result.error.message
    assert ran == []


@pytest.mark.anyio
async def test_body_sees_a_signal_fused_from_caller_and_wrapper_replacement() -> None:
    # B086: distinct from both; fires when the replacement fires; the caller's stays.
    caller, replacement = CancelSource(), CancelSource()
    seen: list[tuple[CancelSignal, bool]] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        replacement.cancel("wrapper")
        seen.append((ctx.signal, ctx.signal.cancelled))
        return "x"

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(replacement.signal)

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    result = failure(await registry.execute(call(signal=caller.signal)))
    [(signal, fired)] = seen
    assert signal is not caller.signal
    assert signal is not replacement.signal
    assert fired
    assert signal.reason == "wrapper"
    assert not caller.cancelled
    # B160: the fused signal was aborted when the body returned -> ABORTED.
    assert result.code == "ABORTED"


@pytest.mark.anyio
async def test_body_sees_the_callers_signal_itself_without_a_replacement() -> None:
    # B086
    caller = CancelSource()
    seen: list[CancelSignal] = []
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: seen.append(ctx.signal) or "x"))
    await registry.execute(call(signal=caller.signal))
    assert seen == [caller.signal]


def test_wrapper_short_circuit_skips_the_body() -> None:
    # B088, B089: authored success is re-rendered by the output contract; authored
    # content ignored, wrapper contexts kept, concludes_turn only from the body.
    log: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        return ToolExecutionSuccess(
            value="short-circuited",
            content=["ignored authored content"],
            additional_contexts=[context("wrapper")],
            concludes_turn=True,
        )

    registry = ToolRegistry()
    registry.register(
        tool(
            lambda args, ctx: log.append("body"),
            output=string_output(presentation_meta=lambda args, value: {"len": len(value)}),
        )
    )
    registry.add_plugin(wrapper(around))
    result = success(registry.execute_sync(call()))
    assert log == []
    assert result.value == "short-circuited"
    assert result.content == [text("short-circuited")]
    assert result.meta == {"len": 15}
    assert result.additional_contexts == (context("wrapper"),)
    assert result.concludes_turn is False


def test_wrapper_authored_failure_is_kept_and_goes_through_post() -> None:
    # B090
    log: list[str] = []
    authored = ToolExecutionFailure(
        error=failure_result("rate limited", "RATE_LIMIT").error,
        content=["slow down"],
        meta={"retry_after": 3},
    )

    async def around(dispatch: Any, signal: Any) -> Any:
        return authored

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    observed = Observed(log)
    registry.add_plugin(observed)
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("slow down")]
    assert result.meta == {"retry_after": 3}
    assert result.code == "RATE_LIMIT"
    assert observed.post_seen == [authored]
    assert log == ["post", "result"]


@pytest.mark.parametrize(
    ("code", "concludes"),
    [("RATE_LIMIT", False), ("TOOL_ERROR", False), ("APPROVAL_PENDING", True)],
)
def test_an_authored_failure_ends_the_turn_only_while_it_waits_for_a_person(
    code: str, concludes: bool
) -> None:
    # B090: a failure ends the model's turn only with APPROVAL_PENDING, whoever made it.
    async def around(dispatch: Any, signal: Any) -> Any:
        failed = failure_result("not now", code)
        return attrs.evolve(failed, concludes_turn=True)

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    observed = Observed([])
    registry.add_plugin(observed)
    result = failure(registry.execute_sync(call()))
    assert (result.code, result.concludes_turn) == (code, concludes)
    assert observed.results == [result]


def test_result_cached_from_another_dispatch_is_revalidated() -> None:
    # B091, B093: a string value reused for an object-output tool is invalid output,
    # the body never runs and post-execute is skipped.
    log: list[str] = []
    cache: list[ToolExecutionResult] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        if cache:
            return cache[0]
        cache.append(await dispatch(signal))
        return cache[0]

    registry = ToolRegistry()
    registry.register(tool(name="text"))
    registry.register(
        tool(
            lambda args, ctx: log.append("object body") or {"a": 1},
            name="object",
            output=ToolOutput(
                schema={"type": "object", "properties": {"a": {"type": "integer"}}},
                render=lambda args, value: "object",
            ),
        )
    )
    registry.add_plugin(wrapper(around))
    observed = Observed(log)
    registry.add_plugin(observed)
    assert registry.execute_sync(call("text")).value == "hi"
    log.clear()
    result = failure(registry.execute_sync(call("object")))
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert (
        result.error.message == 'tool "object" returned invalid output: "value" must be an object'
    )
    assert log == ["result"]


def test_result_of_this_dispatch_passes_through_untouched() -> None:
    # B091: the body's own result is not rendered again; retries run the body twice.
    log: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        await dispatch(signal)
        return await dispatch(signal)

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body") or "x", output=string_output(log)))
    registry.add_plugin(wrapper(around))
    assert registry.execute_sync(call()).value == "x"
    assert log == ["body", "render", "body", "render"]


def test_raising_wrapper_fails_on_the_final_path_and_loses_body_contexts() -> None:
    # B092, B142
    log: list[str] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("deferred")
        return "x"

    async def around(dispatch: Any, signal: Any) -> Any:
        await dispatch(signal)
        raise RuntimeError("wrapper broke")

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "wrapper broke" in result.error.message
    assert result.additional_contexts == ()
    assert log == ["result"]


def test_authored_success_for_a_tool_unregistered_meanwhile_is_unknown() -> None:
    # B093: final path.
    log: list[str] = []
    registry = ToolRegistry()
    dispose = registry.register(tool())

    async def around(dispatch: Any, signal: Any) -> Any:
        dispose()
        return ToolExecutionSuccess(value="x", content=["x"])

    registry.add_plugin(wrapper(around))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call()))
    assert (result.code, result.error.message) == ("UNKNOWN_TOOL", 'unknown tool "echo"')
    assert log == ["result"]


def test_authored_success_with_invalid_value_is_invalid_output_on_the_final_path() -> None:
    # B093
    log: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        return ToolExecutionSuccess(value=42, content=["42"])

    registry = ToolRegistry()
    registry.register(tool(output=string_output()))
    registry.add_plugin(wrapper(around))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert log == ["result"]


def test_wrapper_returning_a_non_result_fails_closed() -> None:
    # B093 (Python port): anything but a result record is a POLICY_ERROR.
    async def around(dispatch: Any, signal: Any) -> Any:
        return "just text"

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "str" in result.error.message


def test_tool_resolved_when_the_body_is_about_to_run() -> None:
    # B095: unregistered inside a wrapper -> UNKNOWN_TOOL on the post path.
    log: list[str] = []
    registry = ToolRegistry()
    dispose = registry.register(tool(lambda args, ctx: log.append("body")))

    async def around(dispatch: Any, signal: Any) -> Any:
        dispose()
        return await dispatch(signal)

    registry.add_plugin(wrapper(around))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "UNKNOWN_TOOL"
    assert log == ["post", "result"]


def test_scoped_wrapper_runs_only_for_its_agents_calls() -> None:
    # B096
    agents: list[str | None] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            agents.append(execution.agent)
            return (yield)

    registry = ToolRegistry()
    registry.register(tool())
    registry.scope("a").add_plugin(Wrapper())
    registry.execute_sync(call())
    registry.scope("b").execute_sync(call())
    registry.scope("a").execute_sync(call())
    registry.scope("a").scope("x").execute_sync(call())
    assert agents == ["a", "a/x"]


def chained(label: str, log: list[str], setup: Callable[[], Any] | None = None) -> object:
    """A wrapper plugin that logs around the yield and around the dispatch it returns."""

    class Chained:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            log.append(f"{label} start")
            if setup is not None:
                setup()
            try:
                dispatch = yield
            except Exception as error:
                log.append(f"{label} saw {error}")
                raise

            async def wrapped(signal: CancelSignal | None = None) -> Any:
                log.append(f"{label} dispatch")
                return await dispatch(signal)

            return wrapped

    return Chained()


def test_wrappers_nest_with_the_last_registered_outermost() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body") or "ok"))
    registry.add_plugin(chained("inner", log))
    registry.add_plugin(chained("outer", log))
    assert success(registry.execute_sync(call())).value == "ok"
    assert log == ["outer start", "inner start", "outer dispatch", "inner dispatch", "body"]


def test_a_wrapper_raising_before_its_yield_is_thrown_into_the_outer_ones() -> None:
    log: list[str] = []

    def broken() -> None:
        raise RuntimeError("inner broke")

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(chained("inner", log, broken))
    registry.add_plugin(chained("outer", log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "inner broke" in result.error.message
    assert log == ["outer start", "inner start", "outer saw inner broke"]


def test_a_wrapper_that_never_yields_or_yields_twice_fails_closed() -> None:
    class NoYield:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            return None
            yield  # a generator that returns at once

    class TwoYields:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            dispatch = yield
            yield
            return dispatch

    ran: list[str] = []
    for plugin, problem in ((NoYield(), "did not yield"), (TwoYields(), "yielded twice")):
        registry = ToolRegistry()
        registry.register(tool(lambda args, ctx: ran.append("body")))
        registry.add_plugin(plugin)
        result = failure(registry.execute_sync(call()))
        assert result.code == "POLICY_ERROR"
        assert problem in result.error.message
    assert ran == []


def test_an_outer_wrapper_may_recover_from_an_inner_wrapper_error() -> None:
    class Broken:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            yield
            raise RuntimeError("inner broke after its yield")

    class Recovering:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            try:
                return (yield)
            except RuntimeError:

                async def fallback(signal: CancelSignal | None = None) -> Any:
                    return ToolExecutionSuccess(value="recovered", content="recovered")

                return fallback

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(Broken())
    registry.add_plugin(Recovering())
    assert success(registry.execute_sync(call())).value == "recovered"


def test_invalid_arguments_never_reach_the_body_and_still_pass_post() -> None:
    # B117 + E1: INVALID_ARGS lists every violation.
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call(arguments={"text": 1, "extra": True})))
    assert (result.error.info.name, result.code) == ("ToolArgsError", "INVALID_ARGS")
    assert result.error.message.startswith("invalid arguments: ")
    assert '"text" must be a string' in result.error.message
    assert log == ["post", "result"]


# ------------------------------------------------------------------ output contract


def test_non_json_value_is_invalid_tool_output() -> None:
    # B097 (also for tools without an output declaration).
    for output in (None, string_output()):
        registry = ToolRegistry()
        registry.register(tool(lambda args, ctx: {1, 2}, output=output))
        result = failure(registry.execute_sync(call()))
        assert (result.error.info.name, result.code) == ("ToolOutputError", "INVALID_TOOL_OUTPUT")
        assert result.error.message.startswith(
            'tool "echo" returned invalid output: value is not lossless JSON'
        )


def test_value_is_validated_against_the_output_schema() -> None:
    # B099
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: 42, name="wrong-output", output=string_output()))
    result = failure(registry.execute_sync(call("wrong-output")))
    assert (
        result.error.message
        == 'tool "wrong-output" returned invalid output: "value" must be a string'
    )
    assert result.content == [text(f"Error: {result.error.message}")]


def test_output_violations_are_joined_with_semicolons() -> None:
    # B099
    output = ToolOutput(
        schema={
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        render=lambda args, value: "x",
    )
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: {}, output=output))
    message = failure(registry.execute_sync(call())).error.message
    assert message == (
        'tool "echo" returned invalid output: missing required property "value.a"; '
        'missing required property "value.b"'
    )


def test_raising_render_is_invalid_output_without_value() -> None:
    # B100
    def render(args: Any, value: Any) -> str:
        raise ValueError("no template")

    registry = ToolRegistry()
    registry.register(tool(output=ToolOutput(schema={"type": "string"}, render=render)))
    result = failure(registry.execute_sync(call()))
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert (
        result.error.message
        == 'tool "echo" returned invalid output: output.render failed: no template'
    )
    assert result.value is None


def test_render_returning_non_json_is_invalid_output() -> None:
    # B100
    registry = ToolRegistry()
    registry.register(
        tool(output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [object()]))
    )
    result = failure(registry.execute_sync(call()))
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert "returned invalid output: output.render returned non-lossless JSON" in (
        result.error.message
    )


def test_render_gets_typed_arguments_and_the_frozen_value() -> None:
    # B100
    seen: list[tuple[Any, Any]] = []

    def render(args: Any, value: Any) -> str:
        seen.append((args, value))
        return f"{args['text']}={value['n']}"

    output = ToolOutput(schema={"type": "object"}, render=render)
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: {"n": 1}, output=output))
    result = success(registry.execute_sync(call()))
    assert result.content == [text("hi=1")]
    [(args, value)] = seen
    assert args == {"text": "hi"}
    with pytest.raises(TypeError):
        value["n"] = 2


def test_presentation_meta_only_for_top_level_calls() -> None:
    # B101, B104
    calls: list[Any] = []

    def meta(args: Any, value: Any) -> dict[str, Any]:
        calls.append(value)
        return {"chars": len(value)}

    registry = ToolRegistry()
    registry.register(tool(output=string_output(presentation_meta=meta)))
    top = success(registry.execute_sync(call()))
    assert top.meta == {"chars": 2}
    nested = success(registry.execute_sync(call(parent=ExecutionToken())))
    assert nested.meta is None
    assert calls == ["hi"]


def test_raising_or_non_json_presentation_meta_is_invalid_output() -> None:
    # B101
    def broken(args: Any, value: Any) -> Any:
        raise RuntimeError("meta broke")

    for projector, expected in (
        (broken, "output.presentation_meta failed: meta broke"),
        (lambda args, value: {1, 2}, "output.presentation_meta returned non-lossless JSON"),
    ):
        registry = ToolRegistry()
        registry.register(tool(output=string_output(presentation_meta=projector)))
        result = failure(registry.execute_sync(call()))
        assert result.code == "INVALID_TOOL_OUTPUT"
        assert expected in result.error.message


def test_output_failures_are_ordinary_body_failures_seen_by_wrapper_and_post() -> None:
    # B102
    seen: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(signal)
        seen.append(f"wrapper:{result.code}")
        return result

    class Post:
        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
            assert isinstance(result, ToolExecutionFailure)
            seen.append(f"post:{result.code}")

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: 1, output=string_output()))
    registry.add_plugin(wrapper(around))
    registry.add_plugin(Post())
    registry.execute_sync(call())
    assert seen == ["wrapper:INVALID_TOOL_OUTPUT", "post:INVALID_TOOL_OUTPUT"]


def test_success_shape_of_an_output_tool() -> None:
    # B104
    registry = ToolRegistry()
    registry.register(tool(output=string_output()))
    result = success(registry.execute_sync(call()))
    assert (result.value, result.content, result.meta) == ("hi", [text("hi")], None)
    assert (result.additional_contexts, result.concludes_turn) == ((), False)


def test_body_without_output_may_return_text_blocks_or_json() -> None:
    # design.md §1: str -> one text block; typed blocks -> content; JSON -> JSON text.
    from dsh_tools._content import ImageContent, TextContent

    image = ImageContent(data="aGk=", mime_type="image/png")
    for returned, content, value in (
        ("plain", [text("plain")], "plain"),
        (
            [TextContent("a"), image],
            [text("a"), {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
            None,
        ),
        ({"n": [1, 2]}, [text('{"n":[1,2]}')], {"n": [1, 2]}),
        (None, [text("null")], None),
    ):
        registry = ToolRegistry()
        registry.register(tool(lambda args, ctx, returned=returned: returned))
        result = success(registry.execute_sync(call()))
        assert result.content == content
        assert result.value == (content if value is None and returned is not None else value)


# ------------------------------------------------------------------ post-execute


def post_plugin(decide: Callable[[ToolExecutionResult], Any]) -> object:
    class Post:
        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> Any:
            return decide(result)

    return Post()


def test_post_execute_none_and_plain_accept_keep_the_result() -> None:
    # B105
    registry = ToolRegistry()
    registry.register(tool(output=string_output(presentation_meta=lambda a, v: 1)))
    registry.add_plugin(post_plugin(lambda result: None))
    registry.add_plugin(post_plugin(lambda result: Accept()))
    result = success(registry.execute_sync(call()))
    assert (result.value, result.content, result.meta) == ("hi", [text("hi")], 1)


def test_accept_content_on_success_withholds_value_and_meta_keeps_conclusion() -> None:
    # B106 kept value and meta; deviation (issue 16): they are what the content was
    # rendered from, and every other wire (MCP structuredContent, cards, logs) sends them.
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        return "hi"

    registry = ToolRegistry()
    registry.register(tool(body, output=string_output(presentation_meta=lambda a, v: "m")))
    registry.add_plugin(post_plugin(lambda result: Accept(content=["redacted"])))
    result = success(registry.execute_sync(call()))
    assert result.content == [text("redacted")]
    assert (result.value, result.meta, result.concludes_turn) == (None, None, True)


def test_accept_of_the_same_content_keeps_value_and_meta() -> None:
    registry = ToolRegistry()
    registry.register(tool(output=string_output(presentation_meta=lambda a, v: "m")))
    registry.add_plugin(post_plugin(lambda result: Accept(content=result.content)))
    result = success(registry.execute_sync(call()))
    assert result.meta == "m"
    assert result.value is not None


def test_accept_content_on_failure_keeps_the_error() -> None:
    # B106: a failure cannot become a success.
    def boom(args: Any, ctx: Any) -> str:
        raise ToolError("disk full", code="ENOSPC")

    registry = ToolRegistry()
    registry.register(tool(boom))
    registry.add_plugin(post_plugin(lambda result: Accept(content=["try a smaller file"])))
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("try a smaller file")]
    assert (result.error.message, result.code) == ("disk full", "ENOSPC")


def test_accept_value_re_renders_and_recomputes_meta() -> None:
    # B107
    registry = ToolRegistry()
    registry.register(
        tool(output=string_output(presentation_meta=lambda args, value: {"len": len(value)}))
    )
    registry.add_plugin(post_plugin(lambda result: Accept(value="replacement")))
    result = success(registry.execute_sync(call()))
    assert result.value == "replacement"
    assert result.content == [text("replacement")]
    assert result.meta == {"len": 11}
    assert result.additional_contexts == ()


def test_accept_cannot_replace_both_value_and_content() -> None:
    # B108: refused when built; a listener that tries fails the call.
    with pytest.raises(ValueError, match="cannot replace both value and content"):
        Accept(content=["x"], value=None)
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(post_plugin(lambda result: Accept(content=["x"], value="y")))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "cannot replace both value and content" in result.error.message


def test_accept_value_on_a_failure_is_refused() -> None:
    # B109
    registry = ToolRegistry()
    registry.guard(lambda execution: "no")
    registry.register(tool())
    registry.add_plugin(post_plugin(lambda result: Accept(value="sneaky")))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "cannot replace the value of a failed result" in result.error.message


def test_invalid_replacement_value_is_invalid_output() -> None:
    # B110
    registry = ToolRegistry()
    registry.register(tool(output=string_output()))
    registry.add_plugin(post_plugin(lambda result: Accept(value=1)))
    result = failure(registry.execute_sync(call()))
    assert result.code == "INVALID_TOOL_OUTPUT"
    assert '"value" must be a string' in result.error.message


def test_replacement_value_after_unregistration_is_unknown_tool() -> None:
    # B110
    registry = ToolRegistry()
    dispose = registry.register(tool())

    def decide(result: ToolExecutionResult) -> Accept:
        dispose()
        return Accept(value="replacement")

    registry.add_plugin(post_plugin(decide))
    result = failure(registry.execute_sync(call()))
    assert (result.code, result.error.message) == ("UNKNOWN_TOOL", 'unknown tool "echo"')


def test_block_returns_feedback_verbatim() -> None:
    # B111
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        return "secret"

    registry = ToolRegistry()
    registry.register(tool(body, output=string_output(presentation_meta=lambda a, v: "m")))
    registry.add_plugin(post_plugin(lambda result: Block(["the output was withheld"])))
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("the output was withheld")]
    assert result.error.message == "the output was withheld"
    assert result.code == "BLOCKED"
    assert result.meta is None
    assert (result.value, result.concludes_turn) == (None, False)


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        (["a", "b"], "a\nb"),
        ([{"type": "reasoning", "text": "r"}], "[reasoning content]"),
        (["a", {"type": "image", "data": "", "mimeType": "x"}], "a\n[image content]"),
        ([], "tool result blocked by post-execute policy"),
    ],
)
def test_block_message_is_derived_from_feedback(feedback: list[Any], message: str) -> None:
    # B112
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(post_plugin(lambda result: Block(feedback)))
    result = failure(registry.execute_sync(call()))
    assert result.error.message == message
    assert result.content == Block(feedback).feedback


def test_post_contexts_follow_body_and_wrapper_contexts() -> None:
    # B113, B140: deferred (call order), then wrapper, then post.
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(context("nested-1"))
        ctx.defer_context(context("nested-2"))
        return "x"

    async def around(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(signal)
        return attrs.evolve(
            result, additional_contexts=(*result.additional_contexts, context("wrapper"))
        )

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    registry.add_plugin(post_plugin(lambda result: Accept(additional_contexts=[context("post")])))
    result = success(registry.execute_sync(call()))
    assert [c.id for c in result.additional_contexts] == ["nested-1", "nested-2", "wrapper", "post"]


def test_block_keeps_only_its_own_contexts() -> None:
    # B114, B142
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("deferred")
        return "x"

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(
        post_plugin(lambda result: Block(["no"], additional_contexts=[context("block")]))
    )
    result = failure(registry.execute_sync(call()))
    assert result.additional_contexts == (context("block"),)


def test_raising_post_listener_fails_but_finalize_and_observers_run() -> None:
    # B115
    log: list[str] = []

    def broken(result: ToolExecutionResult) -> None:
        raise RuntimeError("post broke")

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        log.append("finalize")

    registry = ToolRegistry()
    registry.register(tool(finalize_content=finalize))
    registry.add_plugin(Observed(log))  # added first: its post listener runs last
    registry.add_plugin(post_plugin(broken))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "post broke" in result.error.message
    assert log == ["finalize", "result"]


def test_non_json_block_feedback_fails_the_call() -> None:
    # B116 (detected when the Block is built: the listener fails). Issue 16: a raising
    # policy is a policy fault, whatever it raised; its code is named in the message.
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(post_plugin(lambda result: Block([{"type": "text", "text": {1}}])))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert '"content[0].text" is a set' in result.error.message
    assert "INVALID_JSON" in result.error.message


def test_post_listeners_fold_over_earlier_replacements() -> None:
    # B105: later listeners see earlier replacements (later-added plugins run first).
    seen: list[Any] = []

    def second(result: ToolExecutionResult) -> None:
        seen.append(result.content)

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(post_plugin(second))
    registry.add_plugin(post_plugin(lambda result: Accept(content=["first"])))
    registry.execute_sync(call())
    assert seen == [[text("first")]]


def test_post_execute_runs_for_unknown_tools_but_not_for_invalid_json_arguments() -> None:
    # B117
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(Observed(log))
    registry.execute_sync(call("ghost"))
    assert log == ["post", "result"]
    log.clear()
    result = failure(registry.execute_sync(call(arguments={"text": {1}})))
    assert result.code == "INVALID_JSON"
    assert log == ["result"]


def test_scoped_post_listener_sees_only_its_agent_and_the_callers_signal() -> None:
    # B118
    caller = CancelSource()
    seen: list[tuple[str | None, object]] = []

    class Post:
        @hookimpl
        def dsh_tools_post_execute(self, execution: ToolExecution) -> None:
            seen.append((execution.agent, execution.signal))

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(CancelSource().signal)

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    registry.scope("a").add_plugin(Post())
    registry.execute_sync(call(signal=caller.signal))
    registry.scope("a").execute_sync(call(signal=caller.signal))
    assert seen == [("a", caller.signal)]


# ------------------------------------------------------------------ finalize_content


@pytest.mark.parametrize(
    "case", ["success", "body-failure", "denied", "policy-error", "invalid-json", "aborted"]
)
def test_finalize_runs_exactly_once_for_every_outcome(case: str) -> None:
    # B119
    seen: list[ToolExecutionResult] = []

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        seen.append(result)

    def body(args: Any, ctx: Any) -> str:
        if case == "body-failure":
            raise RuntimeError("no")
        return "ok"

    registry = ToolRegistry()
    registry.register(tool(body, finalize_content=finalize))
    if case == "denied":
        registry.guard(lambda execution: "no")
    if case == "policy-error":
        registry.add_plugin(post_plugin(lambda result: 1 / 0))
    arguments: Any = {"text": {1}} if case == "invalid-json" else {"text": "hi"}
    source = CancelSource()
    if case == "aborted":
        source.cancel()
    result = registry.execute_sync(call(arguments=arguments, signal=source.signal))
    assert seen == [result]
    assert result.is_error is (case != "success")


def test_finalize_replaces_the_content_and_withholds_value_and_meta() -> None:
    # B120 kept value and meta; withheld like a post-execute redaction (issue 16).
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(context("c"))
        ctx.conclude_turn()
        return "long output"

    registry = ToolRegistry()
    registry.register(
        tool(
            body,
            output=string_output(presentation_meta=lambda a, v: "m"),
            finalize_content=lambda execution, result: ["short"],
        )
    )
    result = success(registry.execute_sync(call()))
    assert result.content == [text("short")]
    assert (result.value, result.meta, result.concludes_turn) == (None, None, True)
    assert result.additional_contexts == (context("c"),)


def test_finalize_returning_none_keeps_content_and_keeps_error_info() -> None:
    # B120
    def boom(args: Any, ctx: Any) -> str:
        raise ToolError("x", code="ENOSPC")

    registry = ToolRegistry()
    registry.register(tool(boom, finalize_content=lambda execution, result: None))
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("Error: x")]
    registry = ToolRegistry()
    registry.register(tool(boom, finalize_content=lambda execution, result: ["bounded"]))
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("bounded")]
    assert (result.error.info.name, result.code) == ("ToolError", "ENOSPC")


def test_finalizer_is_captured_at_entry() -> None:
    # B121: disposing the tool during pre-execute does not stop its finalizer.
    registry = ToolRegistry()
    dispose = registry.register(
        tool(finalize_content=lambda execution, result: ["bounded failure"])
    )

    class Disposer:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            dispose()
            raise ToolError("policy failed", code="POLICY_FAILED")

    registry.add_plugin(Disposer())
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("bounded failure")]
    assert (result.error.info.name, result.code) == ("ToolError", "POLICY_ERROR")
    assert "POLICY_FAILED" in result.error.message


def test_finalizer_not_called_for_names_invisible_at_entry() -> None:
    # B122: unknown, other scope, restricted away.
    seen: list[str | None] = []

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        seen.append(execution.agent)

    registry = ToolRegistry()
    registry.scope("a").register(tool(finalize_content=finalize))
    registry.register(tool(name="global", finalize_content=finalize))
    registry.scope("b").restrict(deny=["global"])
    assert failure(registry.execute_sync(call())).code == "UNKNOWN_TOOL"
    assert failure(registry.scope("c").execute_sync(call())).code == "UNKNOWN_TOOL"
    assert failure(registry.scope("b").execute_sync(call("global"))).code == "UNKNOWN_TOOL"
    assert seen == []
    registry.scope("a").execute_sync(call())
    assert seen == ["a"]


def test_finalizer_sees_materialization_failures() -> None:
    # B123
    def meta(args: Any, value: Any) -> Any:
        raise RuntimeError("getter exploded")

    registry = ToolRegistry()
    registry.register(
        tool(
            name="throwing-meta",
            output=string_output(presentation_meta=meta),
            finalize_content=lambda execution, result: [result.content[0]["text"][:32]],
        )
    )
    result = failure(registry.execute_sync(call("throwing-meta")))
    [block] = result.content
    assert len(block["text"]) == 32
    assert block["text"].startswith('Error: tool "throwing-meta"')
    assert result.code == "INVALID_TOOL_OUTPUT"


def test_raising_finalizer_replaces_the_whole_result_once() -> None:
    # B124
    calls: list[int] = []

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        calls.append(1)
        raise RuntimeError("finalizer broke")

    registry = ToolRegistry()
    registry.register(tool(finalize_content=finalize))
    result = failure(registry.execute_sync(call()))
    assert "finalizer broke" in result.error.message
    assert result.content == [text(f"Error: {result.error.message}")]
    assert result.value is None
    assert calls == [1]


def test_finalizer_returning_non_json_content_fails_the_call() -> None:
    # B125
    registry = ToolRegistry()
    registry.register(tool(finalize_content=lambda execution, result: [object()]))  # type: ignore[list-item]
    result = failure(registry.execute_sync(call()))
    assert result.error.message.startswith("tool result must be losslessly JSON-serializable")
    assert result.code == "INVALID_JSON"


# ------------------------------------------------------------------ result observers


def test_execute_returns_the_object_observers_received() -> None:
    # B127, B128, B129
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool())
    observed = Observed(log)
    registry.add_plugin(observed)
    result = registry.execute_sync(call())
    assert observed.results == [result]
    assert observed.results[0] is result
    [execution] = observed.executions
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        execution.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        execution.arguments["text"] = "x"  # type: ignore[index]


def test_observers_see_none_arguments_after_invalid_json() -> None:
    # B129, B049
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool())
    observed = Observed(log)
    registry.add_plugin(observed)
    registry.execute_sync(call(arguments={"text": float("nan")}))
    assert observed.executions[0].arguments is None


def test_observer_return_values_are_ignored() -> None:
    # B130
    class Transformer:
        @hookimpl
        def dsh_tools_result(self) -> Any:
            return ToolExecutionSuccess(value="changed", content=["changed"])

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(Transformer())
    assert registry.execute_sync(call()).value == "hi"


def test_raising_observer_is_logged_and_contained(caplog: pytest.LogCaptureFixture) -> None:
    # B131 + E8: one warning per failing observer; the others still run.
    log: list[str] = []

    class Broken:
        @hookimpl
        def dsh_tools_result(self) -> None:
            raise RuntimeError("observer broke")

    registry = ToolRegistry()
    registry.register(tool())
    observed = Observed(log)
    registry.add_plugin(observed)
    registry.add_plugin(Broken())
    with caplog.at_level(logging.WARNING, logger="dsh_tools"):
        result = registry.execute_sync(call())
    assert observed.results == [result]
    assert result.value == "hi"
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert message.startswith('tool "echo" (call-1): ')
    assert message.endswith("failed: observer broke")


@pytest.mark.anyio
async def test_rejecting_async_observer_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    # B131
    log: list[str] = []

    class Broken:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            raise RuntimeError("async observer broke")

    registry = ToolRegistry()
    registry.register(tool())
    observed = Observed(log)
    registry.add_plugin(observed)
    registry.add_plugin(Broken())
    with caplog.at_level(logging.WARNING, logger="dsh_tools"):
        result = await registry.execute(call())
    assert observed.results == [result]
    assert "async observer broke" in caplog.records[0].getMessage()


def test_scoped_observers_receive_only_their_agents_results() -> None:
    # B132
    scoped, everywhere = Observed([]), Observed([])
    registry = ToolRegistry()
    registry.register(tool())
    registry.scope("a").add_plugin(scoped)
    registry.add_plugin(everywhere)
    registry.execute_sync(call())
    registry.scope("a").execute_sync(call())
    registry.scope("b").execute_sync(call())
    assert [e.agent for e in scoped.executions] == ["a"]
    assert [e.agent for e in everywhere.executions] == [None, "a", "b"]


def test_observers_see_the_entry_values_and_the_callers_signal() -> None:
    # B133
    caller = CancelSource()
    parent = ExecutionToken()
    observed = Observed([])

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(CancelSource().signal)

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    registry.scope("a").add_plugin(observed)
    registry.scope("a").execute_sync(call(signal=caller.signal, parent=parent))
    [execution] = observed.executions
    assert execution.signal is caller.signal
    assert execution.parent is parent
    assert execution.agent == "a"


# ------------------------------------------------------------------ errors


def test_unknown_tool_is_a_coded_failure() -> None:
    # B134, B139
    result = failure(ToolRegistry().execute_sync(call("nope")))
    assert result.error.message == 'unknown tool "nope"'
    assert (result.error.info.name, result.code) == ("ToolNotFoundError", "UNKNOWN_TOOL")
    assert result.content == [text('Error: unknown tool "nope"')]
    error = ToolNotFoundError("ghost")
    assert (error.code, error.message) == ("UNKNOWN_TOOL", 'unknown tool "ghost"')


def test_plain_exception_from_the_body_is_a_tool_error() -> None:
    # B135, B138
    def boom(args: Any, ctx: Any) -> str:
        raise RuntimeError("exploded")

    registry = ToolRegistry()
    registry.register(tool(boom))
    result = failure(registry.execute_sync(call()))
    assert result.error.message == "exploded"
    assert (result.error.info.name, result.code) == ("RuntimeError", "TOOL_ERROR")
    assert result.content == [text("Error: exploded")]


@pytest.mark.parametrize(
    ("error", "name", "code"),
    [
        (ToolError("disk full", code="ENOSPC"), "ToolError", "ENOSPC"),
        (ToolArgsError(["bad"]), "ToolArgsError", "INVALID_ARGS"),
    ],
)
def test_coded_exception_from_the_body_keeps_its_code(
    error: Exception, name: str, code: str
) -> None:
    # B136
    def boom(args: Any, ctx: Any) -> str:
        raise error

    registry = ToolRegistry()
    registry.register(tool(boom))
    result = failure(registry.execute_sync(call()))
    assert (result.error.info.name, result.code) == (name, code)
    assert result.error.message == str(error)


def test_unprintable_and_empty_exceptions_still_give_a_message() -> None:
    # B137
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("cannot print")

    for raised, message in (
        (Unprintable(), "<unprintable thrown value>"),
        (KeyError(), "KeyError"),
    ):

        def boom(args: Any, ctx: Any, raised: Exception = raised) -> str:
            raise raised

        registry = ToolRegistry()
        registry.register(tool(boom))
        assert failure(registry.execute_sync(call())).error.message == message


# ------------------------------------------------------------------ contexts


def test_deferred_contexts_survive_a_raising_body() -> None:
    # B141
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("before the crash")
        raise RuntimeError("crash")

    registry = ToolRegistry()
    registry.register(tool(body))
    result = failure(registry.execute_sync(call()))
    [deferred] = result.additional_contexts
    assert deferred.content == [text("before the crash")]


def test_deferred_context_shape() -> None:
    # B143
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("look at this")
        return "x"

    registry = ToolRegistry()
    registry.register(tool(body))
    [deferred] = registry.execute_sync(call()).additional_contexts
    assert deferred.to_json() == {
        "id": "call-1:context:1",
        "role": "user",
        "content": [text("look at this")],
        "source": "echo",
    }
    assert registry.execute_sync(call(arguments={"text": "y"})).additional_contexts != ()
    registry = ToolRegistry()
    registry.register(tool())
    assert registry.execute_sync(call()).additional_contexts == ()


def test_conclude_turn_marks_successes_only() -> None:
    # B144
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        if args["text"] == "fail":
            raise RuntimeError("failed")
        return "done"

    registry = ToolRegistry()
    registry.register(tool(body, output=string_output()))
    assert success(registry.execute_sync(call())).concludes_turn is True
    assert registry.execute_sync(call(arguments={"text": "fail"})).concludes_turn is False
    registry.add_plugin(post_plugin(lambda result: Accept(value="replaced")))
    replaced = success(registry.execute_sync(call()))
    assert (replaced.value, replaced.concludes_turn) == ("replaced", True)


def test_blocked_nested_success_has_no_conclusion() -> None:
    # B145
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.conclude_turn()
        return "x"

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(post_plugin(lambda result: Block(["withheld"])))
    result = failure(registry.execute_sync(call(parent=ExecutionToken())))
    assert result.concludes_turn is False


def test_denied_call_never_calls_the_body_even_through_a_wrapper() -> None:
    # B094 (pre-execute denial and wrappers together).
    log: list[str] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        log.append("wrapper")
        return await dispatch(signal)

    class Denier:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            return Deny("no")

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(wrapper(around))
    registry.add_plugin(Denier())
    assert failure(registry.execute_sync(call())).code == "DENIED"
    assert log == []


def test_accept_value_keeps_the_contexts_earlier_steps_added() -> None:
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(context("body"))
        return "hi"

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(post_plugin(lambda result: Accept(additional_contexts=[context("a")])))
    registry.add_plugin(
        post_plugin(lambda result: Accept(value="new", additional_contexts=[context("b")]))
    )
    result = success(registry.execute_sync(call()))
    assert result.value == "new"
    assert {message.id for message in result.additional_contexts} == {"body", "a", "b"}


@pytest.mark.parametrize(
    ("own", "default", "budget"), [(5000, 100, 5000), (None, 100, 100), (100, 5000, 100)]
)
def test_a_tools_own_timeout_wins_over_the_registry_default(
    own: int | None, default: int, budget: int
) -> None:
    seen: list[float] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        assert ctx.signal.deadline is not None
        seen.append(ctx.signal.deadline.budget_ms)
        return "hi"

    registry = ToolRegistry()
    registry.default_timeout_ms = default
    registry.register(tool(body, timeout_ms=own))
    success(registry.execute_sync(call()))
    assert seen == [budget]


def test_a_conclusion_follows_the_bodys_last_run_even_for_an_earlier_result() -> None:
    # A wrapper that runs the body twice and returns the first result: the body's last run
    # did not conclude the turn, so the call does not.
    runs: list[int] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        runs.append(len(runs))
        if len(runs) == 1:
            ctx.conclude_turn()
        return "hi"

    async def around(dispatch: Any, signal: Any) -> Any:
        first = await dispatch(signal)
        await dispatch(signal)
        return first

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    result = success(registry.execute_sync(call()))
    assert runs == [0, 1]
    assert result.concludes_turn is False
