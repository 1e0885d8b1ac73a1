"""A person's feedback on an approval reaches every record of the call, whichever channel
carried it: the decision record, the audit log, ``replay --explain`` and the
OpenTelemetry decision events, not only the result the model reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import (
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    MemoryApprovalStore,
    TicketAnswer,
    ToolExecutionInput,
    ToolRegistry,
    hookimpl,
)
from dsh_tools.records import DecisionRecord
from dsh_tools_plugins.audit import AuditLog, read_audit_log, replay

FEEDBACK = "write it under docs/ instead"
CALL = ToolExecutionInput("c1", "write", {"path": "a.txt"}, agent="coder")


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("writes files")


def asking(tmp_path: Path, approval: Any, store: Any = None) -> tuple[ToolRegistry, list[str]]:
    registry = ToolRegistry(approval=approval, approval_store=store)
    ran = add_write_tool(registry)
    registry.add_plugin(AskAlways(), name="permissions")
    registry.add_plugin(AuditLog(tmp_path / "audit.jsonl"))
    return registry, ran


def logged_record(tmp_path: Path) -> DecisionRecord:
    """The decision record of the last call the audit log holds, read back as replay
    reads it."""
    [*_, replayed] = replay(tmp_path / "audit.jsonl", ToolRegistry())
    assert replayed.record is not None
    return replayed.record


def answer_step(record: DecisionRecord) -> dict[str, Any]:
    [*_, step] = [step for step in record.of("approval") if step.decision != "pending"]
    return step.to_json()


def test_an_in_process_channels_feedback_reaches_the_records(tmp_path: Path) -> None:
    def person(request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer("rejected", feedback=FEEDBACK)

    registry, ran = asking(tmp_path, person)
    result = registry.execute_sync(CALL)
    assert result.error.message == f'the user rejected tool "write": {FEEDBACK}'
    record = logged_record(tmp_path)
    step = answer_step(record)
    assert (step["decision"], step["detail"]["feedback"]) == ("rejected", FEEDBACK)
    assert FEEDBACK in "\n".join(record.lines())
    assert ran == []


@pytest.mark.parametrize("outcome", ["rejected", "allowed-once"])
def test_a_ticket_answers_feedback_reaches_the_records(tmp_path: Path, outcome: str) -> None:
    store = MemoryApprovalStore()
    registry, _ = asking(tmp_path, lambda request: "pending", store)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    store.answer_ticket(ticket, TicketAnswer(outcome, "ana", "cli", feedback=FEEDBACK))  # type: ignore[arg-type]
    assert code(registry.resume_sync(ticket)) == ("ok" if outcome == "allowed-once" else "DENIED")
    record = logged_record(tmp_path)
    step = answer_step(record)
    assert step["decision"] == outcome
    assert (step["detail"]["by"], step["detail"]["feedback"]) == ("ana", FEEDBACK)
    assert f"answered by ana via cli: {FEEDBACK}" in "\n".join(record.lines())


def test_an_audit_log_line_holds_the_feedback(tmp_path: Path) -> None:
    registry, _ = asking(tmp_path, lambda request: ApprovalAnswer("rejected", feedback=FEEDBACK))
    registry.execute_sync(CALL)
    [*_, event] = read_audit_log(tmp_path / "audit.jsonl")
    steps = event.data["record"]["steps"]
    assert any(step.get("detail", {}).get("feedback") == FEEDBACK for step in steps)


@pytest.mark.anyio
async def test_an_mcp_elicitations_feedback_reaches_the_records(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp import types as mcp_types

    from dsh_tools.bridges.mcp import build_mcp_server

    async def user(context: Any, params: Any) -> mcp_types.ElicitResult:
        content = {"decision": "reject", "feedback": FEEDBACK}
        return mcp_types.ElicitResult(action="accept", content=content)

    registry, ran = asking(tmp_path, None)
    with anyio.fail_after(10):
        async with Client(build_mcp_server(registry), elicitation_callback=user) as client:
            result = await client.call_tool("write", {"path": "a.txt"})
    assert result.is_error
    assert ran == []
    step = answer_step(logged_record(tmp_path))
    assert (step["decision"], step["detail"]["feedback"]) == ("rejected", FEEDBACK)
    assert step["detail"]["channel"] == "mcp"


def test_an_opentelemetry_decision_event_carries_the_feedback() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dsh_tools_plugins.otel import OpenTelemetryDecisionsPlugin

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = ToolRegistry(approval=lambda r: ApprovalAnswer("rejected", feedback=FEEDBACK))
    add_write_tool(registry)
    registry.add_plugin(AskAlways(), name="permissions")
    registry.add_plugin(OpenTelemetryDecisionsPlugin(tracer_provider=provider))
    registry.execute_sync(CALL)
    provider.shutdown()
    [span] = exporter.get_finished_spans()
    answers = [
        dict(event.attributes or {})
        for event in span.events
        if (event.attributes or {}).get("dsh_tools.decision") == "rejected"
    ]
    assert [event["dsh_tools.feedback"] for event in answers] == [FEEDBACK]


def test_feedback_must_be_text() -> None:
    with pytest.raises(TypeError, match="feedback must be a str"):
        ApprovalAnswer("rejected", feedback=3)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_hosts_feedback_to_a_remote_servers_elicitation_reaches_its_records(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp")
    from dsh_tools.bridges.mcp import McpToolSource, build_mcp_server

    remote, ran = asking(tmp_path, None)
    host = ToolRegistry()
    person = lambda request: ApprovalAnswer("rejected", feedback=FEEDBACK)  # noqa: E731
    with anyio.fail_after(10):
        async with McpToolSource(build_mcp_server(remote), prefix="r_", approval=person) as source:
            source.register(host)
            result = await host.scope("me").execute(
                ToolExecutionInput("local-1", "r_write", {"path": "a.txt"})
            )
    assert FEEDBACK in result.text
    assert ran == []
    step = answer_step(logged_record(tmp_path))
    assert (step["decision"], step["detail"]["feedback"]) == ("rejected", FEEDBACK)
