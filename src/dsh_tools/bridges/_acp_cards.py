"""Cards as ACP updates: the mapping of :mod:`dsh_tools.presentation` cards to ACP JSON.

Plain ``dict`` data only; no ACP package is needed. How each card maps is described in
:mod:`dsh_tools.bridges.acp`, the public import path.

What an editor shows as text passes :func:`~dsh_tools._safetext.safe_text`: titles on one
line, text content and terminal output with their lines kept. Data an editor acts on
(``rawInput``, paths in ``locations`` and diffs, diff text) is passed as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from .._content import content_text
from .._json import thaw
from .._models import PresentableResult, ToolExecutionResult
from .._safetext import safe_text
from ..presentation._cards import (
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
    command_reach,
)
from ..presentation._presenting import presentable_result
from ._acp_paths import absolute_path, relative_title

Json = dict[str, Any]
"""A plain, mutable JSON object as the bridge returns it."""


def call_view_to_acp(
    call_id: str,
    view: ToolCallView,
    *,
    raw_input: object = None,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """A pending card as an ACP ``tool_call`` session update (``status: "pending"``).

    ``raw_input`` (usually the call's arguments) becomes ``rawInput`` unless a generic card
    names its own salient input. ``cwd`` is the session's working directory;
    ``terminal_output`` says the client supports the ``_meta`` terminal convention.
    """
    update: Json = {"sessionUpdate": "tool_call", "toolCallId": call_id}
    raw: object = raw_input
    if isinstance(view, GenericCallView):
        locations = view.locations
        update["title"] = _title(relative_title(view.title, cwd) if locations else view.title)
        update["kind"] = view.kind.value if view.kind is not None else "other"
        if view.content is not None:
            update["content"] = acp_content(view.content)
        if view.raw_input is not None:
            raw = thaw(view.raw_input)
    elif isinstance(view, TerminalCallView):
        update["title"] = _title(view.title)
        update["kind"] = "execute"
        reach = command_reach(view)
        notes = (view.description, f"[{reach}]" if reach else None)
        content = [text_item(note) for note in notes if note]
        if terminal_output:
            content.append(_terminal_item(call_id))
            info: Json = {"terminal_id": call_id}
            where = absolute_path(view.cwd, cwd) if view.cwd is not None else cwd
            if where is not None:
                info["cwd"] = where
            update["_meta"] = {"terminal_info": info}
        if content:
            update["content"] = content
        locations = ()
    else:
        update["title"] = _title(relative_title(view.title, cwd))
        update["kind"] = "edit"
        update["content"] = [diff_item(diff, cwd) for diff in view.diffs]
        locations = view.locations or tuple(FileLocation(path) for path in _paths(view.diffs))
    update["status"] = "pending"
    if locations:
        update["locations"] = [location_json(location, cwd) for location in locations]
    if raw is not None:
        update["rawInput"] = plain_json(raw)
    return update


_Parts: TypeAlias = "tuple[str | None, list[Json], Json | None]"
"""A completed card's ``title`` (``None``: keep the pending one), ``content`` and ``_meta``."""


def result_view_to_acp(
    call_id: str,
    view: ToolResultView | None,
    result: ToolExecutionResult | PresentableResult,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """A completed card as an ACP ``tool_call_update``: ``status`` ``completed`` or
    ``failed`` (from the result's error flag), and ``content`` that replaces the pending
    content. ``view=None`` keeps the pending title and shows the raw result content."""
    projection = presentable_result(result)
    update: Json = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed" if projection.is_error else "completed",
    }
    if isinstance(view, ReadResultView):
        update["locations"] = [location_json(FileLocation(view.path, view.offset), cwd)]
    title, content, meta = _result_parts(call_id, view, projection.content, cwd, terminal_output)
    if title is not None:
        update["title"] = safe_text(title)
    update["content"] = content
    if meta is not None:
        update["_meta"] = meta
    return update


def _result_parts(
    call_id: str,
    view: ToolResultView | None,
    raw: Sequence[Any],
    cwd: str | None,
    terminal_output: bool,
) -> _Parts:
    """What each kind of completed card shows; ``raw`` is the result's own content."""
    if view is None:
        return None, acp_content(raw), None
    if isinstance(view, GenericResultView):
        return view.title, acp_content(view.content if view.content is not None else raw), None
    if isinstance(view, TerminalResultView):
        return _terminal_result(call_id, view, raw, terminal_output)
    if isinstance(view, DiffResultView):
        diffs = [diff_item(diff, cwd) for diff in view.diffs]
        return relative_title(view.title, cwd), diffs or acp_content(raw), None
    if isinstance(view, ReadResultView):
        content = (
            [text_item(view.content)]
            if view.content is not None
            else _raw_or(raw, lambda: _read_text(view))
        )
        return relative_title(view.title, cwd), content, None
    return view.title, _raw_or(raw, lambda: _summary(view)), None


def _terminal_result(
    call_id: str, view: TerminalResultView, raw: Sequence[Any], terminal_output: bool
) -> _Parts:
    """A finished command: the ``_meta`` terminal convention, or a fenced console block."""
    output = view.output if view.output is not None else content_text(raw)
    meta: Json | None = None
    if terminal_output:
        content = [_terminal_item(call_id)]
        meta = {
            "terminal_output": {"terminal_id": call_id, "data": safe_text(output, multiline=True)},
            "terminal_exit": {
                "terminal_id": call_id,
                "exit_code": view.exit_code,
                "signal": view.signal,
            },
        }
    else:
        content = [text_item(console_text(output, view.exit_code, view.signal))]
    reach = command_reach(view)
    if reach is not None:
        content.append(text_item(f"[{reach}]"))
    return view.title, content, meta


def acp_content(blocks: Iterable[Any]) -> list[Json]:
    """Content blocks as ACP tool call ``content`` items (``{"type": "content", ...}``).

    Text, image, audio, resource link and embedded resource blocks share MCP's shape in
    ACP and pass through with the fields ACP defines for them (annotations and ``_meta``
    are dropped). Any other block, or one missing a required field, becomes the text
    ``[<type> content]``, so the update is always valid ACP.
    """
    items: list[Json] = []
    for block in blocks:
        data = plain_json(block)
        converted = _acp_block(data) if isinstance(data, dict) else None
        if converted is None:
            kind = data.get("type") if isinstance(data, dict) else None
            converted = {
                "type": "text",
                "text": f"[{kind if isinstance(kind, str) else 'unknown'} content]",
            }
        items.append({"type": "content", "content": converted})
    return items


_BLOCK_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # type: (required string fields, optional string fields)
    "text": (("text",), ()),
    "image": (("data", "mimeType"), ("uri",)),
    "audio": (("data", "mimeType"), ()),
    "resource_link": (("name", "uri"), ("title", "description", "mimeType")),
}


