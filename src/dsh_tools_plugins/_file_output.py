"""What the file tools give back: their output schemas, the text a model reads, the
cards a person sees, and the bounded diffs a write or an edit reports. Nothing else.

Each tool's value is copied into the result ``meta``, and the presenters here rebuild
their cards from ``meta`` alone, so they stay pure. What the tools do to files is
:mod:`dsh_tools_plugins.files`'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any

from dsh_tools._json import JsonValue
from dsh_tools._models import PresentableResult, ToolOutput
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

if TYPE_CHECKING:
    from .files import EditFileArgs, ListDirArgs, ReadFileArgs, WriteFileArgs

__all__ = [
    "EDIT_OUTPUT",
    "LIST_OUTPUT",
    "READ_OUTPUT",
    "WRITE_OUTPUT",
    "change_value",
    "fields",
    "listing_counts",
    "listing_text",
    "meta_output",
    "object_schema",
    "present_change_call",
    "present_change_result",
    "present_edit_call",
    "present_list_call",
    "present_list_result",
    "present_read_call",
    "present_read_result",
    "result_meta",
    "shown_of",
    "utf8_size",
]


def _value_as_meta(args: object, value: JsonValue) -> JsonValue:
    return value


def meta_output(schema: Mapping[str, Any], render: Callable[[Any, Any], str]) -> ToolOutput:
    """A declared output whose value is copied into the result ``meta``, where the
    presenters, which must be pure, find it."""
    return ToolOutput(schema, render, _value_as_meta)


def listing_text(lines: Sequence[str], empty: str, notes: Sequence[str]) -> str:
    """What a model reads of a capped listing: ``lines`` one a line (``empty`` when there
    are none), then the ``notes`` in brackets."""
    text = "\n".join(lines) if lines else empty
    return text + "\n\n[" + "; ".join(notes) + "]" if notes else text


def listing_counts(found: Sized, limit: int) -> dict[str, Any]:
    """The ``total`` and ``truncated`` of a listing of ``found`` capped at ``limit``."""
    return {"total": len(found), "truncated": len(found) > limit}


def shown_of(value: Mapping[str, Any], shown: int, noun: str) -> list[str]:
    """The note on a truncated listing (none when it is whole): ``shown`` of its total."""
    return [f"showing {shown} of {value['total']} {noun}"] if value["truncated"] else []


def fields(value: object) -> Mapping[str, Any]:
    """A declared output value as a mapping (the output schema guarantees an object)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__qualname__}")
    return value


def result_meta(result: PresentableResult) -> Mapping[str, Any] | None:
    """The value a successful result copied into its ``meta``; ``None`` for a failure or
    a ``meta`` that is not an object (a card then shows the raw result)."""
    if result.is_error or not isinstance(result.meta, Mapping):
        return None
    return result.meta


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


def object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    """The schema of an object with exactly these ``properties``, each required."""
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
    "items": object_schema({"old_text": _nullable(_STRING), "new_text": _STRING}),
}


# --------------------------------------------------------------------------- read_file


