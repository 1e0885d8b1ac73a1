"""The dsh-tools command, driven as a person at a terminal (or a script) would."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, main
from sandbox_owner import give_away


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace with one file, in ``tmp_path`` (where host files such as the rules
    file go); the env vars the command sets are restored afterwards."""
    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(root))
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return root


def dsh(*argv: str, stdin: str = "") -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return Run(code, out.getvalue(), err.getvalue())


def test_version() -> None:
    run = dsh("--version")
    assert run.code == 0
    assert run.out.startswith("dsh-tools ")


def test_list_shows_the_installed_workspace_tools(workspace: Path) -> None:
    run = dsh("--workspace", str(workspace), "list")
    assert run.code == 0
    names = [line.split()[0] for line in run.out.splitlines()]
    assert {"read_file", "grep", "run_command"} <= set(names)
    assert "read-only" in next(line for line in run.out.splitlines() if line.startswith("grep"))


SETTINGS = ("DSH_TOOLS_WORKSPACE", "DSH_TOOLS_RULES", "DSH_TOOLS_SANDBOX", "DSH_TOOLS_NETWORK")


def test_main_leaves_its_process_environment_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "on")  # the host's own setting
    root = tmp_path / "ws"
    root.mkdir()
    rules = tmp_path / "rules.toml"
    rules.write_text('default = "ask"\n')
    argv = ["--workspace", str(root), "--rules", str(rules), "--sandbox", "off", "--no-network"]
    run = dsh(*argv, "list")
    assert run.code == 0, run.err
    assert "run_command" in run.out
    # A host or a test that runs main() in its own process keeps its settings: a later
    # load_plugins there, or a command it starts, does not inherit this command's options.
    assert {name: os.environ.get(name) for name in SETTINGS} == {
        "DSH_TOOLS_WORKSPACE": None,
        "DSH_TOOLS_RULES": None,
        "DSH_TOOLS_SANDBOX": None,
        "DSH_TOOLS_NETWORK": "on",
    }


def test_no_plugins_means_no_tools() -> None:
    run = dsh("--no-plugins", "list")
    assert run.code == 0
    assert run.out.startswith("no tools")


@pytest.mark.parametrize("format", ["raw", "openai", "anthropic", "gemini", "mcp"])
def test_schemas_in_each_provider_format(workspace: Path, format: str) -> None:
    run = dsh("--workspace", str(workspace), "schemas", "--format", format)
    assert run.code == 0
    declarations = json.loads(run.out)
    assert isinstance(declarations, list)
    assert "read_file" in run.out


def test_call_shows_the_pending_and_completed_cards(workspace: Path) -> None:
    run = dsh("--workspace", str(workspace), "call", "read_file", '{"path": "notes.txt"}')
    assert run.code == 0, run.err
    assert run.out.startswith("▶ Read notes.txt")
    assert "✓ done" in run.out
    assert "beta" in run.out


def test_call_reads_arguments_from_stdin_and_prints_json(workspace: Path) -> None:
    run = dsh(
        "--workspace",
        str(workspace),
        "call",
        "grep",
        "-",
        "--json",
        stdin='{"pattern": "^b"}',
    )
    assert run.code == 0, run.err
    result = json.loads(run.out)
    assert result["isError"] is False
    assert "notes.txt:2:beta" in result["content"][0]["text"]


def test_a_failed_call_exits_1_and_ask_without_a_terminal_denies(workspace: Path) -> None:
    give_away(workspace)  # a command that could run: only then is anyone asked
    run = dsh("--workspace", str(workspace), "call", "run_command", '{"command": "echo hi"}')
    assert run.code == EXIT_CALL_FAILED
    assert "✗ failed (DENIED)" in run.out
    assert "no approval channel" in run.out


@pytest.mark.parametrize(
    ("argv", "code", "note"),
    [
        (["call", "read_file", "{oops"], "INVALID_JSON", None),
        (["call", "read_file", "[1]"], "INVALID_JSON", None),
        (["call", "no_such_tool"], "UNKNOWN_TOOL", "known tools: "),
    ],
)
def test_a_call_that_cannot_run_is_a_failed_call_with_its_code(
    workspace: Path, argv: list[str], code: str, note: str | None
) -> None:
    run = dsh(*argv)
    assert run.code == EXIT_CALL_FAILED
    assert f"✗ failed ({code})" in run.out
    assert "Traceback" not in run.err
    if note is not None:
        assert note in run.err


