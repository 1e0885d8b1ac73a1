"""run_command in the bubblewrap sandbox: every test is a real escape attempt through the
real tool, which must fail inside the sandbox and leave the host untouched, while the
same command works on a file inside the workspace.

Without bubblewrap the escape tests skip with the reason; the ``required`` mode's
refusal and the ``auto`` mode's fallback are tested everywhere.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from command_calls import (
    cancelled_call,
    cards,
    command_registry,
    eventually,
    live_processes,
    ok,
    run,
)

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools.presentation import (
    CardError,
    TerminalCallView,
    TerminalResultView,
    render_call_view,
    render_result,
    structure_call_view,
    structure_result_view,
    unstructure_view,
)
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.sandbox import (
    Sandbox,
    SandboxLimits,
    SandboxSettings,
    enforces_process_limit,
)
from dsh_tools_plugins.tools import workspace_tools
from dsh_tools_plugins.workspace import Workspace
from sandbox_owner import UNPRIVILEGED, give_away

_STATE = Sandbox("auto").state()
needs_sandbox = pytest.mark.skipif(not _STATE.sandboxed, reason=f"no sandbox here: {_STATE.reason}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "inside.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("original\n")
    give_away(workspace, outside)
    return workspace


def _registry(root: Path, **settings: Any) -> ToolRegistry:
    limits = settings.pop("limits", SandboxLimits())
    sandbox = SandboxSettings(mode="required", limits=limits, **settings)
    return command_registry(root, kill_grace_ms=200, sandbox=sandbox)


def _failed(registry: ToolRegistry, command: str, **arguments: Any) -> str:
    """Run ``command`` sandboxed; it must exit non-zero. Returns its output."""
    result = ok(registry, command=command, **arguments)
    assert result.value["sandboxed"] is True
    assert result.value["exit_code"] != 0, (command, result.text)
    return str(result.value["output"])


def _no_processes_left(marker: str) -> bool:
    return eventually(lambda: not live_processes(marker=marker), seconds=2.0)


# --------------------------------------------------------------------------- files


@needs_sandbox
def test_writes_outside_the_workspace_fail_and_the_same_writes_inside_work(
    root: Path, tmp_path: Path
) -> None:
    registry = _registry(root)
    outside = tmp_path / "outside"
    marker = f"dsh-tools-sandbox-{uuid.uuid4().hex}"
    attempts = {
        "touch": "touch {dir}/new.txt",
        "redirect": "echo pwned > {dir}/victim.txt",
        "append": "echo pwned >> {dir}/victim.txt",
        "cp": "cp inside.txt {dir}/copied.txt",
        "mv": "mv inside.txt {dir}/moved.txt && mv {dir}/moved.txt inside.txt",
        "symlink": "ln -sf {dir}/victim.txt link && echo pwned > link",
        "mkdir": "mkdir {dir}/made",
    }
    for name, template in attempts.items():
        _failed(registry, template.format(dir=outside))
        (root / "dest").mkdir()
        (root / "dest" / "victim.txt").write_text("original\n")
        give_away(root / "dest")
        inside = ok(registry, command=template.format(dir="dest"))
        assert inside.value["exit_code"] == 0, (name, inside.text)
        shutil.rmtree(root / "dest")
        (root / "link").unlink(missing_ok=True)
    for system in ("/usr", "/etc", "/"):
        _failed(registry, f"touch {system.rstrip('/')}/{marker}")
        assert not os.path.exists(f"{system.rstrip('/')}/{marker}")
    assert sorted(path.name for path in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "original\n"
    assert (root / "inside.txt").read_text() == "inside\n"


@needs_sandbox
def test_a_command_that_cds_out_cannot_write_there(root: Path, tmp_path: Path) -> None:
    registry = _registry(root)
    _failed(registry, "cd .. && touch escaped")
    _failed(registry, "cd ../.. && touch escaped")
    _failed(registry, "cd / && touch escaped")
    private = ok(registry, command="cd /tmp && touch escaped && ls /tmp")
    assert "escaped" in private.value["output"]  # the sandbox's own /tmp, gone after
    assert not (tmp_path / "escaped").exists()
    assert not (root.parent.parent / "escaped").exists()
    assert ok(registry, command="cd sub && touch made", cwd=".").value["exit_code"] == 0
    assert (root / "sub" / "made").exists()


@needs_sandbox
def test_the_workspace_swapped_for_a_symlink_during_the_call_stays_put(
    root: Path, tmp_path: Path
) -> None:
    """The workspace is mounted from its verified descriptor: renaming it and putting
    a symlink to somewhere else at its path changes nothing inside the sandbox."""
    registry = _registry(root)
    moved = tmp_path / "ws-moved"
    outside = tmp_path / "outside"
    command = (
        f"touch ready; while [ ! -e go ]; do sleep 0.01; done; "
        f"echo written > {root}/victim.txt; ls {root}"
    )
    results: list[Any] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                results.append(
                    await registry.execute(
                        ToolExecutionInput("c", "run_command", {"command": command})
                    )
                )

            group.start_soon(call)
            with anyio.fail_after(10):
                while not (root / "ready").exists():
                    await anyio.sleep(0.01)
            root.rename(moved)
            root.symlink_to(outside, target_is_directory=True)
            (moved / "go").touch()

    anyio.run(scenario)
    [result] = results
    assert result.value["exit_code"] == 0, result.text
    assert (outside / "victim.txt").read_text() == "original\n"
    assert (moved / "victim.txt").read_text() == "written\n"
    # a new call refuses the swapped workspace: its root is now a symbolic link
    refused = run(registry, command="true")
    assert refused.code == "DENIED", refused.text
    assert (outside / "victim.txt").read_text() == "original\n"


@needs_sandbox
def test_secrets_outside_the_workspace_cannot_be_read(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = f"-----BEGIN OPENSSH PRIVATE KEY----- {uuid.uuid4().hex}"
    (home / ".ssh" / "id_ed25519").write_text(secret)
    monkeypatch.setenv("HOME", str(home))
    registry = _registry(root)
    for command in (
        "cat ~/.ssh/id_ed25519",
        f"cat {home}/.ssh/id_ed25519",
        f"cp {home}/.ssh/id_ed25519 stolen",
        f"ln -s {home}/.ssh/id_ed25519 key && cat key",
        "cat /etc/shadow",
        "cat /etc/gshadow",
    ):
        output = _failed(registry, command)
        assert secret not in output
        assert "root:" not in output
    assert not (root / "stolen").exists()
    (root / "mine.txt").write_text(secret)
    assert ok(registry, command="cat mine.txt").value["output"] == secret
    assert "root:" in ok(registry, command="cat /etc/passwd").value["output"]
    assert ok(registry, command='echo "$HOME"; ls -A "$HOME"').value["output"] == "/tmp/home\n"


@needs_sandbox
def test_extra_read_only_and_read_write_paths(root: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "tool.sh").write_text("echo tool ran\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    makefile = root / "Makefile"
    makefile.write_text("all:\n")
    give_away(tools, cache, makefile)
    registry = _registry(
        root,
        read_only_paths=[tools, tmp_path / "missing", makefile],
        read_write_paths=[str(cache)],
    )
    assert ok(registry, command=f"sh {tools}/tool.sh").value["output"] == "tool ran\n"
    _failed(registry, f"touch {tools}/new")
    _failed(registry, "echo evil >> Makefile")  # a single file, read-only
    assert makefile.read_text() == "all:\n"
    assert ok(registry, command=f"echo hit > {cache}/entry").value["exit_code"] == 0
    assert (cache / "entry").read_text() == "hit\n"
    assert sorted(path.name for path in tools.iterdir()) == ["tool.sh"]


def _git_hooks(root: Path) -> Path:
    hooks = root / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    return hooks


@needs_sandbox
@pytest.mark.parametrize("writable", [False, True], ids=["read_only", "read_write"])
def test_an_extra_path_a_command_swapped_for_a_link_is_refused_not_mounted(
    root: Path, tmp_path: Path, writable: bool
) -> None:
    """A command renames the mounted path's parent and plants a relative link where the
    path was; the next call must not mount the host directory the link names."""
    hooks = _git_hooks(root)
    key = "read_write_paths" if writable else "read_only_paths"
    registry = _registry(root, **{key: [hooks]})
    assert ok(registry, command="cat .git/hooks/pre-commit").value["exit_code"] == 0
    swap = "mv .git .git-old && mkdir .git && ln -s ../../outside .git/hooks"
    assert ok(registry, command=swap).value["exit_code"] == 0
    refused = run(registry, command="cat .git/hooks/victim.txt; echo pwned > .git/hooks/victim.txt")
    assert refused.code == "TOOL_ERROR"
    assert refused.text == (
        f"Error: the sandbox path {hooks} is a symbolic link; refusing to mount it (give "
        "the real path in read_only_paths / read_write_paths)"
    )
    assert (tmp_path / "outside" / "victim.txt").read_text() == "original\n"


@needs_sandbox
def test_an_extra_path_under_a_link_to_etc_is_refused(root: Path) -> None:
    """``.git`` swapped for a link to ``/etc``: mounting ``.git/hooks`` would expose the
    host's ``/etc/hooks``-like paths unmasked; any link on the way is refused."""
    (root / "etc-link").symlink_to("/etc")
    registry = _registry(root, read_write_paths=[root / "etc-link" / "ssl"])
    refused = run(registry, command="ls etc-link/ssl/private")
    assert refused.code == "TOOL_ERROR"
    assert f"passes through {root}/etc-link, which is a symbolic link" in refused.text


