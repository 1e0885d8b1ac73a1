"""The typed schema DSL: per-property specs with ``required: True``, compiled to JSON Schema.

Tool authors describe parameters as a mapping of property specs::

    {"path": {"type": "string", "required": True, "description": "Absolute path"},
     "limit": {"type": "integer", "default": 25}}

which compiles to ``{"type": "object", "properties": {...}, "required": ["path"]}``. The
vocabulary is JSON Schema's own words (so the spec reads like what the model sees) plus
``required: True`` per property and the author-only type ``"json"`` (any JSON value).

Author mistakes are reported one at a time with a DSL path (``parameters.tags.items.type
...``): the first problem is usually the cause of the rest. The compiled schema then passes
:func:`~dsh_tools._schema.subset.assert_supported_json_schema`, which reports everything left.
An explicit nested ``{"type": "object"}`` is open unless it says ``additionalProperties:
False`` (JSON Schema's default). So is the parameter root, which is implicit in a property
map; an author who wants undeclared argument keys refused writes the root out as an object
value spec instead, ``{"type": "object", "properties": {...}, "additionalProperties":
False}``. A ``const`` needs no ``type``: it is the type of its value, so a union of
literals reads ``{"oneOf": [{"const": 1}, {"const": "max"}]}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn, TypeAlias, TypedDict

from .._json import MAX_DEPTH, FrozenDict
from ..errors import JsonSchemaError
from .subset import (
    ANNOTATIONS,
    MAX_NODE_DEPTH,
    SCALAR_TYPES,
    annotation_violations,
    assert_supported_json_schema,
    compile_validator,
    is_record,
)

__all__ = [
    "PropertySpec",
    "Scalar",
    "SchemaSpec",
    "ValueSpec",
    "ValueType",
    "schema_spec_to_json_schema",
    "validate_args",
    "value_spec_to_json_schema",
]

Scalar: TypeAlias = "str | int | float | bool | None"
"""A JSON scalar, the only kind of value ``enum`` and ``const`` may hold."""

ValueType: TypeAlias = Literal[
    "string", "number", "integer", "boolean", "null", "array", "object", "json"
]
"""The DSL's ``type`` words; ``json`` is author-only and means "any JSON value"."""


class ValueSpec(TypedDict, total=False):
    """One value: a ``type`` (or ``oneOf``) with the keywords that type allows."""

    type: ValueType
    oneOf: Sequence[ValueSpec]
    enum: Sequence[Scalar]
    const: Scalar
    items: ValueSpec
    properties: Mapping[str, PropertySpec]
    additionalProperties: bool
    description: str
    title: str
    default: object
    examples: Sequence[object]


class PropertySpec(ValueSpec, total=False):
    """A property of an object: a value spec that may also say ``required: True``."""

    required: Literal[True]


SchemaSpec: TypeAlias = Mapping[str, PropertySpec] | ValueSpec
"""A tool's parameters: property name -> property spec (an implicit open object root), or
one object value spec (``{"type": "object", "properties": ...}``), which may close the
root with ``"additionalProperties": False``."""

_TYPE_WORDS = ("string", "number", "integer", "boolean", "null", "array", "object", "json")
_VOCABULARY: dict[str, frozenset[str]] = {
    **{kind: frozenset({"type", "enum", "const"}) for kind in SCALAR_TYPES},
    "array": frozenset({"type", "items"}),
    "object": frozenset({"type", "properties", "additionalProperties"}),
    "json": frozenset({"type"}),
    "oneOf": frozenset({"oneOf"}),
}


def _fail(violation: str) -> NoReturn:
    raise JsonSchemaError([violation])


def _is_scalar(value: object) -> bool:
    kind = type(value)
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    return value is None or kind is str or kind is int or kind is bool


_SCALAR_WORDS: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
}


def _const_type(spec: dict[str, Any], path: str) -> str | None:
    """The type a ``const`` without ``type`` stands for: the JSON type of its value."""
    if "type" in spec or "const" not in spec:
        return None
    literal = spec["const"]
    if not _is_scalar(literal):
        _fail(f"{path}.const must be a string, number, boolean or null to stand without a type")
    return _SCALAR_WORDS[type(literal)]


def _kind(spec: dict[str, Any], path: str, is_property: bool) -> tuple[str, str | None]:
    """The spec's kind (a type word, or ``oneOf``) and the type a lone ``const`` implies;
    refuses ``required`` where it cannot stand and any key the kind does not take."""
    if "required" in spec:
        if not is_property:
            _fail(f"{path}.required is not supported by the value schema DSL")
        if spec["required"] is not True:
            _fail(f"{path}.required must be true when present")
    implied = None
    if "oneOf" in spec:
        if "type" in spec:
            _fail(f"{path} cannot declare both type and oneOf")
        kind = "oneOf"
    else:
        implied = _const_type(spec, path)
        word = implied or spec.get("type")
        if not isinstance(word, str) or word not in _TYPE_WORDS:
            _fail(f"{path}.type must be {'/'.join(_TYPE_WORDS)}, or use oneOf")
        kind = word
    allowed = _VOCABULARY[kind]
    for key in spec:
        if key not in allowed and key not in ANNOTATIONS and key != "required":
            _fail(f"{path}.{key} is not supported by the value schema DSL")
    return kind, implied


