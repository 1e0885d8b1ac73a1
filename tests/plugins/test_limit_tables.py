"""The rules file's [limits], [[budget]] and [cache] tables."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionInput
from dsh_tools._plugins.loading import load_plugins
from dsh_tools._registry import ToolRegistry
from dsh_tools_plugins.permissions import RULES_ENV_VAR, PermissionRules, RulesError

TABLES = """\
default = "allow"

[limits]
per_agent = 4
overall = 16

[limits.per_tool]
"web_*" = 2

[[budget]]
tools = "web_fetch"
limit = 5
window_s = 3600
name = "fetches per hour"

[cache]
ttl_s = 60
max_entries = 100
"""


def test_the_tables_configure_the_plugins() -> None:
    limits = PermissionRules.from_toml_text(TABLES).limits

    assert limits.concurrency is not None
    assert limits.concurrency.per_tool == {"web_*": 2}
    assert (limits.concurrency.per_agent, limits.concurrency.overall) == (4, 16)
    assert limits.budgets is not None
    [budget] = limits.budgets.budgets
    assert (budget.tools, budget.limit, budget.window_s, budget.name) == (
        "web_fetch",
        5,
        3600.0,
        "fetches per hour",
    )
    assert limits.cache is not None
    assert (limits.cache.ttl_s, limits.cache.max_entries) == (60.0, 100)


def test_a_file_without_the_tables_configures_none() -> None:
    limits = PermissionRules.from_toml_text('default = "ask"').limits
    assert (limits.concurrency, limits.budgets, limits.cache) == (None, None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[limits]\nper_agent = 2\nper_tol = 3\n", "<string>:3: unknown key 'per_tol' in [limits]"),
        (
            "[limits]\n\noverall = 0\n",
            "<string>:3: ConcurrencyLimit overall must be an integer >= 1",
        ),
        (
            '[[budget]]\ntools = "a"\nlimit = 1\n\n[[budget]]\ntools = "b"\nlimit = -1\n',
            "<string>:7: [[budget]] #2: CallBudget limit must be an integer >= 0",
        ),
        ('[[budget]]\ntools = "a"\n', "<string>:1: [[budget]] #1: missing 'limit'"),
        ("[cache]\nttl = 5\n", "<string>:2: unknown key 'ttl' in [cache]"),
        ('["cache"]\n\nttl = 5\n', "<string>:3: unknown key 'ttl' in [cache]"),
        ("cache = 5\n", "<string>:1: cache must be a table"),
        ("budget = 5\n", "<string>:1: 'budget' must be an array of tables"),
    ],
)
def test_a_broken_table_refuses_the_file_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(RulesError) as raised:
        PermissionRules.from_toml_text(text)
    assert str(raised.value).startswith(message)


def test_the_entry_points_register_what_the_rules_file_configures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('default = "allow"\n[[budget]]\ntools = "echo"\nlimit = 1\n')
    monkeypatch.setenv(RULES_ENV_VAR, str(rules))
    registry = ToolRegistry()
    registry.register(
        define_tool(name="echo", description="echo", parameters={}, execute=lambda a, c: "hi")
    )

    report = load_plugins(registry, only=["default_permissions", "limits", "budgets", "cache"])

    assert {record.name for record in report.loaded} >= {"default_permissions", "budgets"}
    assert not registry.execute_sync(ToolExecutionInput("1", "echo")).is_error
    denied = registry.execute_sync(ToolExecutionInput("2", "echo"))
    assert "limit of 1 echo calls reached" in denied.text


def test_a_broken_table_refuses_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("[cache]\nttl_s = -1\n")
    monkeypatch.setenv(RULES_ENV_VAR, str(rules))
    with pytest.raises(RulesError, match=r"rules\.toml:2: ResultCache ttl_s"):
        load_plugins(ToolRegistry(), only=["cache"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[limits]\nstore = 5\n", '<string>:2: [limits] store must be "process", "approvals"'),
        ('[limits]\nstore = "mysql://db/x"\n', "<string>:2: [limits] store must be"),
        (
            '[limits]\nper_agent = 1\nstore = "limits.sqlite3"\n',
            "<string>:3: [limits] store path 'limits.sqlite3' must be absolute",
        ),
        ("[limits]\nlease_s = 5\n", "<string>:2: [limits] lease_s needs a shared store"),
        (
            '[limits]\nstore = "approvals"\nlease_s = "5"\n',
            "<string>:3: [limits] lease_s must be a positive finite number of seconds",
        ),
        (
            '[limits]\nstore = "approvals"\nlease_s = -1\n',
            "<string>:3: [limits] lease_s must be a positive finite number of seconds",
        ),
    ],
)
def test_a_bad_store_refuses_the_file_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(RulesError) as raised:
        PermissionRules.from_toml_text(text)
    assert str(raised.value).startswith(message)


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> ToolRegistry:
    """A registry with the ``echo`` tool and the plugins the rules file ``text`` makes."""
    rules = tmp_path / "rules.toml"
    rules.write_text(text)
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    monkeypatch.setenv(RULES_ENV_VAR, str(rules))
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))
    registry = ToolRegistry()
    registry.register(
        define_tool(name="echo", description="echo", parameters={}, execute=lambda a, c: "hi")
    )
    load_plugins(registry, only=["default_permissions", "limits", "budgets"])
    return registry


def test_limits_in_a_shared_store_hold_across_registries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two registries stand for two processes: each loads the same rules, and the
    budget counts their calls together (four processes: tests/plugins/test_shared_limits.py)."""
    store = tmp_path / "state" / "limits.sqlite3"
    text = (
        f'default = "allow"\n[limits]\nstore = "{store}"\n[[budget]]\ntools = "echo"\nlimit = 1\n'
    )
    first, second = load(tmp_path, monkeypatch, text), load(tmp_path, monkeypatch, text)
    assert not first.execute_sync(ToolExecutionInput("1", "echo")).is_error
    denied = second.execute_sync(ToolExecutionInput("2", "echo"))
    assert "limit of 1 echo calls reached" in denied.text


