"""The enforced raw JSON Schema subset, and fast compiled validators for it.

A schema sent to a model is a promise: every keyword in it must be one we enforce on the
value that comes back. So :func:`assert_supported_json_schema` rejects anything outside a
small subset (``type oneOf properties required additionalProperties items enum const`` plus
the annotations ``description title default examples``), listing every violation with its
path. Accepted schemas compile once (:func:`compile_validator`) into a validator: a tree of
small closures that is the one place violations come from (:mod:`dsh_tools._schema.validators`),
behind generated straight-line source that answers "certainly valid" for the usual value
at next to no cost (:mod:`dsh_tools._schema.codegen`).

Python mapping of JSON: ``None`` is null (and counts as present), ``bool`` is never a
number, a float without a fractional part (``2.0``) is an integer, tuples are arrays.
Nesting of schemas and of validated values is bounded by :data:`~dsh_tools._json.MAX_DEPTH`,
so no walker here can hit ``RecursionError``, and no validator raises for any value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeAlias

from .._json import MAX_DEPTH, FrozenDict, int_has_text
from ..errors import JsonSchemaError, OutputSchemaError
from .codegen import generate
from .validators import ABSENT, Check, Validator, compile_checks, finish, is_lossless

__all__ = [
    "JsonSchema",
    "StructuredOutputSchema",
    "Validator",
    "assert_supported_json_schema",
    "assert_supported_output_schema",
    "compile_validator",
    "validate_json_schema_value",
    "validate_structured_value",
]

JsonSchema: TypeAlias = Mapping[str, Any]
"""A raw JSON Schema node of the enforced subset (any JSON root)."""

StructuredOutputSchema: TypeAlias = Mapping[str, Any]
"""A raw JSON Schema of the enforced subset whose root is ``{"type": "object", ...}``."""

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
SCALAR_TYPES = frozenset({"string", "number", "integer", "boolean", "null"})
ANNOTATIONS = ("description", "title", "default", "examples")
_CONSTRAINTS = ("properties", "required", "additionalProperties", "items", "enum", "const")
_KEYWORDS = frozenset({"type", "oneOf", *_CONSTRAINTS, *ANNOTATIONS})
_HOME_TYPE = {
    "properties": "object",
    "required": "object",
    "additionalProperties": "object",
    "items": "array",
}
_SUBSET = "type/oneOf/properties/required/additionalProperties/items/enum/const + annotations"
_OBJECT_ROOTED = 'schema.type must be "object" (structured output is object-rooted)'

MAX_NODE_DEPTH = MAX_DEPTH - 2
"""Deepest JSON nesting of a schema node: its own containers (``enum``, ``properties``)
must still fit under :data:`MAX_DEPTH`, so any accepted schema can be snapshotted."""


def is_of_type(kind: str, value: object) -> bool:
    """Whether the literal ``value`` (from ``enum``/``const``) is a ``kind`` JSON scalar."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return type(value) is bool
    if kind == "null":
        return value is None
    if type(value) is int:
        return kind in ("number", "integer") and int_has_text(value)
    if type(value) is float and math.isfinite(value):
        return kind == "number" or (kind == "integer" and value.is_integer())
    return False


def annotation_violations(node: Mapping[str, Any], path: str, depth: int) -> Iterator[str]:
    """The annotation problems of one node (shared by the raw subset and the DSL)."""
    for keyword in ("description", "title"):
        if keyword in node and not isinstance(node[keyword], str):
            yield f"{path}.{keyword} must be a string"
    for keyword in ("default", "examples"):
        if keyword in node and not is_lossless(node[keyword], depth + 1):
            yield f"{path}.{keyword} annotation must be lossless JSON data"


def is_record(node: object) -> bool:
    """A dict whose keys are all strings: the only shape a schema node may have."""
    return isinstance(node, dict) and all(isinstance(key, str) for key in dict.keys(node))


# --------------------------------------------------------------------------- subset walk


