"""run_command streams its output as it arrives and reports its elapsed time, in and out
of the sandbox; its result is the one it gives with nobody watching."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from command_calls import command_registry

from dsh_tools import ToolExecutionInput
from dsh_tools._models import ToolExecution
from dsh_tools.progress import Output, Progress
from dsh_tools_plugins.sandbox import Sandbox
from sandbox_owner import give_away

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")

_STATE = Sandbox("auto").state()
MODES = [
    "off",
    pytest.param(
        "required",
        marks=pytest.mark.skipif(not _STATE.sandboxed, reason=f"no sandbox: {_STATE.reason}"),
    ),
]

# The command waits for a file the listener creates when it sees the first line: if the
# output were delivered only at the end, the command would wait until its timeout.
HANDSHAKE = (
    "echo ready; i=0; while [ ! -f go ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
    "[ -f go ] && echo saw go; sleep 1.2; echo done"
)


@pytest.mark.parametrize("mode", MODES)
def test_output_arrives_while_the_command_runs_and_the_result_is_unchanged(
    tmp_path: Path, mode: str
) -> None:
    give_away(tmp_path)  # a root host runs sandboxed commands as the workspace's owner
    registry = command_registry(tmp_path, sandbox=mode)
    events: list[Progress | Output] = []

    def listener(execution: ToolExecution, event: Progress | Output) -> None:
        events.append(event)
        if isinstance(event, Output) and "ready" in event.text:
            (tmp_path / "go").touch()

    arguments: dict[str, Any] = {"command": HANDSHAKE}
    watched = registry.execute_sync(
        ToolExecutionInput("c1", "run_command", arguments, on_progress=listener)
    )
    assert watched.text.startswith("ready\nsaw go\ndone\n"), watched.text
    streamed = "".join(event.text for event in events if isinstance(event, Output))
    assert streamed == "ready\nsaw go\ndone\n"
    assert any(
        isinstance(event, Progress) and event.message == "running for 1s" for event in events
    )
    (tmp_path / "go").unlink()
    (tmp_path / "go").touch()  # so the unwatched call does not wait
    unwatched = registry.execute_sync(ToolExecutionInput("c2", "run_command", arguments))
    assert (unwatched.content, unwatched.value) == (watched.content, watched.value)


def test_multibyte_characters_split_across_reads_arrive_whole(tmp_path: Path) -> None:
    registry = command_registry(tmp_path, sandbox="off")
    streamed: list[str] = []
    command = "printf '\\342\\202'; sleep 0.2; printf '\\254 euro\\n'"
    result = registry.execute_sync(
        ToolExecutionInput(
            "c3",
            "run_command",
            {"command": command},
            on_progress=lambda _, event: streamed.append(getattr(event, "text", "")),
        )
    )
    assert "".join(streamed) == "€ euro\n"
    assert result.value["output"] == "€ euro\n"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("glob", {"pattern": "**/*.txt"}), ("grep", {"pattern": "needle", "path": "."})],
)
def test_searches_report_files_scanned_on_large_trees(
    tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    from dsh_tools import ToolRegistry
    from dsh_tools_plugins.search import REPORT_EVERY_FILES
    from dsh_tools_plugins.tools import workspace_tools

    for directory in range(6):
        folder = tmp_path / f"d{directory}"
        folder.mkdir()
        for number in range(REPORT_EVERY_FILES // 4):
            (folder / f"{number}.txt").write_text("hay\n")
    (tmp_path / "d0" / "found.txt").write_text("needle\n")
    registry = ToolRegistry()
    for definition in workspace_tools(tmp_path, sandbox="off"):
        registry.register(definition)
    progress: list[Progress] = []
    call = ToolExecutionInput(
        "c4",
        tool,
        arguments,
        on_progress=lambda _, event: (
            progress.append(event) if isinstance(event, Progress) else None
        ),
    )
    watched = registry.execute_sync(call)
    unwatched = registry.execute_sync(ToolExecutionInput("c5", tool, arguments))
    assert (watched.content, watched.value) == (unwatched.content, unwatched.value)
    assert progress, "no progress reported"
    last = progress[-1]
    assert last.done % REPORT_EVERY_FILES == 0
    assert last.message == f"{last.done:g} files scanned"
