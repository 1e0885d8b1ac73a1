"""run_command: exit codes, signals, output cap, and no process left behind on timeout
or cancellation (the whole process group is killed, grandchildren included)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools import CancelSource, PresentableResult, ToolExecutionInput, ToolRegistry
from dsh_tools.models import ToolDefinition, ToolExecutionSuccess
from dsh_tools.presentation import TerminalCallView, TerminalResultView, unstructure_view
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.workspace import Workspace

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return workspace


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(run_command_tool(Workspace(root), kill_grace_ms=200, max_output_bytes=256))
    return registry


def _run(registry: ToolRegistry, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput("call-1", "run_command", arguments))


def _ok(registry: ToolRegistry, **arguments: Any) -> ToolExecutionSuccess:
    result = _run(registry, **arguments)
    assert isinstance(result, ToolExecutionSuccess), result.text
    return result


def _cards(registry: ToolRegistry, result: Any, **arguments: Any) -> tuple[Any, Any]:
    definition: ToolDefinition[Any] | None = registry.get("run_command")
    assert definition is not None
    assert definition.present_call is not None
    assert definition.present_result is not None
    parsed = definition.arguments.parse(arguments)
    call_view = definition.present_call(parsed)
    result_view = definition.present_result(
        parsed, PresentableResult(result.content, result.is_error, result.meta)
    )
    for view in (call_view, result_view):
        if view is not None:
            unstructure_view(view)
    return call_view, result_view


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by init) is dead."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def _gone(*pids: int) -> bool:
    """Every pid dies within a second (SIGKILL is certain, its delivery takes a moment)."""
    deadline = time.monotonic() + 1.0
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _emptied(pgid: int) -> bool:
    """No live process is left in group ``pgid`` within a second."""
    deadline = time.monotonic() + 1.0
    while _group(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _group(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def test_exit_code_output_and_terminal_cards(registry: ToolRegistry) -> None:
    arguments = {"command": "echo out; echo err >&2; exit 3", "description": "fail on purpose"}
    result = _ok(registry, **arguments)
    assert result.text == "out\nerr\n[exit code 3]"
    assert result.value["exit_code"] == 3
    assert result.value["signal"] is None
    assert result.value["timed_out"] is False
    call_view, result_view = _cards(registry, result, **arguments)
    assert call_view == TerminalCallView(
        "echo out; echo err >&2; exit 3", description="fail on purpose"
    )
    assert result_view == TerminalResultView(output="out\nerr\n", exit_code=3)


def test_argv_without_a_shell_in_a_subdirectory(registry: ToolRegistry, root: Path) -> None:
    arguments = {"argv": ["sh", "-c", 'pwd; printf "%s\\n" "$1"', "x", "a b; c"], "cwd": "sub"}
    result = _ok(registry, **arguments)
    assert result.text == f"{root / 'sub'}\na b; c\n[exit code 0]"
    assert result.value["cwd"] == "sub"
    call_view, _ = _cards(registry, result, **arguments)
    assert call_view == TerminalCallView(
        "sh -c 'pwd; printf \"%s\\n\" \"$1\"' x 'a b; c'", cwd="sub"
    )
    assert _ok(registry, argv=["true"]).text == "(no output)\n[exit code 0]"


def test_killed_by_a_signal(registry: ToolRegistry) -> None:
    result = _ok(registry, command="echo bye; kill -KILL $$")
    assert result.text == "bye\n[killed by SIGKILL]"
    assert result.value["exit_code"] is None
    assert result.value["signal"] == "SIGKILL"
    _, view = _cards(registry, result, command="echo bye; kill -KILL $$")
    assert view == TerminalResultView(output="bye\n", signal="SIGKILL")


def test_output_cap_keeps_head_and_tail(registry: ToolRegistry) -> None:
    result = _ok(registry, command="seq 1 200")
    output = result.value["output"]
    assert result.value["truncated"] is True
    assert result.value["output_bytes"] == 692
    assert output.startswith("1\n2\n3\n")
    assert "\n[... output truncated: 436 bytes omitted ...]\n" in output
    assert output.endswith("199\n200\n")
    assert len(output.encode()) == 256 + len("\n[... output truncated: 436 bytes omitted ...]\n")
    assert _ok(registry, command="seq 1 10").value["truncated"] is False


def test_bad_arguments_and_confinement(registry: ToolRegistry, root: Path) -> None:
    for arguments in (
        {},
        {"command": "true", "argv": ["true"]},
        {"argv": []},
        {"command": "true", "timeout_ms": 0},
        {"command": "true", "timeout_ms": 600_001},
    ):
        result = _run(registry, **arguments)
        assert result.code == "INVALID_ARGS", (arguments, result.text)
    assert _run(registry, command="true", cwd="..").code == "DENIED"
    assert _run(registry, command="true", cwd=str(root.parent / "outside")).code == "DENIED"
    (root / "hop").symlink_to(root.parent / "outside")
    assert _run(registry, command="true", cwd="hop").code == "DENIED"
    assert _run(registry, command="true", cwd="missing").code == "TOOL_ERROR"
    missing = _run(registry, argv=["definitely-not-a-program-xyz"])
    assert missing.code == "TOOL_ERROR"
    assert missing.text == "Error: command not found: definitely-not-a-program-xyz"
    assert _cards(registry, missing, argv=["definitely-not-a-program-xyz"])[1] is None


def test_timeout_kills_the_child_and_its_grandchild(registry: ToolRegistry) -> None:
    command = "echo $$; sleep 30 & echo $!; sleep 30"
    result = _ok(registry, command=command, timeout_ms=300)
    shell, background = (int(line) for line in result.value["output"].split())
    assert result.value["timed_out"] is True
    assert result.value["signal"] == "SIGTERM"
    assert result.text.endswith("[timed out; the process group was killed (SIGTERM)]")
    assert _gone(shell, background)
    assert _emptied(shell)  # the foreground sleep too: nobody is left in the group


def test_sigterm_ignored_means_sigkill_after_the_grace_period(registry: ToolRegistry) -> None:
    command = "trap '' TERM; echo $$; sleep 30 & echo $!; while :; do sleep 0.05; done"
    result = _ok(registry, command=command, timeout_ms=200)
    shell, background = (int(line) for line in result.value["output"].split())
    assert result.value["timed_out"] is True
    assert result.value["signal"] == "SIGKILL"
    assert _gone(shell, background)
    assert _emptied(shell)


def test_leftover_background_processes_are_killed_after_exit(registry: ToolRegistry) -> None:
    result = _ok(registry, command="sleep 30 & echo $!")
    assert result.value["exit_code"] == 0
    assert _gone(int(result.value["output"]))


@pytest.mark.anyio
async def test_cancellation_kills_the_whole_group(registry: ToolRegistry, root: Path) -> None:
    source = CancelSource()
    results: list[Any] = []
    command = "echo $$ > pids; sleep 30 & echo $! >> pids; wait"

    async def call() -> None:
        results.append(
            await registry.execute(
                ToolExecutionInput("c", "run_command", {"command": command}, signal=source.signal)
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(5):
            while len((root / "pids").read_text().split() if (root / "pids").exists() else []) < 2:
                await anyio.sleep(0.01)
        source.cancel()
    [result] = results
    assert result.code == "ABORTED"
    shell, background = (int(pid) for pid in (root / "pids").read_text().split())
    assert _gone(shell, background)
    assert _emptied(shell)


@pytest.mark.anyio
async def test_async_hosts_run_commands(registry: ToolRegistry) -> None:
    result = await registry.execute(
        ToolExecutionInput("c", "run_command", {"argv": ["echo", "hi"]})
    )
    assert result.text == "hi\n[exit code 0]"


def test_definition_declares_a_backstop_timeout_and_metadata(root: Path) -> None:
    definition = run_command_tool(Workspace(root))
    assert definition.timeout_ms == 600_000 + 2_000 + 5_000
    assert definition.metadata == {"read_only": False}
    with pytest.raises(ValueError, match="default_timeout_ms"):
        run_command_tool(Workspace(root), default_timeout_ms=10, max_timeout_ms=5)
