"""Never waste a yes: a call the tool would refuse whatever a person answered is refused
before anyone is asked (no service request, no ticket), and ``explain`` and ``check``
say it would be refused."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import (
    Ask,
    MemoryApprovalStore,
    ToolError,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools._checks import check_registry
from dsh_tools.cli import EXIT_CALL_FAILED, main
from dsh_tools.errors import ErrorCode
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.files import edit_file_tool, write_file_tool
from dsh_tools_plugins.limits import CallBudget, CallBudgets
from dsh_tools_plugins.sandbox import Sandbox, SandboxSettings
from dsh_tools_plugins.workspace import Workspace
from sandbox_owner import give_away

_STATE = Sandbox("auto").state()
needs_root_sandbox = pytest.mark.skipif(
    not _STATE.sandboxed or os.geteuid() != 0,
    reason=f"needs a root host with a sandbox (sandbox: {_STATE.reason or 'yes'})",
)


class AskAll:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("every call needs a person")


def _asking(tool: Any, answer: str = "allowed-once") -> tuple[ToolRegistry, list[str]]:
    """A registry that asks about every call of ``tool``, and the calls it asked about
    (the service answers ``answer``, ``pending`` keeping a ticket)."""
    asked: list[str] = []

    def service(request: Any) -> str:
        asked.append(request.tool_name)
        return answer

    registry = ToolRegistry(approval=service, approval_store=MemoryApprovalStore())
    registry.add_plugin(AskAll())
    registry.register(tool)
    return registry, asked


def _call(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput("c1", name, arguments, agent="me"))


def _explained(registry: ToolRegistry, name: str, **arguments: Any) -> list[str]:
    return registry.explain(ToolExecutionInput("c1", name, arguments, agent="me")).lines()


def _deploy(preflight: Any) -> Any:
    return define_tool(
        name="deploy",
        description="Deploy to a target.",
        parameters={"target": {"type": "string", "required": True}},
        execute=lambda args, ctx: f"deployed {args['target']}",
        preflight=preflight,
    )


def _no_production(args: Any) -> None:
    if args is None or args["target"] == "production":
        raise ToolError("production is frozen this week", code=ErrorCode.DENIED)


async def _no_production_async(args: Any) -> None:
    _no_production(args)


@pytest.mark.parametrize("preflight", [_no_production, _no_production_async])
def test_a_call_the_preflight_refuses_is_refused_before_anyone_is_asked(preflight: Any) -> None:
    registry, asked = _asking(_deploy(preflight), answer="pending")
    refused = _call(registry, "deploy", target="production")
    assert (refused.code, refused.text) == ("DENIED", "Error: production is frozen this week")
    assert asked == []
    store = registry.approval_store
    assert isinstance(store, MemoryApprovalStore)
    assert store.list_tickets() == []
    assert _explained(registry, "deploy", target="production") == [
        "would be refused (DENIED): production is frozen this week"
    ]
    # A call it lets through is asked about as before (here: a ticket for a person).
    assert _call(registry, "deploy", target="staging").code == "APPROVAL_PENDING"
    assert asked == ["deploy"]
    assert (
        _explained(registry, "deploy", target="staging")[0]
        == "would ask: every call needs a person"
    )


def test_explain_says_would_be_refused_also_where_nobody_would_be_asked() -> None:
    registry = ToolRegistry()
    registry.register(_deploy(_no_production))
    assert _explained(registry, "deploy", target="production") == [
        "would be refused (DENIED): production is frozen this week"
    ]
    assert _explained(registry, "deploy", target="staging") == ["would run"]


def test_a_failing_preflight_refuses_closed_and_check_reports_a_tool_refused_for_every_call() -> (
    None
):
    def broken(args: Any) -> None:
        raise RuntimeError("cannot tell")

    registry, asked = _asking(_deploy(broken))
    refused = _call(registry, "deploy", target="staging")
    assert (refused.code, refused.text) == ("TOOL_ERROR", "Error: cannot tell")
    assert asked == []
    assert check_registry(registry) == ['tool "deploy": every call would be refused: cannot tell']
    fine, _ = _asking(_deploy(lambda args: None))
    assert check_registry(fine) == []


def test_preflight_must_be_callable() -> None:
    with pytest.raises(Exception, match=r"define_tool\(deploy\): preflight must be callable"):
        _deploy("no")


# --------------------------------------------------------------------------- run_command


def _commands(root: Path, mode: str = "off", **options: Any) -> tuple[ToolRegistry, list[str]]:
    settings = SandboxSettings(mode=mode)  # type: ignore[arg-type]
    return _asking(run_command_tool(Workspace(root), sandbox=settings, **options))


@pytest.mark.parametrize(
    ("arguments", "code", "text"),
    [
        (
            {"argv": ["no-such-program-here"]},
            "TOOL_ERROR",
            "command not found: no-such-program-here",
        ),
        ({"command": "true", "argv": ["true"]}, "INVALID_ARGS", 'pass exactly one of "command"'),
        ({"command": "true", "timeout_ms": 10**9}, "INVALID_ARGS", '"timeout_ms" must be between'),
        ({"command": "true", "cwd": "notes.txt"}, "TOOL_ERROR", '"notes.txt" is not a directory'),
        ({"command": "true", "cwd": "gone"}, "TOOL_ERROR", "gone"),
    ],
)
def test_run_command_refuses_before_asking_what_it_could_never_run(
    tmp_path: Path, arguments: dict[str, Any], code: str, text: str
) -> None:
    (tmp_path / "notes.txt").write_text("hi\n")
    registry, asked = _commands(tmp_path)
    refused = _call(registry, "run_command", **arguments)
    assert refused.code == code
    assert text in refused.text
    assert asked == []
    assert _explained(registry, "run_command", **arguments)[0].startswith(
        f"would be refused ({code}): "
    )
    assert _call(registry, "run_command", command="true").code is None  # it ran, asked once
    assert asked == ["run_command"]


@needs_root_sandbox
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_a_root_host_refuses_a_sandboxed_command_before_asking(tmp_path: Path, mode: str) -> None:
    """The case seen: on a root host, with a workspace root owns, the sandbox refuses to
    run commands as root. The refusal comes before the person is asked, with the fix."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    registry, asked = _commands(workspace, mode)
    refused = _call(registry, "run_command", command="touch ran")
    assert refused.code == "DENIED"
    assert refused.text.startswith(
        "Error: the host runs as root and the workspace belongs to root, so sandboxed "
        "commands would run as the host's root user: give the workspace to an "
        "unprivileged user (chown)"
    )
    assert asked == []
    assert not (workspace / "ran").exists()
    explained = _explained(registry, "run_command", command="touch ran")
    assert explained[0].startswith("would be refused (DENIED): the host runs as root")
    assert not any("if approved" in line for line in explained)
    assert check_registry(registry) == [
        'tool "run_command": every call would be refused: ' + refused.text.removeprefix("Error: ")
    ]
    give_away(workspace)  # the fix it names: then the person is asked, once, and it runs
    assert _call(registry, "run_command", command="touch ran").code is None
    assert asked == ["run_command"]
    assert (workspace / "ran").exists()
    assert check_registry(registry) == []


