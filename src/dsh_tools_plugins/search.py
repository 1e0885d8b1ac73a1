"""Search tools confined to a :class:`~dsh_tools_plugins.workspace.Workspace`.

* ``glob``: file paths matching a pattern (``**`` spans directories), a ``paths`` card.
* ``grep``: lines matching a regular expression (RE2 syntax), a ``matches`` card.

Both walk the tree through directory descriptors without following symlinks (links are
neither entered nor reported), skip ``.git`` and, unless ``include_ignored`` is set, what
``.gitignore`` and ``.ignore`` files exclude (see :mod:`dsh_tools_plugins._search.ignore`).
They visit entries in name order, cap what they return and report ``total`` (everything
found) and ``truncated``. Both are ``blocking`` (an async host runs them in a worker
thread) and stop when the call's signal fires: the walk checks it between files and
directories, grep also between chunks of a file and while ripgrep runs.

Model-supplied patterns never reach a backtracking engine: globs translate to RE2, grep
patterns are RE2 (:mod:`dsh_tools_plugins._search.regex`), so a match costs time linear in the
text. Given ripgrep, grep asks it which files can match (:mod:`dsh_tools_plugins._search.ripgrep`);
what it returns is the same with or without ripgrep.

Pattern syntax (``glob`` patterns and ``grep``'s ``include``): ``*`` and ``?`` stay inside
one path component, ``**`` as a whole component matches any number of directories (none
included), ``[abc]``/``[!abc]`` are character classes, ``{a,b}`` alternatives. ``*``
matches names starting with a dot too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from dsh_tools._context import ToolRunContext
from dsh_tools._models import PresentableResult, ToolDefinition
from dsh_tools._paths import PathArgument
from dsh_tools._safetext import safe_text
from dsh_tools.errors import ToolArgsError, ToolError
from dsh_tools.presentation import (
    GenericCallView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    ToolCallKind,
)

from ._file_output import (
    listing_counts,
    listing_text,
    meta_output,
    object_schema,
    result_meta,
    shown_of,
)
from ._host_programs import inside, system_program
from ._reach import split_glob
from ._search.glob_patterns import GlobMatcher, compile_glob
from ._search.grep import MAX_MATCH_LINE_CHARS, Findings, search_tree
from ._search.ignore import ignore_filter
from ._search.regex import compile_line_pattern
from ._tool_shapes import check_positive, workspace_tool
from .files import DEFAULT_MAX_FILE_BYTES, fields
from .workspace import Opened, WalkFilter, Workspace, WorkspaceFile

__all__ = [
    "DEFAULT_GLOB_LIMIT",
    "DEFAULT_GREP_LIMIT",
    "MAX_MATCH_LINE_CHARS",
    "GlobArgs",
    "GlobMatcher",
    "GrepArgs",
    "compile_glob",
    "glob_tool",
    "grep_tool",
]

DEFAULT_GLOB_LIMIT = 500
"""Paths ``glob`` returns when the call gives no ``limit``."""

DEFAULT_GREP_LIMIT = 200
"""Matching lines ``grep`` returns when the call gives no ``limit``."""

_INCLUDE_IGNORED = (
    "Also search files that .gitignore or .ignore files exclude (.git is always skipped)"
)


def _check_pattern(name: str, pattern: str) -> None:
    if not pattern:
        raise ToolArgsError([f'"{name}" must not be empty'])
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolArgsError(
            [f'"{name}" must be relative to the search directory, without ".." components']
        )


def _prefix(base: Opened) -> str:
    """What the display paths of files under ``base`` start with."""
    return "" if base.display == "." else base.display + "/"


def _walk_filter(workspace: Workspace, base: Opened, include_ignored: bool) -> WalkFilter | None:
    return None if include_ignored else ignore_filter(workspace, base)


def _stopper(ctx: ToolRunContext) -> Callable[[], bool]:
    signal = ctx.signal
    return lambda: signal.cancelled


REPORT_EVERY_FILES = 500
"""On a large tree, ``glob`` and ``grep`` report progress every this many files."""


class _Scanned:
    """Counts the files a search looked at, reporting ``N files scanned`` every
    :data:`REPORT_EVERY_FILES` (the total is unknown until the walk ends)."""

    def __init__(self, ctx: ToolRunContext) -> None:
        self.ctx = ctx
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        if not self.count % REPORT_EVERY_FILES:
            self.ctx.report_progress(self.count, None, f"{self.count} files scanned")

    def files(self, walk: Iterator[WorkspaceFile]) -> Iterator[WorkspaceFile]:
        for found in walk:
            self()
            yield found


# --------------------------------------------------------------------------- glob


@attrs.frozen
class GlobArgs:
    """Arguments of ``glob``."""

    pattern: str = attrs.field(
        metadata={
            "description": "Glob pattern relative to path, e.g. `**/*.py` or `src/*.{ts,tsx}`"
        }
    )
    path: str = attrs.field(
        default=".", metadata={"description": "Directory to search in, relative to the root"}
    )
    limit: int = attrs.field(
        default=DEFAULT_GLOB_LIMIT, metadata={"description": "Most paths to return"}
    )
    include_ignored: bool = attrs.field(default=False, metadata={"description": _INCLUDE_IGNORED})


_GLOB_SCHEMA = object_schema(
    {
        "paths": {"type": "array", "items": {"type": "string"}},
        "total": {"type": "integer"},
        "truncated": {"type": "boolean"},
    }
)


def _render_glob(args: GlobArgs, value: Any) -> str:
    value = fields(value)
    paths = value["paths"]
    notes = shown_of(value, len(paths), "paths")
    return listing_text(paths, f"No files match {args.pattern}", notes)


def _search_call(verb: str, pattern: str, path: str) -> GenericCallView:
    """How a search call reads before it runs: what it looks for, and where unless that
    is the whole workspace."""
    where = "" if path in (".", "") else f" in {path}"
    return GenericCallView(f"{verb} {pattern}{where}", kind=ToolCallKind.SEARCH)


def _present_glob_call(args: GlobArgs) -> GenericCallView:
    return _search_call("Glob", args.pattern, args.path)


def _present_glob_result(args: GlobArgs, result: PresentableResult) -> SearchPathsView | None:
    meta = result_meta(result)
    if meta is None:
        return None
    return SearchPathsView(
        meta["paths"],
        title=f"{meta['total']} files match {args.pattern}",
        truncated=meta["truncated"],
        total=meta["total"],
    )


def glob_tool(workspace: Workspace) -> ToolDefinition[GlobArgs]:
    """The ``glob`` tool: workspace files whose path matches a pattern, sorted."""

    def execute(args: GlobArgs, ctx: ToolRunContext) -> dict[str, Any]:
        _check_pattern("pattern", args.pattern)
        check_positive("limit", args.limit)
        literal, rest = split_glob(args.pattern)
        matcher = compile_glob(rest)
        start = f"{args.path}/{literal}" if literal else args.path
        try:
            base = workspace.open(start, directory=True)
        except ToolError as error:
            if error.code == "DENIED" or not literal:
                raise
            return {"paths": [], "total": 0, "truncated": False}  # the literal part is absent
        stop = _stopper(ctx)
        with base:
            skip = len(_prefix(base))
            walk = workspace.walk_files(
                base, entry_filter=_walk_filter(workspace, base, args.include_ignored), stop=stop
            )
            found = sorted(
                found.display
                for found in _Scanned(ctx).files(walk)
                if not stop() and matcher.matches(found.display[skip:])
            )
        return {
            "paths": [safe_text(path) for path in found[: args.limit]],
            **listing_counts(found, args.limit),
        }

    return workspace_tool(
        name="glob",
        description=(
            "Find workspace files by path pattern. `*` and `?` match within one path "
            "component, `**` spans directories, `{a,b}` gives alternatives. Paths are "
            "relative to the workspace root, sorted; symlinks, .git and files excluded by "
            ".gitignore or .ignore are skipped (include_ignored=true keeps the latter)."
        ),
        parameters=GlobArgs,
        execute=execute,
        output=meta_output(_GLOB_SCHEMA, _render_glob),
        present_call=_present_glob_call,
        present_result=_present_glob_result,
        title="Find files by name",
        paths=workspace.tool_paths(
            PathArgument("path", "tree"),
            PathArgument("pattern", "pattern", within="path", relative_to="path"),
        ),
    )


# --------------------------------------------------------------------------- grep

_PATTERN_HELP = (
    "Regular expression in RE2 syntax (Python `re` without backreferences or lookaround; "
    "`\\d`, `\\w`, `\\s` and `\\b` are ASCII-only). A match never spans lines; `^` and `$` "
    "match at line starts and ends"
)


@attrs.frozen
class GrepArgs:
    """Arguments of ``grep``."""

    pattern: str = attrs.field(metadata={"description": _PATTERN_HELP})
    path: str = attrs.field(
        default=".",
        metadata={"description": "File or directory to search, relative to the workspace root"},
    )
    include: str | None = attrs.field(
        default=None,
        metadata={
            "description": "Only search files matching this glob, e.g. `*.py` or `*.{ts,tsx}` "
            "(matched against the file name, or the path when it contains `/`)"
        },
    )
    case_insensitive: bool = attrs.field(
        default=False, metadata={"description": "Match regardless of case"}
    )
    limit: int = attrs.field(
        default=DEFAULT_GREP_LIMIT, metadata={"description": "Most matching lines to return"}
    )
    include_ignored: bool = attrs.field(default=False, metadata={"description": _INCLUDE_IGNORED})


_MATCH_SCHEMA = object_schema({"line_number": {"type": "integer"}, "line": {"type": "string"}})
_GREP_SCHEMA = object_schema(
    {
        "files": {
            "type": "array",
            "items": object_schema(
                {"path": {"type": "string"}, "matches": {"type": "array", "items": _MATCH_SCHEMA}}
            ),
        },
        "total": {"type": "integer"},
        "truncated": {"type": "boolean"},
        "skipped_files": {"type": "integer"},
    }
)


def _render_grep(args: GrepArgs, value: Any) -> str:
    value = fields(value)
    files = value["files"]
    lines = [
        f"{entry['path']}:{match['line_number']}:{match['line']}"
        for entry in files
        for match in entry["matches"]
    ]
    notes = shown_of(value, len(lines), "matching lines")
    if value["skipped_files"]:
        notes.append(f"{value['skipped_files']} binary or oversized files skipped")
    return listing_text(lines, f"No matches for {args.pattern}", notes)


def _present_grep_call(args: GrepArgs) -> GenericCallView:
    return _search_call("Grep", args.pattern, args.path)


def _present_grep_result(args: GrepArgs, result: PresentableResult) -> SearchMatchesView | None:
    meta = result_meta(result)
    if meta is None:
        return None
    return SearchMatchesView(
        [
            SearchFileMatches(
                entry["path"],
                [SearchMatch(match["line_number"], match["line"]) for match in entry["matches"]],
            )
            for entry in meta["files"]
        ],
        title=f"{meta['total']} matches for {args.pattern}",
        truncated=meta["truncated"],
        total=meta["total"],
    )


def _include_matcher(include: str | None) -> Callable[[str], bool] | None:
    if include is None:
        return None
    _check_pattern("include", include)
    matcher = compile_glob(include, "include")
    by_path = "/" in include.strip("/")

    def matches(display: str) -> bool:
        return matcher.matches(display if by_path else display.rsplit("/", 1)[-1])

    return matches


def _ripgrep_executable(workspace: Workspace, ripgrep: str | bool) -> str | None:
    """The ``rg`` grep may run: found in a system directory, or the host's absolute path;
    never one in the workspace, where a command could have put it."""
    if ripgrep is False:
        return None
    if ripgrep is True:
        found = system_program("rg")
        if found is None or inside(found, (str(workspace.root),)) is not None:
            return None
        return found
    if not isinstance(ripgrep, str) or not os.path.isabs(ripgrep):
        raise ValueError(f"ripgrep must be True, False or an absolute path, got {ripgrep!r}")
    if inside(ripgrep, (str(workspace.root),)) is not None:
        raise ValueError(
            f"ripgrep {ripgrep} lies in the workspace {workspace.root}, where commands can "
            "replace it"
        )
    return ripgrep


def grep_tool(
    workspace: Workspace,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ripgrep: str | bool = False,
) -> ToolDefinition[GrepArgs]:
    """The ``grep`` tool: lines matching an RE2 regex in workspace text files.

    Binary files (a NUL byte in the first 8 KiB) and files over ``max_file_bytes`` are
    skipped (and counted). ``ripgrep``: ``True`` has ripgrep pre-select the files to
    read, with an ``rg`` found once in a system directory (``/usr/bin``, ``/bin``,
    ``/usr/local/bin``..., never from ``PATH``; none: no pre-selection); an absolute
    path names the executable; ``False`` (the default) never runs it. Either way it is
    never one inside the workspace. The results are the same either way. Off by default
    because on a 2-core machine the pre-selection measured slower than the built-in
    search (benchmarks/, case 8).
    """
    executable = _ripgrep_executable(workspace, ripgrep)

    def execute(args: GrepArgs, ctx: ToolRunContext) -> dict[str, Any]:
        regex = compile_line_pattern(args.pattern, case_insensitive=args.case_insensitive)
        check_positive("limit", args.limit)
        include = _include_matcher(args.include)
        findings = Findings(regex, args.limit, max_file_bytes, _stopper(ctx), _Scanned(ctx))
        if not workspace.resolve(args.path).is_dir():
            with workspace.open(args.path) as single:
                findings.search(single.display, single.fd, single.stat.st_size)
            return findings.value()
        with workspace.open(args.path, directory=True) as base:
            entry_filter = _walk_filter(workspace, base, args.include_ignored)
            search_tree(workspace, base, findings, entry_filter, include, ripgrep=executable)
        return findings.value()

    return workspace_tool(
        name="grep",
        description=(
            "Search workspace text files for lines matching a regular expression (RE2 "
            "syntax: no backreferences or lookaround; `\\d`, `\\w`, `\\s`, `\\b` are "
            "ASCII-only). Returns `path:line:text` per matching line. Filter files with "
            "include (e.g. `*.py`); binary files, symlinks, .git and files excluded by "
            ".gitignore or .ignore are skipped (include_ignored=true keeps the latter)."
        ),
        parameters=GrepArgs,
        execute=execute,
        output=meta_output(_GREP_SCHEMA, _render_grep),
        present_call=_present_grep_call,
        present_result=_present_grep_result,
        title="Search file contents",
        # include is matched against the path from the workspace root, whatever path is
        paths=workspace.tool_paths(
            PathArgument("path", "tree"), PathArgument("include", "pattern", within="path")
        ),
    )