# --------------------------------------------------------------------------- kernel state


@needs_sandbox
def test_kernel_settings_cannot_be_written_from_the_sandbox(root: Path) -> None:
    """Each write puts back the value it read, so a failure of the test changes nothing;
    as root, the old sandbox let all of them through (the kernel checks the uid only)."""
    registry = _registry(root)
    for setting in (
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/overcommit_memory",
        "/proc/sys/fs/protected_symlinks",
    ):
        output = _failed(registry, f'v=$(cat {setting}) && printf "%s\\n" "$v" > {setting}')
        assert "Read-only file system" in output or "Permission denied" in output
    for entry in ("irq", "bus", "fs", "sys"):
        if os.path.isdir(f"/proc/{entry}"):
            _failed(registry, f"touch /proc/{entry}/x")
    assert ok(registry, command="echo renamed > /proc/self/comm").value["exit_code"] == 0


@needs_sandbox
def test_the_sandbox_tmp_and_shm_are_bounded_by_the_memory_limit(root: Path) -> None:
    """Unsized, each was half the host's memory, held for the whole call."""
    limits = SandboxLimits(memory_bytes=32 * 1024**2)
    registry = _registry(root, limits=limits)
    sizes = ok(registry, command="df -k --output=size /tmp /dev/shm | tail -n 2").value["output"]
    assert [int(size) for size in sizes.split()] == [24 * 1024, 8 * 1024]
    full = _failed(registry, "head -c 30000000 /dev/zero > /tmp/fill")
    assert "No space left on device" in full
    _failed(registry, "head -c 9000000 /dev/zero > /dev/shm/fill")
    _failed(registry, "touch /dev/planted")  # /dev is no third tmpfs to fill
    assert ok(registry, command="echo fine > /dev/null").value["exit_code"] == 0


