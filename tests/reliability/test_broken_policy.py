"""A broken policy never means no policy (issue 16, reproduction r01_broken_rules.sh).

A rules file that cannot be read, parsed or understood stops the host: the command exits
2 naming the file, the line and the rule, and ``load_plugins`` raises, strict or not.
While an entry point that could hold policy failed to load, ``call`` and ``serve-mcp``
refuse to run tools unless ``--allow-broken-plugins`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_tools._plugins.loading import GUARDS_GROUP, PLUGINS_GROUP, TOOLS_GROUP, load_plugins
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import PluginConfigError
from dsh_tools_plugins.permissions import RulesError
from fake_dists import Site, on_sys_path, run_dsh

BROKEN_RULES = {
    "typo-in-a-key": ('default = "deny"\n[[rule]]\nacton = "allow"\n', ":3: rule #1: ", "'acton'"),
    "typo-in-a-predicate": (
        'default = "deny"\n[[rule]]\nname = "git"\naction = "allow"\ntool = "run_command"\n'
        'comand_matches = "^git"\n',
        ":6: rule #1 ('git'): ",
        "'comand_matches'",
    ),
    "bad-toml": ('default = "deny"\n[[rule]\naction = "allow"\n', ":2:", "invalid TOML"),
    "bad-value": ('[[rule]]\naction = "permit"\n', ":2: rule #1: ", "action must be one of"),
    "unknown-section": ('default = "ask"\n[sandboxx]\nnet = false\n', ":2: ", "'sandboxx'"),
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("how", ["--rules", "DSH_TOOLS_RULES"])
@pytest.mark.parametrize("broken", sorted(BROKEN_RULES))
def test_a_broken_rules_file_stops_the_command_before_any_call_runs(
    tmp_path: Path, workspace: Path, how: str, broken: str
) -> None:
    text, where, problem = BROKEN_RULES[broken]
    rules = tmp_path / "rules.toml"
    rules.write_text(text, encoding="utf-8")
    argv = ["--workspace", str(workspace)]
    env = {}
    if how == "--rules":
        argv += ["--rules", str(rules)]
    else:
        env["DSH_TOOLS_RULES"] = str(rules)

    done = run_dsh(*argv, "call", "run_command", '{"command": "touch pwned"}', env=env)

    assert done.returncode == 2, done.stdout
    assert list(workspace.iterdir()) == []
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dsh-tools: error: ")
    assert f"{rules}{where}" in line
    assert problem in line


def test_a_missing_or_unreadable_rules_file_named_by_the_environment_stops_the_command(
    tmp_path: Path, workspace: Path
) -> None:
    for path, problem in (
        (tmp_path / "missing.toml", "cannot open it: No such file"),
        (tmp_path, "is not a regular file"),
    ):
        done = run_dsh(
            "--workspace",
            str(workspace),
            "call",
            "run_command",
            '{"command": "touch pwned"}',
            env={"DSH_TOOLS_RULES": str(path)},
        )
        assert done.returncode == 2
        assert f"{path}: {problem}" in done.stderr
        assert list(workspace.iterdir()) == []


def test_serve_mcp_does_not_start_with_a_broken_rules_file(tmp_path: Path, workspace: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nacton = "allow"\n', encoding="utf-8")
    done = run_dsh("--workspace", str(workspace), "--rules", str(rules), "serve-mcp")
    assert done.returncode == 2
    assert "unknown key 'acton'" in done.stderr
    assert done.stdout == ""  # not one MCP message: the server never started


def test_load_plugins_raises_a_broken_rules_file_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nacton = "allow"\n', encoding="utf-8")
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules))
    (tmp_path / "ws").mkdir()
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    registry = ToolRegistry()

    with pytest.raises(RulesError) as raised:
        load_plugins(registry, only=["workspace", "default_permissions"])

    assert isinstance(raised.value, PluginConfigError)
    assert (raised.value.source, raised.value.line, raised.value.rule_index) == (str(rules), 2, 1)
    # The workspace tools loaded before the rules failed; they were removed again.
    assert registry.names() == []
    assert registry.plugin_manager.get_plugin("default_permissions") is None


# --------------------------------------------------------------------------- any plugin


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from on_sys_path(tmp_path / "site", monkeypatch)


def test_a_plugin_that_raises_plugin_config_error_stops_load_plugins(site: Site) -> None:
    module = site.module(
        "configured",
        """
        from dsh_tools.errors import PluginConfigError
        from .common import tool

        TOOL = tool("early")

        def make():
            raise PluginConfigError("acme.toml:3: 'endpoint' must be a URL")
        """,
    )
    site.dist(
        "configured-dist",
        {TOOLS_GROUP: {"early": f"{module}:TOOL"}, PLUGINS_GROUP: {"acme": f"{module}:make"}},
    )
    registry = ToolRegistry()
    with pytest.raises(PluginConfigError, match="'endpoint' must be a URL"):
        load_plugins(registry, only=["dist:configured-dist"])
    assert registry.names() == []


def _broken(site: Site, group: str) -> None:
    module = site.module(
        "broken", "import dsh_fake_policy_dependency_that_is_not_installed\nPOLICY = None\n"
    )
    site.dist("acme-policy", {group: {"acme-guardrails": f"{module}:POLICY"}}, version="0.9")


@pytest.mark.parametrize("group", [PLUGINS_GROUP, GUARDS_GROUP])
def test_call_and_serve_mcp_refuse_while_a_policy_plugin_is_broken(
    site: Site, workspace: Path, group: str
) -> None:
    _broken(site, group)
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    base = ("--workspace", str(workspace))
    read = ("call", "read_file", '{"path": "notes.txt"}')

    for command in (read, ("serve-mcp",)):
        done = run_dsh(*base, *command, sites=(site,))
        assert done.returncode == 3, done.stderr
        assert "hello" not in done.stdout
        warning, error = done.stderr.splitlines()
        assert warning.startswith("dsh-tools: warning: plugin not loaded: acme-policy 0.9: ")
        assert error.startswith("dsh-tools: error: refusing to run tools")
        assert f"[{group}] acme-guardrails (acme-policy 0.9)" in error
        assert "--allow-broken-plugins" in error

    allowed = run_dsh(*base, "--allow-broken-plugins", *read, sites=(site,))
    assert allowed.returncode == 0, allowed.stderr
    assert "hello" in allowed.stdout
    listed = run_dsh(*base, "list", sites=(site,))  # listing runs no tool
    assert listed.returncode == 0
    assert "read_file" in listed.stdout


def test_a_broken_tools_entry_point_does_not_stop_calls(site: Site, workspace: Path) -> None:
    _broken(site, TOOLS_GROUP)
    done = run_dsh("--workspace", str(workspace), "call", "list_dir", sites=(site,))
    assert done.returncode == 0, done.stderr
    assert "plugin not loaded: acme-policy 0.9" in done.stderr


def test_rules_that_the_permissions_plugin_never_loads_are_refused(
    tmp_path: Path, workspace: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('default = "deny"\n', encoding="utf-8")
    base = ("--workspace", str(workspace), "--rules", str(rules))
    touch = ("call", "run_command", '{"command": "touch pwned"}')
    for left_out in (
        ("--block", "default_permissions"),
        ("--only", "workspace"),
        ("--no-plugins",),
    ):
        done = run_dsh(*base, *left_out, *touch)
        assert done.returncode == 2
        assert "--rules needs the default_permissions plugin" in done.stderr
        assert list(workspace.iterdir()) == []