_READ_SCHEMA = object_schema(
    {
        "path": _STRING,
        "offset": _INTEGER,
        "lines": {"type": "array", "items": object_schema({"number": _INTEGER, "text": _STRING})},
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


def present_read_call(args: ReadFileArgs) -> GenericCallView:
    line = args.offset if isinstance(args.offset, int) and args.offset > 1 else None
    return GenericCallView(
        f"Read {args.path}",
        kind=ToolCallKind.READ,
        locations=[FileLocation(args.path, line)],
    )


def present_read_result(args: ReadFileArgs, result: PresentableResult) -> ReadResultView | None:
    meta = result_meta(result)
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


READ_OUTPUT = meta_output(_READ_SCHEMA, _render_read)


# --------------------------------------------------------------------------- write and edit


_CONTEXT = 3
"""Unchanged lines a hunk carries on each side."""


def change_value(
    display: str,
    *,
    created: bool,
    size: int,
    replacements: int,
    before: str | None,
    after: str,
    budget: int,
) -> dict[str, Any]:
    """The value of a write or an edit, its diffs bounded by ``budget``."""
    diffs, omitted = _bounded_diffs(display, before, after, budget)
    return {
        "path": display,
        "created": created,
        "bytes": size,
        "replacements": replacements,
        "diffs": diffs,
        "diffs_omitted": omitted,
    }


def _bounded_diffs(
    display: str, before: str | None, after: str, budget: int
) -> tuple[list[dict[str, str | None]], int]:
    """The hunks from ``before`` to ``after`` that fit, in order, in ``budget`` UTF-8
    bytes of text, and how many hunks were left out."""
    hunks = file_diffs(display, before, after, context=_CONTEXT)
    kept: list[dict[str, str | None]] = []
    used = 0
    for index, diff in enumerate(hunks):
        used += utf8_size(diff.old_text or "") + utf8_size(diff.new_text)
        if used > budget:
            return kept, len(hunks) - index
        kept.append({"old_text": diff.old_text, "new_text": diff.new_text})
    return kept, 0


def utf8_size(text: str) -> int:
    """The size of ``text`` in UTF-8 (ASCII text is not encoded to count it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


_CHANGE_SCHEMA = object_schema(
    {
        "path": _STRING,
        "created": _BOOLEAN,
        "bytes": _INTEGER,
        "replacements": _INTEGER,
        "diffs": _DIFFS_SCHEMA,
        "diffs_omitted": _INTEGER,
    }
)


def present_change_result(args: object, result: PresentableResult) -> DiffResultView | None:
    meta = result_meta(result)
    if meta is None:
        return None
    path = meta["path"]
    title = f"{'Created' if meta['created'] else 'Edited'} {path}"
    omitted = meta.get("diffs_omitted", 0)  # absent in logs written before it existed
    return DiffResultView(
        title=_shown_hunks(title, omitted), diffs=_file_diffs(path, meta["diffs"])
    )


def present_change_call(
    title: str, path: str, before: str | None, after: str, *, budget: int, line: int | None = None
) -> DiffCallView:
    """The card of a write or an edit as it would change the file as it is now: the
    hunks its result would show (bounded by ``budget`` alike), at ``line``. A person
    approves this change to this text; if the file changes before the call runs, the
    card drawn again differs and the call does not run (``APPROVAL_STALE``)."""
    diffs, omitted = _bounded_diffs(path, before, after, budget)
    return DiffCallView(
        _shown_hunks(title, omitted),
        _file_diffs(path, diffs),
        locations=[FileLocation(path, line)],
    )


def _shown_hunks(title: str, omitted: int) -> str:
    """``title``, saying how many hunks were too large to show, if any."""
    if not omitted:
        return title
    return f"{title} ({omitted} {'hunk' if omitted == 1 else 'hunks'} too large to show)"


def _file_diffs(path: str, diffs: Sequence[Mapping[str, Any]]) -> list[FileDiff]:
    return [FileDiff(path, diff["old_text"], diff["new_text"]) for diff in diffs]


def _render_write(args: WriteFileArgs, value: Any) -> str:
    value = fields(value)
    verb = "Created" if value["created"] else "Overwrote"
    return f"{verb} {value['path']} ({value['bytes']} bytes)"


def _render_edit(args: EditFileArgs, value: Any) -> str:
    value = fields(value)
    count = value["replacements"]
    noun = "occurrence" if count == 1 else "occurrences"
    return f"Edited {value['path']}: replaced {count} {noun}"


def present_edit_call(args: EditFileArgs) -> DiffCallView:
    return DiffCallView(
        f"Edit {args.path}",
        [FileDiff(args.path, args.old_string, args.new_string)],
        locations=[FileLocation(args.path)],
    )


WRITE_OUTPUT = meta_output(_CHANGE_SCHEMA, _render_write)
EDIT_OUTPUT = meta_output(_CHANGE_SCHEMA, _render_edit)


# --------------------------------------------------------------------------- list_dir


_MARKERS = {"dir": "/", "symlink": "@", "fifo": "|", "socket": "=", "file": "", "other": "?"}

_LIST_SCHEMA = object_schema(
    {
        "path": _STRING,
        "entries": {
            "type": "array",
            "items": object_schema(
                {"name": _STRING, "type": {"type": "string", "enum": list(_MARKERS)}}
            ),
        },
        "total": _INTEGER,
        "truncated": _BOOLEAN,
    }
)


def _render_list(args: ListDirArgs, value: Any) -> str:
    value = fields(value)
    lines = [f"{entry['name']}{_MARKERS[entry['type']]}" for entry in value["entries"]]
    return listing_text(lines, f"{value['path']} is empty", shown_of(value, len(lines), "entries"))


def present_list_call(args: ListDirArgs) -> GenericCallView:
    return GenericCallView(
        f"List {args.path}", kind=ToolCallKind.READ, locations=[FileLocation(args.path)]
    )


def present_list_result(args: ListDirArgs, result: PresentableResult) -> GenericResultView | None:
    meta = result_meta(result)
    if meta is None:
        return None
    return GenericResultView(title=f"List {meta['path']} ({meta['total']} entries)")


LIST_OUTPUT = meta_output(_LIST_SCHEMA, _render_list)
