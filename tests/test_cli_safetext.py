"""What the command line shows a person is safe text: cards of ``call`` and ``replay``,
decision records, explanations, the approval prompt and the library's warnings (issue
23: escape sequences from the model or the workspace rewrote cards, set the window title
and wrote the clipboard)."""

from __future__ import annotations

import argparse
import io
import json
import logging
from pathlib import Path

import pytest

from dsh_tools import ApprovalRequest, ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools._json import FrozenDict
from dsh_tools.cli import main
from dsh_tools.cli._console import library_log
from dsh_tools.cli._run import cmd_explain
from dsh_tools.cli._setup import TerminalApproval
from dsh_tools_plugins.audit import AuditLog
from strategies import HOSTILE_TEXTS, is_inert


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _echo_registry(reason: str | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="echo",
            description="Echo the text.",
            parameters={"text": {"type": "string", "required": True}},
            execute=lambda args, ctx: args["text"],
        )
    )
    if reason is not None:
        registry.guard(lambda execution: reason)
    return registry


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_replay_shows_the_recorded_calls_inert(tmp_path: Path, text: str) -> None:
    log = tmp_path / "audit.jsonl"
    registry = _echo_registry()
    registry.add_plugin(AuditLog(log), name="audit")
    registry.execute_sync(ToolExecutionInput(f"id-{text}", "echo", {"text": text}))
    out, err = io.StringIO(), io.StringIO()
    code = main(["--no-plugins", "replay", "--explain", str(log)], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    shown = out.getvalue()
    assert is_inert(shown, multiline=True), shown
    lines = shown.splitlines()
    assert lines[0].startswith("call id-")
    assert lines[1].startswith("▶ echo")  # the id forged no line


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_explain_shows_a_reason_on_one_line_inert(text: str) -> None:
    options = argparse.Namespace(
        name="echo", arguments='{"text": "x"}', json=False, unmatched_rules=False
    )
    out = io.StringIO()
    cmd_explain(_echo_registry(reason=text), options, out, io.StringIO(), io.StringIO())
    shown = out.getvalue()
    assert is_inert(shown, multiline=True), shown
    assert shown.splitlines()[0].startswith("would deny (DENIED): ")
    assert len(shown.splitlines()) == len(
        _explained_lines(_echo_registry(reason="plain reason"), options)
    )


def _explained_lines(registry: ToolRegistry, options: argparse.Namespace) -> list[str]:
    out = io.StringIO()
    cmd_explain(registry, options, out, io.StringIO(), io.StringIO())
    return out.getvalue().splitlines()


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_the_approval_prompt_is_one_inert_line(text: str) -> None:
    stderr = io.StringIO()
    approval = TerminalApproval(_Terminal("n\n"), stderr)
    request = ApprovalRequest(
        call_id="c1",
        tool_name="run_command",
        arguments=FrozenDict({"command": text}),
        reason=text,
        agent="cli",
        signal=None,
    )
    approval.request(request)
    prompt = stderr.getvalue()
    assert is_inert(prompt), prompt
    assert prompt.startswith("Allow run_command ")
    assert prompt.endswith("? [y/N] ")


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_library_warnings_are_inert(text: str) -> None:
    err = io.StringIO()
    with library_log(err, debug=False):
        logging.getLogger("dsh_tools").warning("tool %s said %s", text, text)
    shown = err.getvalue()
    assert is_inert(shown, multiline=True), shown
    assert shown.count("\n") == 1


def test_call_shows_a_file_of_escape_sequences_without_running_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    (tmp_path / "evil.txt").write_text("".join(f"{text}\n" for text in HOSTILE_TEXTS))
    out, err = io.StringIO(), io.StringIO()
    argv = ["--workspace", str(tmp_path), "call", "read_file", '{"path": "evil.txt"}']
    assert main(argv, stdout=out, stderr=err) == 0, err.getvalue()
    shown = out.getvalue()
    assert is_inert(shown, multiline=True), shown
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x1b\\" in shown


def test_call_json_is_inert_and_holds_the_same_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    content = "".join(f"{text}\n" for text in HOSTILE_TEXTS) + "café\n"
    (tmp_path / "evil.txt").write_text(content)
    for argv in (
        ["call", "read_file", '{"path": "evil.txt"}', "--json", "--explain"],
        ["explain", "read_file", '{"path": "evil.txt"}', "--json"],
    ):
        out, err = io.StringIO(), io.StringIO()
        assert main(argv, stdout=out, stderr=err) == 0, err.getvalue()
        assert is_inert(out.getvalue(), multiline=True), out.getvalue()
    out = io.StringIO()
    main(["call", "read_file", '{"path": "evil.txt"}', "--json"], stdout=out)
    assert "evil\u202etxt.exe" in json.loads(out.getvalue())["content"][0]["text"]
    plain = io.StringIO()
    (tmp_path / "plain.txt").write_text("café\n")
    main(["call", "read_file", '{"path": "plain.txt"}', "--json"], stdout=plain)
    assert "café" in plain.getvalue()  # ordinary text stays readable
