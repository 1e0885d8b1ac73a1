"""``dsh-tools serve-mcp`` over stdio, started afresh for every call (as an editor restarts
it, or the MCP Inspector's CLI runs one process per call): its client keeps one scope for
the same workspace and store, so a ticket approved at the command line is found by the
next process and runs once; the server says on standard error which store it uses."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from dsh_tools.cli import EXIT_OK, EXIT_USAGE, main
from test_mcp_approvals import texts

DSH_TOOLS = str(Path(sys.executable).with_name("dsh-tools"))
ARGUMENTS = {"path": "out.txt", "content": "hello\n"}


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """A workspace, and the environment an MCP host starts the server in (its own
    ``XDG_STATE_HOME``); the command line of this test runs in the same one."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TOOLS_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    for name in [k for k in os.environ if k.startswith("DSH_TOOLS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))  # restored after the test
    return workspace, env


async def one_call(
    workspace: Path, env: dict[str, str], log: Path, *options: str
) -> tuple[Any, str]:
    """One ``write_file`` call through a server process of its own, and what it printed
    on standard error."""
    params = StdioServerParameters(
        command=DSH_TOOLS,
        args=["--workspace", str(workspace), "serve-mcp", "--approvals", "pending", *options],
        env=env,
    )
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("write_file", ARGUMENTS)
    return result, log.read_text()


def approve(workspace: Path, ticket: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--workspace", str(workspace), "approvals", "approve", ticket], stdout=out, stderr=err
    )
    return code, out.getvalue() + err.getvalue()


def ticket_of(result: Any) -> str:
    found = re.search(r"dsh-tools approvals approve (t-[0-9a-f]+)", texts(result))
    assert found is not None, texts(result)
    return found.group(1)


def test_a_restarted_server_finds_the_ticket_approved_meanwhile_and_runs_it_once(
    places: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    workspace, env = places

    async def scenario() -> None:
        with anyio.fail_after(120):
            first, said = await one_call(workspace, env, tmp_path / "1.log")
            ticket = ticket_of(first)
            store = re.search(r"dsh-tools: approval store: (\S+\.sqlite3), the default store", said)
            assert store is not None, said
            assert Path(store.group(1)).is_relative_to(tmp_path / "state")
            agent = re.search(r"the stdio client calls as agent (mcp-[0-9a-f]{32})\n", said)
            assert agent is not None, said

            assert await anyio.to_thread.run_sync(approve, workspace, ticket) == (
                EXIT_OK,
                f"{ticket}: allowed-once by {_person()}\n",
            )
            ran, said_again = await one_call(workspace, env, tmp_path / "2.log")
            assert not ran.is_error, texts(ran)
            assert f"calls as agent {agent.group(1)}\n" in said_again  # the same client
            assert (workspace / "out.txt").read_text() == "hello\n"
            (workspace / "out.txt").unlink()

            once, _ = await one_call(workspace, env, tmp_path / "3.log")
            assert ticket_of(once) != ticket  # used up: a new question, nothing ran
            assert not (workspace / "out.txt").exists()

    anyio.run(scenario)


def test_a_named_client_is_a_scope_of_its_own(
    places: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    workspace, env = places

    async def scenario() -> None:
        with anyio.fail_after(120):
            alice, said = await one_call(workspace, env, tmp_path / "a.log", "--client", "alice")
            assert "the stdio client calls as agent mcp-alice\n" in said
            assert approve(workspace, ticket_of(alice))[0] == EXIT_OK
            bob, _ = await one_call(workspace, env, tmp_path / "b.log", "--client", "bob")
            assert ticket_of(bob) != ticket_of(alice)  # alice's yes is not bob's
            again, _ = await one_call(workspace, env, tmp_path / "c.log", "--client", "alice")
            assert not again.is_error, texts(again)

    anyio.run(scenario)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--client", "a/b"], "--client 'a/b': a name of letters"),
        (["--http", "--client", "alice"], "--client names the one client of a stdio server"),
    ],
)
def test_a_client_name_that_cannot_be_a_scope_is_bad_usage(
    places: tuple[Path, dict[str, str]], options: list[str], problem: str
) -> None:
    workspace, _ = places
    out, err = io.StringIO(), io.StringIO()
    argv = ["--no-plugins", "--workspace", str(workspace), "serve-mcp", *options]
    assert main(argv, stdin=io.StringIO(""), stdout=out, stderr=err) == EXIT_USAGE
    assert problem in err.getvalue()
    assert out.getvalue() == ""


def started(argv: list[str], env: dict[str, str], arguments: dict[str, Any]) -> Any:
    """A server process that was sent the handshake and one ``run_command`` call."""
    server = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=env,
    )  # fmt: skip
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "run_command", "arguments": arguments},
        },
    ]
    assert server.stdin is not None
    server.stdin.write("".join(json.dumps(message) + "\n" for message in messages))
    server.stdin.flush()
    return server


def answered(server: Any) -> str:
    """The text of the call's result; the server then ends."""
    assert server.stdout is not None
    while line := server.stdout.readline():
        reply = json.loads(line)
        if reply.get("id") == 2:
            server.stdin.close()
            server.wait(timeout=30)
            server.stdout.close()
            return "".join(block["text"] for block in reply["result"]["content"])
    raise AssertionError("the server ended without answering")


def test_a_server_killed_while_the_approved_call_runs_never_runs_it_again(
    places: tuple[Path, dict[str, str]],
) -> None:
    """SIGKILL mid-call: the ticket was taken when the call started, so the restarted
    server's repeat asks anew, and the command ran once."""
    workspace, env = places
    argv = [DSH_TOOLS, "--workspace", str(workspace), "--sandbox", "off", "serve-mcp"]
    argv += ["--approvals", "pending"]
    arguments = {"command": "echo ran >> marker.txt; sleep 5"}
    first = answered(started(argv, env, arguments))
    ticket = re.search(r"approvals approve (t-[0-9a-f]+)", first)
    assert ticket is not None, first
    assert approve(workspace, ticket.group(1))[0] == EXIT_OK

    running = started(argv, env, arguments)
    marker = workspace / "marker.txt"
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(running.pid, signal.SIGKILL)
    running.wait(timeout=30)
    running.stdin.close()
    running.stdout.close()

    again = answered(started(argv, env, arguments))
    assert "waiting for a person" in again
    assert ticket.group(1) not in again  # a new question: the approval was used
    assert marker.read_text() == "ran\n"  # once


def _person() -> str:
    import getpass

    return getpass.getuser()