def test_limits_kept_with_the_approvals_are_in_the_store_named_else_the_workspaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_TOOLS_APPROVALS_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    text = 'default = "allow"\n[limits]\noverall = 2\nstore = "approvals"\n'
    registry = load(tmp_path, monkeypatch, text)
    assert not registry.execute_sync(ToolExecutionInput("1", "echo")).is_error
    [default] = (tmp_path / "state" / "dsh-tools" / "approvals").iterdir()
    with sqlite3.connect(default) as file:
        assert file.execute("SELECT count(*) FROM permits").fetchone() == (0,)
    file.close()
    inside = tmp_path / "workspace" / "limits.sqlite3"
    monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", str(inside))
    with pytest.raises(RulesError, match=r"rules\.toml:4: \[limits\] store: .*inside the"):
        load(tmp_path, monkeypatch, text)
    outside = tmp_path / "limits.sqlite3"
    monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", str(outside))
    registry = load(tmp_path, monkeypatch, text)
    assert not registry.execute_sync(ToolExecutionInput("1", "echo")).is_error
    assert outside.is_file()


def test_the_command_keeps_the_limits_in_the_store_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--approvals-store`` is where a rules file's ``store = "approvals"`` goes: two runs
    of ``dsh-tools call`` share one budget (and the environment is left as it was)."""
    import io

    from dsh_tools.cli import main

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello")
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'default = "allow"\n[limits]\nstore = "approvals"\n'
        '[[budget]]\ntools = "read_file"\nlimit = 1\n'
    )
    monkeypatch.delenv("DSH_TOOLS_APPROVALS_URL", raising=False)
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))
    monkeypatch.setenv(RULES_ENV_VAR, "")
    store = tmp_path / "approvals.sqlite3"
    argv = ["--workspace", str(workspace), "--rules", str(rules), "--approvals-store", str(store)]
    outputs = []
    for _ in range(2):
        out = io.StringIO()
        code = main(
            [*argv, "call", "read_file", '{"path": "a.txt"}'], stdout=out, stderr=io.StringIO()
        )
        outputs.append((code, out.getvalue()))
    assert outputs[0][0] == 0
    assert "hello" in outputs[0][1]
    assert outputs[1][0] != 0
    assert "limit of 1 read_file calls reached" in outputs[1][1]
    assert "DSH_TOOLS_APPROVALS_URL" not in os.environ