def _acp_block(data: dict[str, Any]) -> Json | None:
    kind = data.get("type")
    if kind == "resource":
        resource = data.get("resource")
        if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
            return None
        body = next((key for key in ("text", "blob") if isinstance(resource.get(key), str)), None)
        if body is None:
            return None
        inner: Json = {"uri": resource["uri"], body: resource[body]}
        if body == "text":
            inner["text"] = safe_text(inner["text"], multiline=True)
        if isinstance(resource.get("mimeType"), str):
            inner["mimeType"] = resource["mimeType"]
        return {"type": "resource", "resource": inner}
    if not isinstance(kind, str) or kind not in _BLOCK_FIELDS:
        return None
    required, optional = _BLOCK_FIELDS[kind]
    if not all(isinstance(data.get(key), str) for key in required):
        return None
    block: Json = {"type": kind}
    block.update(
        (key, _shown(key, data[key]))
        for key in (*required, *optional)
        if isinstance(data.get(key), str)
    )
    size = data.get("size")
    if (
        kind == "resource_link"
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
    ):
        block["size"] = size
    return block


_TEXT_FIELDS = {"text": True, "name": False, "title": False, "description": False}
"""The fields of a block an editor shows as text, and whether they keep their lines."""


def _shown(key: str, value: str) -> str:
    multiline = _TEXT_FIELDS.get(key)
    return value if multiline is None else safe_text(value, multiline=multiline)


