"""Decision records: what a result observer naming ``record`` and ``call_recorder`` see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import Ask, Deny, ToolRegistry, hookimpl
from dsh_tools._define import define_tool
from dsh_tools._models import Block, ToolExecutionInput
from dsh_tools._plugins.loading import load_plugins
from dsh_tools.records import DecisionRecord
from dsh_tools.testing import CallRecorder, ScriptedApproval
from fake_dists import Site, on_sys_path


def echo(calls: list[str] | None = None) -> Any:
    def body(arguments: Any, context: Any) -> str:
        if calls is not None:
            calls.append(arguments["text"])
        return str(arguments["text"])

    return define_tool(
        name="echo",
        description="Echo text.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body,
    )


def call(text: str = "hi", call_id: str = "c-1", agent: str | None = None) -> ToolExecutionInput:
    return ToolExecutionInput(call_id, "echo", {"text": text}, agent=agent)


class Keeper:
    """A result observer that keeps every record it is given."""

    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    @hookimpl
    def dsh_tools_result(self, record: DecisionRecord) -> None:
        self.records.append(record)


def test_a_denial_names_the_plugin_its_reason_and_its_detail() -> None:
    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Any:
            if execution.arguments["text"] == "secret":
                return Deny("no secrets", detail={"rule": {"file": "r.toml", "line": 4}})
            return None

    registry = ToolRegistry()
    registry.register(echo())
    registry.add_plugin(Policy(), name="policy")
    keeper = Keeper()
    registry.add_plugin(keeper, name="keeper")

    registry.execute_sync(call("fine", "c-ok"))
    registry.execute_sync(call("secret", "c-no"))

    allowed, denied = keeper.records
    assert (allowed.call_id, allowed.outcome, allowed.dispatches) == ("c-ok", "ok", 1)
    assert [(s.source, s.decision) for s in allowed.of("pre_execute")] == [("policy", "abstained")]
    assert (denied.outcome, denied.dispatches) == ("DENIED", 0)
    decided = denied.decided_by
    assert decided is not None
    assert (decided.stage, decided.source, decided.decision) == ("pre_execute", "policy", "deny")
    assert decided.reason == "no secrets"
    assert decided.detail == {"rule": {"file": "r.toml", "line": 4}}
    assert "body" not in [step.stage for step in denied.steps]


def test_approval_answers_guards_retries_and_post_execute_are_recorded() -> None:
    class Asker:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Ask:
            return Ask("a person decides")

    class Retry:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self) -> Any:
            dispatch = yield

            async def twice(signal: Any = None) -> Any:
                await dispatch(signal)
                return await dispatch(signal)

            return twice

    class Blocker:
        @hookimpl
        def dsh_tools_post_execute(self, result: Any) -> Any:
            return Block("withheld")

    approval = ScriptedApproval()
    approval.answer("allowed-once", "rejected")
    registry = ToolRegistry(approval=approval)
    registry.register(echo())
    for plugin, name in [(Asker(), "asker"), (Retry(), "retry"), (Blocker(), "blocker")]:
        registry.add_plugin(plugin, name=name)
    keeper = Keeper()
    registry.add_plugin(keeper)
    registry.guard(lambda execution: "guarded" if execution.call_id == "c-3" else None)
    agent = registry.scope("agent")

    agent.execute_sync(call(call_id="c-1"))
    agent.execute_sync(call(call_id="c-2"))

    allowed, rejected = keeper.records
    assert [s.decision for s in allowed.of("approval")] == ["allowed-once"]
    assert allowed.dispatches == 2
    assert [(s.source, s.decision, s.reason) for s in allowed.of("post_execute")] == [
        ("blocker", "block", "withheld")
    ]
    assert allowed.outcome == "BLOCKED"
    assert [s.decision for s in rejected.of("approval")] == ["rejected"]
    # The guards look at a call before anyone is asked about it (a dry run), not after a no.
    assert [s.decision for s in rejected.of("guard")] == ["abstained"]
    assert rejected.steps.index(rejected.of("guard")[0]) < rejected.steps.index(
        rejected.of("approval")[0]
    )
    assert rejected.dispatches == 0
    assert rejected.decided_by is not None
    assert (rejected.decided_by.stage, rejected.decided_by.decision) == ("approval", "rejected")

    agent.execute_sync(call(call_id="c-3"))
    guarded = keeper.records[-1]
    [guard] = guarded.of("guard")
    assert (guard.decision, guard.reason) == ("deny", "guarded")
    assert guarded.of("approval") == ()  # denied before anyone was asked
    assert guarded.decided_by == guard
    assert "lambda" in str(guard.source)


def test_stage_timings_add_up_and_the_record_survives_json() -> None:
    registry = ToolRegistry()
    registry.register(echo())
    keeper = Keeper()
    registry.add_plugin(keeper, name="keeper")

    registry.execute_sync(call())

    [record] = keeper.records
    data = json.loads(json.dumps(record.to_json()))
    assert data["outcome"] == "ok"
    assert [stage["stage"] for stage in data["stages"]] == ["body", "execute"]
    assert all(step["ms"] >= 0 for step in data["steps"])
    assert data["elapsed_ms"] >= data["steps"][-1]["at_ms"] - 1e-6
    assert DecisionRecord.from_json(data) == record
    with pytest.raises(AttributeError):
        record.outcome = "DENIED"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        record.call_id = "another"  # type: ignore[misc]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_body_step_takes_the_body_run_s_own_time(driver: str) -> None:
    import time

    import anyio

    from dsh_tools import _cancel as cancel

    def slow(arguments: Any, context: Any) -> str:
        context.report_progress(1, 2)
        time.sleep(0.2)
        return "done"

    class Waits:
        """A wrapper that waits 0.3 s before the body (a permit, a backoff)."""

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self) -> Any:
            dispatch = yield

            async def waited(signal: Any = None) -> Any:
                await cancel.sleep(0.3)
                return await dispatch(signal)

            return waited

    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(define_tool(name="slow", description="S.", parameters={}, execute=slow))
    keeper = Keeper()
    registry.add_plugin(keeper, name="keeper")
    registry.add_plugin(Waits(), name="waits")
    slow_call = ToolExecutionInput("c-1", "slow", {})

    if driver == "sync":
        registry.execute_sync(slow_call)
    else:
        anyio.run(registry.execute, slow_call)

    [record] = keeper.records
    [body] = record.of("body")
    [progress] = record.of("progress")
    assert body.ms >= 200  # the body's sleep, not the step before's
    assert record.elapsed_ms - body.ms >= 300  # the wrapper's wait is not the body's
    assert progress.ms < body.ms  # the stream closed after the body, on its own time
    assert [step.stage for step in record.steps].index("body") < [
        step.stage for step in record.steps
    ].index("progress")
    assert recorder.last.record == record


def test_call_recorder_gives_the_same_record_as_an_observer() -> None:
    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(echo())
    keeper = Keeper()
    registry.add_plugin(keeper, name="keeper")

    registry.execute_sync(call())

    assert recorder.last.record == keeper.records[-1]


def test_the_call_recorder_fixture_exposes_records(
    tool_registry: ToolRegistry, call_recorder: CallRecorder
) -> None:
    tool_registry.register(echo())
    tool_registry.guard(lambda execution: "never")

    tool_registry.execute_sync(call())

    decided = call_recorder.last.record.decided_by
    assert decided is not None
    assert (decided.stage, decided.reason) == ("guard", "never")


def test_observers_without_record_keep_no_events() -> None:
    """A scope whose observers do not ask for records builds none: the observer that
    asks, added to one scope only, makes only that scope's calls record."""
    registry = ToolRegistry()
    registry.register(echo())
    plain: list[object] = []

    class Plain:
        @hookimpl
        def dsh_tools_result(self, execution: Any, result: Any, tool: Any) -> None:
            plain.append(result)

    registry.add_plugin(Plain())
    keeper = Keeper()
    registry.scope("recorded").add_plugin(keeper)

    registry.execute_sync(call(call_id="global"))
    registry.scope("other").execute_sync(call(call_id="other"))
    registry.scope("recorded").execute_sync(call(call_id="recorded"))

    assert len(plain) == 3
    assert [record.call_id for record in keeper.records] == ["recorded"]


