"""read_file, write_file, edit_file and list_dir through a real registry, with their cards."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import dsh_tools_plugins._file_bytes as file_bytes
from dsh_tools import PresentableResult, ToolExecutionInput, ToolRegistry
from dsh_tools._models import (
    ToolDefinition,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    result_to_json,
)
from dsh_tools.presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    ToolCallKind,
    file_diffs,
    unstructure_view,
)
from dsh_tools_plugins.files import (
    edit_file_tool,
    list_dir_tool,
    read_file_tool,
    write_file_tool,
)
from dsh_tools_plugins.workspace import Workspace
from strategies import HOSTILE_TEXTS, is_inert


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    return workspace


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    ws = Workspace(root)
    registry = ToolRegistry()
    for tool in (
        read_file_tool(ws, max_bytes=4096),
        write_file_tool(ws),
        edit_file_tool(ws, max_bytes=4096),
        list_dir_tool(ws),
    ):
        registry.register(tool)
    return registry


def _call(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput("call-1", name, arguments))


def _ok(registry: ToolRegistry, name: str, **arguments: Any) -> ToolExecutionSuccess:
    result = _call(registry, name, **arguments)
    assert isinstance(result, ToolExecutionSuccess), result.text
    return result


def _fail(registry: ToolRegistry, name: str, code: str, **arguments: Any) -> str:
    result = _call(registry, name, **arguments)
    assert isinstance(result, ToolExecutionFailure), result.text
    assert result.code == code, result.text
    text: str = result.text
    return text


def _call_card(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    """The call's card as the tool draws it now (a change's card reads the file)."""
    return _cards(registry, name, PresentableResult(["x"], False, None), **arguments)[0]


def _cards(registry: ToolRegistry, name: str, result: Any, **arguments: Any) -> tuple[Any, Any]:
    definition: ToolDefinition[Any] | None = registry.get(name)
    assert definition is not None
    assert definition.present_call is not None
    assert definition.present_result is not None
    parsed = definition.arguments.parse(arguments)
    presented = PresentableResult(result.content, result.is_error, result.meta)
    call_view = definition.present_call(parsed)
    result_view = definition.present_result(parsed, presented)
    for view in (call_view, result_view):
        if view is not None:
            unstructure_view(view)  # every card serializes
    return call_view, result_view


# --------------------------------------------------------------------------- read_file


def test_read_file_numbers_lines_and_presents_a_read_card(
    registry: ToolRegistry, root: Path
) -> None:
    (root / "main.py").write_text("one\ntwo\r\nthree\nfour\n")
    result = _ok(registry, "read_file", path="main.py", offset=2, limit=2)
    assert result.text == (
        "     2\ttwo\n     3\tthree\n\n[showing lines 2-3 of 4; continue with offset=4]"
    )
    assert result.value["total_lines"] == 4
    assert result.value["truncated"] is True
    call_view, result_view = _cards(
        registry, "read_file", result, path="main.py", offset=2, limit=2
    )
    assert call_view == GenericCallView(
        "Read main.py", kind=ToolCallKind.READ, locations=[FileLocation("main.py", 2)]
    )
    assert result_view == ReadResultView(
        "main.py",
        title="Read main.py",
        offset=2,
        lines=[ReadFileLine(2, "two"), ReadFileLine(3, "three")],
        total_lines=4,
        lang="python",
    )


def test_read_file_whole_file_empty_and_past_the_end(registry: ToolRegistry, root: Path) -> None:
    (root / "notes").write_text("a\nb")
    assert _ok(registry, "read_file", path="notes").text == "     1\ta\n     2\tb"
    (root / "empty.md").write_text("")
    result = _ok(registry, "read_file", path="empty.md")
    assert result.text == "empty.md is empty"
    _, view = _cards(registry, "read_file", result, path="empty.md")
    assert view.lines == ()
    assert view.total_lines == 0
    assert view.lang == "markdown"
    result = _ok(registry, "read_file", path="notes", offset=9)
    assert result.text == "notes has 2 lines; offset 9 is past the end"
    _, view = _cards(registry, "read_file", result, path="notes", offset=9)
    assert view.offset == 9
    assert view.lines == ()
    assert view.lang is None


def test_read_file_refuses_binary_huge_missing_and_directories(
    registry: ToolRegistry, root: Path
) -> None:
    (root / "blob.bin").write_bytes(b"PNG\x00\x01\x02" + b"x" * 100)
    assert "is a binary file" in _fail(registry, "read_file", "TOOL_ERROR", path="blob.bin")
    (root / "big.txt").write_text("x" * 5000)
    text = _fail(registry, "read_file", "TOOL_ERROR", path="big.txt")
    assert text == 'Error: "big.txt" is too large to read: 5000 bytes, over the limit of 4096 bytes'
    text = _fail(registry, "read_file", "TOOL_ERROR", path="missing.txt")
    assert text == 'Error: "missing.txt" does not exist'
    (root / "dir").mkdir()
    assert "is a directory" in _fail(registry, "read_file", "TOOL_ERROR", path="dir")
    os.mkfifo(root / "fifo")
    assert "not a regular file" in _fail(registry, "read_file", "TOOL_ERROR", path="fifo")


def test_read_file_bad_offsets_are_invalid_args(registry: ToolRegistry, root: Path) -> None:
    (root / "a.txt").write_text("a\n")
    text = _fail(registry, "read_file", "INVALID_ARGS", path="a.txt", offset=0)
    assert '"offset" must be 1 or more' in text
    _fail(registry, "read_file", "INVALID_ARGS", path="a.txt", limit="3")


def test_read_file_decodes_invalid_utf8_with_replacement(
    registry: ToolRegistry, root: Path
) -> None:
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    assert _ok(registry, "read_file", path="latin.txt").text == "     1\tcaf\ufffd"


@contextlib.contextmanager
def _unprivileged() -> Iterator[None]:
    """Drop the effective uid to nobody while root (chmod 000 means nothing to root)."""
    if os.geteuid() != 0:
        yield
        return
    try:
        os.seteuid(65534)
    except PermissionError:  # pragma: no cover - a root without CAP_SETUID
        pytest.skip("cannot drop privileges to test permission errors")
    try:
        yield
    finally:
        os.seteuid(0)


def test_permission_errors_are_clear_failures() -> None:
    # a world-traversable workspace outside pytest's 0700 temp tree, so nobody can enter it
    top = tempfile.mkdtemp(prefix="dsh-perm-")
    try:
        os.chmod(top, 0o755)
        secret = Path(top) / "locked.txt"
        secret.write_text("x\n")
        secret.chmod(0o000)
        (Path(top) / "locked").mkdir(mode=0o000)
        ws = Workspace(top)
        registry = ToolRegistry()
        for tool in (read_file_tool(ws), list_dir_tool(ws), edit_file_tool(ws)):
            registry.register(tool)
        with _unprivileged():
            read = _call(registry, "read_file", path="locked.txt")
            listed = _call(registry, "list_dir", path="locked")
            edited = _call(registry, "edit_file", path="locked.txt", old_string="x", new_string="y")
        assert read.code == "TOOL_ERROR"
        assert read.text == 'Error: cannot open "locked.txt": permission denied'
        assert listed.code == "TOOL_ERROR"
        assert listed.text == 'Error: cannot open "locked": permission denied'
        assert edited.text == 'Error: cannot open "locked.txt": permission denied'
    finally:
        os.chmod(Path(top) / "locked", 0o755)
        shutil.rmtree(top)


# --------------------------------------------------------------------------- write_file


def test_write_file_creates_parents_and_presents_diff_cards(
    registry: ToolRegistry, root: Path
) -> None:
    call_view = _call_card(registry, "write_file", path="pkg/deep/mod.py", content="x = 1\n")
    result = _ok(registry, "write_file", path="pkg/deep/mod.py", content="x = 1\n")
    assert (root / "pkg" / "deep" / "mod.py").read_text() == "x = 1\n"
    assert result.text == "Created pkg/deep/mod.py (6 bytes)"
    assert result.value["created"] is True
    _, result_view = _cards(
        registry, "write_file", result, path="pkg/deep/mod.py", content="x = 1\n"
    )
    assert call_view == DiffCallView(
        "Write pkg/deep/mod.py",
        [FileDiff("pkg/deep/mod.py", None, "x = 1\n")],
        locations=[FileLocation("pkg/deep/mod.py")],
    )
    assert result_view == DiffResultView(
        title="Created pkg/deep/mod.py", diffs=[FileDiff("pkg/deep/mod.py", None, "x = 1\n")]
    )


def test_write_file_overwrite_diff_uses_the_before_image(
    registry: ToolRegistry, root: Path
) -> None:
    before = "".join(f"line {n}\n" for n in range(1, 21))
    (root / "f.txt").write_text(before)
    after = before.replace("line 10\n", "LINE TEN\n")
    call_view = _call_card(registry, "write_file", path="f.txt", content=after)
    result = _ok(registry, "write_file", path="f.txt", content=after)
    assert result.text == f"Overwrote f.txt ({len(after)} bytes)"
    assert (root / "f.txt").read_text() == after
    _, result_view = _cards(registry, "write_file", result, path="f.txt", content=after)
    assert call_view.diffs == result_view.diffs  # the person sees the change the call makes
    assert result_view == DiffResultView(
        title="Edited f.txt",
        diffs=[
            FileDiff(
                "f.txt",
                "line 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\n",
                "line 7\nline 8\nline 9\nLINE TEN\nline 11\nline 12\nline 13\n",
            )
        ],
    )
    # the presenter is pure: the same durable projection gives the same card
    assert _cards(registry, "write_file", result, path="f.txt", content=after)[1] == result_view


def test_write_file_shrinking_and_refusals(registry: ToolRegistry, root: Path) -> None:
    (root / "f.txt").write_text("a long original content\n")
    _ok(registry, "write_file", path="f.txt", content="short\n")
    assert (root / "f.txt").read_text() == "short\n"  # truncated, not overlaid
    (root / "d").mkdir()
    assert "is a directory" in _fail(registry, "write_file", "TOOL_ERROR", path="d", content="")
    _fail(registry, "write_file", "DENIED", path="../outside.txt", content="pwned")
    (root / "link.txt").symlink_to(root.parent / "outside.txt")
    _fail(registry, "write_file", "DENIED", path="link.txt", content="pwned")
    assert (root.parent / "outside.txt").read_text() == "secret\n"


def test_failed_results_present_no_card(registry: ToolRegistry) -> None:
    result = _call(registry, "write_file", path="../x", content="")
    assert _cards(registry, "write_file", result, path="../x", content="")[1] is None


# --------------------------------------------------------------------------- edit_file


def test_edit_file_replaces_a_unique_string(registry: ToolRegistry, root: Path) -> None:
    (root / "app.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    arguments = {"path": "app.py", "old_string": "return 1", "new_string": "return 10"}
    call_view = _call_card(registry, "edit_file", **arguments)
    result = _ok(registry, "edit_file", **arguments)
    assert result.text == "Edited app.py: replaced 1 occurrence"
    assert (root / "app.py").read_text() == "def f():\n    return 10\n\ndef g():\n    return 2\n"
    _, result_view = _cards(registry, "edit_file", result, **arguments)
    assert call_view == DiffCallView(
        "Edit app.py",
        [
            FileDiff(
                "app.py",
                "def f():\n    return 1\n\ndef g():\n    return 2\n",
                "def f():\n    return 10\n\ndef g():\n    return 2\n",
            )
        ],
        locations=[FileLocation("app.py", 2)],  # the file as it is, where the edit lands
    )
    assert _call_card(registry, "edit_file", **arguments) == DiffCallView(
        "Edit app.py",  # the edit no longer applies the same way: "return 10" holds "return 1"
        [
            FileDiff(
                "app.py",
                "def f():\n    return 10\n\ndef g():\n    return 2\n",
                "def f():\n    return 100\n\ndef g():\n    return 2\n",
            )
        ],
        locations=[FileLocation("app.py", 2)],
    )
    missing = {**arguments, "path": "gone.py"}
    assert _call_card(registry, "edit_file", **missing) == DiffCallView(
        "Edit gone.py",  # nothing to edit: the card shows what was asked
        [FileDiff("gone.py", "return 1", "return 10")],
        locations=[FileLocation("gone.py")],
    )
    assert isinstance(result_view, DiffResultView)
    assert result_view.title == "Edited app.py"
    assert result_view.diffs == (
        FileDiff(
            "app.py",
            "def f():\n    return 1\n\ndef g():\n    return 2\n",
            "def f():\n    return 10\n\ndef g():\n    return 2\n",
        ),
    )


def test_edit_file_refuses_missing_and_ambiguous_matches(
    registry: ToolRegistry, root: Path
) -> None:
    original = "x = 1\nx = 1\n"
    (root / "a.py").write_text(original)
    text = _fail(registry, "edit_file", "TOOL_ERROR", path="a.py", old_string="y", new_string="z")
    assert '"old_string" was not found in "a.py"' in text
    text = _fail(
        registry, "edit_file", "TOOL_ERROR", path="a.py", old_string="x = 1", new_string="x = 2"
    )
    assert '"old_string" matches 2 times in "a.py"' in text
    assert "replace_all" in text
    assert (root / "a.py").read_text() == original
    result = _ok(
        registry, "edit_file", path="a.py", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert result.text == "Edited a.py: replaced 2 occurrences"
    assert (root / "a.py").read_text() == "x = 2\nx = 2\n"


def test_edit_file_argument_and_file_errors(registry: ToolRegistry, root: Path) -> None:
    (root / "a.txt").write_text("abc\n")
    text = _fail(registry, "edit_file", "INVALID_ARGS", path="a.txt", old_string="", new_string="x")
    assert '"old_string" must not be empty' in text
    text = _fail(
        registry, "edit_file", "INVALID_ARGS", path="a.txt", old_string="a", new_string="a"
    )
    assert '"new_string" must differ from "old_string"' in text
    text = _fail(
        registry, "edit_file", "TOOL_ERROR", path="nope.txt", old_string="a", new_string="b"
    )
    assert text == 'Error: "nope.txt" does not exist'
    assert not (root / "nope.txt").exists()  # edit never creates
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    text = _fail(
        registry, "edit_file", "TOOL_ERROR", path="latin.txt", old_string="caf", new_string="x"
    )
    assert "is not valid UTF-8 text" in text
    assert (root / "latin.txt").read_bytes() == b"caf\xe9\n"
    (root / "blob").write_bytes(b"a\x00b")
    text = _fail(registry, "edit_file", "TOOL_ERROR", path="blob", old_string="a", new_string="b")
    assert "is a binary file" in text
    (root / "big.txt").write_text("a" * 5000)
    text = _fail(
        registry, "edit_file", "TOOL_ERROR", path="big.txt", old_string="a", new_string="b"
    )
    assert "is too large to edit" in text


# --------------------------------------------------------------------------- list_dir


def test_list_dir_markers_sorting_and_cap(registry: ToolRegistry, root: Path) -> None:
    (root / "b.txt").write_text("")
    (root / "a_dir").mkdir()
    (root / "c-link").symlink_to(root.parent / "outside.txt")
    os.mkfifo(root / "d.fifo")
    result = _ok(registry, "list_dir")
    assert result.text == "a_dir/\nb.txt\nc-link@\nd.fifo|"
    assert result.value["total"] == 4
    call_view, result_view = _cards(registry, "list_dir", result)
    assert call_view == GenericCallView(
        "List .", kind=ToolCallKind.READ, locations=[FileLocation(".")]
    )
    assert result_view == GenericResultView(title="List . (4 entries)")
    capped = _ok(registry, "list_dir", path=".", limit=2)
    assert capped.text == "a_dir/\nb.txt\n\n[showing 2 of 4 entries]"
    assert capped.value["truncated"] is True
    assert _ok(registry, "list_dir", path="a_dir").text == "a_dir is empty"
    assert "is not a directory" in _fail(registry, "list_dir", "TOOL_ERROR", path="b.txt")
    _fail(registry, "list_dir", "DENIED", path="c-link")


def test_metadata_marks_read_only_tools(registry: ToolRegistry) -> None:
    titles = {"read_file": "Read file", "list_dir": "List directory"}
    for name, title in titles.items():
        definition = registry.get(name)
        assert definition is not None
        assert definition.metadata == {
            "read_only": True,
            "idempotent": True,
            "open_world": False,
            "title": title,
        }
    for name, title in {"write_file": "Write file", "edit_file": "Edit file"}.items():
        definition = registry.get(name)
        assert definition is not None
        assert definition.metadata == {"read_only": False, "open_world": False, "title": title}


# --------------------------------------------------------------------------- hard links


def test_writing_through_a_hard_link_is_refused_reading_is_not(
    registry: ToolRegistry, root: Path
) -> None:
    os.link(root.parent / "outside.txt", root / "inside.txt")
    expected = (
        'Error: "inside.txt" has 2 hard links; writing through it would change every '
        "linked name, which may lie outside the workspace, so it is not written "
        "(reading is allowed)"
    )
    assert _fail(registry, "write_file", "DENIED", path="inside.txt", content="x") == expected
    edited = _fail(
        registry, "edit_file", "DENIED", path="inside.txt", old_string="secret", new_string="x"
    )
    assert edited == expected
    assert (root.parent / "outside.txt").read_text() == "secret\n"
    assert _ok(registry, "read_file", path="inside.txt").text == "     1\tsecret"


# ------------------------------------------------------------------------- paths naming directories


@pytest.mark.parametrize("path", ["newf/", "sub/newf/", "newf/."])
def test_a_path_ending_in_a_slash_is_not_a_file(
    registry: ToolRegistry, root: Path, path: str
) -> None:
    text = _fail(registry, "write_file", "TOOL_ERROR", path=path, content="x")
    ending = "/." if path.endswith(".") else "/"
    assert text == f'Error: "{path}" names a directory (it ends with "{ending}"), not a file'
    assert sorted(root.iterdir()) == []


def test_reading_or_editing_a_file_through_a_trailing_slash_fails(
    registry: ToolRegistry, root: Path
) -> None:
    (root / "a.txt").write_text("abc\n")
    for name, arguments in [
        ("read_file", {"path": "a.txt/"}),
        ("edit_file", {"path": "a.txt/", "old_string": "a", "new_string": "b"}),
    ]:
        text = _fail(registry, name, "TOOL_ERROR", **arguments)
        assert text == 'Error: "a.txt/" names a directory (it ends with "/"), not a file'
    assert (root / "a.txt").read_text() == "abc\n"


# --------------------------------------------------------------------------- size bounds


def test_an_edit_may_not_grow_a_file_past_the_size_limit(
    registry: ToolRegistry, root: Path
) -> None:
    (root / "small.txt").write_text("a" * 3000)  # within the 4096-byte limit
    text = _fail(
        registry,
        "edit_file",
        "TOOL_ERROR",
        path="small.txt",
        old_string="a",
        new_string="b" * 1000,
        replace_all=True,
    )
    assert text == (
        'Error: "small.txt" would be 3000000 bytes after the edit, over the limit of '
        "4096 bytes; the file is unchanged"
    )
    assert (root / "small.txt").read_text() == "a" * 3000


def test_write_file_may_not_write_past_the_size_limit(root: Path) -> None:
    registry = ToolRegistry()
    registry.register(write_file_tool(Workspace(root), max_bytes=100))
    (root / "f.txt").write_text("kept\n")
    text = _fail(registry, "write_file", "TOOL_ERROR", path="f.txt", content="é" * 51)
    assert text == 'Error: "f.txt" would be 102 bytes, over the limit of 100 bytes; not written'
    assert (root / "f.txt").read_text() == "kept\n"
    assert _ok(registry, "write_file", path="f.txt", content="é" * 50).value["bytes"] == 100


def test_a_result_carries_a_bounded_diff(registry: ToolRegistry, root: Path) -> None:
    def replace_all(path: str, old: str, new: str) -> ToolExecutionSuccess:
        before = (root / path).read_text()
        result = _ok(
            registry, "edit_file", path=path, old_string=old, new_string=new, replace_all=True
        )
        assert (root / path).read_text() == before.replace(old, new)
        assert result.meta == result.value
        return result

    # every line changes: one hunk of 2700 + 3000 bytes, over the 4096-byte budget
    (root / "f.txt").write_text("".join(f"line {n:03}\n" for n in range(300)))
    result = replace_all("f.txt", "line", "LINE!")
    assert result.value["diffs"] == []
    assert result.value["diffs_omitted"] == 1
    _, view = _cards(
        registry, "edit_file", result, path="f.txt", old_string="line", new_string="LINE!"
    )
    assert view == DiffResultView(title="Edited f.txt (1 hunk too large to show)", diffs=[])

    # forty separate hunks: those that fit are kept, in order; the rest are counted
    blocks = "".join(f"keep {n:03}\n" * 3 + "change me\n" + "keep\n" * 4 for n in range(40))
    (root / "g.txt").write_text(blocks)
    result = replace_all("g.txt", "change me", "changed!!")
    hunks = file_diffs("g.txt", blocks, blocks.replace("change me", "changed!!"))
    sizes = [len((d.old_text or "") + d.new_text) for d in hunks]
    kept = next(i for i in range(len(hunks) + 1) if sum(sizes[: i + 1]) > 4096)
    assert 0 < kept < len(hunks)
    assert result.value["diffs"] == [
        {"old_text": d.old_text, "new_text": d.new_text} for d in hunks[:kept]
    ]
    assert result.value["diffs_omitted"] == len(hunks) - kept

    # a small change carries all its hunks
    lines = [f"line {n:03}\n" for n in range(40)]
    (root / "h.txt").write_text("".join([*lines[:12], "change me\n", *lines[12:]]))
    small = replace_all("h.txt", "change me", "changed")
    assert len(small.value["diffs"]) == 1
    assert small.value["diffs_omitted"] == 0


# ------------------------------------------------------------------------- names that are not UTF-8


def test_a_name_holding_controls_is_escaped_in_listings_and_messages(
    registry: ToolRegistry, root: Path
) -> None:
    """Issue 23: a newline in a file name forged a line of list_dir's output (which the
    model reads); escape sequences and bidi controls reached it as they were."""
    for index, name in enumerate(HOSTILE_TEXTS):
        (root / f"{index}{name}").mkdir()
    listed = _ok(registry, "list_dir")
    assert len(listed.text.splitlines()) == len(HOSTILE_TEXTS), listed.text
    assert is_inert(listed.text, multiline=True)
    assert "4a.txt\\nsecret.txt:1: forged/" in listed.text.splitlines()
    inside = _ok(registry, "list_dir", path=f"1{HOSTILE_TEXTS[1]}")
    assert inside.value["path"] == "1\\x1b]52;c;cm0gLXJmIH4=\\x1b\\"
    message = _fail(registry, "read_file", "TOOL_ERROR", path=f"3{HOSTILE_TEXTS[3]}/x")
    assert is_inert(message)
    assert "3rm -rf ~\\rls -la" in message


def test_names_that_are_not_utf8_are_shown_with_the_replacement_character(
    registry: ToolRegistry, root: Path
) -> None:
    try:
        (root / os.fsdecode(b"caf\xe9.txt")).write_text("x\n")
    except OSError:  # pragma: no cover - a file system that refuses non-UTF-8 names
        pytest.skip("this file system refuses names that are not UTF-8")
    (root / "plain.txt").write_text("y\n")
    result = _ok(registry, "list_dir")
    assert result.text == "caf\ufffd.txt\nplain.txt"
    assert result.value["entries"][0] == {"name": "caf\ufffd.txt", "type": "file"}
    json.dumps(result_to_json(result), ensure_ascii=False).encode("utf-8")  # any wire carries it


# --------------------------------------------------------------------------- off the event loop


@pytest.mark.anyio
async def test_file_tools_leave_the_event_loop_free_while_they_work(
    registry: ToolRegistry, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "a.txt").write_text("slow disk\n")
    original = file_bytes.read_fd

    def slow_read(fd: int, limit: int) -> bytes:
        time.sleep(0.3)  # a network file system, say
        return original(fd, limit)

    monkeypatch.setattr(file_bytes, "read_fd", slow_read)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        result = await registry.execute(ToolExecutionInput("c", "read_file", {"path": "a.txt"}))
        group.cancel_scope.cancel()
    assert result.text == "     1\tslow disk"
    assert ticks >= 5  # the loop kept running during the 0.3 s read