def test_unreadable_arguments_are_named_in_the_result(workspace: Path) -> None:
    run = dsh("call", "read_file", "{oops", "--json")
    assert run.code == EXIT_CALL_FAILED
    message = json.loads(run.out)["error"]["message"]
    assert message.startswith('tool "read_file" was called with unreadable arguments: ')
    assert '"arguments" is not valid JSON text' in message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workspace", "/definitely/not/here", "list"], "is not a directory"),
        (["--rules", "/definitely/not/here.toml", "list"], "is not a file"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(
    workspace: Path, argv: list[str], message: str
) -> None:
    run = dsh(*argv)
    assert run.code == EXIT_USAGE
    assert run.err.count("\n") == 1
    assert run.err.startswith("dsh-tools: error: ")
    assert message in run.err
    assert "Traceback" not in run.err


def test_unknown_command_is_a_usage_error() -> None:
    assert dsh("frobnicate").code == EXIT_USAGE


def test_audit_log_then_replay(workspace: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    first = dsh("--workspace", str(workspace), "--audit-log", str(log), "call", "list_dir")
    assert first.code == 0, first.err
    dsh("--workspace", str(workspace), "--audit-log", str(log), "call", "read_file", "{}")
    replayed = dsh("--workspace", str(workspace), "replay", str(log))
    assert replayed.code == 0, replayed.err
    assert replayed.out.endswith("2 call(s)\n")
    assert "✓ done" in replayed.out
    assert "✗ failed" in replayed.out
    assert dsh("replay", str(tmp_path / "missing.jsonl")).code == EXIT_USAGE


def test_rules_file_is_enforced(workspace: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\naction = "deny"\ntool = "read_file"\nreason = "not today"\n')
    run = dsh(
        "--workspace",
        str(workspace),
        "--rules",
        str(rules),
        "call",
        "read_file",
        '{"path": "notes.txt"}',
    )
    assert run.code == EXIT_CALL_FAILED
    assert "not today" in run.out


def test_plugins_and_check(workspace: Path) -> None:
    give_away(workspace)  # a root host's commands need a workspace root does not own
    plugins = dsh("--workspace", str(workspace), "plugins")
    assert plugins.code == 0
    assert "workspace" in plugins.out
    assert "default_permissions" in plugins.out
    check = dsh("--workspace", str(workspace), "check")
    assert check.code == 0, check.out
    assert check.out.splitlines()[-1].startswith("ok: ")


def test_check_says_what_the_permission_rules_do_with_a_tool_they_do_not_name(
    workspace: Path, tmp_path: Path
) -> None:
    give_away(workspace)
    lines = dsh("--workspace", str(workspace), "check").out.splitlines()
    assert lines[:3] == [
        "permission rules: the built-in default_rules() (no rules file: --rules FILE names one)",
        "  read_file, list_dir, glob, grep: run without asking (rule 'read-only tools')",
        "  write_file, edit_file: ask a person first (rule 'tools that change files')",
    ]
    # Any tool the defaults do not name, a third-party plugin's included, asks.
    assert lines[-2] == (
        '  any other tool or call: ask a person first (default = "ask"); '
        "loaded tools no rule names: none"
    )
    rules = tmp_path / "rules.toml"
    rules.write_text('default = "deny"\n\n[[rule]]\naction = "allow"\ntool = "grep"\n')
    lines = dsh("--workspace", str(workspace), "--rules", str(rules), "check").out.splitlines()
    assert lines[:2] == [f"permission rules: {rules}", "  grep: run without asking (rule #1)"]
    assert lines[2] == (
        '  any other tool or call: denied (default = "deny"); loaded tools no rule names: '
        "edit_file, glob, list_dir, read_file, run_command, write_file"
    )


def _python_m(cwd: Path, *argv: str, workspace: Path | None = None) -> Any:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DSH_TOOLS_WORKSPACE", "PYTHONSAFEPATH")
    }
    if workspace is not None:
        env["DSH_TOOLS_WORKSPACE"] = str(workspace)
    return subprocess.run(
        [sys.executable, *argv, "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_python_dash_m_runs_the_same_command_outside_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    for argv, workspace in (
        (("-m", "dsh_tools", "--workspace", str(tmp_path / "ws")), None),
        (("-m", "dsh_tools"), tmp_path / "ws"),
        (("-P", "-m", "dsh_tools"), None),  # the current directory is not on the path
    ):
        done = _python_m(tmp_path, *argv, workspace=workspace)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("dsh-tools ")


@pytest.mark.parametrize("case", ["default workspace", "inside", "planted plugins"])
def test_python_dash_m_refuses_to_import_from_the_workspace(tmp_path: Path, case: str) -> None:
    """``python -m`` imports from the current directory first: from the workspace, a
    command could plant ``dsh_tools_plugins/`` (imported later, lazily) there."""
    cwd, workspace = tmp_path, None
    if case == "inside":
        cwd, workspace = tmp_path / "sub", tmp_path
        cwd.mkdir()
    elif case == "planted plugins":
        (tmp_path / "dsh_tools_plugins").mkdir()
        (tmp_path / "dsh_tools_plugins" / "__init__.py").write_text("raise SystemExit(99)\n")
        workspace = tmp_path / "elsewhere"
        workspace.mkdir()
    done = _python_m(cwd, "-m", "dsh_tools", workspace=workspace)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith("dsh-tools: error: refusing to run as python -m dsh_tools")
    assert "Run the dsh-tools command instead" in done.stderr
    assert done.stdout == ""


def test_serve_mcp_answers_an_mcp_client_on_stdio(workspace: Path) -> None:
    pytest.importorskip("mcp")
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "notes.txt"}},
        },
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "dsh_tools", "--workspace", str(workspace), "serve-mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    server.stdin.flush()
    replies: dict[int, Any] = {}
    # Keep stdin open until the last answer arrives: closing it ends the session.
    while 3 not in replies and (line := server.stdout.readline()):
        reply = json.loads(line)
        replies[reply["id"]] = reply
    server.stdin.close()
    assert server.wait(timeout=30) == 0, server.stderr.read() if server.stderr else ""
    server.stdout.close()
    if server.stderr is not None:
        server.stderr.close()
    names = [tool["name"] for tool in replies[2]["result"]["tools"]]
    assert "read_file" in names
    call = replies[3]["result"]
    assert call["isError"] is False
    assert "beta" in call["content"][0]["text"]


