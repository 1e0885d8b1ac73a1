"""MCP clients over HTTP known by their bearer token: the same agent scope on every
request and every server process, never another client's; with the official SDK client
over real HTTP."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from dsh_tools.bridges._mcp_clients import (
    MIN_DISTINCT_CHARS,
    MIN_SECRET_CHARS,
    ClientIdentityError,
    bearer_scope,
)
from dsh_tools.bridges.mcp import serve_http
from test_mcp_approvals import User, accept, asking_registry, texts

ALICE = "alice-Zk3q9XvLw2Hn8RtB5yPm1Jc7Gd4Fs6Ae0Ku"
BOB = "bob-Qw8Er5Ty2Ui9Op3As6Df1Gh4Jk7Lz0Xc"


@contextlib.asynccontextmanager
async def client(url: str, token: str | None, **options: Any) -> AsyncIterator[Client]:
    """The SDK's client at ``url``, its requests carrying ``token`` as a bearer token."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, **options) as connected:
            yield connected


def test_a_bearer_token_names_one_scope_that_does_not_show_the_token() -> None:
    alice = bearer_scope(f"Bearer {ALICE}")
    assert alice is not None
    assert re.fullmatch(r"mcp-[0-9a-f]{32}", alice)
    assert bearer_scope(f"bearer  {ALICE} ") == alice  # the same client, however spelled
    assert bearer_scope(f"Bearer {BOB}") != alice
    assert ALICE not in alice
    assert bearer_scope(None) is None
    assert bearer_scope("Basic dXNlcjpwYXNz") is None
    with pytest.raises(ClientIdentityError, match=f"at least {MIN_SECRET_CHARS}"):
        bearer_scope("Bearer short")


@pytest.mark.parametrize(
    ("secret", "said"),
    [
        ("a" * 32, "1 different characters);"),
        ("ab" * 40, "2 different characters);"),
        ("abcdefg-" * 5, "8 different characters, a shorter text repeated);"),
        ("1234567" * 6, "7 different characters);"),
    ],
)
def test_a_bearer_token_that_is_plainly_not_random_names_no_client(secret: str, said: str) -> None:
    """Long enough is not enough: 32 identical characters, or a short text repeated,
    would let anyone who guesses the pattern take the client's scope."""
    expected = re.escape(f"not random (it has {said}")
    with pytest.raises(ClientIdentityError, match=expected) as raised:
        bearer_scope(f"Bearer {secret}")
    assert f"at least {MIN_DISTINCT_CHARS} different characters" in str(raised.value)
    assert secret not in str(raised.value)


def test_a_random_token_of_any_common_kind_names_a_client() -> None:
    import secrets

    for token in (secrets.token_hex(16), secrets.token_urlsafe(32), str(uuid.uuid4())):
        assert bearer_scope(f"Bearer {token}") is not None


@pytest.mark.anyio
async def test_an_always_answer_holds_for_the_token_across_per_request_calls_only(
    anyio_backend: str,
) -> None:
    """On the per-request protocol every call is a request (and an SDK session) of its
    own: a client known by its token is asked once; another token, or none, is asked
    again."""
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")
    registry, runs = asking_registry()
    alice, bob = User(accept("allow-always")), User(accept("reject"))
    anonymous = User(accept("allow-always"), accept("allow-once"))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            url = await group.start(functools.partial(serve_http, registry, port=0))
            async with client(url, ALICE, elicitation_callback=alice) as connected:
                for _ in range(3):
                    assert not (await connected.call_tool("write", {"path": "a"})).is_error
            async with client(url, ALICE) as again:  # no callback: it cannot be asked
                assert not (await again.call_tool("write", {"path": "a"})).is_error
            async with client(url, BOB, elicitation_callback=bob) as other:
                assert (await other.call_tool("write", {"path": "a"})).is_error
            async with client(url, None, elicitation_callback=anonymous) as nobody:
                for _ in range(2):
                    assert not (await nobody.call_tool("write", {"path": "a"})).is_error
            group.cancel_scope.cancel()
    assert (len(alice.asked), len(bob.asked), len(anonymous.asked)) == (1, 1, 2)
    assert runs == ["a"] * 6


