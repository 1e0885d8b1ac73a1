"""The installed ``dsh-tools`` command behaves like a Unix tool (issue 18).

Every test runs the console script in a subprocess, as a person or a script would.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_tools._plugins.loading import GUARDS_GROUP, PLUGINS_GROUP, TOOLS_GROUP
from fake_dists import Site, installed_command, on_sys_path, run_dsh


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    return folder


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from on_sys_path(tmp_path / "site", monkeypatch)


def test_a_closed_pipe_ends_the_command_quietly(workspace: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # like `| head -1` after its first line: every write fails
    try:
        done = subprocess.run(
            [installed_command(), "--workspace", str(workspace), "list"],
            stdout=writer,
            stderr=subprocess.PIPE,
            env={**os.environ, "DSH_TOOLS_RULES": ""},
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert done.stderr == b""
    assert done.returncode == 141  # as for a program stopped by SIGPIPE


# --------------------------------------------------------------------------- plugins


def _broken_plugins(site: Site) -> None:
    module = site.module(
        "broken",
        """
        import dsh_fake_dependency_that_is_not_installed

        TOOL = None
        """,
    )
    guard = site.module("guard", "raise RuntimeError('no configuration for the guard')\n")
    site.dist(
        "acme-broken",
        {TOOLS_GROUP: {"acme-tools": f"{module}:TOOL"}, GUARDS_GROUP: {"acme-guard": guard}},
        version="2.0",
    )


def test_each_broken_plugin_is_one_line_and_debug_adds_the_traceback(
    site: Site, workspace: Path
) -> None:
    _broken_plugins(site)
    plain = run_dsh("--workspace", str(workspace), "list", sites=(site,))
    assert plain.returncode == 0
    assert "read_file" in plain.stdout
    assert plain.stderr.splitlines() == [
        "dsh-tools: warning: plugin not loaded: acme-broken 2.0: entry point "
        f"[{TOOLS_GROUP}] acme-tools = {site.pkg}.broken:TOOL: import failed: "
        "ModuleNotFoundError: No module named 'dsh_fake_dependency_that_is_not_installed'",
        "dsh-tools: warning: plugin not loaded: acme-broken 2.0: entry point "
        f"[{GUARDS_GROUP}] acme-guard = {site.pkg}.guard: import failed: "
        "RuntimeError: no configuration for the guard",
    ]

    debug = run_dsh("--workspace", str(workspace), "--debug", "list", sites=(site,))
    assert debug.returncode == 0
    assert debug.stderr.count("Traceback (most recent call last)") == 2
    assert "raise RuntimeError('no configuration for the guard')" in debug.stderr


def test_block_and_only_names_that_match_nothing_warn_and_fail_under_strict(
    workspace: Path,
) -> None:
    base = ("--workspace", str(workspace))
    typo = run_dsh(*base, "--block", "default_permisions", "--only", "dist:nope", "list")
    assert typo.returncode == 0
    assert typo.stderr.splitlines() == [
        "dsh-tools: warning: no installed plugin entry point matches 'default_permisions'",
        "dsh-tools: warning: no installed plugin entry point matches 'dist:nope'",
    ]
    assert typo.stdout == "no tools (--only left out every plugin that has tools)\n"

    strict = run_dsh(*base, "--strict", "--block", "default_permisions", "list")
    assert strict.returncode == 3
    assert strict.stderr.splitlines()[-1] == (
        "dsh-tools: error: --block/--only name(s) match no installed entry point: "
        "default_permisions (--strict)"
    )
    assert strict.stdout == ""

    fine = run_dsh(*base, "--strict", "--block", "default_permissions", "list")
    assert (fine.returncode, fine.stderr) == (0, "")


def test_the_no_plugins_hint_only_when_no_plugins_was_given() -> None:
    assert run_dsh("--no-plugins", "list").stdout == (
        "no tools (drop --no-plugins to load the installed plugins)\n"
    )
    blocked = run_dsh("--block", "dist:dsh-tools", "list")
    assert blocked.stdout == "no tools (install a plugin that has tools)\n"


def test_two_distributions_with_one_entry_point_name_warn_and_say_which_wins(
    tmp_path: Path, workspace: Path
) -> None:
    first, second = Site.fresh(tmp_path / "first"), Site.fresh(tmp_path / "second")
    for site, text in ((first, "from the first"), (second, "from the second")):
        module = site.module(
            "policy",
            f"""
            from dsh_tools.hookspecs import hookimpl

            @hookimpl
            def dsh_tools_guard(execution):
                return {text!r}
            """,
        )
        site.dist(f"acme-{site.root.name}", {PLUGINS_GROUP: {"acme-policy": module}})

    done = run_dsh("--workspace", str(workspace), "plugins", sites=(first, second))

    warning = (
        "dsh-tools: warning: plugin not loaded: acme-second 1.2.3: entry point "
        f"[{PLUGINS_GROUP}] acme-policy = {second.pkg}.policy: the name is also declared by "
        f"acme-first 1.2.3 ({first.pkg}.policy), which comes first on sys.path and is the "
        "one loaded; block one of them (dist:<distribution>)"
    )
    assert done.stderr.splitlines() == [warning]
    rows = {line.split()[3]: line.split()[0] for line in done.stdout.splitlines()[1:-1]}
    assert (rows["acme-first"], rows["acme-second"]) == ("loaded", "failed")

    # The loser is a policy plugin that did not load: calls are refused until one is
    # blocked, and then the other one decides.
    call = ("--workspace", str(workspace), "call", "list_dir")
    assert run_dsh(*call, sites=(first, second)).returncode == 3
    chosen = run_dsh("--block", "dist:acme-first", *call, sites=(first, second))
    assert chosen.returncode == 1
    assert "from the second" in chosen.stdout


# --------------------------------------------------------------------------- serve-mcp


def test_serve_mcp_on_a_remote_host_needs_allow_remote() -> None:
    pytest.importorskip("mcp")
    done = run_dsh("serve-mcp", "--http", "--host", "0.0.0.0", timeout=30)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("dsh-tools: error: --host '0.0.0.0' is not a loopback address")
    assert "--allow-remote" in line


# --------------------------------------------------------------------------- call --json


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call", "--json"], "the following arguments are required: name"),
        (["call", "read_file", "{}", "--json", "--frobnicate"], "unrecognized arguments"),
        (["--workspace", "/definitely/not/here", "call", "read_file", "--json"], "not a dir"),
    ],
)
def test_usage_errors_of_call_json_are_a_json_error_object(argv: list[str], message: str) -> None:
    done = run_dsh(*argv)
    assert done.returncode == 2
    answer = json.loads(done.stdout)
    assert answer["isError"] is True
    assert answer["exitCode"] == 2
    assert answer["error"]["info"] == {"name": "UsageError", "code": "USAGE"}
    assert message in answer["error"]["message"]


def test_json_is_an_option_of_call_only() -> None:
    done = run_dsh("--json", "list")
    assert done.returncode == 2
    assert "unrecognized arguments: --json" in done.stderr
    assert done.stdout == ""


# --------------------------------------------------------------------------- audit and replay


def test_every_attempt_is_an_audit_event_and_replay_shows_error_codes(
    workspace: Path, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    base = ("--workspace", str(workspace), "--audit-log", str(log))
    attempts = [
        (["call", "no_such_tool"], "UNKNOWN_TOOL"),
        (["call", "read_file", "{not json"], "INVALID_JSON"),
        (["call", "read_file", "[1, 2]"], "INVALID_JSON"),
        (["call", "write_file", '{"path": "x", "content": "y"}'], "DENIED"),
    ]
    for argv, code in attempts:
        done = run_dsh(*base, *argv)
        assert done.returncode == 1, done.stderr
        assert f"✗ failed ({code})" in done.stdout

    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    results = [event for event in events if event["event"] == "tool/result"]
    assert [event["error"]["info"]["code"] for event in results] == [c for _, c in attempts]
    assert [event["name"] for event in results] == [
        "no_such_tool",
        "read_file",
        "read_file",
        "write_file",
    ]

    replayed = run_dsh("--workspace", str(workspace), "replay", str(log))
    assert replayed.returncode == 0, replayed.stderr
    assert [line for line in replayed.stdout.splitlines() if line.startswith("✗")] == [
        f"✗ failed ({code})" for _, code in attempts
    ]


def test_replay_refuses_what_holds_no_audit_event(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    not_a_log = tmp_path / "notes.md"
    not_a_log.write_text("# notes\n\nsome text\nmore text\n", encoding="utf-8")
    for path in (empty, not_a_log):
        done = run_dsh("replay", str(path))
        assert done.returncode == 2
        # One clear error, not first a warning for each line that is not an event.
        assert done.stderr == (
            f"dsh-tools: error: {str(path)!r} holds no audit event: it is not an audit log "
            "(no line in it is a tool/call or tool/result event; --audit-log writes audit "
            "logs)\n"
        )
    directory = run_dsh("replay", str(tmp_path))
    assert directory.returncode == 2
    assert directory.stderr == f"dsh-tools: error: audit log {str(tmp_path)!r} is a directory\n"


# --------------------------------------------------------------------------- not Unicode


@pytest.mark.parametrize("json_output", [False, True])
def test_a_lone_surrogate_in_the_arguments_is_a_failed_call_not_a_crash(
    workspace: Path, json_output: bool
) -> None:
    """Reproduction r15_cli_surrogate.sh: the arguments hold "\\ud800"."""
    flag = ["--json"] if json_output else []
    done = run_dsh("--workspace", str(workspace), "call", "read_file", '{"path": "\\ud800"}', *flag)
    # A failed call that names the problem; run_dsh checks the output is UTF-8.
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    problem = '"arguments.path" holds the lone surrogate U+D800'
    if json_output:
        result = json.loads(done.stdout)
        assert result["error"]["info"]["code"] == "INVALID_JSON"
        assert problem in result["error"]["message"]
    else:
        assert "✗ failed (INVALID_JSON)" in done.stdout
        assert problem in done.stdout


def test_arguments_that_are_not_utf8_are_a_failed_call_not_a_crash(workspace: Path) -> None:
    from_stdin = run_dsh(
        "--workspace", str(workspace), "call", "read_file", "-", stdin=b'{"path": "\xff.txt"}'
    )
    assert from_stdin.returncode == 1, from_stdin.stderr
    assert "✗ failed (INVALID_JSON)" in from_stdin.stdout
    assert "lone surrogate U+DCFF" in from_stdin.stdout
    name = run_dsh("--workspace", str(workspace), "call", "caf\udcff")
    assert name.returncode == 1
    assert "✗ failed (UNKNOWN_TOOL)" in name.stdout
    assert 'unknown tool "caf\ufffd"' in name.stdout


# --------------------------------------------------------------------------- declarations


def _odd_tools(site: Site) -> None:
    module = site.module(
        "odd",
        """
        from .common import tool

        TOOLS = [
            tool("acme word stats!"),
            tool("github.create_issue"),
            tool("9lives"),
            tool("fine_tool"),
            tool("quiet", description="   "),
        ]
        """,
    )
    site.dist("acme-odd", {TOOLS_GROUP: {"acme-odd": f"{module}:TOOLS"}})


def test_check_reports_what_each_provider_format_refuses(site: Site) -> None:
    _odd_tools(site)
    done = run_dsh("--only", "dist:acme-odd", "check", sites=(site,))
    assert done.returncode == 1
    openai = "the name must match ^[a-zA-Z0-9_-]{1,64}$ (refused by openai, openai-responses, "
    gemini_name = "the name must start with a letter or _ and hold at most 64 letters, digits, "
    assert done.stdout.splitlines() == [
        f'FAIL tool "acme word stats!": {openai}anthropic)',
        f'FAIL tool "acme word stats!": {gemini_name}_ . : or - (refused by gemini)',
        f'FAIL tool "github.create_issue": {openai}anthropic)',
        f'FAIL tool "9lives": {gemini_name}_ . : or - (refused by gemini)',
        'FAIL tool "quiet": the description must not be empty (refused by gemini)',
        "5 problem(s) in 1 plugin(s), 5 tool(s)",
    ]


@pytest.mark.parametrize(
    ("format", "refused"),
    [
        ("openai", ["acme word stats!", "github.create_issue"]),
        ("gemini", ["acme word stats!", "9lives", "quiet"]),
        ("mcp", []),
    ],
)
def test_schemas_fails_for_the_formats_that_refuse_a_declaration(
    site: Site, format: str, refused: list[str]
) -> None:
    _odd_tools(site)
    done = run_dsh("--only", "dist:acme-odd", "schemas", "--format", format, sites=(site,))
    if not refused:
        assert done.returncode == 0, done.stderr
        assert len(json.loads(done.stdout)) == 5
        return
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert [line.split('"')[1] for line in lines[:-1]] == refused
    assert all(line.endswith(f" for {format}") for line in lines[:-1])
    assert lines[-1].startswith(f"dsh-tools: error: {format} would refuse these declarations")


def test_declaration_rules_per_format() -> None:
    from dsh_tools._checks import declaration_problems
    from dsh_tools._json import FrozenDict
    from dsh_tools._models import ToolSchema

    def refused(name: str, format: str, description: str = "Does things.") -> bool:
        return bool(declaration_problems([ToolSchema(name, description, FrozenDict())], format))

    for name in ("a", "read_file", "Read-File_2", "x" * 64):
        assert not any(refused(name, f) for f in ("openai", "openai-responses", "anthropic"))
    for name in ("", "x" * 65, "a.b", "a b", "a/b", "ä", "a\n"):
        assert all(refused(name, f) for f in ("openai", "openai-responses", "anthropic"))
    for name in ("_x", "a.b", "ns:tool", "a-b", "x" * 64):
        assert not refused(name, "gemini"), name
    for name in ("", "1a", "-a", ".a", "x" * 65, "a b"):
        assert refused(name, "gemini"), name
    assert refused("fine", "gemini", description=" \n")
    assert not refused("fine", "anthropic", description="")
    assert not refused("any name at all.", "mcp", description="")