class _Compiler:
    """One compilation: tracks the specs being compiled so a cycle is named, not looped."""

    def __init__(self) -> None:
        self.active: set[int] = set()

    def value(self, spec: object, path: str, depth: int, is_property: bool) -> dict[str, Any]:
        if not is_record(spec):
            _fail(f"{path} must be a value schema object")
        assert isinstance(spec, dict)
        if id(spec) in self.active:
            _fail(f"{path} is circular")
        if depth > MAX_NODE_DEPTH:
            _fail(f"{path} nests deeper than {MAX_DEPTH} levels")
        kind, implied = _kind(spec, path, is_property)
        for problem in annotation_violations(spec, path, depth):
            _fail(problem)

        self.active.add(id(spec))
        out: dict[str, Any] = {"type": implied} if implied else {}
        required: list[str] = []
        for key, item in spec.items():
            if key == "required" or (key == "type" and kind == "json"):
                continue
            out[key] = self.keyword(key, item, path, depth, required)
        if required:
            out["required"] = required
        self.active.discard(id(spec))
        return out

    def keyword(self, key: str, item: Any, path: str, depth: int, required: list[str]) -> Any:
        """One keyword of the spec at ``path``, compiled; a property marked required adds
        its name to ``required``."""
        if key == "items":
            return self.value(item, f"{path}.items", depth + 1, False)
        if key == "properties":
            return self.properties(item, f"{path}.properties", depth + 1, required)
        if key == "oneOf":
            if not isinstance(item, (list, tuple)) or len(item) < 2:
                _fail(f"{path}.oneOf must be an array of at least two value schemas")
            return [
                self.value(branch, f"{path}.oneOf[{index}]", depth + 2, False)
                for index, branch in enumerate(item)
            ]
        if key == "enum":
            if not isinstance(item, (list, tuple)) or not item or not all(map(_is_scalar, item)):
                _fail(f"{path}.enum must be a non-empty array of scalar values")
            return list(item)
        if key == "additionalProperties" and type(item) is not bool:
            _fail(f"{path}.additionalProperties must be explicitly true or false")
        return item

    def properties(
        self, specs: object, path: str, depth: int, required: list[str]
    ) -> dict[str, Any]:
        """Compile a property map; names marked ``required: True`` go to ``required``."""
        if not is_record(specs):
            _fail(f"{path} must be an object of value schemas")
        assert isinstance(specs, dict)
        out = {}
        for name, spec in specs.items():
            out[name] = self.value(spec, f"{path}.{name}", depth + 1, True)
            if spec.get("required") is True:
                required.append(name)
        return out


def _unreadable_guard(compile_spec: Callable[[], dict[str, Any]], path: str) -> dict[str, Any]:
    """Run one compilation; a spec whose own ``__eq__``/``__hash__``/``__iter__`` raises
    (a hostile ``str`` subclass, say) is a bad spec, reported as such, never a crash."""
    try:
        return compile_spec()
    except JsonSchemaError:
        raise
    except Exception as error:
        _fail(f"{path} could not be read: {type(error).__name__}")


def _checked(schema: dict[str, Any]) -> FrozenDict:
    assert_supported_json_schema(schema)
    return FrozenDict(schema)


def schema_spec_to_json_schema(spec: SchemaSpec | object) -> FrozenDict:
    """Compile a parameter spec to the model-facing JSON Schema (an object root).

    A property map gives an open root; an object value spec gives the root it describes,
    closed when it says ``"additionalProperties": False``. Raises
    :class:`~dsh_tools.errors.JsonSchemaError` for a bad spec (paths start at
    ``parameters``).
    """
    if is_record(spec) and isinstance(spec.get("type"), str):  # type: ignore[union-attr]
        return _checked(_unreadable_guard(lambda: _object_root(spec), "parameters"))
    required: list[str] = []
    properties = _unreadable_guard(
        lambda: _Compiler().properties(spec, "parameters", 1, required), "parameters"
    )
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return _checked(schema)


def _object_root(spec: object) -> dict[str, Any]:
    """The root written out as an object value spec (no property has a string spec, so a
    string ``type`` cannot be a property map); it always lists its properties, as the
    implicit root does."""
    compiled = _Compiler().value(spec, "parameters", 0, False)
    if compiled.get("type") != "object":
        _fail('parameters.type must be "object": a tool\'s arguments are an object')
    return {"type": "object", "properties": compiled.pop("properties", {}), **compiled}


def value_spec_to_json_schema(spec: ValueSpec | object) -> FrozenDict:
    """Compile one value spec to JSON Schema (paths in errors start at ``schema``)."""
    return _checked(
        _unreadable_guard(lambda: _Compiler().value(spec, "schema", 0, False), "schema")
    )


def validate_args(spec: SchemaSpec | object, args: object) -> list[str]:
    """The violations of ``args`` against a parameter spec, ``[]`` when valid.

    Never raises because of ``args``; raises :class:`~dsh_tools.errors.JsonSchemaError`
    for a bad spec. Compiles on every call: for a hot path use
    :func:`dsh_tools._arguments.arguments_model` once and call its ``violations``.
    """
    return compile_validator(schema_spec_to_json_schema(spec), root="")(args)
