"""File tools confined to a :class:`~dsh_tools_plugins.workspace.Workspace`.

* ``read_file``: numbered lines of a text file (``offset``/``limit``), a ``read`` card.
* ``write_file``: create or overwrite a file (parents created), ``diff`` cards.
* ``edit_file``: exact string replacement, unique unless ``replace_all``, ``diff`` cards.
* ``list_dir``: the entries of a directory with type markers, sorted and capped.

Each constructor takes the workspace and returns a :class:`~dsh_tools.ToolDefinition`.
Text is UTF-8. A file is binary when its first 8 KiB hold a NUL byte; binary files and
files over the size cap are refused with a message saying so, and no write or edit may
leave a file over the cap. Every tool declares an output value (``ToolOutput``) and
copies it into the result ``meta`` so the result presenters, which must be pure, rebuild
their cards from ``meta`` alone; the diffs a change carries are bounded by the same cap.

The tools are ``blocking=True``: an async host runs them in a worker thread (about
100 µs a call), so a slow disk, a large file or a large directory never stalls its event
loop; ``execute_sync`` runs them inline. Names are shown as
:func:`~dsh_tools.safetext.safe_text` writes them: bytes that are not UTF-8 as U+FFFD,
control characters (a newline in a file name) and bidi controls as visible escapes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

import attrs

from dsh_tools.context import ToolRunContext
from dsh_tools.define import define_tool
from dsh_tools.errors import ToolArgsError, ToolError
from dsh_tools.json import JsonValue
from dsh_tools.models import PresentableResult, ToolDefinition, ToolOutput
from dsh_tools.paths import PathArgument
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
)
from dsh_tools.safetext import safe_text

from .workspace import Workspace

__all__ = [
    "BINARY_SNIFF_BYTES",
    "DEFAULT_LIST_LIMIT",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_READ_LIMIT",
    "MAX_LINE_CHARS",
    "EditFileArgs",
    "ListDirArgs",
    "ReadFileArgs",
    "WriteFileArgs",
    "edit_file_tool",
    "fields",
    "is_binary",
    "language_of",
    "list_dir_tool",
    "read_fd",
    "read_file_tool",
    "split_lines",
    "write_file_tool",
]

DEFAULT_MAX_FILE_BYTES = 2 * 1024 * 1024
"""Files larger than this are not read or edited (2 MiB)."""

DEFAULT_READ_LIMIT = 2000
"""Lines ``read_file`` returns when the call gives no ``limit``."""

DEFAULT_LIST_LIMIT = 500
"""Entries ``list_dir`` returns when the call gives no ``limit``."""

MAX_LINE_CHARS = 2000
"""Longer lines are cut there by ``read_file`` and marked with ``…``."""

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes makes a file binary."""

READ_ONLY = {"read_only": True, "idempotent": True}

_LANGUAGES = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "jsx",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".json": "json",
    ".md": "markdown",
    ".rst": "rst",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".ini": "ini",
    ".cfg": "ini",
    ".sh": "bash",
    ".bash": "bash",
    ".zsh": "bash",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".rs": "rust",
    ".go": "go",
    ".java": "java",
    ".kt": "kotlin",
    ".rb": "ruby",
    ".php": "php",
    ".cs": "csharp",
    ".swift": "swift",
    ".sql": "sql",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".scss": "scss",
    ".xml": "xml",
    ".txt": "text",
}


def language_of(path: str) -> str | None:
    """A syntax-highlighting hint from the file extension, or ``None`` when unknown."""
    return _LANGUAGES.get(os.path.splitext(path)[1].lower())


# --------------------------------------------------------------------------- helpers