# --------------------------------------------------------------------------- host programs


def _planting_bwrap(path: Path, marker: Path) -> str:
    """Shell text that a command runs to plant ``path``, a bwrap that would leave
    ``marker`` behind on the host if it ever ran."""
    script = f'#!/bin/sh\ntouch {marker}\nexec /usr/bin/env "$@"\n'
    return f"mkdir -p {path.parent} && printf '%s' '{script}' > {path} && chmod 755 {path}"


@needs_sandbox
def test_a_bwrap_planted_in_the_activated_workspace_virtualenv_never_runs(
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    system_directories: Callable[..., None],
) -> None:
    venv = root / ".venv"
    marker = tmp_path / "planted-bwrap-ran"
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    monkeypatch.setenv("PATH", f"{venv}/bin:/usr/bin:/bin")
    registry = _registry(root, read_write_paths=[tmp_path])  # the marker would be writable
    planted = ok(registry, command=_planting_bwrap(venv / "bin" / "bwrap", marker))
    assert planted.value["exit_code"] == 0
    system_directories()  # looked up afresh, with the planted bwrap first on PATH
    assert Sandbox("required").state().sandboxed
    result = ok(registry, command="test -e /proc/1/cmdline && echo inside")
    assert result.value["sandboxed"] is True
    assert not marker.exists()
    call_view, _ = cards(registry, result, command="echo hi")
    assert call_view.sandboxed is True
    assert not marker.exists()