class _SubsetWalk:
    """Collects every raw-subset violation of one schema, in walk order (B221)."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.active: set[int] = set()

    def node(self, node: object, path: str, depth: int) -> None:
        found = self.found
        if not is_record(node):
            found.append(f"{path} must be a schema object")
            return
        assert isinstance(node, dict)
        if id(node) in self.active:
            found.append(f"{path} is circular")
            return
        if depth > MAX_NODE_DEPTH:
            found.append(f"{path} nests deeper than {MAX_DEPTH} levels")
            return
        self.active.add(id(node))
        for keyword in node:
            if keyword not in _KEYWORDS:
                found.append(f"{path}.{keyword} is not a supported keyword (subset: {_SUBSET})")
        found.extend(annotation_violations(node, path, depth))
        if "type" in node and "oneOf" in node:
            found.append(f"{path} cannot declare both type and oneOf")
        elif "oneOf" in node:
            self.one_of(node, path, depth)
        elif "type" in node:
            self.typed(node, path, depth)
        else:
            found.extend(
                f"{path}.{keyword} requires type or oneOf"
                for keyword in _CONSTRAINTS
                if keyword in node
            )
        self.active.discard(id(node))

    def one_of(self, node: dict[str, Any], path: str, depth: int) -> None:
        branches = node["oneOf"]
        if not isinstance(branches, (list, tuple)) or len(branches) < 2:
            self.found.append(f"{path}.oneOf must be an array of at least two schemas")
        else:
            for index, branch in enumerate(branches):
                self.node(branch, f"{path}.oneOf[{index}]", depth + 2)
        self.found.extend(
            f"{path}.{keyword} is not supported beside oneOf"
            for keyword in _CONSTRAINTS
            if keyword in node
        )

    def typed(self, node: dict[str, Any], path: str, depth: int) -> None:
        kind = node["type"]
        if isinstance(kind, (list, tuple)):
            self.found.append(
                f"{path}.type must be a single type string (type arrays are not supported)"
            )
            return
        if not isinstance(kind, str) or kind not in TYPES:
            self.found.append(f"{path}.type must be one of {'/'.join(TYPES)}")
            return
        for keyword in _CONSTRAINTS:
            home = _HOME_TYPE.get(keyword)
            misplaced = kind not in SCALAR_TYPES if home is None else kind != home
            if keyword in node and misplaced:
                self.found.append(f'{path}.{keyword} is not supported on type "{kind}"')
        if kind == "object":
            self.object(node, path, depth)
        elif kind == "array":
            if "items" in node:
                self.node(node["items"], f"{path}.items", depth + 1)
        else:
            self.literals(node, path, kind)

    def object(self, node: dict[str, Any], path: str, depth: int) -> None:
        properties = node.get("properties", ABSENT)
        names: Mapping[str, Any] = {}
        if properties is not ABSENT:
            if is_record(properties):
                names = properties
                for name, child in properties.items():
                    self.node(child, f"{path}.properties.{name}", depth + 2)
            else:
                self.found.append(f"{path}.properties must be an object of schemas")
        if "required" in node:
            required = node["required"]
            if isinstance(required, (list, tuple)) and all(isinstance(n, str) for n in required):
                self.found.extend(
                    f'{path}.required names "{name}" which is not in properties'
                    for name in required
                    if name not in names
                )
            else:
                self.found.append(f"{path}.required must be an array of strings")
        if "additionalProperties" in node and type(node["additionalProperties"]) is not bool:
            self.found.append(f"{path}.additionalProperties must be a boolean")

    def literals(self, node: dict[str, Any], path: str, kind: str) -> None:
        enum = node.get("enum", ABSENT)
        enum_ok = False
        if enum is not ABSENT:
            enum_ok = (
                isinstance(enum, (list, tuple))
                and len(enum) > 0
                and all(is_of_type(kind, member) for member in enum)
            )
            if not enum_ok:
                self.found.append(f"{path}.enum must be a non-empty array of {kind} values")
        if "const" in node:
            const = node["const"]
            if not is_of_type(kind, const):
                self.found.append(f"{path}.const must be a {kind} value")
            elif enum_ok and const not in enum:
                self.found.append(f"{path}.const must be one of {path}.enum when both are declared")


def _subset_violations(schema: object) -> list[str]:
    walk = _SubsetWalk()
    try:
        walk.node(schema, "schema", 0)
    except Exception as error:  # a hostile __eq__/__hash__/__iter__ inside the schema
        walk.found.append(f"schema could not be read: {type(error).__name__}")
    return walk.found


def assert_supported_json_schema(schema: object) -> None:
    """Raise :class:`JsonSchemaError` listing every way ``schema`` leaves the subset."""
    found = _subset_violations(schema)
    if found:
        raise JsonSchemaError(found)


def assert_supported_output_schema(schema: object) -> None:
    """Like :func:`assert_supported_json_schema`, and the root must be an object node.

    Raises :class:`OutputSchemaError`; the object-root rule is reported only when the
    schema is otherwise supported, so the first fix an author sees is the real one.
    """
    found = _subset_violations(schema)
    if not found and schema.get("type") != "object":  # type: ignore[attr-defined]
        found = [_OBJECT_ROOTED]
    if found:
        raise OutputSchemaError(found)


# --------------------------------------------------------------------------- compile


def compile_validator(schema: JsonSchema, *, root: str = "value") -> Validator:
    """Check ``schema`` against the subset once, then return a fast validator for it.

    ``root`` labels the value in messages (``"value" must be a string``); the empty root
    is the argument validator's: ``"arguments" must be an object``, ``"config.host"``.
    Raises :class:`JsonSchemaError` for an unsupported schema.
    """
    assert_supported_json_schema(schema)
    memo: dict[tuple[int, int], Check] = {}
    slow = finish(compile_checks(schema, 0, memo), root)
    fast = generate(schema, memo, "_validate", "return _slow(v)", "return []", slow)
    return slow if fast is None else fast


Predicate: TypeAlias = Callable[[object], bool]
"""``True`` only for a value the closure tree certainly accepts."""


def _never(value: object) -> bool:
    return False


def _compile_predicate(schema: JsonSchema) -> Predicate:
    """The validator's fast path alone, answering ``True``/``False`` (for tests)."""
    assert_supported_json_schema(schema)
    memo: dict[tuple[int, int], Check] = {}
    compile_checks(schema, 0, memo)
    fast: Predicate | None = generate(schema, memo, "_accept", "return False", "return True")
    return _never if fast is None else fast


