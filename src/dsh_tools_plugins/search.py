"""Search tools confined to a :class:`~dsh_tools_plugins.workspace.Workspace`.

* ``glob``: file paths matching a pattern (``**`` spans directories), a ``paths`` card.
* ``grep``: lines matching a Python regular expression, a ``matches`` card.

Both walk the tree through directory descriptors without following symlinks (links are
neither entered nor reported), skip ``.git``, visit entries in name order, cap what they
return and report ``total`` (everything found) and ``truncated``. Both poll the call's
cancellation signal between files, and are ``blocking`` so an async host runs them in a
worker thread.

Pattern syntax (``glob`` patterns and ``grep``'s ``include``): ``*`` and ``?`` stay inside
one path component, ``**`` as a whole component matches any number of directories (none
included), ``[abc]``/``[!abc]`` are character classes, ``{a,b}`` alternatives. ``*``
matches names starting with a dot too.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from typing import Any

import attrs

from dsh_tools.context import ToolRunContext
from dsh_tools.define import define_tool
from dsh_tools.errors import ToolArgsError, ToolError
from dsh_tools.models import PresentableResult, ToolDefinition, ToolOutput
from dsh_tools.presentation import (
    GenericCallView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    ToolCallKind,
)

from .files import DEFAULT_MAX_FILE_BYTES, fields, is_binary, read_fd, split_lines
from .workspace import Opened, Workspace, WorkspaceFile

__all__ = [
    "DEFAULT_GLOB_LIMIT",
    "DEFAULT_GREP_LIMIT",
    "MAX_MATCH_LINE_CHARS",
    "GlobArgs",
    "GrepArgs",
    "glob_regex",
    "glob_tool",
    "grep_tool",
]

DEFAULT_GLOB_LIMIT = 500
"""Paths ``glob`` returns when the call gives no ``limit``."""

DEFAULT_GREP_LIMIT = 200
"""Matching lines ``grep`` returns when the call gives no ``limit``."""

MAX_MATCH_LINE_CHARS = 500
"""Matching lines longer than this are cut and marked with ``…``."""

_READ_ONLY = {"read_only": True, "idempotent": True}
_SPECIAL = frozenset("*?[{")


# --------------------------------------------------------------------------- patterns


def _translate_component(part: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(part):
        char = part[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = part.find("]", index + 1 if part[index : index + 1] in ("!", "^") else index)
            if end < 0:
                out.append(re.escape(char))
                continue
            body = part[index:end]
            index = end + 1
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\")
            out.append(f"[{'^/' if negate else ''}{body}]")
        elif char == "{":
            end = part.find("}", index)
            if end < 0:
                out.append(re.escape(char))
                continue
            options = part[index:end].split(",")
            index = end + 1
            out.append("(?:" + "|".join(_translate_component(o) for o in options) + ")")
        else:
            out.append(re.escape(char))
    return "".join(out)


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob ``pattern`` (see the module docstring) to an anchored regex.

    Raises :class:`~dsh_tools.errors.ToolArgsError` when the result is not a valid
    regular expression (for example a malformed character class).
    """
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_translate_component(part) + ("" if last else "/"))
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as error:
        raise ToolArgsError([f'"{pattern}" is not a valid glob pattern: {error}']) from None


def _literal_base(pattern: str) -> tuple[str, str]:
    """Split ``a/b/*.py`` into the literal directory ``a/b`` and the rest ``*.py``."""
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    literal: list[str] = []
    for part in parts[:-1]:
        if _SPECIAL & set(part) or part == "**":
            break
        literal.append(part)
    return "/".join(literal), "/".join(parts[len(literal) :])


def _check_pattern(name: str, pattern: str) -> None:
    if not pattern:
        raise ToolArgsError([f'"{name}" must not be empty'])
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolArgsError(
            [f'"{name}" must be relative to the search directory, without ".." components']
        )


def _relative(found: WorkspaceFile, base: Opened) -> str:
    if base.display == ".":
        return found.display
    return found.display[len(base.display) + 1 :]


def _walk(workspace: Workspace, base: Opened, ctx: ToolRunContext) -> Iterator[WorkspaceFile]:
    for found in workspace.walk_files(base):
        if ctx.signal.cancelled:
            return
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


_GLOB_SCHEMA = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string"}},
        "total": {"type": "integer"},
        "truncated": {"type": "boolean"},
    },
    "required": ["paths", "total", "truncated"],
    "additionalProperties": False,
}


def _render_glob(args: GlobArgs, value: Any) -> str:
    value = fields(value)
    paths = value["paths"]
    if not paths:
        return f"No files match {args.pattern}"
    text = "\n".join(paths)
    if value["truncated"]:
        text += f"\n\n[showing {len(paths)} of {value['total']} paths]"
    return text


def _present_glob_call(args: GlobArgs) -> GenericCallView:
    where = "" if args.path in (".", "") else f" in {args.path}"
    return GenericCallView(f"Glob {args.pattern}{where}", kind=ToolCallKind.SEARCH)


