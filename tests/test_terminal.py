"""Terminal rendering of cards: plain text for pipes, framed by rich on a terminal."""

from __future__ import annotations

import io

import pytest

from dsh_tools.models import PresentableResult, failure_result
from dsh_tools.presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    GenericCallView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    WebFetchView,
    WebSearchView,
    WebSource,
)
from dsh_tools.terminal import emit_card, render_call_view, render_result

DONE = PresentableResult(content=["raw output"], is_error=False)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_call_cards() -> None:
    generic = GenericCallView("Read a.txt", kind=ToolCallKind.READ, raw_input={"path": "a.txt"})
    assert render_call_view(generic).startswith("▶ Read a.txt [read]\n")
    assert '"path": "a.txt"' in render_call_view(generic)
    assert render_call_view(TerminalCallView("ls -l", cwd="/w")) == "$ ls -l   (in /w)\n"
    diff = DiffCallView("Write a.txt", [FileDiff("a.txt", None, "new\n")])
    assert "+new" in render_call_view(diff)
    assert "/dev/null" in render_call_view(diff)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (TerminalResultView(output="hi\n", exit_code=0), "[exit 0]"),
        (TerminalResultView(output="", signal="SIGKILL"), "[killed by SIGKILL]"),
        (DiffResultView(diffs=[FileDiff("a.txt", "old\n", "new\n")]), "-old"),
        (
            SearchMatchesView(
                [SearchFileMatches("a.py", [SearchMatch(3, "def f():")])], truncated=True, total=9
            ),
            "a.py:3: def f():",
        ),
        (SearchPathsView(["a.py", "b.py"], truncated=False, total=2), "  b.py\n"),
        (
            ReadResultView("a.txt", offset=1, lines=[ReadFileLine(1, "x")], total_lines=4),
            "(a.txt: 1 of 4 lines)",
        ),
        (
            WebSearchView([WebSource("https://e.org", title="E")], truncated=False),
            "E  https://e.org",
        ),
        (WebFetchView("https://e.org", status_code=200, truncated=False), "[200]"),
    ],
)
def test_result_cards(view: object, expected: str) -> None:
    text = render_result(view, DONE)  # type: ignore[arg-type]
    assert text.startswith("✓ done")
    assert expected in text


def test_failures_and_missing_cards_show_the_raw_content() -> None:
    assert render_result(None, DONE) == "✓ done\n  raw output\n"
    failed = render_result(None, failure_result("nope", "DENIED"))
    assert failed == "✗ failed (DENIED)\n  Error: nope\n"


def test_emit_card_is_plain_text_off_a_terminal() -> None:
    out = io.StringIO()
    emit_card("✓ done\n  body\n", out)
    assert out.getvalue() == "✓ done\n  body\n"


def test_emit_card_frames_the_card_on_a_terminal() -> None:
    pytest.importorskip("rich")
    out = Terminal()
    emit_card("✗ failed (DENIED)\n  Error: nope\n", out)
    text = out.getvalue()
    assert "╭" in text
    assert "failed (DENIED)" in text
    assert "Error: nope" in text
    assert "\x1b[" in text  # coloured
