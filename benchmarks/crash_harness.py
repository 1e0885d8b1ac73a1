"""A crash harness: worker processes run calls on one shared store while they are killed
and the database restarts, and every request is counted by what became of it (issue 31).

N worker processes share one approval store (a SQLite file, or a PostgreSQL database).
This process is the client and the person: it sends each request to an idle worker,
repeats it on another worker when its worker died (as a client repeats a dropped call,
with a new call id) or when it failed because the store could not be reached, approves
every ticket the workers open, and SIGKILLs a busy worker every ``--kill-every`` seconds
(a new one takes its place). The tool's body appends its key and call id to an effects
file, then sleeps; its ``reconcile`` step reads that file.

``--transport`` says how a worker runs a call. ``execute`` (the default): the worker
calls ``registry.execute_sync``, and waits in process for the person's answer.
``mcp``: the worker serves its registry with ``serve_http`` (what ``dsh-tools serve-mcp
--http`` runs, ``approvals="pending"``) and calls it with the official MCP client over
HTTP, one bearer token for every worker (one client, as a client behind a load balancer
is); an ``APPROVAL_PENDING`` answer is repeated every 50 ms until the person answered,
as a model that was told to wait does. The request carries its idempotency key (``_meta``
over MCP) unless ``--no-key``: then a repeat is known by its agent, tool and arguments
only, and a repeat of a call that finished but whose reply was lost runs again, as a new
call (docs/once.md); the harness counts those apart.

``--db-restarts N`` restarts the database N times, spread over the run. On PostgreSQL it
is a real restart (``pg_ctl restart -m fast``: the server cuts every connection and comes
back) of the cluster in ``--pg-cluster DIR``, one that ``.ci/postgres start DIR`` made;
the workers' store calls fail while it is down (closed: an error result, never a body
without its journal entry) and work again once it is back. SQLite has no server: the
nearest thing is every worker killed at once (every connection to the file gone
together, a transaction cut short leaving its rollback journal) and new workers opening
the file again. A worker that exits by itself (it could not open the store while the
database was down) is replaced, and counted.

At the end it prints, per request: ran once, ran twice (or more), not run; how many
answers the client got were ``OUTCOME_UNKNOWN`` (unsettled) or reconciled (an unknown
attempt settled by the tool); and, from the call journal, how many approvals were spent
without a record. The promise: 0 runs against it (every second run with a key; without
one, a second run that began before the run before it had finished), 0 approvals spent
without a record, every request answered.

    python benchmarks/crash_harness.py --store /tmp/h.sqlite3 --workers 4 --requests 200 --kills 12
    python benchmarks/crash_harness.py --store postgresql://... --body blocking \\
        --db-restarts 2 --pg-cluster /tmp/pg --transport mcp
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import random
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

REGISTRY = r"""
import json, sys, time, uuid
from dsh_tools import Ask, ToolExecutionInput, ToolRegistry, define_tool, hookimpl
from dsh_tools_plugins.approval_store import open_approval_store

store_at, effects, body_kind, lease_s, body_s, reconciles, token, keyed = sys.argv[1:]


def charge(args, ctx):
    with open(effects, "a") as file:  # one short append: whole, whatever is killed
        file.write(args["key"] + " " + ctx.execution.call_id + "\n")
    time.sleep(float(body_s))
    return {"charged": args["key"]}


def reconcile(args, entry):
    with open(effects) as file:
        done = any(line.split()[0] == args["key"] for line in file if line.strip())
    return {"charged": args["key"], "reconciled": True} if done else None


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return Ask("charges money")


registry = ToolRegistry(
    approval=lambda request: "pending",
    approval_store=open_approval_store(store_at, timeout_s=60),
    approval_timeout_ms=600_000,  # a worker waits for the person's answer
    journal_lease_s=float(lease_s),
)
registry.register(define_tool(
    name="charge", description="Charge.", parameters={"key": {"type": "string"}},
    execute=charge, blocking=body_kind == "blocking",
    reconcile=reconcile if reconciles == "yes" else None,
))
registry.add_plugin(AskAlways(), name="permissions")
"""

EXECUTE = r"""
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    key = line.strip()
    call = ToolExecutionInput(
        f"{key}-{uuid.uuid4().hex[:8]}", "charge", {"key": key}, agent="client",
        idempotency_key=key if keyed == "yes" else None,
    )
    result = registry.execute_sync(call)
    code = result.error.info.code if result.is_error else None
    store = result.is_error and "approval store" in result.error.message
    reconciled = not result.is_error and result.value.get("reconciled") is True
    said = {"key": key, "code": code, "store": store, "reconciled": reconciled}
    print(json.dumps(said), flush=True)
