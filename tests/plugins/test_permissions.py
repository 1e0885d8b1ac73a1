"""PermissionRules: TOML and Python rules, deny > ask > allow, guards, defaults, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dsh_tools.define import define_tool
from dsh_tools.errors import DshToolsError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.models import (
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    Deny,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from dsh_tools.registry import ToolRegistry
from dsh_tools_plugins.permissions import (
    PermissionRules,
    Rule,
    RulesError,
    default_permissions,
    default_rules,
)

TOOLS = ("read_file", "write_file", "run_command", "deploy")


class Approver:
    """Records approval requests and answers with a fixed outcome."""

    def __init__(self, outcome: ApprovalOutcome = ApprovalOutcome.ALLOWED_ONCE) -> None:
        self.outcome = outcome
        self.requests: list[ApprovalRequest] = []

    def request(self, request: ApprovalRequest) -> ApprovalOutcome:
        self.requests.append(request)
        return self.outcome


def registry_with(
    policy: PermissionRules, approver: Approver | None = None, *, before: tuple[object, ...] = ()
) -> ToolRegistry:
    """Tools plus ``policy``; plugins in ``before`` are added first (so they run after it)."""
    registry = ToolRegistry(approval=approver)

    def body(args: Any, ctx: Any) -> str:
        return f"{ctx.execution.name} ran"

    for plugin in before:
        registry.add_plugin(plugin)
    for name in TOOLS:
        registry.register(
            define_tool(
                name=name,
                description=name,
                parameters={
                    "path": {"type": "string"},
                    "command": {"type": "string"},
                    "argv": {"type": "array", "items": {"type": "string"}},
                    "mode": {"type": "json"},
                },
                execute=body,
            )
        )
    registry.add_plugin(policy)
    return registry


def run(registry: ToolRegistry, name: str, **arguments: Any) -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput("c1", name, arguments, agent=None))


def run_as_agent(registry: ToolRegistry, name: str, **arguments: Any) -> ToolExecutionResult:
    return registry.scope("agent").execute_sync(ToolExecutionInput("c1", name, arguments))


def denied(result: ToolExecutionResult) -> str:
    assert isinstance(result, ToolExecutionFailure), result
    assert result.code == "DENIED"
    return result.error.message


RULES = """\
default = "deny"

[[rule]]
name = "read the workspace"
action = "allow"
tool = ["read_file", "write_file"]
path_prefix = "/work"

[[rule]]
name = "ask before writing"
action = "ask"
tool = "write_*"

