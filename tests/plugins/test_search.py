"""glob and grep through a real registry: matching, caps, skips, errors and their cards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_tools import (
    CancelSource,
    PresentableResult,
    ToolArgsError,
    ToolExecutionInput,
    ToolRegistry,
)
from dsh_tools.models import ToolDefinition, ToolExecutionFailure, ToolExecutionSuccess
from dsh_tools.presentation import (
    GenericCallView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    ToolCallKind,
    unstructure_view,
)
from dsh_tools_plugins.search import glob_regex, glob_tool, grep_tool
from dsh_tools_plugins.workspace import Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    files = {
        "setup.py": "import os\nNAME = 'demo'\n",
        "src/pkg/__init__.py": "",
        "src/pkg/core.py": "def Main():\n    return main()\n\ndef main():\n    pass\n",
        "src/pkg/util.ts": "export const main = 1;\n",
        "src/pkg/view.tsx": "// main view\n",
        "docs/guide.md": "Main guide\nsee main()\n",
        ".git/config": "main = true\n",
        ".hidden/x.py": "main\n",
    }
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (workspace / "data.bin").write_bytes(b"main\x00\x01")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("main = 'secret'\n")
    (workspace / "linked").symlink_to(outside)
    (workspace / "leak.py").symlink_to(outside / "leak.py")
    return workspace


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    ws = Workspace(root)
    registry = ToolRegistry()
    registry.register(glob_tool(ws))
    registry.register(grep_tool(ws, max_file_bytes=1024))
    return registry


def _call(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput("call-1", name, arguments))


def _ok(registry: ToolRegistry, name: str, **arguments: Any) -> ToolExecutionSuccess:
    result = _call(registry, name, **arguments)
    assert isinstance(result, ToolExecutionSuccess), result.text
    return result


def _cards(registry: ToolRegistry, name: str, result: Any, **arguments: Any) -> tuple[Any, Any]:
    definition: ToolDefinition[Any] | None = registry.get(name)
    assert definition is not None
    assert definition.present_call is not None
    assert definition.present_result is not None
    parsed = definition.arguments.parse(arguments)
    call_view = definition.present_call(parsed)
    result_view = definition.present_result(
        parsed, PresentableResult(result.content, result.is_error, result.meta)
    )
    for view in (call_view, result_view):
        if view is not None:
            unstructure_view(view)
    return call_view, result_view


# --------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "setup.py", True),
        ("*.py", "src/setup.py", False),
        ("**/*.py", "setup.py", True),
        ("**/*.py", "src/pkg/core.py", True),
        ("src/**", "src/pkg/core.py", True),
        ("src/**/core.py", "src/core.py", True),
        ("src/*/core.py", "src/pkg/core.py", True),
        ("src/*/core.py", "src/a/b/core.py", False),
        ("*.{ts,tsx}", "view.tsx", True),
        ("*.{ts,tsx}", "view.js", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("[!a]*.md", "guide.md", True),
        ("[!g]*.md", "guide.md", False),
        ("[gh]uide.md", "huide.md", True),
        ("a+b(c).txt", "a+b(c).txt", True),
    ],
)
def test_glob_regex(pattern: str, path: str, expected: bool) -> None:
    assert (glob_regex(pattern).match(path) is not None) is expected


# --------------------------------------------------------------------------- glob


def test_glob_matches_sorted_and_presents_a_paths_card(registry: ToolRegistry) -> None:
    result = _ok(registry, "glob", pattern="**/*.py")
    paths = [".hidden/x.py", "setup.py", "src/pkg/__init__.py", "src/pkg/core.py"]
    assert result.text == "\n".join(paths)  # no .git, no symlinks, nothing outside
    assert result.value == {"paths": paths, "total": 4, "truncated": False}
    call_view, result_view = _cards(registry, "glob", result, pattern="**/*.py")
    assert call_view == GenericCallView("Glob **/*.py", kind=ToolCallKind.SEARCH)
    assert result_view == SearchPathsView(
        paths, title="4 files match **/*.py", truncated=False, total=4
    )


def test_glob_base_directory_literal_prefix_and_cap(registry: ToolRegistry) -> None:
    assert _ok(registry, "glob", pattern="*.{ts,tsx}", path="src/pkg").text == (
        "src/pkg/util.ts\nsrc/pkg/view.tsx"
    )
    assert _ok(registry, "glob", pattern="src/pkg/*.ts").text == "src/pkg/util.ts"
    assert _ok(registry, "glob", pattern="nope/**/*.py").text == "No files match nope/**/*.py"
    capped = _ok(registry, "glob", pattern="**", limit=2)
    assert capped.value["total"] == 8
    assert capped.value["truncated"] is True
    assert capped.text.endswith("\n\n[showing 2 of 8 paths]")
    _, view = _cards(registry, "glob", capped, pattern="**", limit=2)
    assert view == SearchPathsView(
        [".hidden/x.py", "data.bin"], title="8 files match **", truncated=True, total=8
    )


def test_glob_refusals(registry: ToolRegistry) -> None:
    for pattern in ("../*", "/etc/*", ""):
        result = _call(registry, "glob", pattern=pattern)
        assert result.code == "INVALID_ARGS", result.text
    assert _call(registry, "glob", pattern="*", path="linked").code == "DENIED"
    assert _call(registry, "glob", pattern="*", path="..").code == "DENIED"
    assert _call(registry, "glob", pattern="*", path="missing").code == "TOOL_ERROR"
    assert _call(registry, "glob", pattern="*", path="setup.py").code == "TOOL_ERROR"


# --------------------------------------------------------------------------- grep


def test_grep_matches_with_line_numbers_and_presents_a_matches_card(
    registry: ToolRegistry,
) -> None:
    result = _ok(registry, "grep", pattern=r"\bmain\(")
    assert result.text == (
        "docs/guide.md:2:see main()\n"
        "src/pkg/core.py:2:    return main()\n"
        "src/pkg/core.py:4:def main():\n"
        "\n"
        "[1 binary or oversized files skipped]"
    )
    assert result.value["total"] == 3
    assert result.value["skipped_files"] == 1  # data.bin is binary
    call_view, result_view = _cards(registry, "grep", result, pattern=r"\bmain\(")
    assert call_view == GenericCallView(r"Grep \bmain\(", kind=ToolCallKind.SEARCH)
    assert result_view == SearchMatchesView(
        [
            SearchFileMatches("docs/guide.md", [SearchMatch(2, "see main()")]),
            SearchFileMatches(
                "src/pkg/core.py",
                [SearchMatch(2, "    return main()"), SearchMatch(4, "def main():")],
            ),
        ],
        title=r"3 matches for \bmain\(",
        truncated=False,
        total=3,
    )


def test_grep_include_case_and_single_file(registry: ToolRegistry) -> None:
    result = _ok(registry, "grep", pattern="main", include="*.py")
    assert result.text == (
        ".hidden/x.py:1:main\nsrc/pkg/core.py:2:    return main()\nsrc/pkg/core.py:4:def main():"
    )
    result = _ok(
        registry, "grep", pattern="MAIN", include="src/**/*.{ts,tsx}", case_insensitive=True
    )
    assert (
        result.text == "src/pkg/util.ts:1:export const main = 1;\nsrc/pkg/view.tsx:1:// main view"
    )
    result = _ok(registry, "grep", pattern="^def", path="src/pkg/core.py")
    assert result.text == "src/pkg/core.py:1:def Main():\nsrc/pkg/core.py:4:def main():"
    assert _ok(registry, "grep", pattern="zzz", include="*.md").text == "No matches for zzz"


def test_grep_caps_matches_but_counts_them_all(registry: ToolRegistry) -> None:
    result = _ok(registry, "grep", pattern="main", case_insensitive=True, limit=2)
    assert result.value["total"] == 8
    assert result.value["truncated"] is True
    assert result.text.endswith(
        "\n\n[showing 2 of 8 matching lines; 1 binary or oversized files skipped]"
    )
    _, view = _cards(registry, "grep", result, pattern="main", case_insensitive=True, limit=2)
    assert isinstance(view, SearchMatchesView)
    assert view.total == 8
    assert view.truncated is True
    assert sum(len(entry.matches) for entry in view.files) == 2


def test_grep_skips_oversized_files_and_cuts_long_lines(registry: ToolRegistry, root: Path) -> None:
    (root / "big.txt").write_text("main\n" * 400)  # 2000 bytes > 1024
    (root / "long.txt").write_text("main" + "x" * 600 + "\n")
    result = _ok(registry, "grep", pattern="^main", path=".", include="*.txt")
    assert result.value["skipped_files"] == 1
    [entry] = result.value["files"]
    assert entry["path"] == "long.txt"
    assert entry["matches"][0]["line"] == "main" + "x" * 496 + "…"


def test_grep_invalid_regex_is_invalid_args(registry: ToolRegistry) -> None:
    result = _call(registry, "grep", pattern="(unclosed")
    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "INVALID_ARGS"
    assert result.error.message == (
        'invalid arguments: "pattern" is not a valid regular expression: '
        "missing ), unterminated subpattern at position 0"
    )
    assert _cards(registry, "grep", result, pattern="(unclosed")[1] is None
    assert _call(registry, "grep", pattern="x", include="../*.py").code == "INVALID_ARGS"
    assert _call(registry, "grep", pattern="x", limit=0).code == "INVALID_ARGS"
    with pytest.raises(ToolArgsError, match="not a valid glob pattern"):
        glob_regex("[z-a]")


def test_grep_never_follows_symlinks(registry: ToolRegistry) -> None:
    result = _ok(registry, "grep", pattern="secret")
    assert result.value["total"] == 0
    assert _call(registry, "grep", pattern="secret", path="leak.py").code == "DENIED"


@pytest.mark.anyio
async def test_a_cancelled_search_ends_aborted(registry: ToolRegistry) -> None:
    source = CancelSource()
    source.cancel()
    result = await registry.execute(
        ToolExecutionInput("c", "grep", {"pattern": "main"}, signal=source.signal)
    )
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    result = await registry.execute(ToolExecutionInput("c", "glob", {"pattern": "**/*.md"}))
    assert result.text == "docs/guide.md"  # blocking tools run in a worker thread


def test_metadata_marks_search_tools_read_only(registry: ToolRegistry) -> None:
    for name in ("glob", "grep"):
        definition = registry.get(name)
        assert definition is not None
        assert definition.metadata == {"read_only": True, "idempotent": True}
        assert definition.blocking is True
