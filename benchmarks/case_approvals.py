"""Case 11: approvals at scale, four ``serve-mcp --http`` workers on one PostgreSQL server.

Four ``dsh-tools serve-mcp --http --approvals pending --approval-wait-ms 30000`` worker
processes share one PostgreSQL approval store and write an audit log each. This process
runs 400 MCP clients (the official SDK's, on the per-request protocol 2026-07-28), each
known by a bearer token of its own. Each client calls ``write_file`` (which the default
rules ask a person about) and repeats the call until it runs, every repeat going to the
next worker: a call waits in its worker up to 30 seconds (the in-process waiter, woken by
``LISTEN``/``NOTIFY``), then ends ``APPROVAL_PENDING`` and the client repeats it. Another
process is the person: once the 400 tickets are pending, it approves them in a random
order, one every 20 ms (50 answers a second), noting the time just before each answer.

Reported: how many asks ran exactly once (0 lost, 0 twice; from the workers' audit logs,
asserted), and the time from an answer to the start of the body it released (the audit
log's ``started``, written by the guard just before the body is dispatched), p50 and
p99 (target p99 <= 100 ms); the note says how many ran at a repeat rather than in the
call that was waiting. The audit logs and the workspace live in ``/dev/shm`` where there
is one: the audit log syncs every event to disk, and this case measures approvals, not
the disk.

Needs a server: ``DSH_TOOLS_TEST_POSTGRES_URL`` (see ``.ci/postgres``); the case runs in a
schema of its own and drops it afterwards. Without one it reports itself skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from _harness import Row, Settings

WORKERS = 4
CLIENTS = 400
WAIT_MS = 30_000
ANSWER_EVERY_S = 0.02
TARGET_P99_MS = 100.0

_PERSON = """
import json, random, sys, time
from dsh_tools.approvals import TicketAnswer, TicketState
from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

url, total = sys.argv[1], int(sys.argv[2])
store = PostgresApprovalStore(url, timeout_s=30)
deadline = time.monotonic() + 300
while len(pending := store.list_tickets(state=TicketState.PENDING)) < total:
    if time.monotonic() > deadline:
        break
    time.sleep(0.05)
random.shuffle(pending)
answered = {}
for ticket in pending:
    time.sleep(float(sys.argv[3]))
    answered[ticket.arguments["path"]] = time.time()
    store.answer_ticket(ticket.id, TicketAnswer("allowed-once", "bench", "bench"))