def test_sandbox_flags_reach_run_command_and_its_rules(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--sandbox required`` with the network off: the default rules let a command run
    without asking, or the tool refuses it where no sandbox can be made. ``auto`` and
    ``--network`` keep asking (no terminal here: denied)."""
    from dsh_tools_plugins.sandbox import Sandbox

    give_away(workspace)  # a root host runs sandboxed commands as the workspace's owner
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "")
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "")
    call = ["call", "run_command", '{"argv": ["echo", "hi"]}']
    confined = dsh("--workspace", str(workspace), "--sandbox", "required", *call)
    if Sandbox("required").state().sandboxed:
        assert confined.code == 0, confined.out
        assert "hi" in confined.out
        assert "[exit 0; sandboxed, network off]" in confined.out
    else:
        assert confined.code == EXIT_CALL_FAILED
        assert "✗ failed (DENIED)" in confined.out
    for flags in (["--sandbox", "auto"], ["--sandbox", "required", "--network"]):
        asked = dsh("--workspace", str(workspace), *flags, *call)
        assert asked.code == EXIT_CALL_FAILED, flags
        assert "no approval channel" in asked.out, flags
    bad = dsh("--workspace", str(workspace), "--sandbox", "strict", "list")
    assert bad.code == EXIT_USAGE
    assert "--sandbox" in bad.err


def test_a_bad_network_setting_stops_the_command(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "")
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "maybe")
    run = dsh("--workspace", str(workspace), "list")
    assert run.code == EXIT_USAGE
    assert '$DSH_TOOLS_NETWORK: must be "on" or "off"' in run.err


@pytest.mark.parametrize("option", ["--rules", "--audit-log"])
@pytest.mark.parametrize("cwd_is_workspace", [False, True])
def test_host_files_inside_the_workspace_are_refused(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, option: str, cwd_is_workspace: bool
) -> None:
    """A sandboxed command could rewrite them (the rules) or swap them for a link (the
    log): the command stops before loading anything, saying where to keep them."""
    (workspace / "sub").mkdir()
    host_file = workspace / "sub" / "host.file"
    host_file.write_text('default = "allow"\n')
    argv = [option, str(host_file), "call", "read_file", '{"path": "notes.txt"}']
    if cwd_is_workspace:  # no --workspace: the current directory is the workspace
        monkeypatch.delenv("DSH_TOOLS_WORKSPACE")
        monkeypatch.chdir(workspace)
    else:
        argv = ["--workspace", str(workspace), *argv]
    run = dsh(*argv)
    assert run.code == EXIT_USAGE
    assert run.err.startswith(f"dsh-tools: error: {option} {host_file}: it is inside {workspace}, ")
    assert "keep it outside the workspace" in run.err
    assert run.err.count("\n") == 1
    assert host_file.read_text() == 'default = "allow"\n'


@pytest.mark.parametrize("option", ["--rules", "--audit-log"])
@pytest.mark.parametrize("swap", ["last", "parent"])
def test_host_files_through_a_link_are_refused(
    workspace: Path, tmp_path: Path, option: str, swap: str
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "real.file").write_text("")
    if swap == "last":
        (config / "host.file").symlink_to("real.file")
        path, link = config / "host.file", config / "host.file"
    else:  # the folder renamed and a link left in its place
        (config / "real.file").rename(config / "host.file")
        config.rename(tmp_path / "moved")
        config.symlink_to("moved")
        path, link = config / "host.file", config
    run = dsh("--workspace", str(workspace), option, str(path), "list")
    assert run.code == EXIT_USAGE
    assert "a symbolic link; refusing to follow it" in run.err
    assert str(link) in run.err


# What a new user stumbled on: options after the command, help pages, where
# `serve-mcp --http` listens, and a note for arguments that are not JSON.
def test_global_options_are_accepted_after_the_command(workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "elsewhere.txt").write_text("needle\n")
    run = dsh("call", "read_file", '{"path": "elsewhere.txt"}', "--json", "--workspace", str(other))
    assert run.code == EXIT_OK, run.out + run.err
    assert "needle" in json.dumps(json.loads(run.out)["content"])


def test_a_repeatable_option_given_before_and_after_the_command_keeps_both() -> None:
    from dsh_tools.cli._parser import build_parser

    options = build_parser().parse_args(["--block", "a", "list", "--block", "b", "--debug"])
    assert options.block == ["a", "b"]
    assert options.debug is True
    assert build_parser().parse_args(["--workspace", "w", "list"]).workspace == "w"


@pytest.mark.parametrize("command", ["list", "schemas", "call", "explain", "replay", "serve-mcp"])
def test_each_command_help_page_has_a_description(command: str) -> None:
    page = dsh(command, "--help").out
    description = page.partition("\n\n")[2].split("\n", 1)[0]
    assert description[:1].isupper(), page
    assert not description.startswith(("positional", "options")), page


def test_schemas_format_has_help_text() -> None:
    assert "declaration format" in dsh("schemas", "--help").out


def test_arguments_that_are_not_json_get_a_note_on_standard_error(workspace: Path) -> None:
    run = dsh("call", "read_file", "{oops")
    assert "dsh-tools: note: ARGUMENTS must be one JSON object" in run.err


def test_serve_mcp_http_prints_its_url_on_standard_error(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    from dsh_tools.bridges import mcp

    async def served(*args: object, **kwargs: object) -> None:
        return None

    monkeypatch.setattr(mcp, "serve_http", served)
    run = dsh("serve-mcp", "--http", "--port", "8765")
    assert run.code == EXIT_OK
    assert "http://127.0.0.1:8765/mcp" in run.err
    assert "MCP client" in run.err
    assert run.out == ""