def console_text(output: str, exit_code: int | None = None, signal: str | None = None) -> str:
    """Terminal output as a fenced ``console`` block plus its exit status, for clients
    without the terminal convention. The fence outgrows any backtick run in ``output``."""
    longest = max((len(run) for run in re.findall(r"`+", output)), default=0)
    fence = "`" * max(3, longest + 1)
    body = output if output.endswith("\n") or not output else output + "\n"
    text = f"{fence}console\n{body}{fence}"
    if exit_code is not None:
        text += f"\nExited with code {exit_code}"
    elif signal is not None:
        text += f"\nKilled by {signal}"
    return text


def client_supports_terminal_output(client_capabilities: object) -> bool:
    """True when the client's ``initialize`` capabilities carry ``_meta.terminal_output:
    true``, the opt-in of the ``_meta`` terminal convention.

    Takes the capabilities as JSON data or as the ACP package's ``ClientCapabilities``.
    """
    data = plain_json(client_capabilities)
    meta = data.get("_meta") if isinstance(data, dict) else None
    return isinstance(meta, dict) and meta.get("terminal_output") is True


def plain_json(value: object) -> Any:
    """JSON data from frozen JSON, a pydantic model (by alias) or plain data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return thaw(value)


def text_item(text: str) -> Json:
    """A text content item, its text made safe to show (lines kept)."""
    return {"type": "content", "content": {"type": "text", "text": safe_text(text, multiline=True)}}


def _title(title: str | None) -> str | None:
    return None if title is None else safe_text(title)


def _terminal_item(call_id: str) -> Json:
    return {"type": "terminal", "terminalId": call_id}


def diff_item(diff: FileDiff, cwd: str | None) -> Json:
    return {
        "type": "diff",
        "path": absolute_path(diff.path, cwd),
        "oldText": diff.old_text,
        "newText": diff.new_text,
    }


def location_json(location: FileLocation, cwd: str | None) -> Json:
    data: Json = {"path": absolute_path(location.path, cwd)}
    if location.line is not None:
        data["line"] = location.line
    return data


def _paths(diffs: Sequence[FileDiff]) -> list[str]:
    return list(dict.fromkeys(diff.path for diff in diffs))


def _raw_or(raw: Sequence[Any], summary: Callable[[], str]) -> list[Json]:
    return acp_content(raw) if raw else [text_item(summary())]


def _read_text(view: ReadResultView) -> str:
    return "\n".join(line.text for line in view.lines)


def _summary(view: SearchMatchesView | SearchPathsView | WebSearchView | WebFetchView) -> str:
    """A text rendering of a card ACP has no equivalent of (used when no raw content)."""
    lines: list[str] = []
    if isinstance(view, SearchMatchesView):
        for entry in view.files:
            path = safe_text(entry.path)
            lines.extend(f"{path}:{m.line_number}: {safe_text(m.line)}" for m in entry.matches)
        shown = sum(len(entry.matches) for entry in view.files)
    elif isinstance(view, SearchPathsView):
        lines.extend(safe_text(path) for path in view.paths)
        shown = len(view.paths)
    elif isinstance(view, WebSearchView):
        if view.answer:
            lines.append(view.answer)
        lines.extend(
            f"- {source.title} <{source.url}>" if source.title else f"- <{source.url}>"
            for source in view.sources
        )
        return "\n".join(lines) + ("\n(more results not shown)" if view.truncated else "")
    else:
        suffix = " (truncated)" if view.truncated else ""
        return f"{view.url}: HTTP {view.status_code}{suffix}"
    if view.truncated:
        lines.append(f"({view.total - shown} more not shown)")
    return "\n".join(lines) if lines else "No results"
