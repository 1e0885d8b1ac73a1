"""Terminal rendering of cards: plain text for pipes, framed by rich on a terminal."""

from __future__ import annotations

import io

import pytest

from dsh_tools._models import PresentableResult, failure_result
from dsh_tools.presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
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
    emit_card,
    render_call_view,
    render_result,
)
from strategies import HOSTILE_TEXTS, is_inert

DONE = PresentableResult(content=["raw output"], is_error=False)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_call_cards() -> None:
    generic = GenericCallView("Read a.txt", kind=ToolCallKind.READ, raw_input={"path": "a.txt"})
    assert render_call_view(generic).startswith("▶ Read a.txt [read]\n")
    assert '  path: "a.txt"\n' in render_call_view(generic)
    assert render_call_view(TerminalCallView("ls -l", cwd="/w")) == "$ ls -l   (in /w)\n"
    diff = DiffCallView("Write a.txt", [FileDiff("a.txt", None, "new\n")])
    assert "+new" in render_call_view(diff)
    assert "/dev/null" in render_call_view(diff)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (TerminalResultView(output="hi\n", exit_code=0), "[exit 0]"),
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


@pytest.mark.parametrize(
    ("view", "status"),
    [
        (TerminalResultView(output="", exit_code=2), "✗ exit 2"),
        (TerminalResultView(output="", exit_code=-1), "✗ exit -1"),
        (TerminalResultView(output="", signal="SIGKILL"), "✗ killed by SIGKILL"),
        (TerminalResultView(output="", exit_code=0), "✓ done"),
    ],
)
def test_a_command_card_shows_how_the_command_ended(view: TerminalResultView, status: str) -> None:
    # Issue 27, item 12: a command that exited non-zero is not "done".
    assert render_result(view, DONE).startswith(status + "\n")


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


def _one_line_cards(text: str) -> list[tuple[object, object]]:
    """(call card, result card) pairs whose fields holding ``text`` show on one line."""
    return [
        (TerminalCallView(text, cwd=text, description=text), None),
        (GenericCallView(text, locations=[FileLocation(text, 3)]), None),
        (
            None,
            SearchMatchesView(
                [SearchFileMatches(text, [SearchMatch(3, text)])],
                title=text,
                truncated=False,
                total=1,
            ),
        ),
        (None, SearchPathsView([text, "b.py"], title=text, truncated=False, total=2)),
        (None, ReadResultView(text, offset=1, lines=[ReadFileLine(1, text)], total_lines=1)),
        (None, WebSearchView([WebSource(text, title=text)], truncated=False, title=text)),
        (None, WebFetchView(text, status_code=200, truncated=False, title=text)),
    ]


def _body_cards(text: str) -> list[tuple[object, object]]:
    """Cards that show ``text`` laid out in lines (output, content, diffs)."""
    return [
        (GenericCallView("Run", raw_input=text), None),
        (GenericCallView("Write", raw_input={"content": text}), None),
        (DiffCallView(text, [FileDiff(text, text, text + "\n")]), None),
        (None, TerminalResultView(title=text, output=text, exit_code=1)),
        (None, WebSearchView([], answer=text, truncated=False)),
        (None, DiffResultView(diffs=[FileDiff(text, text, "new\n")], title=text)),
        (None, None),
    ]


def _render(call: object, result: object, text: str) -> str:
    if call is not None:
        return render_call_view(call)  # type: ignore[arg-type]
    return render_result(result, PresentableResult(content=[text], is_error=False))  # type: ignore[arg-type]


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_every_card_is_inert(text: str) -> None:
    for call, result in _one_line_cards(text) + _body_cards(text):
        card = _render(call, result, text)
        assert is_inert(card, multiline=True), card
    assert is_inert(render_result(None, failure_result(text, "DENIED")), multiline=True)


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_a_one_line_field_forges_no_line_of_a_card(text: str) -> None:
    pairs = zip(_one_line_cards(text), _one_line_cards("X"), strict=True)
    for (call, result), (plain_call, plain_result) in pairs:
        card = _render(call, result, "X")
        assert card.count("\n") == _render(plain_call, plain_result, "X").count("\n"), card


def test_a_command_card_shows_the_escape_instead_of_rewriting_itself() -> None:
    card = render_call_view(TerminalCallView("rm -rf ~\x1b[1A\x1b[2K\r$ ls"))
    assert card == "$ rm -rf ~\\x1b[1A\\x1b[2K\\r$ ls\n"


def test_command_output_keeps_its_lines_and_shows_what_would_act() -> None:
    view = TerminalResultView(output="ok\r\n\x1b]52;c;Zm9v\x07\nbar\rbaz\n", exit_code=0)
    card = render_result(view, DONE)
    assert "  ok\n  \\x1b]52;c;Zm9v\\x07\n  bar\\rbaz\n" in card


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_a_framed_card_on_a_terminal_writes_no_hostile_sequence(text: str) -> None:
    pytest.importorskip("rich")
    out = Terminal()
    view = TerminalResultView(title=text, output=text, exit_code=0)
    emit_card(render_result(view, DONE), out)
    written = out.getvalue()
    for sequence in ("\x1b]", "\x07", "\x1b[1A", "\x1b[2K", "\r", "\u202e", "\x9b", "\x08"):
        assert sequence not in written


def test_a_card_of_arguments_shows_every_key_in_a_fixed_order_long_values_folded() -> None:
    """A tool without a card is shown by its arguments: the model's key order and a long
    first value cannot hide a short argument from the person approving."""
    from approval_helpers import HIDING, add_deploy_tool, assert_every_argument_shown
    from dsh_tools import ToolExecutionInput, ToolRegistry

    registry = ToolRegistry()
    add_deploy_tool(registry)
    card = render_call_view(registry.present_call(ToolExecutionInput("c", "deploy", HIDING)))
    assert_every_argument_shown(card)
    flipped = {"target": "production", "notes": "n" * 5000}
    assert (
        render_call_view(registry.present_call(ToolExecutionInput("c", "deploy", flipped))) == card
    )


def test_nested_arguments_are_folded_never_dropped() -> None:
    nested = {
        "z": {"long": "q" * 900, "b": [1] * 25, "empty": {}, "none": []},
        "a b": "line\n  target: forged",
    }
    card = render_call_view(GenericCallView("t", raw_input=nested))
    assert card == (
        "▶ t\n"
        '  "a b": "line\\n  target: forged"\n'
        "  z:\n" + "    b:\n" + "      - 1\n" * 20 + "      … (5 more items not shown)\n"
        "    empty: {}\n"
        f'    long: "{"q" * 400}" … (500 more characters not shown)\n'
        "    none: []\n"
    )
    assert render_call_view(GenericCallView("t", raw_input="r" * 2500)).endswith(
        " … (500 more characters not shown)\n"
    )
