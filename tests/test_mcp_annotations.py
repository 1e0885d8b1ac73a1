"""MCP tool annotations both ways, with the official SDK's client and server, and the
permission rules that read them (a remote hint only makes a decision stricter)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp import types as mcp_types
from mcp.server.lowlevel import Server

from dsh_tools import ToolRegistry, define_tool
from dsh_tools._models import Allow, Ask
from dsh_tools.bridges.mcp import McpToolSource, build_mcp_server
from dsh_tools_plugins.permissions import PermissionRules, RulesError


def local_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="read_notes",
            description="Read the notes.",
            parameters={},
            execute=lambda args, ctx: "notes",
            metadata={"read_only": True, "idempotent": True, "title": "Read notes"},
        )
    )
    registry.register(
        define_tool(
            name="wipe_notes",
            description="Delete every note.",
            parameters={},
            execute=lambda args, ctx: "gone",
            metadata={"destructive": True, "open_world": False},
        )
    )
    registry.register(
        define_tool(name="plain", description="No flags.", parameters={}, execute=lambda a, c: "")
    )
    return registry


def remote_server() -> Server[Any]:
    tools = [
        mcp_types.Tool(
            name="drop_table",
            input_schema={"type": "object"},
            annotations=mcp_types.ToolAnnotations(destructive_hint=True),
        ),
        mcp_types.Tool(
            name="select",
            input_schema={"type": "object"},
            annotations=mcp_types.ToolAnnotations(read_only_hint=True, title="Query"),
        ),
    ]

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> Any:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text="done")])

    return Server("db", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.mark.anyio
async def test_serve_mcp_emits_annotations_from_tool_metadata() -> None:
    with anyio.fail_after(5):
        async with Client(build_mcp_server(local_registry())) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert listed["read_notes"].annotations == mcp_types.ToolAnnotations(
        read_only_hint=True, idempotent_hint=True, title="Read notes"
    )
    assert listed["wipe_notes"].annotations == mcp_types.ToolAnnotations(
        destructive_hint=True, open_world_hint=False
    )
    assert listed["plain"].annotations is None
    # The title is the tool's own too, where clients look first.
    assert (listed["read_notes"].title, listed["plain"].title) == ("Read notes", None)


@pytest.mark.anyio
async def test_the_workspace_tools_have_titles_and_say_they_stay_in_the_workspace(
    tmp_path: Any,
) -> None:
    from dsh_tools_plugins.sandbox import SandboxSettings
    from dsh_tools_plugins.tools import workspace_tools

    registry = ToolRegistry()
    offline = SandboxSettings(mode="required", network=False)
    for definition in workspace_tools(tmp_path, sandbox=offline):
        registry.register(definition)
    with anyio.fail_after(5):
        async with Client(build_mcp_server(registry)) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {name: tool.title for name, tool in listed.items()} == {
        "read_file": "Read file",
        "write_file": "Write file",
        "edit_file": "Edit file",
        "list_dir": "List directory",
        "glob": "Find files by name",
        "grep": "Search file contents",
        "run_command": "Run command",
    }
    for tool in listed.values():  # a sandboxed offline run_command included
        assert tool.annotations is not None
        assert tool.annotations.open_world_hint is False


@pytest.mark.anyio
async def test_a_remote_tools_annotations_are_imported_as_claims() -> None:
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with McpToolSource(remote_server(), name="db") as source:
            source.register(local)
            drop, select = local.get("drop_table"), local.get("select")
    assert drop is not None
    assert select is not None
    assert drop.metadata == {"mcp_hints": {"destructive": True}, "mcp_server": "db"}
    assert select.metadata == {
        "mcp_hints": {"read_only": True},
        "mcp_server": "db",
        "title": "Query",
    }
    assert "read_only" not in select.metadata  # no local plugin acts on a claim


RULES = """\
default = "ask"

[[rule]]
action = "allow"
read_only = true
name = "reads"

[[rule]]
action = "ask"
destructive = true
name = "destructive tools"
"""


@pytest.mark.anyio
async def test_a_remote_destructive_hint_turns_into_an_ask_and_a_read_only_one_needs_trust() -> (
    None
):
    untrusted = PermissionRules.from_toml_text(RULES)
    trusted = PermissionRules.from_toml_text('trusted_mcp_servers = ["db"]\n' + RULES)
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with McpToolSource(remote_server(), name="db") as source:
            source.register(local)
            drop, select = local.get("drop_table"), local.get("select")
            loose = PermissionRules.from_toml_text('default = "allow"\n' + RULES.split("\n", 1)[1])

            asked = untrusted.decide("drop_table", {}, drop)
            unproven = untrusted.decide("select", {}, select)
            believed = trusted.decide("select", {}, select)
            stricter = loose.decide("drop_table", {}, drop)

    assert isinstance(asked, Ask)
    assert asked.detail is not None
    assert asked.detail["rule"]["name"] == "destructive tools"
    assert isinstance(unproven, Ask)  # an untrusted readOnlyHint does not allow
    assert isinstance(believed, Allow)
    assert isinstance(stricter, Ask)  # under an allow default, the hint still asks


@pytest.mark.anyio
async def test_annotations_survive_a_round_trip_through_serve_and_import() -> None:
    policy = PermissionRules.from_toml_text(RULES)
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with (
            Client(build_mcp_server(local_registry())) as client,
            McpToolSource(client, prefix="far_", name="peer") as source,
        ):
            source.register(local)
            wipe = local.get("far_wipe_notes")
            decided = policy.decide("far_wipe_notes", {}, wipe)
    assert wipe is not None
    assert wipe.metadata["mcp_hints"] == {"destructive": True, "open_world": False}
    assert isinstance(decided, Ask)


def test_local_flags_are_trusted_and_bad_hint_settings_are_refused() -> None:
    policy = PermissionRules.from_toml_text(RULES)
    registry = local_registry()
    assert isinstance(policy.decide("read_notes", {}, registry.get("read_notes")), Allow)
    assert isinstance(policy.decide("plain", {}, registry.get("plain")), Ask)
    with pytest.raises(RulesError, match=r"<string>:3: rule #1: read_only must be true or false"):
        PermissionRules.from_toml_text('[[rule]]\naction = "allow"\nread_only = "yes"\n')
    with pytest.raises(RulesError, match=r"<string>:1: trusted_mcp_servers must be a list"):
        PermissionRules.from_toml_text('trusted_mcp_servers = "db"\n')
