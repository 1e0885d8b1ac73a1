"""The strict cattrs converter behind :mod:`dsh_tools.presentation`'s card JSON.

Imported on first use by ``structure_call_view``, ``structure_result_view`` and
``unstructure_view``: cattrs costs about 17 ms to import, which ``import dsh_tools`` should
not pay. The wire rules it enforces are described in :mod:`dsh_tools.presentation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
from cattrs import Converter
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .._json import FrozenDict, FrozenList, snapshot, thaw
from ..errors import JsonValueError
from ._cards import (
    CardError,
    ContentBlocks,
    DiffCallView,
    DiffResultView,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
)
from ._fields import _freeze_content, _freeze_json, _Invalid, _wire

_CALL_TAGS: dict[type[Any], dict[str, str]] = {
    GenericCallView: {"card": "generic"},
    TerminalCallView: {"card": "terminal"},
    DiffCallView: {"card": "diff"},
}
_RESULT_TAGS: dict[type[Any], dict[str, str]] = {
    GenericResultView: {"card": "generic"},
    TerminalResultView: {"card": "terminal"},
    DiffResultView: {"card": "diff"},
    SearchMatchesView: {"card": "search", "shape": "matches"},
    SearchPathsView: {"card": "search", "shape": "paths"},
    ReadResultView: {"card": "read"},
    WebSearchView: {"card": "web", "kind": "search"},
    WebFetchView: {"card": "web", "kind": "fetch"},
}
_SUBTAG = {"search": "shape", "web": "kind"}
"""Cards that come in several shapes, and the key that tells them apart."""


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, tuple) else "an object"


def _structure_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_json_type(value)}")
    return value


def _structure_bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected a boolean, got {_json_type(value)}")
    return value


def _structure_int(value: Any, _: Any) -> int:
    """Integers only; ``2.0`` counts (JSON does not tell them apart), ``True`` does not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(f"expected an integer, got {_json_type(value)}")
    return value


def _structure_kind(value: Any, _: Any) -> ToolCallKind:
    if isinstance(value, str):
        try:
            return ToolCallKind(value)
        except ValueError:
            pass
    choices = ", ".join(member.value for member in ToolCallKind)
    raise _Invalid(f"expected one of {choices}, got {value!r}")


def _is_tuple_type(kind: Any) -> bool:
    args: tuple[Any, ...] = getattr(kind, "__args__", ())
    return getattr(kind, "__origin__", None) is tuple and len(args) == 2 and args[1] is ...


def _structure_tuple_factory(kind: Any) -> Callable[[Any, Any], tuple[Any, ...]]:
    """cattrs' tuple hook, minus its leniency: it would iterate a string or an object."""
    items = homogenous_tuple_structure_factory(kind, _converter)

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if not isinstance(value, FrozenList):  # input is snapshotted before structuring
            raise _Invalid(f"expected an array, got {_json_type(value)}")
        result: tuple[Any, ...] = items(value, kind)
        return result

    return structure


def _unstructure_tuple_factory(kind: Any) -> Callable[[tuple[Any, ...]], list[Any]]:
    item_hook = _converter.get_unstructure_hook(kind.__args__[0])
    return lambda value: [item_hook(item) for item in value]


def _structure_content(value: Any, _: Any) -> ContentBlocks:
    """Wire content is an array of block objects (Python callers may also pass text)."""
    if not isinstance(value, FrozenList):
        raise _Invalid(f"expected an array, got {_json_type(value)}")
    blocks: list[FrozenDict] = []
    for index, block in enumerate(value):
        if not isinstance(block, FrozenDict):
            problem = f"expected a content block object, got {_json_type(block)}"
            raise _Invalid(problem, where=f"[{index}]")
        blocks.append(block)
    return _freeze_content(blocks) or ()


def _structure_raw(value: Any, _: Any) -> Any:
    return value  # already frozen: the whole card is snapshotted before structuring


def _structure_record_factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
    overrides = {}
    for field in attrs.fields(cls):
        hook: Callable[[Any, Any], Any] | None = None
        if field.converter is _freeze_json:
            hook = _structure_raw
        elif field.converter is _freeze_content:
            hook = _structure_content
        overrides[field.name] = override(rename=_wire(field.name), struct_hook=hook)
    inner = make_dict_structure_fn(cls, _converter, **overrides)  # type: ignore[arg-type]

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(f"expected an object, got {_json_type(value)}")
        return inner(value, cls)

    return structure


def _holds_default(value: object, default: object) -> bool:
    # ``is None`` rather than ``==``: a frozen JSON array must never be compared to None
    return value is None if default is None else value == default


