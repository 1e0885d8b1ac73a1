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
The schemas, texts and cards are :mod:`dsh_tools_plugins._file_output`'s; this module
does the work.

The tools are ``blocking=True``: an async host runs them in a worker thread (about
100 µs a call), so a slow disk, a large file or a large directory never stalls its event
loop; ``execute_sync`` runs them inline. Names are shown as
:func:`~dsh_tools._safetext.safe_text` writes them: bytes that are not UTF-8 as U+FFFD,
control characters (a newline in a file name) and bidi controls as visible escapes.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from dsh_tools import DshToolsError
from dsh_tools._context import ToolRunContext
from dsh_tools._models import ToolDefinition
from dsh_tools._paths import PathArgument
from dsh_tools._safetext import safe_text
from dsh_tools.errors import ToolArgsError, ToolError
from dsh_tools.presentation import DiffCallView

from ._file_bytes import (
    BINARY_SNIFF_BYTES,
    before_image,
    is_binary,
    read_fd,
    read_text,
    split_lines,
    write_all,
)
from ._file_output import (
    EDIT_OUTPUT,
    LIST_OUTPUT,
    READ_OUTPUT,
    WRITE_OUTPUT,
    change_value,
    fields,
    listing_counts,
    present_change_call,
    present_change_result,
    present_edit_call,
    present_list_call,
    present_list_result,
    present_read_call,
    present_read_result,
    utf8_size,
)
from ._languages import language_of
from ._tool_shapes import check_positive, workspace_tool
from .workspace import Opened, Workspace

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


