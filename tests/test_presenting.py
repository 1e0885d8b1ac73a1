"""Presenters (B029, B192, B222-B223): resolved per agent, soft-validated, always total."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_tools import (
    PresentableResult,
    ToolDefinition,
    ToolExecutionInput,
    ToolOutput,
    ToolRegistry,
    define_tool,
    failure_result,
)
from dsh_tools._json import FrozenDict, dumps
from dsh_tools.presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    GenericCallView,
    GenericResultView,
    TerminalResultView,
    ToolCallKind,
    fallback_call_view,
    present_call,
    present_result,
    presentable_result,
)
from strategies import any_values, json_values


@attrs.frozen
class WriteArgs:
    path: str
    text: str


def _write_tool(**presenters: Any) -> ToolDefinition[WriteArgs]:
    return define_tool(
        name="write",
        description="Write a file",
        parameters=WriteArgs,
        execute=lambda args, ctx: f"wrote {args.path}",
        **presenters,
    )


def _call(arguments: object = None, agent: str | None = None) -> ToolExecutionInput:
    if arguments is None:
        arguments = {"path": "notes.md", "text": "hi\n"}
    return ToolExecutionInput("call-1", "write", arguments, agent=agent)


def _diff_card(args: WriteArgs) -> DiffCallView:
    return DiffCallView(f"Write {args.path}", [FileDiff(args.path, None, args.text)])


# ------------------------------------------------------------------- present_call


def test_the_presenter_gets_typed_arguments_and_its_card_is_used() -> None:
    seen: list[object] = []

    def present(args: WriteArgs) -> DiffCallView:
        seen.append(args)
        return _diff_card(args)

    registry = ToolRegistry()
    registry.register(_write_tool(present_call=present))
    card = present_call(registry, _call())
    assert card == DiffCallView("Write notes.md", [FileDiff("notes.md", None, "hi\n")])
    assert seen == [WriteArgs("notes.md", "hi\n")]


def test_a_dsl_tool_presenter_gets_the_frozen_mapping() -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="grep",
            description="Search",
            parameters={"pattern": {"type": "string", "required": True}},
            execute=lambda args, ctx: "",
            present_call=lambda args: GenericCallView(
                f"grep {args['pattern']}", kind=ToolCallKind.SEARCH
            ),
        )
    )
    call = ToolExecutionInput("c", "grep", {"pattern": "TODO"})
    assert present_call(registry, call) == GenericCallView("grep TODO", kind=ToolCallKind.SEARCH)


def test_a_raw_definition_presenter_gets_the_frozen_arguments_unvalidated() -> None:
    seen: list[object] = []

    def present(args: Any) -> GenericCallView:
        seen.append(args)
        return GenericCallView("raw")

    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="write",
            description="bridged",
            parameters={"type": "object"},
            execute=lambda args, ctx: "",
            present_call=present,
        )
    )
    assert present_call(registry, _call({"anything": [1, 2]})) == GenericCallView("raw")
    assert seen == [{"anything": [1, 2]}]
    assert isinstance(seen[0], FrozenDict)


@pytest.mark.parametrize(
    "presenters",
    [
        pytest.param({}, id="no presenter"),
        pytest.param({"present_call": lambda args: None}, id="returns None"),
        pytest.param({"present_call": lambda args: {"card": "generic"}}, id="returns a dict"),
        pytest.param(
            {"present_call": lambda args: GenericResultView(title="x")}, id="returns a result card"
        ),
    ],
)
def test_the_fallback_card_is_the_tool_name_and_raw_arguments(presenters: Any) -> None:
    registry = ToolRegistry()
    registry.register(_write_tool(**presenters))
    card = present_call(registry, _call())
    assert card == GenericCallView("write", raw_input={"path": "notes.md", "text": "hi\n"})
    assert card == fallback_call_view("write", {"path": "notes.md", "text": "hi\n"})


def test_a_raising_presenter_falls_back_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(args: WriteArgs) -> DiffCallView:
        raise RuntimeError("presenter bug")

    registry = ToolRegistry()
    registry.register(_write_tool(present_call=broken))
    with caplog.at_level(logging.WARNING, logger="dsh_tools"):
        card = present_call(registry, _call())
    assert card == fallback_call_view("write", _call().arguments)
    [record] = caplog.records
    assert "present_call of tool 'write' raised" in record.getMessage()
    assert record.exc_info is not None
    assert "presenter bug" in str(record.exc_info[1])


def test_an_async_presenter_is_not_awaited_and_its_coroutine_is_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def present(args: WriteArgs) -> DiffCallView:  # pragma: no cover - never awaited
        return _diff_card(args)

    registry = ToolRegistry()
    registry.register(_write_tool(present_call=present))
    # filterwarnings = error turns a "never awaited" RuntimeWarning into a failure
    assert present_call(registry, _call()) == fallback_call_view("write", _call().arguments)
    assert "is async" in caplog.text


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"path": "notes.md"}, id="missing a field (older schema)"),
        pytest.param({"path": 3, "text": "x"}, id="wrong type"),
        pytest.param({"path": "a", "text": "b", "mode": "w"}, id="unknown key"),
    ],
)
def test_arguments_that_no_longer_validate_fall_back_without_calling_the_presenter(
    arguments: dict[str, Any],
) -> None:
    calls: list[object] = []
    registry = ToolRegistry()
    registry.register(_write_tool(present_call=lambda args: calls.append(args)))
    assert present_call(registry, _call(arguments)) == GenericCallView("write", raw_input=arguments)
    assert calls == []


def test_an_attrs_validator_refusing_the_arguments_falls_back() -> None:
    @attrs.frozen
    class Positive:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="count",
            description="",
            parameters=Positive,
            execute=lambda args, ctx: "",
            present_call=lambda args: GenericCallView(f"count {args.n}"),
        )
    )
    good = ToolExecutionInput("c", "count", {"n": 2})
    bad = ToolExecutionInput("c", "count", {"n": -1})
    assert present_call(registry, good) == GenericCallView("count 2")
    assert present_call(registry, bad) == GenericCallView("count", raw_input={"n": -1})


def test_non_json_arguments_give_a_card_without_raw_input() -> None:
    registry = ToolRegistry()
    registry.register(_write_tool(present_call=_diff_card))
    assert present_call(registry, _call({"path": {1, 2}})) == GenericCallView("write")
    assert present_call(registry, _call([1, 2])) == GenericCallView("write", raw_input=[1, 2])


def test_an_unknown_tool_gets_the_fallback() -> None:
    call = ToolExecutionInput("c", "nope", {"q": 1})
    assert present_call(ToolRegistry(), call) == GenericCallView("nope", raw_input={"q": 1})


# --------------------------------------------------------- resolution per agent (B029)


def _layered() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(_write_tool(present_call=lambda args: GenericCallView("global")))
    scoped = _write_tool(present_call=lambda args: GenericCallView("scoped a"))
    registry.scope("a").register(scoped)
    registry.scope("c").restrict(deny=["write"])
    return registry


@pytest.mark.parametrize(
    ("agent", "title"),
    [
        (None, "global"),
        ("a", "scoped a"),
        ("a/b", "scoped a"),  # inherits its parent's shadowing definition
        ("other", "global"),
        ("c", "write"),  # restricted: nothing runs, so the fallback card
        ("a//b", "write"),  # a malformed agent path in an old log
        ("", "write"),  # an empty agent id is malformed too
    ],
)
def test_the_card_matches_the_definition_that_runs_for_the_agent(
    agent: str | None, title: str
) -> None:
    card = present_call(_layered(), _call(agent=agent))
    assert isinstance(card, GenericCallView)
    assert card.title == title


@pytest.mark.parametrize(
    ("agent", "title"),
    [(None, "scoped a"), ("a", "scoped a"), ("a/b", "scoped a"), ("other", "write")],
)
def test_through_a_scope_the_agent_is_that_scope_or_a_descendant(
    agent: str | None, title: str
) -> None:
    card = present_call(_layered().scope("a"), _call(agent=agent))
    assert isinstance(card, GenericCallView)
    assert card.title == title


def test_presenting_matches_execution_for_a_nested_scope() -> None:
    registry = _layered()
    nested = registry.scope("a").scope("b")
    nested.register(_write_tool(present_call=lambda args: GenericCallView("scoped b")))
    card = present_call(registry, _call(agent="a/b"))
    assert isinstance(card, GenericCallView)
    assert card.title == "scoped b"
    assert registry.scope("a").scope("b").get("write") is nested.get("write")


# ------------------------------------------------------------------ present_result


def test_the_result_presenter_gets_the_durable_projection() -> None:
    seen: list[tuple[object, PresentableResult]] = []

    def present(args: WriteArgs, result: PresentableResult) -> DiffResultView:
        seen.append((args, result))
        return DiffResultView(diffs=[FileDiff(args.path, None, args.text)])

    registry = ToolRegistry()
    registry.register(_write_tool(present_result=present))
    call = _call()
    result = registry.execute_sync(call)
    card = present_result(registry, call, result)
    assert card == DiffResultView(diffs=[FileDiff("notes.md", None, "hi\n")])
    [(args, projection)] = seen
    assert args == WriteArgs("notes.md", "hi\n")
    assert projection == PresentableResult(content=["wrote notes.md"], is_error=False)


def test_the_projection_carries_meta_and_the_failure_flag() -> None:
    seen: list[PresentableResult] = []

    def present(args: Any, result: PresentableResult) -> TerminalResultView:
        seen.append(result)
        return TerminalResultView(output=dumps(result.meta), exit_code=0)

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="run",
            description="",
            parameters={"cmd": {"type": "string", "required": True}},
            execute=lambda args, ctx: {"code": 0},
            output=ToolOutput(
                {"type": "object"},
                render=lambda args, value: "ok",
                presentation_meta=lambda args, value: {"exit": 0, "value": value},
            ),
            present_result=present,
        )
    )
    call = ToolExecutionInput("c", "run", {"cmd": "true"})
    assert present_result(registry, call, registry.execute_sync(call)) == TerminalResultView(
        output='{"exit":0,"value":{"code":0}}', exit_code=0
    )
    assert seen[0].meta == {"exit": 0, "value": {"code": 0}}
    failed = failure_result("boom", "TOOL_ERROR")
    present_result(registry, call, failed)
    assert seen[1] == PresentableResult(content=["Error: boom"], is_error=True)
    assert presentable_result(seen[1]) is seen[1]


@pytest.mark.parametrize(
    "presenter",
    [
        pytest.param(None, id="no presenter"),
        pytest.param(lambda args, result: None, id="returns None"),
        pytest.param(lambda args, result: 1 / 0, id="raises"),
        pytest.param(lambda args, result: GenericCallView("pending"), id="returns a call card"),
        pytest.param(lambda args, result: "done", id="returns text"),
    ],
)
def test_a_missing_or_broken_result_presenter_gives_none(presenter: Any) -> None:
    registry = ToolRegistry()
    registry.register(_write_tool(present_result=presenter))
    result = PresentableResult(content=["ok"])
    assert present_result(registry, _call(), result) is None


def test_result_presenting_soft_validates_and_resolves_per_agent() -> None:
    calls: list[str] = []
    registry = ToolRegistry()
    registry.register(_write_tool(present_result=lambda args, r: GenericResultView(title="global")))

    def scoped(args: WriteArgs, result: PresentableResult) -> GenericResultView:
        calls.append("a")
        return GenericResultView()

    registry.scope("a").register(_write_tool(present_result=scoped))
    done = PresentableResult(content=["ok"])
    assert present_result(registry, _call(), done) == GenericResultView(title="global")
    assert present_result(registry, _call(agent="a"), done) == GenericResultView()
    assert present_result(registry, _call({"path": 1}, agent="a"), done) is None
    assert present_result(registry, _call([1], agent="a"), done) is None
    assert present_result(registry, ToolExecutionInput("c", "nope"), done) is None
    assert calls == ["a"]


# ------------------------------------------------------------------- never raises


@given(
    arguments=any_values() | json_values(),
    agent=st.none() | st.text(alphabet="ab/", max_size=5),
    behaviour=st.sampled_from(["card", "none", "raise", "junk"]),
)
def test_replaying_any_logged_call_never_raises(
    arguments: object, agent: str | None, behaviour: str
) -> None:
    def call_presenter(args: Any) -> Any:
        return {"card": GenericCallView("ok"), "none": None, "junk": object()}[behaviour]

    def result_presenter(args: Any, result: PresentableResult) -> Any:
        return {"card": GenericResultView(), "none": None, "junk": object()}[behaviour]

    registry = ToolRegistry()
    for view in (registry, registry.scope("a")):
        view.register(
            ToolDefinition(
                name="t",
                description="",
                parameters={"type": "object"},
                execute=lambda args, ctx: "",
                present_call=call_presenter,
                present_result=result_presenter,
            )
        )
    call = ToolExecutionInput("c", "t", arguments, agent=agent)
    card = present_call(registry, call)
    assert isinstance(card, (GenericCallView,))
    outcome = present_result(registry, call, PresentableResult(content=["x"]))
    assert outcome is None or isinstance(outcome, GenericResultView)
