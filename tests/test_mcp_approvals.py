"""Approvals over MCP, with the official SDK client: an ask becomes an elicitation when
the client can elicit; each client is its own agent."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp import types as mcp_types

from approval_helpers import add_write_tool
from dsh_tools import MemoryApprovalStore, TicketState, ToolRegistry
from dsh_tools._models import ApprovalRequest, Ask, ToolExecution, ToolExecutionInput
from dsh_tools.bridges.mcp import McpToolSource, build_mcp_server, serve_http
from dsh_tools.hookspecs import hookimpl


def asking_registry() -> tuple[ToolRegistry, list[str]]:
    """A registry whose ``write`` tool always asks, and the paths its body wrote."""
    registry = ToolRegistry()
    runs = add_write_tool(registry)

    class AskFirst:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("writes files\x1b[2J")

    registry.add_plugin(AskFirst())
    return registry, runs


class User:
    """An MCP client's user, answering each elicitation with ``answers`` in turn."""

    def __init__(self, *answers: mcp_types.ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[mcp_types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        self.asked.append(params)
        return self.answers.pop(0)


def accept(decision: str, feedback: str | None = None) -> mcp_types.ElicitResult:
    content: dict[str, Any] = {"decision": decision}
    if feedback is not None:
        content["feedback"] = feedback
    return mcp_types.ElicitResult(action="accept", content=content)


def texts(result: mcp_types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_ask_elicits_with_the_calls_card_and_an_accepted_answer_runs_it_once(
    mode: str,
) -> None:
    registry, runs = asking_registry()
    user = User(accept("allow-once"))
    server = build_mcp_server(registry)
    with anyio.fail_after(10):
        async with Client(server, mode=mode, elicitation_callback=user) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert not result.is_error
    assert texts(result) == "written"
    assert runs == ["notes.txt"]
    [asked] = user.asked
    assert '"write"' in asked.message
    assert "notes.txt" in asked.message
    assert "writes files\\x1b[2J" in asked.message  # the reason, made safe to show
    assert "\x1b" not in asked.message
    decision = asked.requested_schema["properties"]["decision"]
    # The current spec's single choice with labels (oneOf of const and title), never the
    # deprecated enumNames.
    assert decision == {
        "type": "string",
        "title": "Decision",
        "oneOf": [
            {"const": "allow-once", "title": "Allow once"},
            {"const": "allow-always", "title": "Allow always"},
            {"const": "reject", "title": "Reject"},
        ],
    }


@pytest.mark.anyio
async def test_an_elicitation_shows_every_argument_of_a_call_without_a_card() -> None:
    from approval_helpers import HIDING, add_deploy_tool, assert_every_argument_shown

    registry, _ = asking_registry()
    add_deploy_tool(registry)
    user = User(accept("reject"))
    with anyio.fail_after(10):
        async with Client(build_mcp_server(registry), elicitation_callback=user) as client:
            await client.call_tool("deploy", HIDING)
    [asked] = user.asked
    assert_every_argument_shown(asked.message)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(
    "answer",
    [
        mcp_types.ElicitResult(action="decline"),
        accept("reject", "use docs/ instead"),
        mcp_types.ElicitResult(action="cancel"),
        accept("run it anyway"),
    ],
)
async def test_anything_but_an_allowing_answer_leaves_the_body_unrun(
    answer: mcp_types.ElicitResult, mode: str
) -> None:
    registry, runs = asking_registry()
    server = build_mcp_server(registry)
    with anyio.fail_after(10):
        async with Client(server, mode=mode, elicitation_callback=User(answer)) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert result.is_error
    assert runs == []


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_rejection_tells_the_model_the_users_feedback(mode: str) -> None:
    registry, runs = asking_registry()
    server = build_mcp_server(registry)
    user = User(accept("reject", "write it under docs/\x1b[2J instead"))
    with anyio.fail_after(10):
        async with Client(server, mode=mode, elicitation_callback=user) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert result.is_error
    # As every channel tells it: the rejection, then what the user said, made safe.
    said = 'the user rejected tool "write": write it under docs/\\x1b[2J instead'
    assert said in texts(result)
    assert runs == []


@pytest.mark.anyio
async def test_an_always_answer_holds_for_its_client_connection_only() -> None:
    registry, runs = asking_registry()
    server = build_mcp_server(registry)
    first = User(accept("allow-always"))
    second = User(accept("reject"))
    with anyio.fail_after(10):
        async with Client(server, mode="legacy", elicitation_callback=first) as client:
            await client.call_tool("write", {"path": "a.txt"})
            again = await client.call_tool("write", {"path": "a.txt"})
        async with Client(server, mode="legacy", elicitation_callback=second) as other:
            refused = await other.call_tool("write", {"path": "a.txt"})
    assert not again.is_error
    assert len(first.asked) == 1  # remembered for the first client
    assert refused.is_error
    assert len(second.asked) == 1  # asked again: another client is another agent
    assert runs == ["a.txt", "a.txt"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_cannot_elicit_is_refused_under_approvals_deny(mode: str) -> None:
    registry, runs = asking_registry()
    server = build_mcp_server(registry, approvals="deny")
    with anyio.fail_after(10):
        async with Client(server, mode=mode) as client:
            result = await client.call_tool("write", {"path": "notes.txt"})
    assert result.is_error
    assert "no approval channel is available" in texts(result)
    assert runs == []


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_can_elicit_now_is_asked_although_its_old_ticket_is_open(
    mode: str,
) -> None:
    """An earlier run of the client could not be asked and left a ticket; now it can
    elicit: it is asked at once (not told APPROVAL_PENDING), its answer closes the old
    ticket, and the call runs once."""
    registry, runs = asking_registry()
    store = MemoryApprovalStore()
    registry.approval_store = store
    server = build_mcp_server(registry, approvals="pending", client="mcp-editor")
    user = User(accept("allow-once"))
    with anyio.fail_after(10):
        async with Client(server, mode=mode) as earlier:
            pending = await earlier.call_tool("write", {"path": "a.txt"})
        async with Client(server, mode=mode, elicitation_callback=user) as now:
            ran = await now.call_tool("write", {"path": "a.txt"})
    assert "waiting for a person" in texts(pending)
    [ticket] = store.list_tickets()
    assert not ran.is_error, texts(ran)
    assert runs == ["a.txt"]
    assert len(user.asked) == 1
    closed = store.get_ticket(ticket.id)
    assert closed is not None
    assert closed.answer is not None
    assert (closed.state, closed.answer.channel) == (TicketState.RESUMED, "mcp")


@pytest.mark.anyio
async def test_a_client_known_by_its_connection_has_a_scope_of_128_random_bits() -> None:
    registry, _ = asking_registry()
    store = MemoryApprovalStore()
    registry.approval_store = store
    server = build_mcp_server(registry, approvals="pending")
    with anyio.fail_after(10):
        for _ in range(2):
            async with Client(server, mode="legacy") as client:
                await client.call_tool("write", {"path": "a.txt"})
    first, second = (ticket.agent for ticket in store.list_tickets())
    assert re.fullmatch(r"mcp-anon-[0-9a-f]{32}", first), first  # anonymous: see limits
    assert first != second  # two connections, two clients


@pytest.mark.anyio
async def test_a_remote_servers_older_enum_form_is_still_answered() -> None:
    from dsh_tools.bridges._mcp_elicit import elicitation_answerer

    answer = elicitation_answerer(lambda request: "allowed-always")
    decision = {"type": "string", "enum": ["allow-once", "allow-always", "reject"]}
    form = mcp_types.ElicitRequestFormParams(
        message="deploy?",
        requested_schema={"type": "object", "properties": {"decision": decision}},
    )
    filled = await answer(None, form)
    assert (filled.action, filled.content) == ("accept", {"decision": "allow-always"})


def _dsh(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The ``dsh-tools`` console script, as a person at another terminal runs it (``python
    -m dsh_tools`` refuses to run from inside the workspace)."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("dsh-tools")), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.anyio
async def test_a_client_that_cannot_elicit_waits_for_a_person_at_the_cli_and_runs_once(
    tmp_path: Path,
) -> None:
    """``serve-mcp --approvals pending`` over stdio with the SDK's client: the ask ends
    ``APPROVAL_PENDING``; a person approves from the CLI in another process; the model's
    repeated call runs once, and the one after it waits for a person again."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = tmp_path / "approvals.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TOOLS_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    common = ["--workspace", str(workspace), "--approvals-store", str(store)]
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "dsh_tools", *common, "serve-mcp", "--approvals", "pending"],
        env=env,
    )
    arguments = {"path": "w2.txt", "content": "hello\n"}
    with anyio.fail_after(60):
        async with Client(server) as client:
            pending = await client.call_tool("write_file", arguments)
            assert pending.is_error
            text = texts(pending)
            assert "APPROVAL_PENDING" in text or "waiting for a person" in text
            ticket = re.search(r"dsh-tools approvals approve (t-[0-9a-f]+)", text)
            assert ticket is not None, text
            assert not (workspace / "w2.txt").exists()

            again = await client.call_tool("write_file", arguments)  # still pending
            assert again.is_error
            assert ticket.group(1) in texts(again)  # the same ticket, not a second one

            approved = await anyio.to_thread.run_sync(
                lambda: _dsh(
                    "--approvals-store",
                    str(store),
                    "approvals",
                    "approve",
                    ticket.group(1),
                    env=env,
                )
            )
            assert approved.returncode == 0, approved.stderr

            ran = await client.call_tool("write_file", arguments)
            assert not ran.is_error, texts(ran)
            assert (workspace / "w2.txt").read_text() == "hello\n"
            (workspace / "w2.txt").unlink()

            once = await client.call_tool("write_file", arguments)
            assert once.is_error  # the approval was used up: a new ticket waits
            assert ticket.group(1) not in texts(once)
    assert not (workspace / "w2.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize(("answer", "ran"), [("allowed-once", True), ("rejected", False)])
async def test_a_remote_servers_elicitation_is_answered_through_the_hosts_channel(
    answer: str, ran: bool
) -> None:
    registry, runs = asking_registry()
    remote = build_mcp_server(registry)
    asked: list[ApprovalRequest] = []

    def person(request: ApprovalRequest) -> str:
        asked.append(request)
        return answer

    host = ToolRegistry()
    with anyio.fail_after(10):
        async with McpToolSource(remote, prefix="remote_", approval=person) as source:
            source.register(host)
            result = await host.scope("me").execute(
                ToolExecutionInput("local-1", "remote_write", {"path": "x.txt"})
            )
    assert result.is_error is not ran
    assert runs == (["x.txt"] if ran else [])
    [request] = asked
    assert (request.agent, request.tool_name, request.call_id) == ("me", "remote_write", "local-1")
    assert request.reason is not None
    assert "x.txt" in request.reason  # the remote call's card
    assert "\x1b" not in request.reason


@pytest.mark.anyio
async def test_an_elicitation_the_channel_cannot_fill_is_declined() -> None:
    from dsh_tools.bridges._mcp_elicit import elicitation_answerer

    answer = elicitation_answerer(lambda request: "allowed-once")
    form = mcp_types.ElicitRequestFormParams(
        message="your API key?",
        requested_schema={
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
    )
    assert (await answer(None, form)).action == "decline"
    empty = mcp_types.ElicitRequestFormParams(message="go on?", requested_schema={"type": "object"})
    assert (await answer(None, empty)).action == "accept"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_ask_elicits_over_streamable_http(anyio_backend: str, mode: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")
    registry, runs = asking_registry()
    user = User(accept("allow-once"))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            url = await group.start(functools.partial(serve_http, registry, port=0))
            async with Client(url, mode=mode, elicitation_callback=user) as client:
                result = await client.call_tool("write", {"path": "web.txt"})
            group.cancel_scope.cancel()
    assert not result.is_error
    assert runs == ["web.txt"]
    assert len(user.asked) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_elicitation_shows_an_earlier_attempt_and_a_yes_settles_it(
    tmp_path: Path, mode: str
) -> None:
    """A repeat (a new call id) of a call whose earlier attempt died is put to the user
    with that attempt, as a ticket shows it; their yes runs the call and settles it."""
    from dsh_tools.approvals import JournalEntry, JournalState, call_digest
    from dsh_tools_plugins.approval_store import SqliteApprovalStore

    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    registry, runs = asking_registry()
    registry.approval_store = store
    user = User(accept("allow-once"), accept("allow-once"))
    with anyio.fail_after(20):
        server = build_mcp_server(registry)
        async with Client(server, mode=mode, elicitation_callback=user) as client:
            first = await client.call_tool("write", {"path": "a.txt"})
            [journaled] = store.list_calls(tool="write")
            digest = call_digest("write", {"path": "b.txt"})
            dead = JournalEntry(journaled.agent, "dead", "write", digest, "c0", "host-a:42:x")
            assert store.begin_call(dead, 0.0).started  # its owner died at once
            second = await client.call_tool("write", {"path": "b.txt"})
    assert (first.is_error, second.is_error) == (False, False), texts(second)
    assert runs == ["a.txt", "b.txt"]
    assert "Earlier attempt" not in user.asked[0].message
    shown = user.asked[1].message
    assert "Earlier attempt: call c0 started " in shown
    assert "on host-a:42:x and stopped without recording its end: it may have run" in shown
    settled = store.get_call(journaled.agent, "dead")
    assert settled.state is JournalState.FINISHED  # settled by the user's answer
    assert settled.result["error"]["info"]["code"] == "OUTCOME_UNKNOWN"