@needs_sandbox
def test_a_bwrap_inside_the_workspace_is_never_run(
    root: Path, tmp_path: Path, system_directories: Callable[..., None]
) -> None:
    """Even when the host's system directory is where commands write (and the host
    trusts the workspace's files: the host's user owns them)."""
    root = tmp_path / "owned"
    tools = root / "bin"
    tools.mkdir(parents=True)
    marker = tmp_path / "workspace-bwrap-ran"
    wrapper = tools / "bwrap"
    wrapper.write_text(f'#!/bin/sh\ntouch {marker}\nexec /usr/bin/bwrap "$@"\n')
    wrapper.chmod(0o755)
    system_directories(tools)
    assert Sandbox("required").state().sandboxed  # its probe ran: it is a working bwrap
    marker.unlink()
    for settings in ({}, {"read_write_paths": [tools]}):
        registry = _registry(root if not settings else tmp_path / "outside", **settings)
        refused = run(registry, command="true")
        assert refused.code == "DENIED"
        assert f"bubblewrap at {wrapper} lies in" in refused.text
        assert "which commands can write: refusing to run it" in refused.text
    assert not marker.exists()


def test_host_programs_others_can_write_are_not_run(
    root: Path,
    tmp_path: Path,
    system_directories: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = tmp_path / "shared"
    _fake_bwrap(shared, "planted")
    shared.chmod(0o777)  # anyone may replace what is in it
    system_directories(shared)
    state = Sandbox("auto").state()
    assert (state.sandboxed, state.reason) == (False, "bubblewrap (bwrap) is not installed")
    assert f"not running {shared}/bwrap: {shared} is writable by other users" in caplog.text
    writable = tmp_path / "writable"
    _fake_bwrap(writable, "planted")
    (writable / "bwrap").chmod(0o777)
    system_directories(writable)
    assert Sandbox("auto").state().reason == "bubblewrap (bwrap) is not installed"
    assert f"{writable}/bwrap is writable by other users" in caplog.text


# --------------------------------------------------------------------------- network


def _listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(2.0)
    return listener


@needs_sandbox
@pytest.mark.skipif(shutil.which("bash") is None, reason="the connection test uses bash")
def test_network_is_off_by_default_and_on_when_allowed(root: Path) -> None:
    with _listener() as listener:
        port = listener.getsockname()[1]
        connect = f"bash -c 'echo hello >/dev/tcp/127.0.0.1/{port}'"
        closed = _registry(root)
        _failed(closed, connect)
        listener.settimeout(0.3)
        with pytest.raises(TimeoutError):
            listener.accept()
        listener.settimeout(2.0)
        opened = _registry(root, network=True)
        result = ok(opened, command=connect)
        assert result.value["exit_code"] == 0, result.text
        assert result.value["network"] is True
        connection, _ = listener.accept()
        with connection:
            assert connection.recv(100) == b"hello\n"


# --------------------------------------------------------------------------- processes


@needs_sandbox
def test_host_processes_cannot_be_signalled(root: Path) -> None:
    registry = _registry(root)
    with subprocess.Popen(["sleep", "30"]) as bystander:
        try:
            for command in (
                f"kill -TERM {os.getpid()}",
                f"kill -KILL {bystander.pid}",
                "kill -KILL -1",
            ):
                output = _failed(registry, command)
                assert "No such process" in output
            assert bystander.poll() is None
            own = ok(registry, command="sleep 30 & kill -TERM $!; wait $!; echo $?")
            assert own.value["output"].endswith("143\n")  # it may signal its own
        finally:
            bystander.kill()


@needs_sandbox
def test_no_process_survives_the_call_not_even_a_daemon(root: Path) -> None:
    registry = _registry(root)
    marker = str(900000 + uuid.uuid4().int % 99999)
    command = (
        f"sleep {marker}1 & setsid sleep {marker}2 & (sleep {marker}3 &) ; "
        f"nohup sleep {marker}4 >/dev/null 2>&1 & sleep 0.2; echo started"
    )
    result = ok(registry, command=command)
    assert result.value["output"] == "started\n"
    assert _no_processes_left(marker)


@needs_sandbox
@pytest.mark.anyio
async def test_cancelling_a_sandboxed_call_ends_everything_it_started(root: Path) -> None:
    registry = _registry(root)
    marker = str(800000 + uuid.uuid4().int % 99999)
    result = await cancelled_call(
        registry,
        f"setsid sleep {marker}1 & sleep {marker}2 & wait",
        lambda: all(live_processes(marker=f"{marker}{n}\0") for n in (1, 2)),
    )
    assert result.code == "ABORTED"
    assert _no_processes_left(marker)


@needs_sandbox
@pytest.mark.skipif(
    not enforces_process_limit(),
    reason="as root the process limit needs a writable pids cgroup, and there is none",
)
def test_process_count_is_bounded_and_a_fork_bomb_ends_with_the_call(root: Path) -> None:
    registry = _registry(root, limits=SandboxLimits(processes=24))
    counted = ok(
        registry,
        command="i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); echo $i; done",
    )
    started = [int(line) for line in counted.value["output"].split() if line.isdigit()]
    assert counted.value["exit_code"] != 0
    assert "fork" in counted.value["output"].lower()
    assert 0 < max(started) < 24
    marker = f"bomb{uuid.uuid4().hex}"
    bomb = ok(registry, command=f"b() {{ b | b & }}; b; sleep 5 # {marker}", timeout_ms=1500)
    assert bomb.value["timed_out"] or bomb.value["exit_code"] is not None
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    assert _no_processes_left(marker)


@needs_sandbox
def test_memory_file_size_and_cpu_time_are_bounded(root: Path) -> None:
    limits = SandboxLimits(memory_bytes=64 * 1024**2, file_bytes=1024**2, cpu_seconds=1)
    registry = _registry(root, limits=limits)
    hog = ok(registry, argv=["awk", 'BEGIN { s = "x"; while (1) s = s s }'], timeout_ms=20000)
    assert hog.value["exit_code"] not in (0, None)
    assert not hog.value["timed_out"]
    small = ok(registry, argv=["awk", 'BEGIN { s = "x"; for (i = 0; i < 10; i++) s = s s }'])
    assert small.value["exit_code"] == 0
    big = ok(registry, command="head -c 2097152 /dev/zero > big")
    assert big.value["exit_code"] == 128 + 25  # SIGXFSZ, as a shell reports it
    assert (root / "big").stat().st_size == 1024**2
    assert ok(registry, command="head -c 1000 /dev/zero > ok").value["exit_code"] == 0
    spin = ok(registry, command="while :; do :; done", timeout_ms=20000)
    assert spin.value["exit_code"] == 128 + 24  # SIGXCPU
    assert not spin.value["timed_out"]


# --------------------------------------------------------------------------- the tool


@needs_sandbox
def test_cards_and_result_say_sandboxed_and_the_network_setting(root: Path) -> None:
    for network in (False, True):
        registry = _registry(root, network=network)
        result = ok(registry, command="echo hi")
        assert result.text == "hi\n[exit code 0]"
        call_view, view = cards(registry, result, command="echo hi")
        assert call_view == TerminalCallView("echo hi", sandboxed=True, network=network)
        setting = "on" if network else "off"
        assert render_call_view(call_view) == f"$ echo hi\n  [sandboxed, network {setting}]\n"
        assert view == TerminalResultView(
            output="hi\n", exit_code=0, sandboxed=True, network=network
        )
        assert render_result(view, result).endswith(
            f"  hi\n  [exit 0; sandboxed, network {setting}]\n"
        )
        definition = registry.get("run_command")
        assert definition is not None
        assert "network access" in definition.description


@needs_sandbox
def test_a_missing_program_and_a_sandbox_that_cannot_start(root: Path) -> None:
    registry = _registry(root)
    missing = run(registry, argv=["definitely-not-a-program-xyz"])
    assert (missing.code, missing.text) == (
        "TOOL_ERROR",
        "Error: command not found: definitely-not-a-program-xyz",
    )
    locked = root / "locked"
    locked.mkdir(mode=0o000)
    try:
        result = run(registry, command="true", cwd="locked")
    finally:
        locked.chmod(0o755)
    assert result.code == "TOOL_ERROR"
    if os.geteuid() == 0:  # root opens it; inside, without capabilities, bwrap cannot
        assert result.text.startswith("Error: the sandbox could not start the command: bwrap")
        assert "locked" in result.text


@needs_sandbox
@pytest.mark.anyio
async def test_async_hosts_run_sandboxed_commands(root: Path) -> None:
    registry = _registry(root)
    result = await registry.execute(
        ToolExecutionInput("c", "run_command", {"argv": ["cat", "inside.txt"]})
    )
    assert result.text == "inside\n[exit code 0]"


# --------------------------------------------------------------------------- no sandbox


def _fake_bwrap(directory: Path, message: str) -> None:
    """A ``bwrap`` that fails the way a kernel without user namespaces makes it fail."""
    directory.mkdir()
    script = directory / "bwrap"
    script.write_text(f"#!/bin/sh\necho 'bwrap: {message}' >&2\nexit 1\n")
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("bwrap", "message"),
    [
        (
            None,
            "bubblewrap (bwrap) is not installed; install bubblewrap (Debian, Ubuntu: "
            "apt-get install bubblewrap",
        ),
        (
            "No permissions to creating new namespace",
            "cannot start a sandbox here: bwrap: No permissions to creating new namespace",
        ),
    ],
    ids=["missing", "broken"],
)
def test_required_without_a_working_bubblewrap_denies_and_says_why(
    root: Path,
    tmp_path: Path,
    system_directories: Callable[..., None],
    bwrap: str | None,
    message: str,
) -> None:
    """``bwrap`` missing from the system directories, or failing the way a kernel
    without user namespaces makes it fail: the call is refused before anything runs."""
    tools = tmp_path / "bin"
    if bwrap is None:
        tools.mkdir()
    else:
        _fake_bwrap(tools, bwrap)
    system_directories(tools)
    registry = command_registry(root, sandbox="required")
    result = run(registry, command=f"echo ran > {root}/ran.txt")
    assert result.code == "DENIED"
    assert message in result.text
    assert not (root / "ran.txt").exists()