@pytest.mark.anyio
async def test_a_short_bearer_token_runs_nothing(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")
    registry, runs = asking_registry()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            url = await group.start(functools.partial(serve_http, registry, port=0))
            async with client(url, "short", elicitation_callback=User(accept("allow-once"))) as c:
                result = await c.call_tool("write", {"path": "a"})
            group.cancel_scope.cancel()
    assert result.is_error
    assert "at least 32" in texts(result)
    assert runs == []


@pytest.mark.anyio
async def test_a_pending_call_says_when_its_client_cannot_be_found_again(
    anyio_backend: str,
) -> None:
    """A per-request client without a token is told its repeat will not find the ticket;
    a client with a token, or with a session, is not."""
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")
    registry, runs = asking_registry()
    said: dict[str, str] = {}
    serve = functools.partial(serve_http, registry, port=0, approvals="pending")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            url = await group.start(serve)
            for name, token, mode in [("nobody", None, "auto"), ("alice", ALICE, "auto")]:
                async with client(url, token, mode=mode) as connected:
                    said[name] = texts(await connected.call_tool("write", {"path": name}))
            async with client(url, None, mode="legacy") as session:
                said["session"] = texts(await session.call_tool("write", {"path": "s"}))
            group.cancel_scope.cancel()
    assert all("waiting for a person" in text for text in said.values()), said
    assert "carry no bearer token" in said["nobody"]
    assert "carry no bearer token" not in said["alice"]
    assert "carry no bearer token" not in said["session"]
    assert runs == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _dsh(*argv: str) -> list[str]:
    return [str(Path(sys.executable).with_name("dsh-tools")), *argv]


@contextlib.contextmanager
def servers(
    common: list[str], env: dict[str, str], count: int, log: Path, *options: str
) -> Iterator[list[str]]:
    """``count`` ``dsh-tools serve-mcp --http --approvals pending`` processes, their URLs;
    what they write to stderr goes to ``log``."""
    ports = [_free_port() for _ in range(count)]
    serve = ["serve-mcp", "--http", "--approvals", "pending", *options, "--port"]
    with log.open("a") as errors:
        processes = [
            subprocess.Popen(
                _dsh(*common, *serve, str(port)),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            for port in ports
        ]
    try:
        for port, process in zip(ports, processes, strict=True):
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, log.read_text()
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                assert time.monotonic() < deadline, "serve-mcp did not listen"
                time.sleep(0.05)
        yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


class Site:
    """A workspace and an approval store in ``folder``, served by ``serve-mcp`` processes
    and answered with ``dsh-tools approvals`` (environment without ``DSH_TOOLS_*``)."""

    def __init__(self, folder: Path) -> None:
        self.workspace, self.store, self.log = folder / "ws", folder / "store.db", folder / "log"
        self.workspace.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TOOLS_")}
        self.env["XDG_STATE_HOME"] = str(folder / "state")

    def servers(self, count: int, *options: str) -> contextlib.AbstractContextManager[list[str]]:
        common = ["--workspace", str(self.workspace), "--approvals-store", str(self.store)]
        return servers(common, self.env, count, self.log, *options)

    async def approve(self, ticket: str) -> None:
        approve = _dsh("--approvals-store", str(self.store), "approvals", "approve", ticket)
        done = await anyio.run_process(approve, env=self.env, check=False)
        assert done.returncode == 0, done.stderr


def ticket_in(text: str) -> str:
    found = re.search(r"dsh-tools approvals approve (t-[0-9a-f]+)", text)
    assert found is not None, text
    return found[1]


ARGUMENTS = {"path": "w.txt", "content": "hello\n"}


@pytest.mark.anyio
async def test_a_call_approved_from_the_cli_runs_once_on_whichever_server_it_is_repeated(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Two ``serve-mcp --http`` processes share a store: a client's call waits for a
    person at the first, is approved from the CLI, and its repeat at the second runs once;
    another client's same call finds no approval of its own."""
    if anyio_backend != "asyncio":
        pytest.skip("one run is enough: the servers are processes")
    site = Site(tmp_path)
    written = site.workspace / "w.txt"
    with site.servers(2) as (first, second), anyio.fail_after(90):
        async with client(first, ALICE) as alice:
            ticket = ticket_in(texts(await alice.call_tool("write_file", ARGUMENTS)))
        async with client(second, ALICE) as alice:  # still waiting: the same ticket
            assert ticket in texts(await alice.call_tool("write_file", ARGUMENTS))
        await site.approve(ticket)
        async with client(second, BOB) as bob:  # another client: not its approval
            refused = texts(await bob.call_tool("write_file", ARGUMENTS))
        assert "APPROVAL_PENDING" in refused or "waiting for a person" in refused
        assert ticket not in refused
        assert not written.exists()
        async with client(second, ALICE) as alice:
            ran = await alice.call_tool("write_file", ARGUMENTS)
            assert not ran.is_error, texts(ran)
            assert written.read_text() == "hello\n"
            written.unlink()
        async with client(first, ALICE) as alice:
            once = texts(await alice.call_tool("write_file", ARGUMENTS))
    assert ticket not in once  # used up: a new ticket waits
    assert not written.exists()


@pytest.mark.anyio
async def test_a_repeat_held_by_approval_wait_runs_when_the_cli_approves(
    tmp_path: Path, anyio_backend: str
) -> None:
    """``--approval-wait-ms``: the client's repeat, at another server process, waits for
    the person; the approval from the CLI ends the wait and the body runs once."""
    if anyio_backend != "asyncio":
        pytest.skip("one run is enough: the servers are processes")
    site = Site(tmp_path)
    with site.servers(1) as [first], anyio.fail_after(90):
        async with client(first, ALICE) as alice:
            ticket = ticket_in(texts(await alice.call_tool("write_file", ARGUMENTS)))
    held: list[str] = []
    with site.servers(1, "--approval-wait-ms", "60000") as [second]:
        async with client(second, ALICE) as alice, anyio.create_task_group() as group:

            async def repeat() -> None:
                result = await alice.call_tool("write_file", ARGUMENTS)
                held.append("error" if result.is_error else "ran")

            group.start_soon(repeat)
            await site.approve(ticket)
    assert held == ["ran"]
    assert (site.workspace / "w.txt").read_text() == "hello\n"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--approval-wait-ms", "100"], "--approval-wait-ms needs --approvals pending"),
        (["--approvals", "pending", "--approval-wait-ms", "-1"], "approval_timeout_ms must be"),
    ],
)
def test_a_bad_approval_wait_is_a_usage_error(
    tmp_path: Path, options: list[str], problem: str
) -> None:
    site = Site(tmp_path)
    command = _dsh("--workspace", str(site.workspace), "serve-mcp", "--http", "--port", "1")
    done = subprocess.run(
        [*command, *options], env=site.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert problem in done.stderr