def _present_glob_result(args: GlobArgs, result: PresentableResult) -> SearchPathsView | None:
    if result.is_error or result.meta is None:
        return None
    meta = fields(result.meta)
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
        if args.limit < 1:
            raise ToolArgsError([f'"limit" must be 1 or more, got {args.limit}'])
        literal, rest = _literal_base(args.pattern)
        matcher = glob_regex(rest)
        start = f"{args.path}/{literal}" if literal else args.path
        try:
            base = workspace.open(start, directory=True)
        except ToolError as error:
            if error.code == "DENIED" or not literal:
                raise
            return {"paths": [], "total": 0, "truncated": False}  # the literal part is absent
        with base:
            found = sorted(
                found.display
                for found in _walk(workspace, base, ctx)
                if matcher.match(_relative(found, base))
            )
        return {
            "paths": found[: args.limit],
            "total": len(found),
            "truncated": len(found) > args.limit,
        }

    return define_tool(
        name="glob",
        description=(
            "Find workspace files by path pattern. `*` and `?` match within one path "
            "component, `**` spans directories, `{a,b}` gives alternatives. Paths are "
            "relative to the workspace root, sorted; symlinks and .git are skipped."
        ),
        parameters=GlobArgs,
        execute=execute,
        output=ToolOutput(_GLOB_SCHEMA, _render_glob, lambda args, value: value),
        present_call=_present_glob_call,
        present_result=_present_glob_result,
        blocking=True,
        metadata=_READ_ONLY,
    )


# --------------------------------------------------------------------------- grep


@attrs.frozen
class GrepArgs:
    """Arguments of ``grep``."""

    pattern: str = attrs.field(metadata={"description": "Python regular expression to search for"})
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


_GREP_SCHEMA = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "matches": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "line_number": {"type": "integer"},
                                "line": {"type": "string"},
                            },
                            "required": ["line_number", "line"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["path", "matches"],
                "additionalProperties": False,
            },
        },
        "total": {"type": "integer"},
        "truncated": {"type": "boolean"},
        "skipped_files": {"type": "integer"},
    },
    "required": ["files", "total", "truncated", "skipped_files"],
    "additionalProperties": False,
}


def _render_grep(args: GrepArgs, value: Any) -> str:
    value = fields(value)
    files = value["files"]
    lines = [
        f"{entry['path']}:{match['line_number']}:{match['line']}"
        for entry in files
        for match in entry["matches"]
    ]
    text = "\n".join(lines) if lines else f"No matches for {args.pattern}"
    notes = []
    if value["truncated"]:
        notes.append(f"showing {len(lines)} of {value['total']} matching lines")
    if value["skipped_files"]:
        notes.append(f"{value['skipped_files']} binary or oversized files skipped")
    if notes:
        text += "\n\n[" + "; ".join(notes) + "]"
    return text


def _present_grep_call(args: GrepArgs) -> GenericCallView:
    where = "" if args.path in (".", "") else f" in {args.path}"
    return GenericCallView(f"Grep {args.pattern}{where}", kind=ToolCallKind.SEARCH)


def _present_grep_result(args: GrepArgs, result: PresentableResult) -> SearchMatchesView | None:
    if result.is_error or result.meta is None:
        return None
    meta = fields(result.meta)
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


def _include_matcher(include: str | None) -> Any:
    if include is None:
        return None
    _check_pattern("include", include)
    regex = glob_regex(include)
    by_path = "/" in include.strip("/")

    def matches(display: str) -> bool:
        return regex.match(display if by_path else display.rsplit("/", 1)[-1]) is not None

    return matches


def grep_tool(
    workspace: Workspace, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[GrepArgs]:
    """The ``grep`` tool: lines matching a regex in workspace text files.

    Binary files and files over ``max_file_bytes`` are skipped (and counted).
    """

    def execute(args: GrepArgs, ctx: ToolRunContext) -> dict[str, Any]:
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
        except re.error as error:
            raise ToolArgsError([f'"pattern" is not a valid regular expression: {error}']) from None
        if args.limit < 1:
            raise ToolArgsError([f'"limit" must be 1 or more, got {args.limit}'])
        include = _include_matcher(args.include)
        files: dict[str, list[dict[str, Any]]] = {}
        total = 0
        skipped = 0

        def search(display: str, fd: int, size: int) -> None:
            nonlocal total, skipped
            data = read_fd(fd, max_file_bytes + 1) if size <= max_file_bytes else b""
            if size > max_file_bytes or len(data) > max_file_bytes or is_binary(data):
                skipped += 1
                return
            text = data.decode("utf-8", errors="replace")
            for number, line in enumerate(split_lines(text), start=1):
                if regex.search(line) is None:
                    continue
                total += 1
                if total <= args.limit:
                    cut = (
                        line
                        if len(line) <= MAX_MATCH_LINE_CHARS
                        else (line[:MAX_MATCH_LINE_CHARS] + "…")
                    )
                    files.setdefault(display, []).append({"line_number": number, "line": cut})

        if not workspace.resolve(args.path).is_dir():
            with workspace.open(args.path) as single:
                search(single.display, single.fd, single.stat.st_size)
        else:
            with workspace.open(args.path, directory=True) as base:
                for found in _walk(workspace, base, ctx):
                    if include is not None and not include(found.display):
                        continue
                    try:
                        fd = workspace.open_walked(found)
                    except (OSError, ToolError):
                        skipped += 1
                        continue
                    try:
                        search(found.display, fd, found.size)
                    finally:
                        os.close(fd)
        return {
            "files": [{"path": path, "matches": matches} for path, matches in files.items()],
            "total": total,
            "truncated": total > args.limit,
            "skipped_files": skipped,
        }

    return define_tool(
        name="grep",
        description=(
            "Search workspace text files for lines matching a Python regular expression. "
            "Returns `path:line:text` per matching line. Filter files with include "
            "(e.g. `*.py`); binary files, symlinks and .git are skipped."
        ),
        parameters=GrepArgs,
        execute=execute,
        output=ToolOutput(_GREP_SCHEMA, _render_grep, lambda args, value: value),
        present_call=_present_grep_call,
        present_result=_present_grep_result,
        blocking=True,
        metadata=_READ_ONLY,
    )