def read_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[ReadFileArgs]:
    """The ``read_file`` tool: numbered lines of a UTF-8 text file in ``workspace``."""

    def execute(args: ReadFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        check_positive("offset", args.offset)
        check_positive("limit", args.limit)
        with workspace.open(args.path) as opened:
            text = read_text(opened.fd, opened.display, opened.stat.st_size, max_bytes, "read")
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

    return workspace_tool(
        name="read_file",
        description=(
            "Read a UTF-8 text file in the workspace. Returns numbered lines "
            "(`number<TAB>text`); use offset (1-based) and limit to page through long "
            f"files. Binary files and files over {max_bytes} bytes are refused."
        ),
        parameters=ReadFileArgs,
        execute=execute,
        output=READ_OUTPUT,
        present_call=present_read_call,
        present_result=present_read_result,
        title="Read file",
        paths=workspace.tool_paths(PathArgument("path", "file")),
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


def write_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[WriteFileArgs]:
    """The ``write_file`` tool: create or overwrite a file, creating parent directories.

    Content over ``max_bytes`` (UTF-8) is refused. The before-image (for the result diff)
    is read when the old file is UTF-8 text of at most ``max_bytes``; otherwise the result
    shows a whole-file diff. The result's diffs hold at most ``max_bytes`` of text.
    """

    def fits(args: WriteFileArgs | None) -> bytes:
        """The content as written; refused over ``max_bytes`` (the preflight too)."""
        data = b"" if args is None else args.content.encode("utf-8")
        if args is not None and len(data) > max_bytes:
            raise ToolError(
                f'"{safe_text(args.path)}" would be {len(data)} bytes, over the limit of '
                f"{max_bytes} bytes; not written"
            )
        return data

    def execute(args: WriteFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        data = fits(args)
        with workspace.open_for_write(args.path) as opened:
            before = before_image(opened, max_bytes)
            write_all(opened.fd, data)
        return change_value(
            opened.display,
            created=opened.created,
            size=len(data),
            replacements=0,
            before=before,
            after=args.content,
            budget=max_bytes,
        )

    return workspace_tool(
        name="write_file",
        description=(
            "Create a file in the workspace, or overwrite it with the complete new content. "
            "Missing parent directories are created. Prefer edit_file for small changes. "
            f"Content over {max_bytes} bytes is refused."
        ),
        parameters=WriteFileArgs,
        execute=execute,
        output=WRITE_OUTPUT,
        present_call=functools.partial(_write_card, workspace, max_bytes),
        present_result=present_change_result,
        title="Write file",
        paths=workspace.tool_paths(PathArgument("path", "file")),
        read_only=False,
        preflight=fits,
    )


def _write_card(workspace: Workspace, max_bytes: int, args: WriteFileArgs) -> DiffCallView:
    """The write as it would change the file as it is now (a new file when there is
    none, or none that can be shown as text)."""
    before = None
    try:
        with workspace.open(args.path) as opened:
            before = before_image(opened, max_bytes)
    except (DshToolsError, OSError):  # no file to show: the write creates one
        pass
    title = f"Write {args.path}"
    return present_change_call(title, args.path, before, args.content, budget=max_bytes)


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


def _check_edit(args: EditFileArgs) -> None:
    """Refuse an edit that could change nothing, before the file is opened."""
    if not args.old_string:
        raise ToolArgsError(['"old_string" must not be empty; use write_file to create a file'])
    if args.old_string == args.new_string:
        raise ToolArgsError(['"new_string" must differ from "old_string"'])


def _occurrences(args: EditFileArgs, before: str, display: str, max_bytes: int) -> int:
    """How many times ``old_string`` is replaced in ``before``; refused when it is not
    found, found more than once without ``replace_all``, or the result is too large."""
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
    growth = count * (utf8_size(args.new_string) - utf8_size(args.old_string))
    size = utf8_size(before) + growth
    if size > max_bytes:
        raise ToolError(
            f'"{display}" would be {size} bytes after the edit, over the limit of '
            f"{max_bytes} bytes; the file is unchanged"
        )
    return count


def _dry_edit(workspace: Workspace, args: EditFileArgs, read: _EditRead) -> tuple[str, int]:
    """``read`` on the file opened for reading only (the edit's preflight, and its card)."""
    with workspace.open(args.path) as opened:
        return read(args, opened)


_EditRead = Callable[[EditFileArgs, Opened], tuple[str, int]]
"""How ``edit_file`` reads a file: its text and how many times the edit replaces in it."""


def _edit_card(
    workspace: Workspace, read: _EditRead, max_bytes: int, args: EditFileArgs
) -> DiffCallView:
    """The edit as it would change the file as it is now, at its first change; the
    strings it replaces when it cannot be applied (its preflight says why)."""
    try:
        before, _ = _dry_edit(workspace, args, read)
    except (DshToolsError, OSError):
        return present_edit_call(args)
    after = before.replace(args.old_string, args.new_string)
    line = before.count("\n", 0, before.index(args.old_string)) + 1
    title = f"Edit {args.path}"
    return present_change_call(title, args.path, before, after, budget=max_bytes, line=line)


def edit_file_tool(
    workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ToolDefinition[EditFileArgs]:
    """The ``edit_file`` tool: replace ``old_string`` with ``new_string`` in one file.

    Refused when ``old_string`` is empty, equals ``new_string``, is not found, is
    found more than once without ``replace_all``, or when the file would grow past
    ``max_bytes``; the file is then left untouched. The result's diffs hold at most
    ``max_bytes`` of text.
    """

    def read(args: EditFileArgs, opened: Opened) -> tuple[str, int]:
        """The file's text and how many times the edit replaces in it; refused as the
        tool's description says."""
        _check_edit(args)
        before = read_text(opened.fd, opened.display, opened.stat.st_size, max_bytes, "edit")
        return before, _occurrences(args, before, opened.display, max_bytes)

    async def preflight(args: EditFileArgs | None) -> None:
        """The edit's checks on the file as it is now, read (in a worker thread), not
        written: an edit that would be refused is refused before anyone is asked."""
        if args is not None:
            await anyio.to_thread.run_sync(lambda: _dry_edit(workspace, args, read))

    def execute(args: EditFileArgs, ctx: ToolRunContext) -> dict[str, Any]:
        with workspace.open_for_write(args.path, create=False) as opened:
            display = opened.display
            before, count = read(args, opened)
            after = before.replace(args.old_string, args.new_string)
            data = after.encode("utf-8")
            write_all(opened.fd, data)
        return change_value(
            display,
            created=False,
            size=len(data),
            replacements=count,
            before=before,
            after=after,
            budget=max_bytes,
        )

    return workspace_tool(
        name="edit_file",
        description=(
            "Replace an exact string in a workspace file. old_string must match exactly "
            "once (include surrounding lines to make it unique) unless replace_all is true. "
            f"An edit that would make the file larger than {max_bytes} bytes is refused."
        ),
        parameters=EditFileArgs,
        execute=execute,
        output=EDIT_OUTPUT,
        present_call=functools.partial(_edit_card, workspace, read, max_bytes),
        present_result=present_change_result,
        title="Edit file",
        paths=workspace.tool_paths(PathArgument("path", "file")),
        read_only=False,
        preflight=preflight,
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


def list_dir_tool(workspace: Workspace) -> ToolDefinition[ListDirArgs]:
    """The ``list_dir`` tool: a directory's entries, sorted by name, with type markers."""

    def execute(args: ListDirArgs, ctx: ToolRunContext) -> dict[str, Any]:
        check_positive("limit", args.limit)
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
            **listing_counts(found, args.limit),
        }

    return workspace_tool(
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
        output=LIST_OUTPUT,
        present_call=present_list_call,
        present_result=present_list_result,
        title="List directory",
        paths=workspace.tool_paths(PathArgument("path", "directory")),
    )