def test_auto_falls_back_and_says_not_sandboxed(
    root: Path, tmp_path: Path, system_directories: Callable[..., None]
) -> None:
    _fake_bwrap(tmp_path / "broken", "setting up uid map: Permission denied")
    system_directories(tmp_path / "broken")
    registry = command_registry(root)
    result = ok(registry, command="echo hi")
    assert result.text == "hi\n[exit code 0; not sandboxed]"
    assert (result.value["sandboxed"], result.value["network"]) == (False, True)
    call_view, view = cards(registry, result, command="echo hi")
    assert call_view == TerminalCallView("echo hi", sandboxed=False, network=True)
    assert render_call_view(call_view).endswith("  [not sandboxed]\n")
    assert render_result(view, result).endswith("  [exit 0; not sandboxed]\n")


def test_auto_on_other_platforms_falls_back(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    state = Sandbox("auto").state()
    assert (state.sandboxed, state.network) == (False, True)
    assert state.reason == "the bubblewrap sandbox needs Linux; this is darwin"
    registry = command_registry(root, sandbox="required")
    denied = run(registry, command="true")
    assert denied.code == "DENIED"
    assert "needs Linux; this is darwin" in denied.text


def test_off_is_the_hosts_choice_and_says_so(root: Path) -> None:
    state = Sandbox("off").state()
    assert state == Sandbox(SandboxSettings(mode="off")).state()
    assert (state.sandboxed, state.reason) == (False, "the host turned the sandbox off")
    definition = run_command_tool(Workspace(root), sandbox="off")
    assert "sandbox" not in definition.description


def test_the_workspace_entry_point_takes_the_configured_sandbox(
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    system_directories: Callable[..., None],
) -> None:
    """``workspace_tools()`` with no sandbox argument (the entry point's call) gets the
    rules file's ``[sandbox]``, with ``$DSH_TOOLS_SANDBOX`` (``--sandbox``) over it."""
    rules = tmp_path / "rules.toml"
    rules.write_text('[sandbox]\nmode = "required"\n')
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules))
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "")
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "")
    empty = tmp_path / "no-bwrap"
    empty.mkdir()
    system_directories(empty)

    def run_echo() -> Any:
        registry = ToolRegistry()
        for tool in workspace_tools(root):
            registry.register(tool)
        return run(registry, command="echo ran")

    assert run_echo().code == "DENIED"  # required, and no bubblewrap installed
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "off")
    assert run_echo().text == "ran\n[exit code 0; not sandboxed]"