def _unstructure_record_factory(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    """camelCase keys, tags first, and optional fields left out while at their default."""
    overrides = {}
    omissible = []
    for field in attrs.fields(cls):
        hook = thaw if field.converter in (_freeze_json, _freeze_content) else None
        overrides[field.name] = override(rename=_wire(field.name), unstruct_hook=hook)
        if field.default is not attrs.NOTHING and not field.metadata.get("always_emit"):
            omissible.append((field.name, _wire(field.name), field.default))
    inner = make_dict_unstructure_fn(cls, _converter, **overrides)  # type: ignore[arg-type]
    tags = _CALL_TAGS.get(cls) or _RESULT_TAGS.get(cls) or {}

    def unstructure(record: Any) -> dict[str, Any]:
        data = {**tags, **inner(record)}
        for name, key, default in omissible:
            if _holds_default(getattr(record, name), default):
                del data[key]
        return data

    return unstructure


def _tagged_union(tags: Mapping[type[Any], Mapping[str, str]]) -> Callable[[Any, Any], Any]:
    """A structure hook for a closed union of cards: read the tags, pick the class."""
    by_tags = {tuple(tag.values()): cls for cls, tag in tags.items()}
    cards = sorted({tag["card"] for tag in tags.values()})

    def pick(value: Mapping[str, Any], key: str, choices: list[str]) -> str:
        if key not in value:
            raise _Invalid("required field missing", where=f".{key}")
        tag = value[key]
        if tag not in choices:
            wanted = ", ".join(repr(choice) for choice in choices)
            raise _Invalid(f"unknown {key} {tag!r}, expected one of {wanted}", where=f".{key}")
        return str(tag)

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(f"expected an object, got {_json_type(value)}")
        card = pick(value, "card", cards)
        chosen: tuple[str, ...] = (card,)
        subtag = _SUBTAG.get(card)
        if subtag is not None:
            shapes = [key[1] for key in by_tags if key[0] == card]
            chosen += (pick(value, subtag, shapes),)
        body = {key: item for key, item in value.items() if key not in ("card", subtag)}
        cls = by_tags[chosen]
        return _converter.get_structure_hook(cls)(body, cls)

    return structure


def _build_converter() -> Converter:
    converter = Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(ToolCallKind, _structure_kind)
    converter.register_unstructure_hook(ToolCallKind, lambda kind: kind.value)
    converter.register_structure_hook_factory(_is_tuple_type, _structure_tuple_factory)
    converter.register_unstructure_hook_factory(_is_tuple_type, _unstructure_tuple_factory)
    converter.register_structure_hook_factory(attrs.has, _structure_record_factory)
    converter.register_unstructure_hook_factory(attrs.has, _unstructure_record_factory)
    converter.register_structure_hook(ToolCallView, _tagged_union(_CALL_TAGS))
    converter.register_structure_hook(ToolResultView, _tagged_union(_RESULT_TAGS))
    return converter


_converter = _build_converter()
"""The strict converter; the hook factories above run (and read it) only once it exists."""


def _problems(error: BaseException, path: str) -> Iterator[str]:
    """Flatten cattrs' exception groups into one ``path: problem`` line per leaf.

    cattrs' own ``transform_error`` names paths by Python attribute (``new_text``); the
    wire says ``newText``, so this walker maps each attribute note to its wire key.
    """
    if isinstance(error, (ClassValidationError, IterableValidationError)):
        noted, unnoted = error.group_exceptions()
        for inner, note in noted:
            if isinstance(note, IterableValidationNote):
                yield from _problems(inner, f"{path}[{note.index}]")
            else:
                yield from _problems(inner, f"{path}.{_wire(note.name)}")
        for inner in unnoted:
            yield from _problems(inner, path)
    elif isinstance(error, ForbiddenExtraKeysError):
        for key in sorted(error.extra_fields):
            yield f"{path}.{key}: unknown key"
    elif isinstance(error, KeyError):
        yield f"{path}: required field missing"
    elif isinstance(error, _Invalid):
        yield f"{path}{error.where}: {error.problem}"
    else:
        yield f"{path}: {error}"


def structure(data: object, union: Any, label: str) -> Any:
    """Read ``data`` as a member of the card ``union``; :class:`CardError` names each bad path."""
    try:
        frozen = snapshot(data, label)
    except JsonValueError as error:
        raise CardError(f"{error.path}: {error.problem}") from None
    try:
        return _converter.structure(frozen, union)
    except (ClassValidationError, IterableValidationError, _Invalid, KeyError) as error:
        raise CardError("; ".join(_problems(error, label))) from None


def unstructure(view: ToolCallView | ToolResultView) -> dict[str, Any]:
    """``view`` as plain JSON-ready data; anything that is not a card is a :class:`CardError`."""
    if type(view) not in _CALL_TAGS and type(view) not in _RESULT_TAGS:
        raise CardError(f"not a card: {type(view).__qualname__}")
    data: dict[str, Any] = _converter.unstructure(view)
    return data
