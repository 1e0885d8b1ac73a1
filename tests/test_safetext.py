"""The one rule for text a person or a model reads: what could act is shown as an escape."""

from __future__ import annotations

import pytest
from hypothesis import given

from dsh_tools._safetext import safe_text
from strategies import HOSTILE_TEXTS, hostile_texts, is_inert


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_each_spelling_is_inert_on_one_line_and_in_lines(text: str) -> None:
    assert is_inert(safe_text(text))
    assert is_inert(safe_text(text, multiline=True), multiline=True)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("\x1b]52;c;Zm9v\x1b\\", "\\x1b]52;c;Zm9v\\x1b\\"),
        ("rm -rf ~\x1b[2K\rls", "rm -rf ~\\x1b[2K\\rls"),
        ("a.txt\nb.txt", "a.txt\\nb.txt"),
        ("tab\there", "tab\\there"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("\x9b2J", "\\x9b2J"),
        ("\x7f\x00", "\\x7f\\x00"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("bad \udcff byte", "bad \ufffd byte"),
    ],
)
def test_what_acts_is_shown_as_a_visible_escape(text: str, shown: str) -> None:
    assert safe_text(text) == shown


def test_multiline_keeps_the_layout_and_escapes_a_lone_carriage_return() -> None:
    text = "col\tumn\r\nnext\roverwritten\n\x1b[31mred\x1b[0m\n"
    assert safe_text(text, multiline=True) == (
        "col\tumn\r\nnext\\roverwritten\n\\x1b[31mred\\x1b[0m\n"
    )


@pytest.mark.parametrize(
    "text", ["plain ascii", "", "é ü 日本 ✓ 🙂", "emoji 👨\u200d👩\u200d👧", "C:\\path\\x1b"]
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert safe_text(text) == text
    assert safe_text(text, multiline=True) == text


@given(hostile_texts())
def test_any_text_becomes_inert_valid_unicode_and_stays_so(text: str) -> None:
    once = safe_text(text)
    lines = safe_text(text, multiline=True)
    assert is_inert(once)
    assert is_inert(lines, multiline=True)
    assert safe_text(once) == once
    assert safe_text(lines, multiline=True) == lines
    once.encode("utf-8")
    assert lines.count("\n") == text.count("\n")