[[rule]]
name = "no secrets"
action = "deny"
tool = "*"
path_prefix = ["/work/secrets", "/etc"]
reason = "secrets are off limits"
"""


def test_rules_from_a_toml_file_decide_calls(tmp_path: Path) -> None:
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(RULES, encoding="utf-8")
    approver = Approver()
    registry = registry_with(PermissionRules.from_toml(rules_file), approver)

    assert run(registry, "read_file", path="/work/a.txt").is_error is False
    assert denied(run(registry, "read_file", path="/work/secrets/key")) == (
        f"secrets are off limits (permission rule 'no secrets' in {rules_file})"
    )
    # Normalised before comparing: climbing out of /work is not inside /work.
    assert "off limits" in denied(run(registry, "read_file", path="/work/../etc/passwd"))
    assert "not allowed" in denied(run(registry, "read_file", path="/workshop/x"))
    assert "not allowed" in denied(run(registry, "deploy"))

    # ask wins over allow; the approval request names the rule.
    assert isinstance(run_as_agent(registry, "write_file", path="/work/a"), ToolExecutionSuccess)
    assert approver.requests[-1].reason == (
        f"permission rule 'ask before writing' in {rules_file} asks before tool \"write_file\" runs"
    )


def test_normalisation_cannot_be_used_to_escape_a_prefix() -> None:
    policy = PermissionRules([Rule("allow", "read_file", path_prefix="/work/src")], "deny")
    allowed = [
        "/work/src",
        "/work/src/",
        "/work/src/a.py",
        "/work//src/./a.py",
        "/work/src/x/../a.py",
    ]
    refused = ["/work/srcx", "/work/src/../../etc/passwd", "/work", "work/src/a.py", ""]
    for path in allowed:
        assert policy.decide("read_file", {"path": path}) == Allow(), path
    for path in refused:
        assert isinstance(policy.decide("read_file", {"path": path}), Deny), path
    relative = PermissionRules([Rule("allow", "*", path_prefix=".")], "deny")
    assert relative.decide("read_file", {"path": "src/a.py"}) == Allow()
    assert isinstance(relative.decide("read_file", {"path": "../outside"}), Deny)
    assert isinstance(relative.decide("read_file", {"path": "/abs"}), Deny)


def test_deny_wins_whatever_the_order() -> None:
    for rules in (
        [Rule("allow", "*"), Rule("ask", "*"), Rule("deny", "run_command", name="no")],
        [Rule("deny", "run_command", name="no"), Rule("ask", "*"), Rule("allow", "*")],
    ):
        policy = PermissionRules(rules, default="allow")
        decision = policy.decide("run_command", {"command": "ls"})
        assert decision == Deny("tool \"run_command\" is denied by permission rule 'no'")
        assert isinstance(policy.decide("read_file", {}), Ask)


def test_predicates() -> None:
    policy = PermissionRules(
        [
            Rule("deny", "run_command", command_matches=r"\brm\s+-rf\b", name="no rm -rf"),
            Rule("allow", "run_command", argv_prefix=[["git", "status"], ["git", "diff"]]),
            Rule("allow", "write_file", path_prefix="/tmp", argument="target"),
            Rule("allow", "deploy", argument_equals={"mode": "dry-run"}),
            Rule("allow", "flag", argument_equals={"force": False}),
        ],
        default="deny",
    )
    assert policy.decide("run_command", {"command": "git status"}) == Allow()
    assert policy.decide("run_command", {"argv": ["git", "diff", "HEAD"]}) == Allow()
    assert isinstance(policy.decide("run_command", {"command": "git push"}), Deny)
    assert isinstance(policy.decide("run_command", {"command": "git status; rm -rf /"}), Deny)
    assert isinstance(policy.decide("run_command", {"argv": ["rm", "-rf", "/"]}), Deny)
    assert isinstance(policy.decide("run_command", {}), Deny)  # no command: no match
    assert policy.decide("write_file", {"target": "/tmp/x"}) == Allow()
    assert isinstance(policy.decide("write_file", {"path": "/tmp/x"}), Deny)
    assert isinstance(policy.decide("write_file", {"target": 3}), Deny)
    assert policy.decide("deploy", {"mode": "dry-run"}) == Allow()
    assert isinstance(policy.decide("deploy", {"mode": "prod"}), Deny)
    assert isinstance(policy.decide("deploy", {}), Deny)
    assert policy.decide("flag", {"force": False}) == Allow()
    assert isinstance(policy.decide("flag", {"force": 0}), Deny)  # JSON: false is not 0


def test_defaults_for_unmatched_calls() -> None:
    assert isinstance(PermissionRules([], "deny").decide("x", {}), Deny)
    ask = PermissionRules([], "ask").decide("x", {})
    assert isinstance(ask, Ask)
    assert ask.reason == 'no permission rule covers tool "x"'
    assert PermissionRules([], "allow").decide("x", {}) == Allow()


def test_an_allow_default_abstains_so_later_policies_decide() -> None:
    class DenyDeploy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
            return Deny("deploys are frozen") if execution.name == "deploy" else None

    policy = PermissionRules([Rule("allow", "read_file")], default="allow")
    registry = registry_with(policy, before=(DenyDeploy(),))  # the rules run first

    assert run(registry, "read_file").is_error is False
    assert denied(run(registry, "deploy")) == "deploys are frozen"


def test_guard_rules_cannot_be_re_allowed_by_another_policy() -> None:
    class AllowEverything:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Allow:
            return Allow()

    rules = PermissionRules.from_toml_text(
        textwrap.dedent(
            """
            [[rule]]
            name = "never touch .ssh"
            action = "deny"
            path_prefix = "/home/me/.ssh"
            enforce = "guard"

            [[rule]]
            name = "plain deny"
            action = "deny"
            tool = "deploy"
            """
        ),
        source="team.toml",
    )
    registry = registry_with(rules)
    registry.add_plugin(AllowEverything())

    assert denied(run(registry, "read_file", path="/home/me/.ssh/id_ed25519")) == (
        "tool \"read_file\" is denied by permission rule 'never touch .ssh' in team.toml"
    )
    # A plain deny rule is only as strong as pre-execute ordering makes it.
    assert run(registry, "deploy").is_error is False
    assert run(registry, "read_file", path="/home/me/notes").is_error is False


def test_rejected_approval_denies() -> None:
    registry = registry_with(default_rules(), Approver(ApprovalOutcome.REJECTED))
    assert denied(run_as_agent(registry, "run_command", command="ls")) == (
        'the user rejected tool "run_command"'
    )


def test_default_rules() -> None:
    policy = default_rules()
    for name in ("read_file", "list_dir", "glob", "grep"):
        assert policy.decide(name, {}) == Allow(), name
    for name in ("write_file", "edit_file", "run_command"):
        assert isinstance(policy.decide(name, {}), Ask), name
    # Other plugins' tools are left to their own policies.
    assert policy.decide("something_else", {}) == Allow()


def test_default_permissions_reads_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_TOOLS_RULES", raising=False)
    assert default_permissions().decide("grep", {}) == Allow()

    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('default = "deny"\n', encoding="utf-8")
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules_file))
    assert isinstance(default_permissions().decide("grep", {}), Deny)

    monkeypatch.setenv("DSH_TOOLS_RULES", str(tmp_path / "missing.toml"))
    with pytest.raises(RulesError, match=r"missing\.toml: cannot read the rules file"):
        default_permissions()


@pytest.mark.parametrize(
    ("text", "line", "column", "index", "message"),
    [
        ('default = "maybe"\n', 1, None, None, "default must be one of"),
        (
            '[[rule]]\naction = "allow"\n\n[[rule]]\nname = "typo"\naction = "deny"\ntoool = "*"\n',
            7,
            None,
            2,
            "rule #2 ('typo'): unknown key 'toool'",
        ),
        ('[[rule]]\naction = "allow"\nenforce = "guard"\n', 3, None, 1, "only for deny rules"),
        ('[[rule]]\naction = "deny"\ncommand_matches = "("\n', 3, None, 1, "not a valid regular"),
        ('[[rule]]\ntool = "x"\n', 1, None, 1, "missing 'action'"),
        ('[[rule]]\naction = "allow"\npath_prefix = []\n', 3, None, 1, "path_prefix must be"),
        ('[[rule]]\naction = "allow"\n\n[[rule]]\naction = "nope"\n', 5, None, 2, "action must"),
        ('rule = [{action = "allow"}, {action = "nah"}]\n', 1, None, 2, "action must"),
        ('[[rule]]\naction = "allow"\nname = \n', 3, 8, None, "invalid TOML"),
        ("unknown = 1\n", 1, None, None, "unknown top-level key 'unknown'"),
    ],
)
def test_malformed_rules_name_the_file_line_and_rule(
    text: str, line: int, column: int | None, index: int | None, message: str
) -> None:
    with pytest.raises(RulesError) as raised:
        PermissionRules.from_toml_text(text, source="rules.toml")
    error = raised.value
    assert isinstance(error, DshToolsError)
    assert (error.source, error.line, error.column, error.rule_index) == (
        "rules.toml",
        line,
        column,
        index,
    )
    assert str(error).startswith(f"rules.toml:{line}")
    assert message in str(error)


def test_a_file_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    rules_file = tmp_path / "bad.toml"
    rules_file.write_bytes(b'default = "ask"\n# caf\xe9\n')
    with pytest.raises(RulesError, match=r"bad.toml:2: the rules file is not UTF-8"):
        PermissionRules.from_toml(rules_file)


def test_python_rules_are_validated() -> None:
    with pytest.raises(RulesError, match="action must be one of"):
        Rule("maybe")
    with pytest.raises(RulesError, match="rule #2: expected a Rule"):
        PermissionRules([Rule("allow"), "deny"])  # type: ignore[list-item]
    with pytest.raises(RulesError, match="argument_equals"):
        Rule("allow", argument_equals={"x": {1, 2}})
