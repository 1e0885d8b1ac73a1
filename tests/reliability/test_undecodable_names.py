"""A file whose name is not UTF-8 in the workspace: every wire still carries the answer.

The project's rule: a name the OS gives as bytes that do not decode is shown with U+FFFD
(``dsh_tools._json.unicode_text``). These tests hold the end-to-end promises: an MCP server
on stdio answers ``list_dir`` and keeps serving, and the audit log records every call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools_plugins.audit import AuditLog, read_audit_log
from dsh_tools_plugins.tools import workspace_tools

LATIN1_NAME = b"caf\xe9.txt"
SHOWN = "caf\ufffd.txt"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    try:
        with open(os.fsencode(root) + b"/" + LATIN1_NAME, "wb") as handle:
            handle.write(b"x\n")
    except OSError:  # pragma: no cover - a file system that refuses non-UTF-8 names
        pytest.skip("this file system refuses names that are not UTF-8")
    return root


@pytest.fixture
def anyio_backend() -> str:
    """The server under test is a subprocess: one client backend is enough."""
    return "asyncio"


@pytest.mark.anyio
async def test_serve_mcp_answers_list_dir_and_keeps_serving(workspace: Path) -> None:
    mcp = pytest.importorskip("mcp")
    from mcp.client.stdio import stdio_client

    server = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-m", "dsh_tools", "--workspace", str(workspace), "serve-mcp"],
    )
    with anyio.fail_after(30):
        async with stdio_client(server) as (read, write), mcp.ClientSession(read, write) as s:
            await s.initialize()
            listed = await s.call_tool("list_dir", {})
            again = await s.call_tool("read_file", {"path": "missing.txt"})
    assert not listed.is_error
    assert [block.text for block in listed.content] == [SHOWN]
    assert listed.structured_content is not None
    assert listed.structured_content["entries"] == [{"name": SHOWN, "type": "file"}]
    assert again.is_error  # the server is alive and answers the next call


def test_the_audit_log_records_a_listing_with_such_a_name(workspace: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    registry = ToolRegistry()
    for tool in workspace_tools(workspace):
        registry.register(tool)
    registry.add_plugin(AuditLog(log))

    result = registry.execute_sync(ToolExecutionInput("call-1", "list_dir", {}))

    assert result.text == SHOWN
    events = list(read_audit_log(log, strict=True))
    assert [event.event for event in events] == ["tool/call", "tool/result"]
    assert events[1].data["content"] == [{"type": "text", "text": SHOWN}]