def test_decision_details_must_be_json_objects() -> None:
    with pytest.raises(TypeError, match="detail must be a JSON object"):
        Deny("no", detail=["not", "an", "object"])
    with pytest.raises(TypeError, match="detail must be a JSON object"):
        Ask("why", detail={"bad": object()})
    assert Deny("no") == Deny("no", detail=None)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from on_sys_path(tmp_path / "site", monkeypatch)


def test_a_plugin_from_an_entry_point_is_named_with_its_distribution(site: Site) -> None:
    module = site.module(
        "policy",
        """
        from dsh_tools import Deny, hookimpl

        class Policy:
            @hookimpl
            def dsh_tools_pre_execute(self, execution):
                return Deny("not today")
        """,
    )
    guards = site.module(
        "guards",
        """
        def no_loud(execution):
            return "too loud" if execution.arguments["text"] == "LOUD" else None
        """,
    )
    site.dist(
        "acme-policy",
        {
            "dsh_tools.plugins": {"acme": f"{module}:Policy"},
            "dsh_tools.guards": {"quiet": f"{guards}:no_loud"},
        },
    )
    registry = ToolRegistry()
    registry.register(echo())
    keeper = Keeper()
    registry.add_plugin(keeper)
    load_plugins(registry, only=["dist:acme-policy"], strict=True)

    registry.execute_sync(call())
    registry.plugin_manager.unregister(name="acme")
    registry.execute_sync(call("LOUD"))

    denied, guarded = (record.decided_by for record in keeper.records)
    assert denied is not None
    assert (denied.source, denied.distribution) == ("acme", "acme-policy")
    assert guarded is not None
    assert (guarded.stage, guarded.source, guarded.distribution) == (
        "guard",
        "quiet",
        "acme-policy",
    )


def test_a_remembered_answer_is_recorded_as_the_store_s() -> None:
    class Asker:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Ask:
            return Ask("a person decides")

    approval = ScriptedApproval()
    approval.answer("rejected-always")
    registry = ToolRegistry(approval=approval)
    registry.register(echo())
    registry.add_plugin(Asker())
    keeper = Keeper()
    registry.add_plugin(keeper)
    agent = registry.scope("agent")

    agent.execute_sync(call(call_id="c-1"))
    agent.execute_sync(call(call_id="c-2"))

    asked, remembered = (record.decided_by for record in keeper.records)
    assert asked is not None
    assert (asked.source, asked.decision) == ("approval service", "rejected-always")
    assert remembered is not None
    assert (remembered.source, remembered.decision, remembered.reason) == (
        "approval store",
        "rejected-always",
        "a remembered answer",
    )
    assert len(approval.requests) == 1
