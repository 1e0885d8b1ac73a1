"""Case 11: approvals at scale on one PostgreSQL server.

Four worker processes share one PostgreSQL approval store. Each runs ten threads, and
each thread makes calls that ask a person: the approval channel answers ``pending``, so
every call opens a ticket and waits for an answer in process (``approval_timeout_ms``),
woken by ``LISTEN``/``NOTIFY``. This process is the person: it lists the pending tickets
and approves each one, from outside the workers. Every call's body writes its call number
and the time it started.

Reported: how many calls ran (0 lost: every call's body ran; 0 twice: none ran more than
once), and the time from an answer (taken just before ``answer_ticket`` is sent) to the
start of the body it released, p50 and p99 (target p99 <= 100 ms). This is a smaller
version of the issue's benchmark: the workers call ``execute_sync`` directly rather than
through ``serve-mcp --http``, so it measures the store and the pipeline's waiting, not
the MCP transport.

Needs a server: ``DSH_TOOLS_TEST_POSTGRES_URL`` (see ``.ci/postgres``); the case runs in a
schema of its own and drops it afterwards. Without one it reports itself skipped.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from _harness import Row, Settings

WORKERS = 4
THREADS = 10
TARGET_P99_MS = 100.0

_WORKER = """
import json, sys, threading, time
from dsh_tools import Ask, ToolExecutionInput, ToolRegistry, define_tool, hookimpl
from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

url, worker, threads, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
started = []

class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return Ask("deploys")

def body(args, ctx):
    started.append((args["n"], time.time()))
    return "deployed"

store = PostgresApprovalStore(url, timeout_s=30)
registry = ToolRegistry(
    approval=lambda request: "pending", approval_store=store, approval_timeout_ms=120_000
)
registry.register(define_tool(name="deploy", description="Deploy.",
    parameters={"n": {"type": "integer", "required": True}}, execute=body))
registry.add_plugin(AskAlways())
codes = []

def run(thread):
    for index in range(calls):
        n = (worker * threads + thread) * calls + index
        call = ToolExecutionInput(f"c{n}", "deploy", {"n": n}, agent=f"agent-{n}")
        result = registry.execute_sync(call)
        codes.append("ok" if not result.is_error else result.error.info.code)

pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
for thread in pool:
    thread.start()
for thread in pool:
    thread.join()
print(json.dumps({"started": started, "codes": codes}))
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
        calls = 2 if settings.quick else 10
        return _measure(f"{url}?options=-csearch_path%3D{schema}", calls)
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def _measure(url: str, calls: int) -> list[Row]:
    from dsh_tools.approvals import TicketAnswer, TicketState
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    total = WORKERS * THREADS * calls
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, url, str(w), str(THREADS), str(calls)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent,
        )
        for w in range(WORKERS)
    ]
    store = PostgresApprovalStore(url, timeout_s=30)
    answered: dict[int, float] = {}
    deadline = time.monotonic() + 600
    while len(answered) < total and time.monotonic() < deadline:
        for ticket in store.list_tickets(state=TicketState.PENDING):
            n = int(ticket.arguments["n"])  # type: ignore[call-overload]
            if n not in answered:
                answered[n] = time.time()
                store.answer_ticket(ticket.id, TicketAnswer("allowed-once", "bench", "bench"))
        time.sleep(0.002)
    outputs = [json.loads(worker.communicate(timeout=600)[0]) for worker in workers]
    store.close()
    started = [tuple(pair) for output in outputs for pair in output["started"]]
    runs: dict[int, int] = {}
    for n, _ in started:
        runs[n] = runs.get(n, 0) + 1
    lost = total - len(runs)
    twice = sum(1 for count in runs.values() if count > 1)
    latencies = sorted((at - answered[n]) * 1000 for n, at in started if n in answered)
    p50 = statistics.median(latencies) if latencies else float("nan")
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else p50
    note = f"{WORKERS} processes x {THREADS} threads, {total} asks, answered from another process"
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
        Row("11", "answer to body start, p50", p50, min(latencies, default=p50), "ms"),
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
