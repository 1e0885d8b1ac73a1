"""``dsh-tools call`` shows a running tool's output and progress: live on a terminal (a
pseudo-terminal here), as plain lines when piped, and with ``--json`` only as an opt-in
``--events`` JSON-lines stream."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh_tools.cli import EXIT_USAGE, main
from streaming import TICKING

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    rules = tmp_path.parent / f"{tmp_path.name}-rules.toml"
    rules.write_text('[[rule]]\naction = "allow"\ntool = "run_command"\n')
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("DSH_TOOLS_RULES", str(rules))
    monkeypatch.setenv("DSH_TOOLS_SANDBOX", "off")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    return tmp_path


def test_on_a_terminal_the_lines_show_before_the_command_ends(workspace: Path) -> None:
    primary, secondary = pty.openpty()
    command = [sys.executable, "-m", "dsh_tools", "call", "run_command"]
    process = subprocess.Popen(
        [*command, json.dumps({"command": TICKING})],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                seen += chunk
            if b"line 0" in seen and not (workspace / "go").exists():
                (workspace / "go").touch()
            if process.poll() is not None and not ready:
                break
    finally:
        os.close(primary)
        process.wait(10)
    text = seen.decode("utf-8", "replace")
    assert process.returncode == 0, text
    assert "no go" not in text
    positions = [text.find(f"line {n}") for n in range(30)]
    assert -1 not in positions
    assert positions == sorted(positions)
    assert "✓" in text[positions[-1] :]  # the result card comes after the streamed lines


def test_piped_output_streams_plain_lines_and_the_result_card(workspace: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["call", "run_command", json.dumps({"command": "echo one; sleep 1.2; echo two"})],
        stdin=io.StringIO(),
        stdout=out,
        stderr=err,
    )
    assert code == 0
    text = out.getvalue()
    assert text.index("one\ntwo\n") < text.index("✓")  # streamed, then the card
    assert "… 1: running for 1s\n" in err.getvalue()


def test_json_shows_nothing_extra_unless_events_are_asked_for(workspace: Path) -> None:
    arguments = json.dumps({"command": "echo one; echo two"})
    out = io.StringIO()
    main(["call", "run_command", arguments, "--json"], stdin=io.StringIO(), stdout=out)
    assert json.loads(out.getvalue())["value"]["output"] == "one\ntwo\n"
    out = io.StringIO()
    main(["call", "run_command", arguments, "--json", "--events"], stdin=io.StringIO(), stdout=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    *events, last = lines
    assert "".join(event["text"] for event in events) == "one\ntwo\n"
    assert {event["type"] for event in events} == {"output"}
    assert last["type"] == "result"
    assert last["result"]["value"]["output"] == "one\ntwo\n"


def test_events_without_json_is_a_usage_error(workspace: Path) -> None:
    err = io.StringIO()
    code = main(
        ["call", "run_command", "{}", "--events"],
        stdin=io.StringIO(),
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == EXIT_USAGE
    assert "--events streams JSON lines: use it with --json" in err.getvalue()


def test_a_def_body_s_progress_shows_while_it_runs() -> None:
    import anyio

    from dsh_tools import ToolExecutionInput, ToolRegistry, ToolRunContext, define_tool
    from dsh_tools.cli._progress import progress_view, run_showing_progress

    out, err = io.StringIO(), io.StringIO()

    def waits(args: object, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "half way")
        ctx.emit_output("working\n")
        for _ in range(100):  # up to 5 s
            if "half way" in err.getvalue() and "working" in out.getvalue():
                return "shown"
            time.sleep(0.05)
        return "nothing shown while it ran"

    registry = ToolRegistry()
    registry.register(define_tool(name="waits", description="W.", parameters={}, execute=waits))
    view = progress_view("waits", False, False, out, err)
    result = anyio.run(run_showing_progress, registry, ToolExecutionInput("c1", "waits"), view)
    assert result.text == "shown"
    assert err.getvalue() == "… 1 of 2: half way\n"


def test_the_terminal_view_holds_a_bounded_part_of_an_unfinished_line() -> None:
    """A line that never ends is printed in pieces of at most ``MAX_HELD_CHARS`` as it
    arrives, never kept whole until the call ends; a line's pieces print joined."""
    import anyio

    from dsh_tools.cli._progress import MAX_HELD_CHARS, RichView
    from dsh_tools.progress import Output

    out = io.StringIO()
    view = RichView(out, "tool")
    anyio.run(view.send, [Output("par"), Output("ts\nmore")])
    anyio.run(view.send, [Output("x" * 1000) for _ in range(40)])
    printed = out.getvalue()
    assert "parts\n" in printed
    assert printed.count("x") > 40_000 - MAX_HELD_CHARS  # shown while the line goes on
    assert view.held_chars < MAX_HELD_CHARS
    view.stop()
    assert out.getvalue().count("x") == 40_000