def _compile_closures(schema: JsonSchema, *, root: str = "value") -> Validator:
    """The closure tree alone: the reference the accelerator is tested against."""
    assert_supported_json_schema(schema)
    return finish(compile_checks(schema, 0, {}), root)


_CACHE_SIZE = 256
_cache: dict[tuple[int, str, bool], tuple[object, Validator]] = {}


def _validator_for(schema: object, root: str, object_rooted: bool) -> Validator:
    """Compiled validators for frozen schemas are cached by identity (they cannot change)."""
    frozen = type(schema) is FrozenDict
    if frozen:
        hit = _cache.get((id(schema), root, object_rooted))
        if hit is not None and hit[0] is schema:
            return hit[1]
    if object_rooted:
        assert_supported_output_schema(schema)
    validator = compile_validator(schema, root=root)  # type: ignore[arg-type]
    if frozen:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        _cache[(id(schema), root, object_rooted)] = (schema, validator)
    return validator


def validate_json_schema_value(schema: JsonSchema, value: object, path: str = "value") -> list[str]:
    """All violations of ``value`` against ``schema`` (``[]`` when valid), in walk order.

    Raises :class:`JsonSchemaError` only when the schema itself is unsupported. For a hot
    path, call :func:`compile_validator` once instead.
    """
    return _validator_for(schema, path, False)(value)


def validate_structured_value(schema: StructuredOutputSchema, value: object) -> list[str]:
    """Violations of a structured output ``value`` (root label ``value``).

    Raises :class:`OutputSchemaError` when the schema is unsupported or not object-rooted.
    """
    return _validator_for(schema, "value", True)(value)
