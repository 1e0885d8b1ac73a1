"""An agent loop on DBOS (SQLite): a workflow makes a model's tool calls through
``call_tool``; one of them waits for a person with DBOS's durable ``recv``, and runs once
approved.

    python examples/dbos_agent.py

Needs the ``dbos`` extra. The model is scripted, so the run is the same every time: the
workflow writes a note (which asks a person; the script approves it as ``dsh-tools
approvals approve`` would, then tells the workflow to look now), then reads the notes
back. Point ``system_database_url`` at PostgreSQL to share the workflows between hosts.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from dsh_tools_plugins.engines.dbos import ANSWERED, Waiting, call_tool, result_text, serve_tools

MODEL_TURNS: list[tuple[str, dict[str, Any]]] = [
    ("write_note", {"text": "ship the release on Friday"}),
    ("read_notes", {}),
]
"""What the scripted model asks for, turn after turn."""


@DBOS.workflow(name="notes_agent")
def notes_agent(task: str) -> list[str]:
    """The agent loop: each model turn's call through the five stages, as a step."""
    transcript = [f"task: {task}"]
    for name, arguments in MODEL_TURNS:
        result = call_tool(
            name, arguments, agent="notes-agent", timeout_s=30, waiting=Waiting(0.2, 2)
        )
        transcript.append(f"{name}: {result_text(result)}")
    return transcript


def approve_and_nudge(store_path: Path, workflow_id: str) -> None:
    """A person approves; the workflow is told to look at the ticket now (optional:
    without it, it looks within ``Waiting.max_s``)."""
    from notes_tools import approve_when_asked

    ticket = approve_when_asked(store_path)
    DBOS.send(workflow_id, ticket, f"{ANSWERED}.{ticket}")


def main() -> None:
    from notes_tools import notes_registry

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "approvals.sqlite3"
        database = f"sqlite:///{tmp}/dbos.db"  # or postgresql://...
        DBOS(
            config={"name": "notes-agent", "system_database_url": database, "log_level": "WARNING"}
        )
        serve_tools(notes_registry(store))
        DBOS.launch()
        person = threading.Thread(target=approve_and_nudge, args=(store, "notes-agent-1"))
        person.start()
        with SetWorkflowID("notes-agent-1"):
            handle = DBOS.start_workflow(notes_agent, "keep notes")
        for line in handle.get_result():
            print(line)
        person.join()
        DBOS.destroy()


if __name__ == "__main__":
    main()