print(json.dumps(answered))
"""


def run(settings: Settings) -> list[Row]:
    url = os.environ.get("DSH_TOOLS_TEST_POSTGRES_URL")
    if not url:
        return [Row("11", "approvals on PostgreSQL", unit="", note="skipped: no server")]
    try:
        import psycopg
    except ImportError:
        return [Row("11", "approvals on PostgreSQL", unit="", note="skipped: no psycopg")]
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    try:
        from dsh_tools_plugins.approval_postgres import create_schema

        clients = CLIENTS // 4 if settings.quick else CLIENTS
        create_schema(f"{url}?options=-csearch_path%3D{schema}")
        return _measure(f"{url}?options=-csearch_path%3D{schema}", clients)
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _workers(url: str, folder: Path) -> Iterator[list[str]]:
    """The four ``serve-mcp --http`` workers, their URLs; each writes ``audit-N.jsonl``."""
    dsh = str(Path(sys.executable).with_name("dsh-tools"))
    workspace = folder / "workspace"
    workspace.mkdir()
    ports = [_free_port() for _ in range(WORKERS)]
    store = ["--workspace", str(workspace), "--approvals-store", url]
    serve = ["serve-mcp", "--http", "--approvals", "pending", "--approval-wait-ms", str(WAIT_MS)]
    with (folder / "workers.log").open("a") as log:
        processes = [
            subprocess.Popen(
                [
                    dsh,
                    *store,
                    "--audit-log",
                    str(folder / f"audit-{n}.jsonl"),
                    *serve,
                    "--port",
                    str(port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            for n, port in enumerate(ports)
        ]
    try:
        for port, process in zip(ports, processes, strict=True):
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((folder / "workers.log").read_text()[-2000:])
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
        yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


async def _client(urls: list[str], n: int, outcomes: dict[int, str]) -> None:
    """Client ``n``: its call, repeated at the next worker until it runs."""
    import httpx2
    from mcp import Client, types
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}
    arguments = {"path": f"{n}.txt", "content": f"{n}\n"}
    # Plain HTTP on loopback: no certificates to load for each of the 400 clients.
    async with httpx2.AsyncClient(headers=headers, timeout=120, verify=False) as http:
        for attempt in range(200):
            transport = streamable_http_client(urls[(n + attempt) % WORKERS], http_client=http)
            async with Client(transport, mode="2026-07-28") as client:
                result = await client.call_tool("write_file", arguments)
            text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
            if not result.is_error:
                outcomes[n] = f"ran at call {attempt + 1}"
                return
            if "APPROVAL_PENDING" not in text and "waiting for a person" not in text:
                outcomes[n] = f"failed: {text[:200]}"
                return
    outcomes[n] = "still pending"


async def _clients(urls: list[str], total: int) -> dict[int, str]:
    import anyio

    outcomes: dict[int, str] = {}
    async with anyio.create_task_group() as group:
        for n in range(total):
            group.start_soon(_client, urls, n, outcomes)
    return outcomes


def _body_starts(folder: Path) -> dict[str, list[float]]:
    """Each path's body starts, from the workers' audit logs (calls that ran only)."""
    paths: dict[str, str] = {}
    starts: dict[str, list[float]] = {}
    for log in folder.glob("audit-*.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "tool/call":
                paths[event["call_id"]] = event["arguments"]["path"]
            elif not event["is_error"]:
                started = datetime.fromisoformat(event["started"]).timestamp()
                starts.setdefault(paths[event["call_id"]], []).append(started)
    return starts


def _measure(url: str, total: int) -> list[Row]:
    import anyio

    memory = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=memory) as tmp, _workers(url, Path(tmp)) as urls:
        person = subprocess.Popen(
            [sys.executable, "-c", _PERSON, url, str(total), str(ANSWER_EVERY_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        outcomes = anyio.run(_clients, urls, total)
        answered: dict[str, float] = json.loads(person.communicate(timeout=600)[0])
        starts = _body_starts(Path(tmp))
    ran = {path: len(times) for path, times in starts.items()}
    lost = total - len(ran)
    twice = sum(1 for count in ran.values() if count > 1)
    failed = [
        f"{n}: {outcome}" for n, outcome in outcomes.items() if not outcome.startswith("ran ")
    ]
    repeated = sum(1 for outcome in outcomes.values() if outcome != "ran at call 1")
    assert lost == 0, f"{lost} of {total} asks never ran: {failed[:3]}"
    assert twice == 0, f"{twice} asks ran more than once"
    latencies = sorted((starts[path][0] - at) * 1000 for path, at in answered.items())
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    note = (
        f"{WORKERS} serve-mcp --http workers, {total} MCP clients ({repeated} ran at a "
        f"repeat); the in-process waiter (--approval-wait-ms {WAIT_MS}), LISTEN/NOTIFY"
    )
    return [
        Row(
            "11",
            "asks that ran exactly once",
            float(total - lost - twice),
            None,
            "calls",
            note=f"{lost} lost, {twice} twice; {note}",
            met=lost == 0 and twice == 0,
            target=f"{total} of {total}",
        ),
        Row("11", "answer to body start, p50", p50, latencies[0], "ms"),
        Row(
            "11",
            "answer to body start, p99",
            p99,
            None,
            "ms",
            target=f"<= {TARGET_P99_MS:g} ms",
            met=p99 <= TARGET_P99_MS,
        ),
    ]