def test_terminal_cards_carry_and_render_what_a_command_can_reach() -> None:
    call = TerminalCallView("make", cwd="pkg", sandboxed=True, network=False)
    assert unstructure_view(call) == {
        "card": "terminal",
        "title": "make",
        "cwd": "pkg",
        "sandboxed": True,
        "network": False,
    }
    assert structure_call_view(unstructure_view(call)) == call
    assert render_call_view(call) == "$ make   (in pkg)\n  [sandboxed, network off]\n"
    opened = TerminalCallView("curl example.com", sandboxed=True, network=True)
    assert render_call_view(opened).endswith("  [sandboxed, network on]\n")
    assert render_call_view(TerminalCallView("ls")) == "$ ls\n"  # a tool that does not say
    with pytest.raises(CardError, match=r"call view\.sandboxed: expected a boolean"):
        structure_call_view({"card": "terminal", "title": "ls", "sandboxed": "yes"})
    killed = TerminalResultView(output="", signal="SIGTERM", sandboxed=False, network=True)
    assert structure_result_view(unstructure_view(killed)) == killed


def test_bad_settings_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match='sandbox mode must be "required", "auto" or "off"'):
        SandboxSettings(mode="on")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be absolute, got 'relative/dir'"):
        SandboxSettings(read_only_paths=["relative/dir"])
    with pytest.raises(ValueError, match="a list of paths, got the single path"):
        SandboxSettings(read_write_paths="/tmp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="processes must be a positive integer, got 0"):
        SandboxLimits(processes=0)
    with pytest.raises(ValueError, match="memory_bytes must be a positive integer, got True"):
        SandboxLimits(memory_bytes=True)
    with pytest.raises(ValueError, match="sandbox network must be true or false, got 'yes'"):
        SandboxSettings(network="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be absolute, got 3"):
        SandboxSettings(read_only_paths=[3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="environment names must be a list of names"):
        SandboxSettings(pass_env="CI")


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root host runs commands as another user")
def test_a_workspace_its_user_cannot_reach_is_refused_naming_the_folder(tmp_path: Path) -> None:
    """bubblewrap walks the workspace's path as the user it runs as, even when handed the
    workspace's descriptor: a folder above that the user may not pass is named, before
    anything runs, instead of bwrap's "Can't find source path /proc/self/fd/N"."""
    closed = tmp_path / "closed"
    workspace = closed / "ws"
    workspace.mkdir(parents=True)
    give_away(workspace)
    closed.chmod(0o700)  # as a pytest session does to /tmp/pytest-of-root when it starts
    refused = run(_registry(workspace), command="touch ran")
    assert refused.code == "DENIED", refused.text
    assert f"user id {UNPRIVILEGED}, who may not pass through {closed} (mode 0700)" in refused.text
    assert not (workspace / "ran").exists()
    closed.chmod(0o701)
    assert ok(_registry(workspace), command="touch ran").value["exit_code"] == 0
