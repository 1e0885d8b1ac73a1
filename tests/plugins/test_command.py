"""run_command without the sandbox: exit codes, signals, output cap, no process left
behind on timeout or cancellation (the whole process group is killed, grandchildren
included); and, with and without it, the allowlisted environment. The sandbox itself:
test_sandbox.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from command_calls import (
    alive,
    cancelled_call,
    cards,
    command_registry,
    eventually,
    live_processes,
    ok,
    run,
)

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools.presentation import TerminalCallView, TerminalResultView
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.sandbox import Sandbox, SandboxSettings
from dsh_tools_plugins.workspace import Workspace
from sandbox_owner import give_away

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    give_away(workspace)  # a root host runs sandboxed commands as the workspace's owner
    return workspace


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    return command_registry(root, kill_grace_ms=200, max_output_bytes=256, sandbox="off")


def _gone(*pids: int) -> bool:
    return eventually(lambda: not any(alive(pid) for pid in pids))


def _emptied(group: int) -> bool:
    return eventually(lambda: not live_processes(group=group))


def test_exit_code_output_and_terminal_cards(registry: ToolRegistry) -> None:
    arguments = {"command": "echo out; echo err >&2; exit 3", "description": "fail on purpose"}
    result = ok(registry, **arguments)
    assert result.text == "out\nerr\n[exit code 3; not sandboxed]"
    assert result.value["exit_code"] == 3
    assert result.value["signal"] is None
    assert result.value["timed_out"] is False
    assert (result.value["sandboxed"], result.value["network"]) == (False, True)
    call_view, result_view = cards(registry, result, **arguments)
    assert call_view == TerminalCallView(
        "echo out; echo err >&2; exit 3",
        description="fail on purpose",
        sandboxed=False,
        network=True,
    )
    assert result_view == TerminalResultView(
        output="out\nerr\n", exit_code=3, sandboxed=False, network=True
    )


def test_argv_without_a_shell_in_a_subdirectory(registry: ToolRegistry, root: Path) -> None:
    arguments = {"argv": ["sh", "-c", 'pwd; printf "%s\\n" "$1"', "x", "a b; c"], "cwd": "sub"}
    result = ok(registry, **arguments)
    assert result.text == f"{root / 'sub'}\na b; c\n[exit code 0; not sandboxed]"
    assert result.value["cwd"] == "sub"
    call_view, _ = cards(registry, result, **arguments)
    assert call_view == TerminalCallView(
        "sh -c 'pwd; printf \"%s\\n\" \"$1\"' x 'a b; c'", cwd="sub", sandboxed=False, network=True
    )
    assert ok(registry, argv=["true"]).text == "(no output)\n[exit code 0; not sandboxed]"


def test_killed_by_a_signal(registry: ToolRegistry) -> None:
    result = ok(registry, command="echo bye; kill -KILL $$")
    assert result.text == "bye\n[killed by SIGKILL; not sandboxed]"
    assert result.value["exit_code"] is None
    assert result.value["signal"] == "SIGKILL"
    _, view = cards(registry, result, command="echo bye; kill -KILL $$")
    assert view == TerminalResultView(
        output="bye\n", signal="SIGKILL", sandboxed=False, network=True
    )


def test_output_cap_keeps_head_and_tail(registry: ToolRegistry) -> None:
    result = ok(registry, command="seq 1 200")
    output = result.value["output"]
    assert result.value["truncated"] is True
    assert result.value["output_bytes"] == 692
    assert output.startswith("1\n2\n3\n")
    assert "\n[... output truncated: 436 bytes omitted ...]\n" in output
    assert output.endswith("199\n200\n")
    assert len(output.encode()) == 256 + len("\n[... output truncated: 436 bytes omitted ...]\n")
    assert ok(registry, command="seq 1 10").value["truncated"] is False


def test_bad_arguments_and_confinement(registry: ToolRegistry, root: Path) -> None:
    for arguments in (
        {},
        {"command": "true", "argv": ["true"]},
        {"argv": []},
        {"command": "true", "timeout_ms": 0},
        {"command": "true", "timeout_ms": 600_001},
    ):
        result = run(registry, **arguments)
        assert result.code == "INVALID_ARGS", (arguments, result.text)
    assert run(registry, command="true", cwd="..").code == "DENIED"
    assert run(registry, command="true", cwd=str(root.parent / "outside")).code == "DENIED"
    (root / "hop").symlink_to(root.parent / "outside")
    assert run(registry, command="true", cwd="hop").code == "DENIED"
    assert run(registry, command="true", cwd="missing").code == "TOOL_ERROR"
    missing = run(registry, argv=["definitely-not-a-program-xyz"])
    assert missing.code == "TOOL_ERROR"
    assert missing.text == "Error: command not found: definitely-not-a-program-xyz"
    assert cards(registry, missing, argv=["definitely-not-a-program-xyz"])[1] is None


def test_timeout_kills_the_child_and_its_grandchild(registry: ToolRegistry) -> None:
    command = "echo $$; sleep 30 & echo $!; sleep 30"
    result = ok(registry, command=command, timeout_ms=300)
    shell, background = (int(line) for line in result.value["output"].split())
    assert result.value["timed_out"] is True
    assert result.value["signal"] == "SIGTERM"
    assert result.text.endswith(
        "[timed out; the process group was killed (SIGTERM); not sandboxed]"
    )
    assert _gone(shell, background)
    assert _emptied(shell)  # the foreground sleep too: nobody is left in the group


def test_sigterm_ignored_means_sigkill_after_the_grace_period(registry: ToolRegistry) -> None:
    command = "trap '' TERM; echo $$; sleep 30 & echo $!; while :; do sleep 0.05; done"
    result = ok(registry, command=command, timeout_ms=200)
    shell, background = (int(line) for line in result.value["output"].split())
    assert result.value["timed_out"] is True
    assert result.value["signal"] == "SIGKILL"
    assert _gone(shell, background)
    assert _emptied(shell)


def test_leftover_background_processes_are_killed_after_exit(registry: ToolRegistry) -> None:
    result = ok(registry, command="sleep 30 & echo $!")
    assert result.value["exit_code"] == 0
    assert _gone(int(result.value["output"]))


@pytest.mark.anyio
async def test_cancellation_kills_the_whole_group(registry: ToolRegistry, root: Path) -> None:
    pids = root / "pids"
    result = await cancelled_call(
        registry,
        "echo $$ > pids; sleep 30 & echo $! >> pids; wait",
        lambda: pids.exists() and len(pids.read_text().split()) == 2,
        seconds=5,
    )
    assert result.code == "ABORTED"
    shell, background = (int(pid) for pid in (root / "pids").read_text().split())
    assert _gone(shell, background)
    assert _emptied(shell)


@pytest.mark.anyio
async def test_async_hosts_run_commands(registry: ToolRegistry) -> None:
    result = await registry.execute(
        ToolExecutionInput("c", "run_command", {"argv": ["echo", "hi"]})
    )
    assert result.text == "hi\n[exit code 0; not sandboxed]"


def test_definition_declares_a_backstop_timeout_and_metadata(root: Path) -> None:
    definition = run_command_tool(Workspace(root))
    assert definition.timeout_ms == 600_000 + 2_000 + 5_000
    # A command that may run unsandboxed, or reach the network, is open world.
    assert definition.metadata == {"read_only": False, "open_world": True, "title": "Run command"}
    offline = run_command_tool(Workspace(root), sandbox=SandboxSettings(mode="required"))
    assert offline.metadata["open_world"] is False
    online = SandboxSettings(mode="required", network=True)
    assert run_command_tool(Workspace(root), sandbox=online).metadata["open_world"] is True
    with pytest.raises(ValueError, match="default_timeout_ms"):
        run_command_tool(Workspace(root), default_timeout_ms=10, max_timeout_ms=5)


_SANDBOX = Sandbox("auto").state()
both_ways = pytest.mark.parametrize(
    "mode",
    [
        "off",
        pytest.param(
            "required",
            marks=pytest.mark.skipif(
                not _SANDBOX.sandboxed, reason=f"no sandbox here: {_SANDBOX.reason}"
            ),
        ),
    ],
)


@both_ways
def test_the_command_sees_only_allowlisted_host_variables(
    root: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Reproduction r13: ``printenv OPENAI_API_KEY`` printed the host's key."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("CI_TOKEN", "ci-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("TERM", "dumb")
    registry = command_registry(root, sandbox=mode)
    leaked = run(registry, argv=["printenv", "OPENAI_API_KEY"])
    assert leaked.value["exit_code"] == 1
    assert leaked.value["output"] == ""
    listing = ok(registry, argv=["env"]).value["output"]
    names = {line.split("=", 1)[0] for line in listing.splitlines()}
    assert "sk-host-secret" not in listing
    assert names <= {"PATH", "LANG", "LC_ALL", "TERM", "HOME", "PWD", "SHLVL", "_"}
    assert {"PATH", "LC_ALL", "TERM", "HOME"} <= names
    assert f"PATH={os.environ['PATH']}\n" in listing


@both_ways
def test_home_is_private_and_empty_for_each_call(root: Path, mode: str) -> None:
    registry = command_registry(root, sandbox=mode)
    first = ok(registry, command='echo "$HOME"; ls -A "$HOME"; touch "$HOME/mark"')
    home = first.value["output"].strip()
    assert home != os.environ.get("HOME")
    assert not os.path.exists(os.path.join(home, "mark"))  # gone after the call
    if mode == "off":
        assert not os.path.exists(home)  # the host side: a temporary directory, removed
    assert ok(registry, command='ls -A "$HOME"').value["output"] == ""


@both_ways
def test_hosts_add_variables_by_name_prefix_or_value(
    root: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("CI_TOKEN", "from-host")
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", "https://npm.example")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    registry = command_registry(
        root,
        sandbox=SandboxSettings(mode=mode, pass_env=["CI_TOKEN", "NPM_*"]),
        env={"MODE": "test", "HOME": "/nonexistent-home"},
    )
    listing = ok(registry, argv=["env"]).value["output"].splitlines()
    assert {"CI_TOKEN=from-host", "NPM_CONFIG_REGISTRY=https://npm.example"} <= set(listing)
    assert {"MODE=test", "HOME=/nonexistent-home"} <= set(listing)
    assert not any(line.startswith("OPENAI_API_KEY=") for line in listing)
    with pytest.raises(ValueError, match=r"environment names .* got 'BAD NAME'"):
        SandboxSettings(pass_env=["BAD NAME"])
    with pytest.raises(ValueError, match=r"environment names .* got 'A=B'"):
        run_command_tool(Workspace(root), env={"A=B": "x"})
    with pytest.raises(ValueError, match="variable MODE must be text without NUL, got 3"):
        run_command_tool(Workspace(root), env={"MODE": 3})  # type: ignore[dict-item]