def test_a_call_over_budget_is_denied_before_anyone_is_asked() -> None:
    """A budget is pre-execute, where the first decision wins: it is ``tryfirst``, so a
    policy that asks, registered after it (called first, as pluggy calls later
    registrations first; the command loads the ``budgets`` entry point before
    ``default_permissions``), cannot put a call over budget to a person."""
    asked: list[str] = []
    registry = ToolRegistry(
        approval=lambda request: asked.append(request.tool_name) or "allowed-once"
    )
    registry.add_plugin(CallBudgets([CallBudget(1, "deploy")]))
    registry.add_plugin(AskAll())
    registry.register(_deploy(None))
    first = _call(registry, "deploy", target="staging")
    second = _call(registry, "deploy", target="staging")
    assert first.text == "deployed staging"
    assert (second.code, asked) == ("DENIED", ["deploy"])
    assert second.text.startswith("Error: limit of 1 deploy calls reached")


# --------------------------------------------------------------------------- file tools


@pytest.mark.parametrize(
    ("name", "arguments", "text"),
    [
        (
            "edit_file",
            {"path": "notes.txt", "old_string": "delta", "new_string": "omega"},
            '"old_string" was not found in "notes.txt"',
        ),
        (
            "edit_file",
            {"path": "notes.txt", "old_string": "a", "new_string": "b"},
            '"old_string" matches 5 times in "notes.txt"',
        ),
        (
            "edit_file",
            {"path": "missing.txt", "old_string": "a", "new_string": "b"},
            "missing.txt",
        ),
        ("write_file", {"path": "big.txt", "content": "x" * 65}, "over the limit of 64 bytes"),
    ],
)
def test_a_file_change_that_would_be_refused_is_refused_before_asking(
    tmp_path: Path, name: str, arguments: dict[str, Any], text: str
) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    tools = {"edit_file": edit_file_tool, "write_file": write_file_tool}
    registry, asked = _asking(tools[name](Workspace(tmp_path), max_bytes=64))
    refused = _call(registry, name, **arguments)
    assert refused.code == "TOOL_ERROR"
    assert text in refused.text
    assert asked == []
    assert (tmp_path / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"
    assert not (tmp_path / "big.txt").exists()
    assert _explained(registry, name, **arguments)[0].startswith("would be refused (TOOL_ERROR): ")


def test_an_edit_that_can_be_made_is_asked_about_and_made(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    registry, asked = _asking(edit_file_tool(Workspace(tmp_path)))
    done = _call(registry, "edit_file", path="notes.txt", old_string="beta", new_string="b")
    assert (done.code, asked) == (None, ["edit_file"])
    assert (tmp_path / "notes.txt").read_text() == "alpha\nb\n"


@needs_root_sandbox
def test_the_command_says_before_asking_that_a_root_host_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``explain``, ``check`` and ``call`` on a root host with a workspace root owns: no
    "if approved: would run", no "ok", and no question to answer."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    command = ("run_command", '{"command": "touch ran"}')

    def dsh(*argv: str, stdin: str = "") -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["--workspace", str(workspace), *argv], stdin=io.StringIO(stdin), stdout=out, stderr=err
        )
        return code, out.getvalue() + err.getvalue()

    explained = dsh("--sandbox", "auto", "explain", *command)
    assert explained[0] == EXIT_CALL_FAILED
    assert explained[1].startswith("would be refused (DENIED): the host runs as root")
    assert "if approved" not in explained[1]
    checked = dsh("check")
    assert checked[0] == EXIT_CALL_FAILED
    assert (
        'FAIL tool "run_command": every call would be refused: the host runs as root' in checked[1]
    )
    called = dsh("--sandbox", "auto", "call", *command, stdin="y\n")
    assert called[0] == EXIT_CALL_FAILED
    assert "Error: the host runs as root" in called[1]
    assert "approve" not in called[1].lower()
    assert not (workspace / "ran").exists()
