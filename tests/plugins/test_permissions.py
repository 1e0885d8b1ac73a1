"""PermissionRules: TOML and Python rules, deny > ask > allow, guards, defaults, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dsh_tools._define import define_tool
from dsh_tools._models import (
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
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import DshToolsError
from dsh_tools.hookspecs import hookimpl
from dsh_tools_plugins.permissions import (
    PermissionRules,
    Rule,
    RulesError,
    configured_sandbox,
    default_permissions,
    default_rules,
)
from dsh_tools_plugins.sandbox import SandboxLimits, SandboxSettings

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
    # A tool these rules do not know (a third-party plugin's, a remote server's) may do
    # anything: a person decides before it runs, as agents ask before an unknown tool.
    unknown = policy.decide("deploy", {})
    assert isinstance(unknown, Ask)
    assert unknown.reason == 'no permission rule in default_rules() covers tool "deploy"'
    assert policy.decide("deploy", {"read_only": True}) == unknown


def test_default_permissions_reads_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_TOOLS_RULES", raising=False)
    monkeypatch.delenv("DSH_TOOLS_SANDBOX", raising=False)
    assert default_permissions().decide("grep", {}) == Allow()

    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('default = "deny"\n', encoding="utf-8")
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules_file))
    assert isinstance(default_permissions().decide("grep", {}), Deny)

    monkeypatch.setenv("DSH_TOOLS_RULES", str(tmp_path / "missing.toml"))
    with pytest.raises(RulesError, match=r"missing\.toml: cannot open it: No such file"):
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
        ('[[rule]]\naction = "allow"\nsandboxed = 1\n', 3, None, 1, "sandboxed must be true"),
        ('[sandbox]\nmode = "on"\n', 2, None, None, 'sandbox mode must be "required", "auto"'),
        ('[sandbox]\nnetwork = "yes"\n', 2, None, None, "network must be true or false"),
        ("[sandbox]\nnetwrok = true\n", 2, None, None, "unknown key 'netwrok' in [sandbox]"),
        (
            '[sandbox]\nread_only_paths = ["/opt", "relative"]\n',
            2,
            None,
            None,
            "read_only_paths: sandbox paths must be absolute, got 'relative'",
        ),
        ('[sandbox]\npass_env = ["A B"]\n', 2, None, None, "pass_env: environment names"),
        (
            '[sandbox]\nmode = "auto"\n\n[sandbox.limits]\nprocs = 3\n',
            5,
            None,
            None,
            "unknown key 'procs' in [sandbox.limits]",
        ),
        (
            '[sandbox]\n\n[sandbox.limits]\nprocesses = 0\n\n[[rule]]\naction = "ask"\n',
            4,
            None,
            None,
            "limit processes must be a positive integer, got 0",
        ),
        ("sandbox = 3\n", 1, None, None, "sandbox must be a table"),
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


def test_a_sandbox_table_configures_the_command_sandbox() -> None:
    policy = PermissionRules.from_toml_text(
        textwrap.dedent(
            """
            [sandbox]
            mode = "required"
            network = true
            read_only_paths = ["/opt/toolchain"]
            read_write_paths = ["/var/cache/build"]
            pass_env = ["CI", "NPM_*"]

            [sandbox.limits]
            processes = 64
            memory_bytes = 1073741824
            """
        )
    )
    assert policy.sandbox == SandboxSettings(
        mode="required",
        network=True,
        read_only_paths=["/opt/toolchain"],
        read_write_paths=["/var/cache/build"],
        pass_env=["CI", "NPM_*"],
        limits=SandboxLimits(processes=64, memory_bytes=1024**3),
    )
    assert PermissionRules.from_toml_text('default = "ask"\n').sandbox is None


@pytest.mark.parametrize(
    ("sandbox", "contained"),
    [
        (SandboxSettings(mode="required"), True),
        (SandboxSettings(mode="required", network=True), False),
        (SandboxSettings(mode="auto"), False),  # a command may then run unsandboxed
        (SandboxSettings(mode="off"), False),
        (None, False),
    ],
)
def test_sandboxed_rules_rely_only_on_a_sandbox_that_cannot_be_skipped(
    sandbox: SandboxSettings | None, contained: bool
) -> None:
    rules = [
        Rule("allow", "run_command", sandboxed=True, name="confined"),
        Rule("deny", "run_command", sandboxed=False, argv_prefix=["curl"], name="no curl"),
    ]
    policy = PermissionRules(rules, default="ask", sandbox=sandbox)
    decision = policy.decide("run_command", {"command": "rm -rf build"})
    assert (decision == Allow()) is contained
    assert isinstance(decision, Allow if contained else Ask)
    curl = policy.decide("run_command", {"argv": ["curl", "example.com"]})
    assert isinstance(curl, Allow if contained else Deny)


def test_default_rules_ask_for_commands_unless_the_sandbox_confines_them() -> None:
    confined = default_rules(SandboxSettings(mode="required"))
    assert confined.decide("run_command", {"command": "pytest -q; rm -rf build"}) == Allow()
    assert confined.decide("run_command", {"argv": ["make"]}) == Allow()
    for name in ("write_file", "edit_file"):
        assert isinstance(confined.decide(name, {"path": "x"}), Ask), name
    for sandbox in (
        None,
        SandboxSettings(mode="auto"),
        SandboxSettings(mode="required", network=True),
        SandboxSettings(mode="off"),
    ):
        decision = default_rules(sandbox).decide("run_command", {"argv": ["ls"]})
        assert decision == Ask(
            "permission rule 'commands not confined to an offline sandbox' in default_rules() "
            'asks before tool "run_command" runs'
        ), sandbox


def test_the_configured_sandbox_is_the_rules_files_with_the_commands_flags_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DSH_TOOLS_RULES", "DSH_TOOLS_SANDBOX", "DSH_TOOLS_NETWORK"):
        monkeypatch.setenv(name, "")
    assert configured_sandbox() == SandboxSettings()
    assert default_permissions().sandbox == SandboxSettings()
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[sandbox]\nmode = "required"\npass_env = ["CI"]\n')
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules_file))
    assert configured_sandbox() == SandboxSettings(mode="required", pass_env=["CI"])
    assert default_permissions().decide("run_command", {"argv": ["ls"]}) == Ask(
        f'no permission rule in {rules_file} covers tool "run_command"'
    )
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "on")
    assert configured_sandbox() == SandboxSettings(mode="required", network=True, pass_env=["CI"])
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "off")
    assert default_permissions().sandbox == configured_sandbox()
    assert configured_sandbox().mode == "off"
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "required")
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "off")
    assert default_permissions().decide("run_command", {"argv": ["ls"]}) == Allow()
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "strict")
    with pytest.raises(RulesError, match=r'^\$DSH_TOOLS_SANDBOX: must be "required", "auto"'):
        configured_sandbox()
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "")
    monkeypatch.setenv("DSH_TOOLS_NETWORK", "yes")
    with pytest.raises(RulesError, match=r'^\$DSH_TOOLS_NETWORK: must be "on" or "off"'):
        default_permissions()


def test_a_decision_record_names_the_deciding_rule_its_file_line_and_text(
    tmp_path: Path,
) -> None:
    from dsh_tools.testing import CallRecorder

    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(
        textwrap.dedent(
            """\
            default = "deny"

            [[rule]]
            action = "allow"
            tool = "echo"

            # no shouting
            [[rule]]
            name = "quiet"
            action = "deny"
            tool = "echo"
            argument_equals = {text = "LOUD"}
            """
        ),
        encoding="utf-8",
    )
    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(
        define_tool(
            name="echo",
            description="echo",
            parameters={"text": {"type": "string", "required": True}},
            execute=lambda args, ctx: args["text"],
        )
    )
    registry.add_plugin(PermissionRules.from_toml(rules_file), name="permissions")

    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "LOUD"}))
    decided = recorder.last.record.decided_by
    assert decided is not None
    assert (decided.source, decided.decision) == ("permissions", "deny")
    assert decided.detail == {
        "rule": {
            "index": 2,
            "name": "quiet",
            "action": "deny",
            "file": str(rules_file),
            "line": 8,
            "text": '[[rule]]\nname = "quiet"\naction = "deny"\ntool = "echo"\n'
            'argument_equals = {text = "LOUD"}',
        }
    }

    registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "soft"}))
    [allowed] = recorder.last.record.of("pre_execute")
    assert allowed.decision == "allow"
    assert allowed.detail is not None
    assert allowed.detail["rule"] == {**allowed.detail["rule"], "index": 1, "line": 3}

    registry.execute_sync(ToolExecutionInput("c3", "other", {}))
    [defaulted] = recorder.last.record.of("pre_execute")
    assert defaulted.detail == {"default": "deny", "file": str(rules_file)}


@pytest.mark.parametrize("where", ["inside", "last link", "parent link"])
def test_a_rules_file_a_command_could_rewrite_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Rules in the workspace could be rewritten to ``default = "allow"`` by a command."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))
    config = tmp_path / "config"
    config.mkdir()
    (config / "rules.toml").write_text('default = "deny"\n')
    path = config / "rules.toml"
    if where == "inside":
        path = workspace / "rules.toml"
        path.write_text('default = "deny"\n')
        problem = f"it is inside {workspace}, which sandboxed commands"
    elif where == "last link":
        path = config / "link.toml"
        path.symlink_to("rules.toml")
        problem = "is a symbolic link"
    else:
        config.rename(tmp_path / "moved")
        config.symlink_to("moved")
        problem = f"passes through {config}, which is a symbolic link"
    monkeypatch.setenv("DSH_TOOLS_RULES", str(path))
    for load in (default_permissions, lambda: PermissionRules.from_toml(path)):
        with pytest.raises(RulesError) as info:
            load()
        assert info.value.source == str(path)
        assert problem in str(info.value)


@pytest.mark.parametrize("source", [None, "<string>", "<rules from the host>"])
def test_rules_from_text_name_no_pseudo_file_in_what_the_model_reads(source: str | None) -> None:
    text = '[[rule]]\nname = "no deploys"\naction = "deny"\ntool = "deploy"\n'
    rules = (
        PermissionRules.from_toml_text(text)
        if source is None
        else PermissionRules.from_toml_text(text, source=source)
    )
    message = denied(run(registry_with(rules), "deploy"))
    assert "permission rule 'no deploys'" in message
    assert " in <" not in message