def read_fd(fd: int, limit: int) -> bytes:
    """Read from ``fd`` until EOF or ``limit`` bytes, whichever comes first."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def is_binary(data: bytes) -> bool:
    """True when the first :data:`BINARY_SNIFF_BYTES` bytes hold a NUL byte."""
    return data.find(b"\x00", 0, BINARY_SNIFF_BYTES) >= 0  # no copy of the first bytes


def split_lines(text: str) -> list[str]:
    """Lines without their terminators (``\\n`` or ``\\r\\n``); no phantom last line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_text(fd: int, display: str, size: int, max_bytes: int, verb: str) -> str:
    if size > max_bytes:
        raise ToolError(
            f'"{display}" is too large to {verb}: {size} bytes, over the limit of {max_bytes} bytes'
        )
    data = read_fd(fd, max_bytes + 1)
    if len(data) > max_bytes:
        raise ToolError(f'"{display}" is too large to {verb}: over the limit of {max_bytes} bytes')
    if is_binary(data):
        raise ToolError(
            f'"{display}" is a binary file (it has NUL bytes in its first 8 KiB); '
            f"cannot {verb} it as text"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if verb != "read":
            raise ToolError(
                f'"{display}" is not valid UTF-8 text (byte {error.start}); cannot {verb} it'
            ) from None
        return data.decode("utf-8", errors="replace")


def _write_all(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ToolArgsError([f'"{name}" must be 1 or more, got {value}'])


def _value_as_meta(args: object, value: JsonValue) -> JsonValue:
    return value


def fields(value: object) -> Mapping[str, Any]:
    """A declared output value as a mapping (the output schema guarantees an object)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__qualname__}")
    return value


def _meta(result: PresentableResult) -> Mapping[str, Any] | None:
    if result.is_error or not isinstance(result.meta, Mapping):
        return None
    return result.meta


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_STRING = {"type": "string"}
_INTEGER = {"type": "integer"}
_BOOLEAN = {"type": "boolean"}

_DIFFS_SCHEMA = {
    "type": "array",
    "items": _object({"old_text": _nullable(_STRING), "new_text": _STRING}),
}


# --------------------------------------------------------------------------- read_file


@attrs.frozen
class ReadFileArgs:
    """Arguments of ``read_file``."""

    path: str = attrs.field(
        metadata={"description": "File to read, relative to the workspace root"}
    )
    offset: int = attrs.field(default=1, metadata={"description": "First line to read (1-based)"})
    limit: int = attrs.field(
        default=DEFAULT_READ_LIMIT, metadata={"description": "Most lines to return"}
    )


_READ_SCHEMA = _object(
    {
        "path": _STRING,
        "offset": _INTEGER,
        "lines": {"type": "array", "items": _object({"number": _INTEGER, "text": _STRING})},
        "total_lines": _INTEGER,
        "truncated": _BOOLEAN,
        "lang": _nullable(_STRING),
    }
)


def _render_read(args: ReadFileArgs, value: Any) -> str:
    value = fields(value)
    lines = value["lines"]
    total = value["total_lines"]
    if not lines:
        if total == 0:
            return f"{value['path']} is empty"
        return f"{value['path']} has {total} lines; offset {value['offset']} is past the end"
    text = "\n".join(f"{line['number']:>6}\t{line['text']}" for line in lines)
    if value["truncated"]:
        last = lines[-1]["number"]
        text += (
            f"\n\n[showing lines {value['offset']}-{last} of {total}; "
            f"continue with offset={last + 1}]"
        )
    return text


def _present_read_call(args: ReadFileArgs) -> GenericCallView:
    line = args.offset if isinstance(args.offset, int) and args.offset > 1 else None
    return GenericCallView(
        f"Read {args.path}",
        kind=ToolCallKind.READ,
        locations=[FileLocation(args.path, line)],
    )


def _present_read_result(args: ReadFileArgs, result: PresentableResult) -> ReadResultView | None:
    meta = _meta(result)
    if meta is None:
        return None
    return ReadResultView(
        meta["path"],
        title=f"Read {meta['path']}",
        offset=meta["offset"],
        lines=[ReadFileLine(line["number"], line["text"]) for line in meta["lines"]],
        total_lines=meta["total_lines"],
        lang=meta["lang"],
    )


def read_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[ReadFileArgs]:
    """The ``read_file`` tool: numbered lines of a UTF-8 text file in ``workspace``."""

    def execute(args: ReadFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        _positive("offset", args.offset)
        _positive("limit", args.limit)
        with workspace.open(args.path) as opened:
            text = _read_text(opened.fd, opened.display, opened.stat.st_size, max_bytes, "read")
        lines = split_lines(text)
        start = args.offset - 1
        chosen = lines[start : start + args.limit]
        return {
            "path": opened.display,
            "offset": args.offset,
            "lines": [
                {"number": args.offset + index, "text": _cut(line)}
                for index, line in enumerate(chosen)
            ],
            "total_lines": len(lines),
            "truncated": start + args.limit < len(lines),
            "lang": language_of(opened.display),
        }

    return define_tool(
        name="read_file",
        description=(
            "Read a UTF-8 text file in the workspace. Returns numbered lines "
            "(`number<TAB>text`); use offset (1-based) and limit to page through long "
            f"files. Binary files and files over {max_bytes} bytes are refused."
        ),
        parameters=ReadFileArgs,
        execute=execute,
        output=ToolOutput(_READ_SCHEMA, _render_read, _value_as_meta),
        present_call=_present_read_call,
        present_result=_present_read_result,
        metadata=READ_ONLY,
        paths=workspace.tool_paths(PathArgument("path", "file")),
        blocking=True,
    )


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"


# --------------------------------------------------------------------------- write_file


@attrs.frozen
class WriteFileArgs:
    """Arguments of ``write_file``."""

    path: str = attrs.field(
        metadata={"description": "File to create or overwrite, relative to the workspace root"}
    )
    content: str = attrs.field(metadata={"description": "The complete new content of the file"})


_CHANGE_SCHEMA = _object(
    {
        "path": _STRING,
        "created": _BOOLEAN,
        "bytes": _INTEGER,
        "replacements": _INTEGER,
        "diffs": _DIFFS_SCHEMA,
        "diffs_omitted": _INTEGER,
    }
)

_CONTEXT = 3
"""Unchanged lines a hunk carries on each side."""


def _bounded_diffs(
    display: str, before: str | None, after: str, budget: int
) -> tuple[list[dict[str, str | None]], int]:
    """The hunks from ``before`` to ``after`` that fit, in order, in ``budget`` UTF-8
    bytes of text, and how many hunks were left out."""
    hunks = file_diffs(display, before, after, context=_CONTEXT)
    kept: list[dict[str, str | None]] = []
    used = 0
    for index, diff in enumerate(hunks):
        used += _utf8_size(diff.old_text or "") + _utf8_size(diff.new_text)
        if used > budget:
            return kept, len(hunks) - index
        kept.append({"old_text": diff.old_text, "new_text": diff.new_text})
    return kept, 0


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _present_change_result(args: object, result: PresentableResult) -> DiffResultView | None:
    meta = _meta(result)
    if meta is None:
        return None
    path = meta["path"]
    title = f"{'Created' if meta['created'] else 'Edited'} {path}"
    omitted = meta.get("diffs_omitted", 0)  # absent in logs written before it existed
    if omitted:
        title += f" ({omitted} {'hunk' if omitted == 1 else 'hunks'} too large to show)"
    return DiffResultView(
        title=title,
        diffs=[FileDiff(path, diff["old_text"], diff["new_text"]) for diff in meta["diffs"]],
    )


def _render_write(args: WriteFileArgs, value: Any) -> str:
    value = fields(value)
    verb = "Created" if value["created"] else "Overwrote"
    return f"{verb} {value['path']} ({value['bytes']} bytes)"


def _present_write_call(args: WriteFileArgs) -> DiffCallView:
    return DiffCallView(
        f"Write {args.path}",
        [FileDiff(args.path, None, args.content)],
        locations=[FileLocation(args.path)],
    )


def write_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[WriteFileArgs]:
    """The ``write_file`` tool: create or overwrite a file, creating parent directories.

    Content over ``max_bytes`` (UTF-8) is refused. The before-image (for the result diff)
    is read when the old file is UTF-8 text of at most ``max_bytes``; otherwise the result
    shows a whole-file diff. The result's diffs hold at most ``max_bytes`` of text.
    """

    def execute(args: WriteFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        data = args.content.encode("utf-8")
        if len(data) > max_bytes:
            raise ToolError(
                f'"{safe_text(args.path)}" would be {len(data)} bytes, over the limit of '
                f"{max_bytes} bytes; not written"
            )
        with workspace.open_for_write(args.path) as opened:
            before: str | None = None
            if not opened.created and opened.stat.st_size <= max_bytes:
                try:
                    before = _read_text(
                        opened.fd, opened.display, opened.stat.st_size, max_bytes, "diff"
                    )
                except ToolError:
                    before = None
            _write_all(opened.fd, data)
        diffs, omitted = _bounded_diffs(opened.display, before, args.content, max_bytes)
        return {
            "path": opened.display,
            "created": opened.created,
            "bytes": len(data),
            "replacements": 0,
            "diffs": diffs,
            "diffs_omitted": omitted,
        }

    return define_tool(
        name="write_file",
        description=(
            "Create a file in the workspace, or overwrite it with the complete new content. "
            "Missing parent directories are created. Prefer edit_file for small changes. "
            f"Content over {max_bytes} bytes is refused."
        ),
        parameters=WriteFileArgs,
        execute=execute,
        output=ToolOutput(_CHANGE_SCHEMA, _render_write, _value_as_meta),
        present_call=_present_write_call,
        present_result=_present_change_result,
        metadata={"read_only": False},
        paths=workspace.tool_paths(PathArgument("path", "file")),
        blocking=True,
    )


# --------------------------------------------------------------------------- edit_file


@attrs.frozen
class EditFileArgs:
    """Arguments of ``edit_file``."""

    path: str = attrs.field(
        metadata={"description": "File to edit, relative to the workspace root"}
    )
    old_string: str = attrs.field(
        metadata={"description": "Exact text to replace (must match exactly once)"}
    )
    new_string: str = attrs.field(metadata={"description": "Replacement text"})
    replace_all: bool = attrs.field(
        default=False, metadata={"description": "Replace every occurrence of old_string"}
    )


def _render_edit(args: EditFileArgs, value: Any) -> str:
    value = fields(value)
    count = value["replacements"]
    noun = "occurrence" if count == 1 else "occurrences"
    return f"Edited {value['path']}: replaced {count} {noun}"


def _present_edit_call(args: EditFileArgs) -> DiffCallView:
    return DiffCallView(
        f"Edit {args.path}",
        [FileDiff(args.path, args.old_string, args.new_string)],
        locations=[FileLocation(args.path)],
    )


def edit_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[EditFileArgs]:
    """The ``edit_file`` tool: replace ``old_string`` with ``new_string`` in one file.

    Refused when ``old_string`` is empty, equals ``new_string``, is not found, is
    found more than once without ``replace_all``, or when the file would grow past
    ``max_bytes``; the file is then left untouched. The result's diffs hold at most
    ``max_bytes`` of text.
    """

    def execute(args: EditFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        if not args.old_string:
            raise ToolArgsError(['"old_string" must not be empty; use write_file to create a file'])
        if args.old_string == args.new_string:
            raise ToolArgsError(['"new_string" must differ from "old_string"'])
        with workspace.open_for_write(args.path, create=False) as opened:
            display = opened.display
            before = _read_text(opened.fd, display, opened.stat.st_size, max_bytes, "edit")
            count = before.count(args.old_string)
            if count == 0:
                raise ToolError(
                    f'"old_string" was not found in "{display}"; it must match the file '
                    "exactly, whitespace and indentation included"
                )
            if count > 1 and not args.replace_all:
                raise ToolError(
                    f'"old_string" matches {count} times in "{display}"; add surrounding '
                    "lines to make it unique, or pass replace_all: true"
                )
            growth = count * (_utf8_size(args.new_string) - _utf8_size(args.old_string))
            size = _utf8_size(before) + growth
            if size > max_bytes:
                raise ToolError(
                    f'"{display}" would be {size} bytes after the edit, over the limit of '
                    f"{max_bytes} bytes; the file is unchanged"
                )
            after = before.replace(args.old_string, args.new_string)
            data = after.encode("utf-8")
            _write_all(opened.fd, data)
        diffs, omitted = _bounded_diffs(display, before, after, max_bytes)
        return {
            "path": display,
            "created": False,
            "bytes": len(data),
            "replacements": count,
            "diffs": diffs,
            "diffs_omitted": omitted,
        }

    return define_tool(
        name="edit_file",
        description=(
            "Replace an exact string in a workspace file. old_string must match exactly "
            "once (include surrounding lines to make it unique) unless replace_all is true. "
            f"An edit that would make the file larger than {max_bytes} bytes is refused."
        ),
        parameters=EditFileArgs,
        execute=execute,
        output=ToolOutput(_CHANGE_SCHEMA, _render_edit, _value_as_meta),
        present_call=_present_edit_call,
        present_result=_present_change_result,
        metadata={"read_only": False},
        paths=workspace.tool_paths(PathArgument("path", "file")),
        blocking=True,
    )


# --------------------------------------------------------------------------- list_dir


@attrs.frozen
class ListDirArgs:
    """Arguments of ``list_dir``."""

    path: str = attrs.field(
        default=".", metadata={"description": "Directory to list, relative to the workspace root"}
    )
    limit: int = attrs.field(
        default=DEFAULT_LIST_LIMIT, metadata={"description": "Most entries to return"}
    )


_MARKERS = {"dir": "/", "symlink": "@", "fifo": "|", "socket": "=", "file": "", "other": "?"}

_LIST_SCHEMA = _object(
    {
        "path": _STRING,
        "entries": {
            "type": "array",
            "items": _object({"name": _STRING, "type": {"type": "string", "enum": list(_MARKERS)}}),
        },
        "total": _INTEGER,
        "truncated": _BOOLEAN,
    }
)


def _entry_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "other"


def _render_list(args: ListDirArgs, value: Any) -> str:
    value = fields(value)
    entries = value["entries"]
    if not entries:
        return f"{value['path']} is empty"
    text = "\n".join(f"{entry['name']}{_MARKERS[entry['type']]}" for entry in entries)
    if value["truncated"]:
        text += f"\n\n[showing {len(entries)} of {value['total']} entries]"
    return text


def _present_list_call(args: ListDirArgs) -> GenericCallView:
    return GenericCallView(
        f"List {args.path}", kind=ToolCallKind.READ, locations=[FileLocation(args.path)]
    )


def _present_list_result(args: ListDirArgs, result: PresentableResult) -> GenericResultView | None:
    meta = _meta(result)
    if meta is None:
        return None
    return GenericResultView(title=f"List {meta['path']} ({meta['total']} entries)")


def list_dir_tool(workspace: Workspace) -> ToolDefinition[ListDirArgs]:
    """The ``list_dir`` tool: a directory's entries, sorted by name, with type markers."""

    def execute(args: ListDirArgs, ctx: ToolRunContext) -> dict[str, Any]:
        _positive("limit", args.limit)
        with workspace.open(args.path, directory=True) as opened:
            try:
                with os.scandir(opened.fd) as scan:
                    found = [
                        (entry.name, _entry_type(entry.stat(follow_symlinks=False).st_mode))
                        for entry in scan
                    ]
            except PermissionError:
                raise ToolError(f'cannot list "{opened.display}": permission denied') from None
        found.sort()
        return {
            "path": opened.display,
            "entries": [
                {"name": safe_text(name), "type": kind} for name, kind in found[: args.limit]
            ],
            "total": len(found),
            "truncated": len(found) > args.limit,
        }

    return define_tool(
        name="list_dir",
        description=(
            "List a workspace directory, sorted by name. Markers: `/` directory, "
            "`@` symbolic link (never followed), `|` FIFO, `=` socket, `?` other. "
            "A name that is not valid UTF-8 is shown with U+FFFD (\ufffd) in place of its "
            "bad bytes, and control characters in a name as escapes such as \\n; such a "
            "file cannot be opened by the name shown."
        ),
        parameters=ListDirArgs,
        execute=execute,
        output=ToolOutput(_LIST_SCHEMA, _render_list, _value_as_meta),
        present_call=_present_list_call,
        present_result=_present_list_result,
        metadata=READ_ONLY,
        paths=workspace.tool_paths(PathArgument("path", "directory")),
        blocking=True,
    )