"""

MCP = r"""
import functools, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from dsh_tools.bridges.mcp import serve_http

PENDING = "dsh-tools approvals approve "  # the line an APPROVAL_PENDING answer carries
UNKNOWN = "may or may not have run"  # what an OUTCOME_UNKNOWN answer says
KEY = "dsh-tools/idempotency-key"  # where a request's _meta names the call (docs/once.md)


async def main():
    async with anyio.create_task_group() as group:
        url = await group.start(
            functools.partial(serve_http, registry, port=0, approvals="pending")
        )
        headers = {"Authorization": f"Bearer {token}"}  # one client, whichever worker
        async with httpx2.AsyncClient(timeout=120, headers=headers) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="2026-07-28") as client:
                print(json.dumps({"ready": True}), flush=True)
                while line := await anyio.to_thread.run_sync(sys.stdin.readline):
                    key = line.strip()
                    meta = {KEY: key} if keyed == "yes" else None
                    while True:  # the model repeats its call until the person answered
                        result = await client.call_tool("charge", {"key": key}, meta=meta)
                        text = "".join(getattr(b, "text", "") for b in result.content)
                        if not (result.is_error and PENDING in text):
                            break
                        await anyio.sleep(0.05)
                    # What a model reads: the text (an MCP answer carries no code).
                    code = "error" if result.is_error else None
                    if result.is_error and UNKNOWN in text:
                        code = "OUTCOME_UNKNOWN"
                    store = result.is_error and "approval store" in text
                    value = {} if result.is_error else json.loads(text)
                    reconciled = value.get("reconciled") is True
                    said = {"key": key, "code": code, "store": store, "reconciled": reconciled}
                    print(json.dumps(said), flush=True)
        group.cancel_scope.cancel()


anyio.run(main)
"""

WORKERS = {"execute": REGISTRY + EXECUTE, "mcp": REGISTRY + MCP}
"""What a worker process runs: the registry, then the calls through ``execute_sync``,
or through the official MCP client and the worker's own ``serve_http`` server."""


