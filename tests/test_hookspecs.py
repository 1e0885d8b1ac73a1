"""``hookspecs.py`` is the contract: every hook documented, exemplified and tested.

In the manner of datasette's ``test_plugins.py``: each hookspec's docstring carries a
"Use in plugins" example that is a working plugin, its ``:param`` lines match the signature,
and each hook name is exercised by some other test file (and listed in ``docs/hooks.md``
once that page exists).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import hookspecs
from dsh_tools._models import (
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    ToolDefinition,
    ToolExecutionInput,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.progress import Output, Progress

TESTS = Path(__file__).parent
DOCS_HOOKS = TESTS.parent / "docs" / "hooks.md"


def _hookspecs() -> dict[str, Callable[..., Any]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: value
        for name, value in vars(hookspecs).items()
        if inspect.isfunction(value) and getattr(value, marker, None) is not None
    }


HOOKS = _hookspecs()
HOOK_NAMES = sorted(HOOKS)


def _example(hook: str) -> str:
    doc = inspect.getdoc(HOOKS[hook]) or ""
    _head, marker, tail = doc.partition("Use in plugins::")
    assert marker, f"{hook} docstring has no 'Use in plugins::' example"
    block = []
    for line in tail.splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip()


def test_the_five_stages_and_the_progress_hooks_are_all_hookspecs() -> None:
    assert HOOK_NAMES == [
        "dsh_tools_execute",
        "dsh_tools_guard",
        "dsh_tools_post_execute",
        "dsh_tools_pre_execute",
        "dsh_tools_progress",
        "dsh_tools_progress_filter",
        "dsh_tools_result",
    ]
    hook = ToolRegistry().plugin_manager.hook
    for name in HOOK_NAMES:
        assert getattr(hook, name).has_spec(), name


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hookspec_has_a_docstring_with_an_example(hook: str) -> None:
    doc = inspect.getdoc(HOOKS[hook])
    assert doc, f"{hook} has no docstring"
    assert "Use in plugins::" in doc
    example = _example(hook)
    assert example, f"{hook}: the 'Use in plugins' block is empty"
    tree = ast.parse(example)
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    assert hook in [function.name for function in functions], (
        f"{hook}: the example does not define {hook}()"
    )


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_param_line_matches_the_signature(hook: str) -> None:
    doc = inspect.getdoc(HOOKS[hook]) or ""
    documented = re.findall(r"^:param (\w+):", doc, flags=re.MULTILINE)
    parameters = list(inspect.signature(HOOKS[hook]).parameters)
    assert documented == parameters, f"{hook}: :param lines {documented} vs {parameters}"


TRIGGERS: dict[str, tuple[ToolExecutionInput, str, str]] = {
    "dsh_tools_pre_execute": (
        ToolExecutionInput("call-2", "run_command", {"command": "ls"}),
        "DENIED",
        "commands need a person's approval",
    ),
    "dsh_tools_guard": (
        ToolExecutionInput("call-2", "read", {"path": "app/.env"}),
        "DENIED",
        "no secrets",
    ),
    "dsh_tools_post_execute": (
        ToolExecutionInput("call-2", "read", {"path": "id_rsa"}),
        "BLOCKED",
        "the output contained a private key; it was withheld",
    ),
}
"""For each decision hook, a call its example must stop, and how."""


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_example_is_a_plugin_that_does_what_it_says(hook: str) -> None:
    """The example is real code: with the public names in scope it registers, lets an
    ordinary call through, and has its effect on the call it is about."""

    class Metrics:
        def __init__(self) -> None:
            self.counted: list[tuple[str, bool]] = []

        def count(self, name: str, *, error: bool) -> None:
            self.counted.append((name, error))

    printed: list[tuple[Any, ...]] = []
    module = types.ModuleType(f"example_{hook}")
    metrics = Metrics()
    namespace: dict[str, Any] = {
        "hookimpl": hookspecs.hookimpl,
        "Accept": Accept,
        "Allow": Allow,
        "Ask": Ask,
        "Block": Block,
        "Deny": Deny,
        "Output": Output,
        "Progress": Progress,
        "time": time,
        "metrics": metrics,
        "print": lambda *args: printed.append(args),
    }
    vars(module).update(namespace)
    exec(compile(_example(hook), f"<{hook} example>", "exec"), vars(module))

    def read(arguments: Any, context: Any) -> str:
        if arguments.get("path") == "id_rsa":
            return "-----BEGIN PRIVATE KEY-----\n..."
        return "file contents"

    registry = ToolRegistry()

    def stream(arguments: Any, context: Any) -> str:
        context.emit_output("password = hunter2\n")
        context.report_progress(1, 2)
        return "streamed"

    bodies = (("read", read), ("run_command", lambda arguments, context: "ran"), ("stream", stream))
    for name, body in bodies:
        registry.register(
            ToolDefinition(name=name, description=name, parameters={"type": "object"}, execute=body)
        )
    registry.add_plugin(module)
    result = registry.execute_sync(
        ToolExecutionInput(call_id="call-1", name="read", arguments={"path": "notes.txt"})
    )
    assert not result.is_error, result

    if hook in TRIGGERS:
        call, code, message = TRIGGERS[hook]
        stopped = registry.execute_sync(call)
        assert stopped.is_error, stopped
        assert (stopped.error.info.code, stopped.error.message) == (code, message)
    elif hook.startswith("dsh_tools_progress"):
        seen: list[Any] = []
        registry.execute_sync(
            ToolExecutionInput("call-3", "stream", on_progress=lambda _, event: seen.append(event))
        )
        if hook == "dsh_tools_progress":
            assert printed == [("stream", 1, 2)]
        else:
            assert seen[0] == Output("password = ********\n")
    elif hook == "dsh_tools_execute":
        [(name, elapsed)] = printed
        assert name == "read"
        assert elapsed >= 0
    else:
        assert metrics.counted == [("read", False)]


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_is_exercised_by_another_test_file(hook: str) -> None:
    users = [
        path.relative_to(TESTS).as_posix()
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name and hook in path.read_text(encoding="utf-8")
    ]
    assert users, f"no test file under tests/ mentions {hook}"


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_is_documented_in_docs_hooks_md(hook: str) -> None:
    if not DOCS_HOOKS.exists():
        pytest.skip("docs/hooks.md does not exist yet; hook pages are checked once it does")
    assert hook in DOCS_HOOKS.read_text(encoding="utf-8"), f"docs/hooks.md does not mention {hook}"
