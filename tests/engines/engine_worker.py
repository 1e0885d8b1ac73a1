"""A worker or host process of the engine tests, which a test may kill mid-body.

    engine_worker.py inline STATE CALL_ID CALL          # run a call, print its result
    engine_worker.py inline-resume STATE TICKET         # resume a ticket, print its result
    engine_worker.py temporal STATE TARGET QUEUE        # a Temporal worker, until killed
    engine_worker.py dbos STATE DB_URL SCHEMA WID CALL  # run a workflow, print its result

Every result is printed as one line of JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from engine_tools import build_registry, dumps

from dsh_tools import ToolExecutionInput
from dsh_tools._models import result_to_json


def inline(state: Path, call_id: str, call: dict[str, Any]) -> None:
    registry = build_registry(state)
    result = registry.execute_sync(
        ToolExecutionInput(call_id, call["name"], call["arguments"], agent=call.get("agent"))
    )
    print(dumps(result_to_json(result)), flush=True)


def inline_resume(state: Path, ticket: str) -> None:
    print(dumps(result_to_json(build_registry(state).resume_sync(ticket))), flush=True)


async def temporal(state: Path, target: str, queue: str) -> None:
    from engine_flows import OneCall
    from temporalio.client import Client
    from temporalio.worker import Worker

    from dsh_tools_plugins.engines.temporal import tool_activities

    client = await Client.connect(target)
    activities = tool_activities(build_registry(state))
    worker = Worker(  # no cache: a workflow task never waits for a killed worker's cache
        client, task_queue=queue, workflows=[OneCall], activities=activities, max_cached_workflows=0
    )
    print("ready", flush=True)
    await worker.run()


def dbos(state: Path, url: str, schema: str, workflow_id: str, call: dict[str, Any]) -> None:
    from dbos import DBOS, SetWorkflowID
    from dbos_flows import one_call

    from dsh_tools_plugins.engines.dbos import serve_tools

    DBOS(config=dbos_config(url, schema))
    serve_tools(build_registry(state), watch_s=0.2)
    DBOS.launch()
    with SetWorkflowID(workflow_id):
        handle = DBOS.start_workflow(one_call, call)
    print(dumps(handle.get_result()), flush=True)
    DBOS.destroy()


def dbos_config(url: str, schema: str) -> Any:
    """The DBOS configuration of the tests: one application version for every process
    (so one recovers another's workflows), the system tables in ``schema``."""
    config: dict[str, Any] = {
        "name": "dsh-tools-test",
        "system_database_url": url,
        "application_version": "dsh-tools-test",
        "log_level": "ERROR",
        "notification_listener_polling_interval_sec": 0.05,
    }
    if url.startswith("postgresql"):
        config["dbos_system_schema"] = schema
    return config


def main(argv: list[str]) -> None:
    kind, state = argv[0], Path(argv[1])
    if kind == "inline":
        inline(state, argv[2], json.loads(argv[3]))
    elif kind == "inline-resume":
        inline_resume(state, argv[2])
    elif kind == "temporal":
        asyncio.run(temporal(state, argv[2], argv[3]))
    else:
        dbos(state, argv[2], argv[3], argv[4], json.loads(argv[5]))


if __name__ == "__main__":
    main(sys.argv[1:])
