"""Cards: lossless JSON round trips, exact wire shapes, path-naming errors, diff hunks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given

from card_strategies import call_views, result_views
from dsh_tools.errors import DshToolsError
from dsh_tools.presentation import (
    DIFF_MATCH_LINES,
    CardError,
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
    WebSource,
    fallback_call_view,
    file_diffs,
    structure_call_view,
    structure_result_view,
    unstructure_view,
)


def through_json(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


def assert_no_null_fields(data: Any) -> None:
    """Absent optional fields are omitted; only ``oldText`` may be null (inside the JSON
    payloads ``rawInput`` and ``content``, null is just data)."""
    if isinstance(data, list):
        for item in data:
            assert_no_null_fields(item)
    elif isinstance(data, dict):
        for key, value in data.items():
            assert value is not None or key == "oldText", key
            if key not in ("rawInput", "content"):
                assert_no_null_fields(value)


# --- round trips ----------------------------------------------------------------------


@given(call_views)
def test_every_call_view_round_trips_through_json(view: ToolCallView) -> None:
    data = unstructure_view(view)
    assert structure_call_view(through_json(data)) == view
    assert_no_null_fields(data)
    hash(view)


@given(result_views)
def test_every_result_view_round_trips_through_json(view: ToolResultView) -> None:
    data = unstructure_view(view)
    assert structure_result_view(through_json(data)) == view
    assert_no_null_fields(data)
    hash(view)


# --- exact wire shapes ------------------------------------------------------------------

WIRE: list[tuple[ToolCallView | ToolResultView, dict[str, Any]]] = [
    (
        GenericCallView(
            "Read src/app.py",
            kind=ToolCallKind.READ,
            raw_input={"path": "src/app.py", "offset": 10},
            content=["reading"],
            locations=[FileLocation("src/app.py", 10)],
        ),
        {
            "card": "generic",
            "title": "Read src/app.py",
            "kind": "read",
            "rawInput": {"path": "src/app.py", "offset": 10},
            "content": [{"type": "text", "text": "reading"}],
            "locations": [{"path": "src/app.py", "line": 10}],
        },
    ),
    (GenericCallView("lookup"), {"card": "generic", "title": "lookup"}),
    (
        TerminalCallView("pytest -q", description="Run the tests", cwd="pkg"),
        {"card": "terminal", "title": "pytest -q", "description": "Run the tests", "cwd": "pkg"},
    ),
    (
        DiffCallView("Write notes.md", [FileDiff("notes.md", None, "# Notes\n")]),
        {
            "card": "diff",
            "title": "Write notes.md",
            "diffs": [{"path": "notes.md", "oldText": None, "newText": "# Notes\n"}],
        },
    ),
    (GenericResultView(), {"card": "generic"}),
    (GenericResultView(content=()), {"card": "generic", "content": []}),
    (
        TerminalResultView(output="ok\n", exit_code=0),
        {"card": "terminal", "output": "ok\n", "exitCode": 0},
    ),
    (TerminalResultView(signal="SIGTERM"), {"card": "terminal", "signal": "SIGTERM"}),
    (DiffResultView(), {"card": "diff", "diffs": []}),
    (
        SearchMatchesView(
            [SearchFileMatches("a.py", [SearchMatch(3, "import os")])],
            truncated=True,
            total=7,
            title="import",
        ),
        {
            "card": "search",
            "shape": "matches",
            "title": "import",
            "files": [{"path": "a.py", "matches": [{"lineNumber": 3, "line": "import os"}]}],
            "truncated": True,
            "total": 7,
        },
    ),
    (
        SearchPathsView(["a.py", "b.py"], truncated=False, total=2),
        {
            "card": "search",
            "shape": "paths",
            "paths": ["a.py", "b.py"],
            "truncated": False,
            "total": 2,
        },
    ),
    (
        ReadResultView(
            "a.py", offset=5, lines=[ReadFileLine(5, "x = 1")], total_lines=40, lang="py"
        ),
        {
            "card": "read",
            "path": "a.py",
            "offset": 5,
            "lines": [{"number": 5, "text": "x = 1"}],
            "totalLines": 40,
            "lang": "py",
        },
    ),
    (
        WebSearchView(
            [WebSource("https://a.example", title="A", published_at="2026-01-02T03:04:05Z")],
            truncated=False,
            answer="42",
        ),
        {
            "card": "web",
            "kind": "search",
            "sources": [
                {"url": "https://a.example", "title": "A", "publishedAt": "2026-01-02T03:04:05Z"}
            ],
            "answer": "42",
            "truncated": False,
        },
    ),
    (
        WebFetchView("https://a.example/final", status_code=200, truncated=True),
        {
            "card": "web",
            "kind": "fetch",
            "url": "https://a.example/final",
            "statusCode": 200,
            "truncated": True,
        },
    ),
]


@pytest.mark.parametrize(("view", "wire"), WIRE, ids=lambda item: type(item).__name__)
def test_wire_shape_is_exact_camel_case_with_tags_first(
    view: ToolCallView | ToolResultView, wire: dict[str, Any]
) -> None:
    data = unstructure_view(view)
    assert data == wire
    assert next(iter(data)) == "card"
    call_cards = (GenericCallView, TerminalCallView, DiffCallView)
    read = structure_call_view if isinstance(view, call_cards) else structure_result_view
    assert read(wire) == view


def test_unstructured_data_is_plain_mutable_json() -> None:
    data = unstructure_view(GenericCallView("t", raw_input={"a": [1, {"b": None}]}))
    assert type(data["rawInput"]) is dict
    assert type(data["rawInput"]["a"]) is list
    assert type(data["rawInput"]["a"][1]) is dict


def test_cards_are_deep_frozen_and_hashable() -> None:
    arguments = {"paths": ["a", "b"]}
    view = GenericCallView("t", raw_input=arguments, locations=[FileLocation("a")])
    arguments["paths"].append("c")
    assert view.raw_input == {"paths": ["a", "b"]}
    assert isinstance(view.locations, tuple)
    with pytest.raises(TypeError):
        view.raw_input["paths"] = []  # type: ignore[index]
    assert hash(view) == hash(
        GenericCallView("t", raw_input={"paths": ["a", "b"]}, locations=[FileLocation("a")])
    )


def test_integral_float_counts_as_integer() -> None:
    view = structure_result_view({"card": "terminal", "exitCode": 2.0})
    assert view == TerminalResultView(exit_code=2)
    assert type(view.exit_code) is int


def test_explicit_null_reads_as_absent() -> None:
    assert structure_result_view({"card": "generic", "title": None}) == GenericResultView()


def test_fallback_call_view_is_a_generic_card_titled_with_the_tool_name() -> None:
    view = fallback_call_view("grep", {"pattern": "x"})
    assert view == GenericCallView("grep", raw_input={"pattern": "x"})
    assert unstructure_view(view) == {
        "card": "generic",
        "title": "grep",
        "rawInput": {"pattern": "x"},
    }


# --- bad input ----------------------------------------------------------------------------

BAD_RESULTS: list[tuple[object, str]] = [
    (
        {"card": "diff", "diffs": [{"path": "a", "oldText": None, "newText": 3}]},
        "result view.diffs[0].newText: expected a string, got a number",
    ),
    (
        {"card": "diff", "diffs": [{"path": "a"}]},
        "result view.diffs[0].oldText: required field missing; "
        "result view.diffs[0].newText: required field missing",
    ),
    ({"card": "chart"}, "result view.card: unknown card 'chart', expected one of"),
    ({"title": "x"}, "result view.card: required field missing"),
    ({"card": 3}, "result view.card: unknown card 3"),
    ({"card": "search", "paths": []}, "result view.shape: required field missing"),
    ({"card": "search", "shape": "tree"}, "result view.shape: unknown shape 'tree'"),
    ({"card": "web", "kind": "crawl"}, "result view.kind: unknown kind 'crawl'"),
    ([], "result view: expected an object, got an array"),
    ({"card": "generic", "colour": "red"}, "result view.colour: unknown key"),
    (
        {"card": "search", "shape": "paths", "paths": "ab", "truncated": 1, "total": "2"},
        "result view.paths: expected an array, got a string; "
        "result view.truncated: expected a boolean, got a number; "
        "result view.total: expected an integer, got a string",
    ),
    (
        {"card": "web", "kind": "fetch", "url": "u", "statusCode": True, "truncated": False},
        "result view.statusCode: expected an integer, got a boolean",
    ),
    (
        {"card": "search", "shape": "matches", "files": ["a.py"], "truncated": False, "total": 0},
        "result view.files[0]: expected an object, got a string",
    ),
    (
        {"card": "terminal", "exitCode": 1, "signal": "SIGKILL"},
        "result view.signal: cannot be set together with exitCode",
    ),
    (
        {"card": "search", "shape": "paths", "paths": ["a"], "truncated": False, "total": 3},
        "result view.total: must be exactly the 1 shown, got 3",
    ),
    (
        {
            "card": "read",
            "path": "a",
            "offset": 1,
            "lines": [{"number": 0, "text": ""}],
            "totalLines": 1,
        },
        "result view.lines[0].number: must be 1 or more, got 0",
    ),
    ({"card": "generic", "content": "hi"}, "result view.content: expected an array, got a string"),
    (
        {"card": "generic", "content": [{"text": "no type"}]},
        'result view.content[0]: must have a string "type"',
    ),
    (
        {"card": "generic", "content": [["nested"]]},
        "result view.content[0]: expected a content block object, got an array",
    ),
    ({"card": "generic", "title": float("nan")}, "result view.title: is NaN"),
    ({"card": "generic", "title": {1, 2}}, "result view.title: is a set"),
    ({"card": "generic", 1: "x"}, "result view: has the key 1 of type int"),
]


@pytest.mark.parametrize(("data", "message"), BAD_RESULTS)
def test_bad_result_json_names_the_path(data: object, message: str) -> None:
    with pytest.raises(CardError) as caught:
        structure_result_view(data)
    assert message in str(caught.value)
    assert isinstance(caught.value, DshToolsError)
    assert isinstance(caught.value, ValueError)
    assert caught.value.__cause__ is None


BAD_CALLS: list[tuple[object, str]] = [
    ({"card": "generic"}, "call view.title: required field missing"),
    (
        {"card": "generic", "title": "t", "kind": "paint"},
        "call view.kind: expected one of read, edit, delete, move, search, execute, fetch, "
        "other, got 'paint'",
    ),
    (
        {"card": "diff", "title": "t", "diffs": [], "locations": [{"path": "a", "line": 0}]},
        "call view.locations[0].line: must be 1 or more, got 0",
    ),
    ({"card": "read", "path": "a"}, "call view.card: unknown card 'read'"),
    ({"card": "terminal", "title": "ls", "exitCode": 0}, "call view.exitCode: unknown key"),
    ("generic", "call view: expected an object, got a string"),
]


@pytest.mark.parametrize(("data", "message"), BAD_CALLS)
def test_bad_call_json_names_the_path(data: object, message: str) -> None:
    with pytest.raises(CardError, match=r"^call view") as caught:
        structure_call_view(data)
    assert message in str(caught.value)


def test_deeply_nested_raw_input_fails_cleanly() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(CardError, match="nests deeper than"):
        structure_call_view({"card": "generic", "title": "t", "rawInput": deep})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TerminalResultView(exit_code=0, signal="SIGTERM"), "TerminalResultView.signal"),
        (lambda: FileLocation("a", 0), "FileLocation.line: must be 1 or more, got 0"),
        (lambda: SearchPathsView(["a", "b"], truncated=True, total=1), "must be at least the 2"),
        (lambda: GenericCallView("t", raw_input={"when": {1, 2}}), "raw_input.when: is a set"),
        (lambda: GenericResultView(content=[3]), "content[0]: is of type int"),  # type: ignore[list-item]
        (lambda: SearchPathsView("ab", truncated=False, total=1), "paths: expected a list"),
    ],
)
def test_constructing_a_broken_card_raises_card_error(build: Any, message: str) -> None:
    with pytest.raises(CardError) as caught:
        build()
    assert message in str(caught.value)


def test_unstructure_rejects_non_cards() -> None:
    with pytest.raises(CardError, match="not a card: FileDiff"):
        unstructure_view(FileDiff("a", None, "b"))  # type: ignore[arg-type]


# --- file_diffs -------------------------------------------------------------------------


def numbered(count: int) -> list[str]:
    return [f"line {number}\n" for number in range(1, count + 1)]


def test_identical_texts_have_no_hunks() -> None:
    assert file_diffs("a", "x\ny\n", "x\ny\n") == ()
    assert file_diffs("a", "", "") == ()


def test_new_file_is_one_whole_file_diff() -> None:
    assert file_diffs("a", None, "x\n") == (FileDiff("a", None, "x\n"),)
    assert file_diffs("a", None, "") == (FileDiff("a", None, ""),)


def test_change_in_a_long_file_carries_context_lines() -> None:
    before = numbered(100)
    after = list(before)
    after[49] = "changed\n"
    (hunk,) = file_diffs("f.txt", "".join(before), "".join(after))
    assert hunk.path == "f.txt"
    assert hunk.old_text == "".join(before[46:53])
    assert hunk.new_text == "".join([*before[46:49], "changed\n", *before[50:53]])


def test_insert_and_delete_hunks() -> None:
    before = numbered(20)
    inserted = [*before[:10], "new\n", *before[10:]]
    (insert,) = file_diffs("f", "".join(before), "".join(inserted))
    assert insert == FileDiff(
        "f", "".join(before[7:13]), "".join([*before[7:10], "new\n", *before[10:13]])
    )
    (delete,) = file_diffs("f", "".join(inserted), "".join(before))
    assert (delete.old_text, delete.new_text) == (insert.new_text, insert.old_text)


def test_distant_changes_are_separate_hunks_and_near_ones_merge() -> None:
    before = numbered(60)
    after = list(before)
    after[5] = "first\n"
    after[50] = "second\n"
    first, second = file_diffs("f", "".join(before), "".join(after), context=2)
    assert first.old_text == "".join(before[3:8])
    assert first.new_text == "".join([*before[3:5], "first\n", *before[6:8]])
    assert second.old_text == "".join(before[48:53])
    after[9] = "near\n"  # within 2 * context of the first change
    merged, _ = file_diffs("f", "".join(before), "".join(after), context=2)
    assert merged.old_text == "".join(before[3:12])


def test_zero_context_and_change_at_file_edges() -> None:
    before = "a\nb\nc\n"
    assert file_diffs("f", before, "A\nb\nc\n", context=0) == (FileDiff("f", "a\n", "A\n"),)
    assert file_diffs("f", before, "a\nb\nc") == (FileDiff("f", before, "a\nb\nc"),)


def test_file_diffs_feed_a_diff_card() -> None:
    view = DiffResultView(diffs=file_diffs("f", "a\n", "b\n"))
    assert structure_result_view(through_json(unstructure_view(view))) == view


def test_a_file_of_repeated_lines_diffs_in_linear_time() -> None:
    # Matching 10 000 identical lines pairwise took 15 s; the common head and tail are cut
    # first, so only the changed region is matched.
    before = ["same\n"] * 10_000
    after = [*before[:5000], "changed\n", *before[5000:]]
    started = time.process_time()
    (hunk,) = file_diffs("f", "".join(before), "".join(after))
    assert time.process_time() - started < 2  # a generous bound: it takes milliseconds
    assert hunk.old_text == "same\n" * 3 + "same\n" * 3
    assert hunk.new_text == "same\n" * 3 + "changed\n" + "same\n" * 3


def test_a_changed_region_past_the_matching_limit_is_one_hunk() -> None:
    before = numbered(DIFF_MATCH_LINES + 10)
    after = ["X" + line for line in before[:-2]] + before[-2:]
    (hunk,) = file_diffs("f", "".join(before), "".join(after), context=1)
    # every changed line and one unchanged line of context after them
    assert hunk.old_text == "".join(before[:-1])
    assert hunk.new_text == "".join(after[:-1])