class Worker:
    """One worker process, and the request it runs now (``None``: idle)."""

    def __init__(self, script: str, argv: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.request: str | None = None
        self.ready = False

    @property
    def stdout(self) -> IO[str]:
        assert self.process.stdout is not None
        return self.process.stdout

    def send(self, key: str) -> None:
        assert self.process.stdin is not None
        self.request = key
        self.process.stdin.write(key + "\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


CLUSTER = Path(__file__).resolve().parents[1] / ".ci" / "postgres"
"""The script that starts, restarts and stops a throwaway PostgreSQL cluster."""


class Fleet:
    """The workers, the requests still to answer, and the answers: the client's side."""

    def __init__(self, script: str, argv: list[str], keys: list[str], size: int) -> None:
        self.script = script
        self.argv = argv
        self.waiting = collections.deque(keys)
        self.answered: dict[str, dict[str, Any]] = {}
        self.repeated = 0
        self.exited = 0
        self.selector = selectors.DefaultSelector()
        self.workers: list[Worker] = []
        for _ in range(size):
            self.spawn()

    def spawn(self) -> None:
        worker = Worker(self.script, self.argv)
        self.workers.append(worker)
        self.selector.register(worker.stdout, selectors.EVENT_READ, worker)

    def step(self) -> None:
        """Hand requests to idle workers and read what the workers said."""
        for worker in self.workers:
            if worker.ready and worker.request is None and self.waiting:
                worker.send(self.waiting.popleft())
        for found, _ in self.selector.select(timeout=0.05):
            worker = found.data
            line = worker.stdout.readline()
            if not line:  # it exited by itself (a store it could not open): replaced
                self.exited += 1
                self.kill(worker)
                continue
            said = json.loads(line)
            if said.get("ready"):
                worker.ready = True
                continue
            worker.request = None
            if said["store"]:  # the store was unreachable: the client tries again
                self.repeated += 1
                self.waiting.append(said["key"])
            else:
                self.answered[said["key"]] = said

    def busy(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.request is not None]

    def kill(self, victim: Worker) -> None:
        """SIGKILL ``victim`` and start another; its request is sent again (the client
        repeats the dropped call)."""
        self.selector.unregister(victim.stdout)
        victim.kill()
        self.workers.remove(victim)
        if victim.request is not None and victim.request not in self.answered:
            self.waiting.appendleft(victim.request)
        self.spawn()

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.selector.close()


def run(options: argparse.Namespace) -> dict[str, Any]:
    """One run of the harness; returns the counts it prints."""
    from dsh_tools_plugins.approval_postgres import create_schema, is_postgres_url
    from dsh_tools_plugins.approval_store import open_approval_store

    workdir = Path(tempfile.mkdtemp(prefix="dsh-crash-"))
    effects = workdir / "effects.txt"
    effects.touch()
    store_at = options.store or str(workdir / "approvals.sqlite3")
    postgres = is_postgres_url(store_at)
    if postgres and options.db_restarts and not options.pg_cluster:
        raise SystemExit("--db-restarts on PostgreSQL needs --pg-cluster (see .ci/postgres)")
    argv = [
        store_at,
        str(effects),
        options.body,
        str(options.lease_s),
        str(options.body_s),
        "yes" if options.reconcile else "no",
        secrets.token_urlsafe(32),  # the bearer token of the one MCP client
        "yes" if options.keyed else "no",
    ]
    if postgres:
        create_schema(store_at, timeout_s=60)  # a deployment's first step (init-store)
    store = open_approval_store(store_at, timeout_s=60)
    keys = [f"req-{options.tag}-{n}" for n in range(options.requests)]
    stop = threading.Event()
    approver = threading.Thread(target=_approve, args=(store, stop), daemon=True)
    approver.start()
    fleet = Fleet(WORKERS[options.transport], argv, keys, options.workers)
    kills = restarts = 0
    started = time.monotonic()
    next_kill = started + options.kill_every
    try:
        while len(fleet.answered) < len(keys):
            if time.monotonic() - started > options.timeout_s:
                raise TimeoutError(f"{len(keys) - len(fleet.answered)} requests never answered")
            fleet.step()
            busy = fleet.busy()
            if kills < options.kills and busy and time.monotonic() >= next_kill:
                fleet.kill(random.choice(busy))
                kills += 1
                next_kill = time.monotonic() + options.kill_every
            # Restarts spread over the run: the n-th once n / (N + 1) of it is answered.
            due = len(keys) * (restarts + 1) / (options.db_restarts + 1)
            if restarts < options.db_restarts and busy and len(fleet.answered) >= due:
                _restart(fleet, options.pg_cluster if postgres else None)
                restarts += 1
    finally:
        stop.set()
        approver.join()
        fleet.close()
    try:
        counts = _counted(store, keys, fleet.answered, effects, time.monotonic() - started)
        # Without a key, a repeat of a finished call is a new call (docs/once.md): only a
        # second run that began before the one before it finished breaks the promise.
        lost_replies = 0 if options.keyed else counts["of them, after the run before finished"]
        counts["ran twice against the promise"] = counts["ran twice"] - lost_replies
        return {
            "kills": kills,
            "db restarts": restarts,
            "repeated after a store failure": fleet.repeated,
            "workers that exited by themselves": fleet.exited,
        } | counts
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()


def _restart(fleet: Fleet, cluster: str | None) -> None:
    """Restart the database: the PostgreSQL server in ``cluster``, or (SQLite, no server)
    every worker killed at once and started again."""
    if cluster is not None:
        subprocess.run([str(CLUSTER), "restart", cluster], check=True)
        return
    for worker in fleet.workers:
        worker.process.send_signal(signal.SIGKILL)  # all at once, then each replaced
    for victim in list(fleet.workers):
        fleet.kill(victim)


def _approve(store: Any, stop: threading.Event) -> None:
    """The person: approves every pending ticket, from this process."""
    from dsh_tools.approvals import TicketAnswer, TicketError, TicketState
    from dsh_tools_plugins.approval_store import ApprovalStoreError

    while not stop.is_set():
        # A ticket answered meanwhile or expired, or the database restarting: look again.
        with contextlib.suppress(TicketError, ApprovalStoreError):
            for ticket in store.list_tickets(state=TicketState.PENDING):
                with contextlib.suppress(TicketError):
                    store.answer_ticket(ticket.id, TicketAnswer("allowed-once", "ana", "harness"))
        stop.wait(0.05)


def _counted(
    store: Any,
    keys: list[str],
    answers: dict[str, dict[str, Any]],
    effects: Path,
    seconds: float,
) -> dict[str, Any]:
    """What became of each request: its runs by the effects file, its answer as the
    client saw it, and the approvals spent by the call journal."""
    from dsh_tools.approvals import TicketState

    runs: dict[str, list[str]] = collections.defaultdict(list)  # key: the call ids that ran it
    for line in effects.read_text().splitlines():
        key, call_id = line.split()
        runs[key].append(call_id)
    entries = store.list_calls()
    by_call = {entry.call_id: entry for entry in entries}
    recorded = {entry.ticket_id for entry in entries if entry.ticket_id}
    spent = [t.id for t in store.list_tickets(state=TicketState.RESUMED) if t.id not in recorded]
    codes = collections.Counter(answers[key]["code"] or "ok" for key in keys)
    return {
        "requests": len(keys),
        "seconds": round(seconds, 1),
        "ran once": sum(1 for key in keys if len(runs[key]) == 1),
        "ran twice": sum(1 for key in keys if len(runs[key]) >= 2),
        "of them, after the run before finished": sum(
            1 for key in keys if len(runs[key]) >= 2 and _one_after_another(runs[key], by_call)
        ),
        "not run": sum(1 for key in keys if not runs[key]),
        "unknown, unsettled": codes["OUTCOME_UNKNOWN"],
        "unknown, reconciled": sum(1 for key in keys if answers[key]["reconciled"]),
        "approvals spent without a record": len(spent),
        "results": dict(codes),
    }


def _one_after_another(call_ids: list[str], by_call: dict[str, Any]) -> bool:
    """Whether each run of a request began after the run before it had finished: a
    client without an idempotency key repeating a call whose reply it lost, which the
    journal can only take for the new call it looks like."""
    ran = [by_call.get(call_id) for call_id in call_ids]
    return all(
        before is not None
        and after is not None
        and before.finished_at is not None
        and before.finished_at <= after.started_at
        for before, after in itertools.pairwise(ran)
    )


def argparse_options(argv: list[str] | None = None) -> argparse.Namespace:
    """The harness's options from its command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", help="a SQLite file or a postgresql:// URL (default: a new SQLite file)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--kill-every", type=float, default=1.0, help="seconds between kills")
    parser.add_argument(
        "--db-restarts",
        type=int,
        default=0,
        help="database restarts spread over the run (SQLite: every worker killed at once)",
    )
    parser.add_argument(
        "--pg-cluster", help="the folder of a cluster `.ci/postgres start` made (to restart)"
    )
    parser.add_argument("--body", choices=["def", "blocking"], default="def")
    parser.add_argument("--body-s", type=float, default=0.2, help="how long a body sleeps")
    parser.add_argument("--lease-s", type=float, default=1.0, help="the journal's lease")
    parser.add_argument("--no-reconcile", dest="reconcile", action="store_false")
    parser.add_argument(
        "--transport",
        choices=sorted(WORKERS),
        default="execute",
        help="how a worker runs a call: execute_sync, or the official MCP client against "
        "the worker's own serve_http server (one client: the same bearer token everywhere)",
    )
    parser.add_argument(
        "--no-key",
        dest="keyed",
        action="store_false",
        help="send no idempotency key: a repeat is known by its tool and arguments",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--tag", default=f"{os.getpid()}", help="what the request keys carry")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    counts = run(argparse_options(argv))
    for name, value in counts.items():
        print(f"{name:>40}: {value}")
    broken = counts["ran twice against the promise"] + counts["approvals spent without a record"]
    return 0 if broken == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
