"""Redaction holds on every wire (issue 16, reproduction r10_mcp_structured_leak.py).

What a post-execute policy (``Accept(content=...)``: a redaction, ``OutputLimit``) or a
tool's ``finalize_content`` replaced must be all that leaves: over MCP
``structuredContent`` used to carry the tool's original value, and the read card, ACP's
update, ``result_to_json`` (the CLI's ``--json``), the wire formats and the audit log read
``value`` and ``meta`` too. Each surface is checked for the text that was replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from dsh_tools import (
    Accept,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolRegistry,
    hookimpl,
)
from dsh_tools._json import thaw
from dsh_tools._models import result_to_json
from dsh_tools.bridges import wire
from dsh_tools.bridges.acp import result_view_to_acp
from dsh_tools.presentation import present_result
from dsh_tools_plugins.audit import AuditLog
from dsh_tools_plugins.output_limit import OutputLimit
from dsh_tools_plugins.tools import workspace_tools
from fake_dists import Site, on_sys_path, run_dsh

SECRET = "sk-live-123456"


class Redact:
    """Replaces any content that shows the secret."""

    @hookimpl
    def dsh_tools_post_execute(
        self, execution: ToolExecution, result: ToolExecutionResult
    ) -> Accept | None:
        if SECRET in result.text:
            return Accept(content=["[redacted]"])
        return None


def _redacting() -> list[object]:
    return [Redact()]


def _limited() -> list[object]:
    return [OutputLimit(max_chars=200)]


POLICIES: dict[str, Callable[[], list[object]]] = {"redact": _redacting, "OutputLimit": _limited}
REDACTIONS = ["redact"]
"""An output limit is not a redaction (see the bounded tests at the end)."""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    # The secret is on the last of many lines: OutputLimit cuts it off, Redact hides it.
    lines = [f"line {n}: nothing to see" for n in range(300)] + [f"API_KEY={SECRET}"]
    (root / "notes.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _registry(workspace: Path, policy: str) -> ToolRegistry:
    registry = ToolRegistry()
    for tool in workspace_tools(workspace):
        registry.register(tool)
    for plugin in POLICIES[policy]():
        registry.add_plugin(plugin)
    return registry


READ = ToolExecutionInput("c1", "read_file", {"path": "notes.txt"})


def _leaks(data: object) -> bool:
    return SECRET in json.dumps(data, ensure_ascii=False, default=repr)


@pytest.mark.parametrize("policy", REDACTIONS)
def test_the_result_withholds_the_value_and_meta_the_replaced_content_came_from(
    workspace: Path, policy: str
) -> None:
    result = _registry(workspace, policy).execute_sync(READ)

    assert not result.is_error
    assert SECRET not in result.text
    assert result.value is None  # type: ignore[union-attr]
    assert result.meta is None
    assert not _leaks(result_to_json(result))  # what `dsh-tools call --json` prints


@pytest.mark.parametrize("policy", REDACTIONS)
def test_mcp_clients_never_get_the_replaced_value(workspace: Path, policy: str) -> None:
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    server = build_mcp_server(_registry(workspace, policy))

    async def main() -> Any:
        async with Client(server) as client:
            return await client.call_tool("read_file", {"path": "notes.txt"})

    answer = anyio.run(main)

    assert answer.structured_content is None
    assert not _leaks(answer.model_dump(mode="json"))
    # read_file advertises an outputSchema: a success without its structuredContent would
    # break the MCP contract (clients reject it), so the replaced content is an error.
    assert answer.is_error
    assert answer.content


@pytest.mark.parametrize("policy", REDACTIONS)
def test_no_wire_format_sends_the_replaced_value(workspace: Path, policy: str) -> None:
    registry = _registry(workspace, policy)
    [result] = wire.execute_calls_sync(registry, [READ])

    sent = [
        wire.to_mcp_call_result(result),
        wire.to_openai_chat_tool_message("c1", result),
        wire.to_openai_responses_output("c1", result),
        wire.to_anthropic_tool_result("c1", result),
        wire.to_gemini_function_response("read_file", result, call_id="c1"),
    ]

    assert [_leaks(message) for message in sent] == [False] * len(sent)


@pytest.mark.parametrize("policy", REDACTIONS)
def test_the_read_card_and_its_acp_update_show_only_the_replaced_content(
    workspace: Path, policy: str
) -> None:
    registry = _registry(workspace, policy)
    result = registry.execute_sync(READ)

    card = present_result(registry, READ, result)
    update = result_view_to_acp("c1", card, result)

    assert SECRET not in repr(card)
    assert not _leaks(update)


@pytest.mark.parametrize("policy", REDACTIONS)
def test_the_audit_log_records_only_the_replaced_content(
    workspace: Path, tmp_path: Path, policy: str
) -> None:
    registry = _registry(workspace, policy)
    log = tmp_path / "audit.jsonl"
    registry.add_plugin(AuditLog(log))

    registry.execute_sync(READ)

    text = log.read_text(encoding="utf-8")
    assert '"tool/result"' in text
    assert SECRET not in text


def test_a_finalizer_that_replaces_the_content_withholds_the_value_on_every_wire(
    workspace: Path,
) -> None:
    [read_file] = [tool for tool in workspace_tools(workspace) if tool.name == "read_file"]

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> list[str] | None:
        return ["[redacted by the tool]"] if SECRET in result.text else None

    registry = ToolRegistry()
    registry.register(attrs.evolve(read_file, finalize_content=finalize))

    result = registry.execute_sync(READ)

    assert result.text == "[redacted by the tool]"
    assert not _leaks(result_to_json(result))
    assert not _leaks(wire.to_mcp_call_result(result))
    assert not _leaks(result_view_to_acp("c1", present_result(registry, READ, result), result))


def test_accept_value_still_sends_the_new_value_as_structured_content(workspace: Path) -> None:
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    class Replace:
        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> Accept:
            value = thaw(result.value)  # type: ignore[union-attr]
            value["lines"] = [line for line in value["lines"] if SECRET not in line["text"]]
            return Accept(value=value)

    registry = _registry(workspace, "redact")
    registry.add_plugin(Replace())  # added last: runs before Redact, which finds nothing
    server = build_mcp_server(registry)

    async def main() -> Any:
        async with Client(server) as client:
            return await client.call_tool("read_file", {"path": "notes.txt"})

    answer = anyio.run(main)

    assert not answer.is_error
    assert answer.structured_content is not None
    assert not _leaks(answer.model_dump(mode="json"))


def test_the_cli_json_output_withholds_the_replaced_value(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites = on_sys_path(tmp_path / "site", monkeypatch)
    site: Site = next(sites)
    module = site.module(
        "redact",
        f"""
        from dsh_tools import Accept, hookimpl

        class Redact:
            @hookimpl
            def dsh_tools_post_execute(self, result):
                if {SECRET!r} in result.text:
                    return Accept(content=["[redacted]"])
        """,
    )
    site.dist("redactor", {"dsh_tools.plugins": {"redact": f"{module}:Redact"}})

    done = run_dsh(
        "--workspace",
        str(workspace),
        "call",
        "read_file",
        '{"path": "notes.txt"}',
        "--json",
        sites=(site,),
    )

    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["content"] == [{"type": "text", "text": "[redacted]"}]
    assert SECRET not in done.stdout


# An output limit bounds what a model reads; it withholds nothing from the host.


def test_a_bounded_result_keeps_its_value_and_meta_for_the_host(workspace: Path) -> None:
    result = _registry(workspace, "OutputLimit").execute_sync(READ)

    assert isinstance(result, ToolExecutionSuccess)
    assert SECRET not in result.text
    assert "[output truncated" in result.text
    assert result.value is not None
    assert SECRET in json.dumps(thaw(result.value))
    card = present_result(_registry(workspace, "OutputLimit"), READ, result)
    assert SECRET in repr(card)  # the host's card keeps its structure


def test_a_bounded_success_stays_a_success_over_mcp(workspace: Path) -> None:
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    server = build_mcp_server(_registry(workspace, "OutputLimit"))

    async def main() -> Any:
        async with Client(server) as client:
            return await client.call_tool("read_file", {"path": "notes.txt"})

    answer = anyio.run(main)

    assert answer.is_error is False
    assert answer.structured_content is not None
    assert answer.structured_content["total_lines"] == 301
    assert SECRET not in json.dumps([block.model_dump() for block in answer.content])


def test_model_wires_carry_the_bounded_content_as_a_success(workspace: Path) -> None:
    [result] = wire.execute_calls_sync(_registry(workspace, "OutputLimit"), [READ])

    sent = [
        wire.to_openai_chat_tool_message("c1", result),
        wire.to_openai_responses_output("c1", result),
        wire.to_anthropic_tool_result("c1", result),
        wire.to_gemini_function_response("read_file", result, call_id="c1"),
    ]

    assert [_leaks(message) for message in sent] == [False] * len(sent)
    assert wire.to_mcp_call_result(result)["isError"] is False
    assert sent[2].get("is_error") is not True
