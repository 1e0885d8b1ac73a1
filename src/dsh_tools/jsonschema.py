"""The enforced raw JSON Schema subset, and fast compiled validators for it.

A schema sent to a model is a promise: every keyword in it must be one we enforce on the
value that comes back. So :func:`assert_supported_json_schema` rejects anything outside a
small subset (``type oneOf properties required additionalProperties items enum const`` plus
the annotations ``description title default examples``), listing every violation with its
path. Accepted schemas compile once (:func:`compile_validator`) into a tree of small
closures, the one place violations come from: paths are only assembled, innermost segment
first, for the violations that are reported.

Every tool call validates its arguments, so a valid value must cost next to nothing. In
front of the tree sits an accelerator: straight-line Python source generated per schema
(one call, no loop over the schema) that answers "certainly valid" by the tree's own rules,
or "not sure". It only reads values of exact builtin types (``str int float bool None``,
``dict``/``FrozenDict``, ``list``/``tuple``/``FrozenList``), so no user ``__eq__`` or
``__iter__`` runs; anything else, any exception, and any value it does not accept go to the
closure tree, which gives the verdict and the messages exactly as without it. Property
names and literals are bound as constants in the namespace, never written into the source,
so no schema text can inject code. Nodes it cannot inline exactly (a ``oneOf`` whose
branches can both match, anything nested too deep) call their own closure from it.

Python mapping of JSON: ``None`` is null (and counts as present), ``bool`` is never a
number, a float without a fractional part (``2.0``) is an integer, tuples are arrays.
Nesting of schemas and of validated values is bounded by :data:`~dsh_tools.json.MAX_DEPTH`,
so no walker here can hit ``RecursionError``, and no validator raises for any value.
"""

from __future__ import annotations

import builtins
import json as _stdlib_json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from .errors import JsonSchemaError, OutputSchemaError
from .json import (
    MAX_DEPTH,
    NEG_SMALL_INT,
    SMALL_INT,
    FrozenDict,
    FrozenList,
    int_has_text,
    is_unicode,
)

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

Validator: TypeAlias = Callable[[object], list[str]]
"""A compiled validator: the violations of a value, ``[]`` when it is valid."""

Violation: TypeAlias = list[Any]
"""Internal: ``[message, innermost segment, ..., outermost segment]``; ``None`` message
means "missing required property"; ``str`` segments are keys, ``int`` are indexes."""

Check: TypeAlias = Callable[[object], "list[Violation] | None"]
"""Internal: one compiled schema node; ``None`` when the value is valid."""

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

_ABSENT: Any = object()
_isfinite = math.isfinite


def is_lossless(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is lossless JSON (the rules of :func:`~dsh_tools.json.snapshot`)
    with every container above :data:`MAX_DEPTH`, counting ``value`` itself at ``depth``.

    Iterative and exception-proof, so it is safe on any object and at any nesting.
    """
    kind = type(value)
    if kind is bool or value is None:
        return True
    stack: list[tuple[object, int]] = [(value, depth)]
    try:
        while stack:
            item, level = stack.pop()
            kind = type(item)
            if kind is bool or item is None:
                continue
            if isinstance(item, str):
                if not is_unicode(str.__str__(item)):
                    return False
            elif kind is int:
                if not int_has_text(item):  # type: ignore[arg-type]
                    return False
            elif kind is float:
                if not _isfinite(item):  # type: ignore[arg-type]
                    return False
            elif kind is FrozenDict or kind is FrozenList:
                continue  # snapshotted when made
            elif isinstance(item, dict):
                if level >= MAX_DEPTH:
                    return False
                for key, member in dict.items(item):
                    if not isinstance(key, str) or not is_unicode(str.__str__(key)):
                        return False
                    stack.append((member, level + 1))
            elif isinstance(item, (list, tuple)):
                if level >= MAX_DEPTH:
                    return False
                members = list.__iter__(item) if isinstance(item, list) else tuple.__iter__(item)
                stack.extend((member, level + 1) for member in members)
            else:
                return False
    except Exception:  # a hostile __class__ / __eq__ makes the value non-JSON, not a crash
        return False
    return True


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
    if type(value) is float and _isfinite(value):
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
        properties = node.get("properties", _ABSENT)
        names: Mapping[str, Any] = {}
        if properties is not _ABSENT:
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
        enum = node.get("enum", _ABSENT)
        enum_ok = False
        if enum is not _ABSENT:
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


# --------------------------------------------------------------------------- checks
# Each builder returns a Check. Failure lists are always fresh: parents append segments.

_MUST_OBJECT = "must be an object"
_MUST_ARRAY = "must be an array"
_UNDECLARED = "is not a declared property (additionalProperties: false)"
_LOSSY_VALUE = "must be a lossless JSON value"
_LOSSY_OBJECT = "must be a lossless JSON object"
_LOSSY_ARRAY = "must be a dense lossless JSON array"


def _compact(value: object) -> str:
    return _stdlib_json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def any_check(depth: int) -> Check:
    """An unconstrained node: any lossless JSON value."""

    def check(value: object) -> list[Violation] | None:
        return None if is_lossless(value, depth) else [[_LOSSY_VALUE]]

    return check


def _string(value: object) -> list[Violation] | None:
    return None if isinstance(value, str) else [["must be a string"]]


def _number(value: object) -> list[Violation] | None:
    kind = type(value)
    if kind is int:
        return None
    if kind is float:
        return None if _isfinite(value) else [["must be a finite JSON number"]]  # type: ignore[arg-type]
    return [["must be a number"]]


def _integer(value: object) -> list[Violation] | None:
    kind = type(value)
    if kind is int or (kind is float and value.is_integer()):  # type: ignore[attr-defined]
        return None
    return [["must be an integer"]]


def _boolean(value: object) -> list[Violation] | None:
    return None if value is True or value is False else [["must be a boolean"]]


def _null(value: object) -> list[Violation] | None:
    return None if value is None else [["must be null"]]


_SCALAR_CHECKS: dict[str, Check] = {
    "string": _string,
    "number": _number,
    "integer": _integer,
    "boolean": _boolean,
    "null": _null,
}


def scalar_check(kind: str, enum: Sequence[object] | None = None, const: object = _ABSENT) -> Check:
    """A scalar node; ``enum`` is checked before ``const`` and only one miss is reported."""
    base = _SCALAR_CHECKS[kind]
    if enum is None and const is _ABSENT:
        return base
    members = None if enum is None else frozenset(enum)
    enum_miss = "" if enum is None else f"must be one of {_compact(list(enum))}"
    const_miss = "" if const is _ABSENT else f"must be {_compact(const)}"

    def check(value: object) -> list[Violation] | None:
        found = base(value)
        if found is not None:
            return found
        if members is not None and value not in members:
            return [[enum_miss]]
        if const is not _ABSENT and value != const:
            return [[const_miss]]
        return None

    return check


def array_check(items: Check | None, depth: int) -> Check:
    """An array node; without ``items`` every element must be lossless JSON."""
    if items is None:

        def unconstrained(value: object) -> list[Violation] | None:
            if not isinstance(value, (list, tuple)):
                return [[_MUST_ARRAY]]
            return None if is_lossless(value, depth) else [[_LOSSY_ARRAY]]

        return unconstrained

    def check(value: object) -> list[Violation] | None:
        if not isinstance(value, (list, tuple)):
            return [[_MUST_ARRAY]]
        found: list[Violation] | None = None
        for index, item in enumerate(value):
            bad = items(item)
            if bad is not None:
                for violation in bad:
                    violation.append(index)
                if found is None:
                    found = bad
                else:
                    found += bad
        return found

    return check


def map_check(values: Check) -> Check:
    """An object whose every member must pass ``values`` (typed ``dict[str, T]`` fields)."""

    def check(value: object) -> list[Violation] | None:
        if not isinstance(value, dict):
            return [[_MUST_OBJECT]]
        found: list[Violation] | None = None
        for key, item in dict.items(value):
            if not isinstance(key, str):
                return [[_LOSSY_OBJECT]]
            bad = values(item)
            if bad is not None:
                for violation in bad:
                    violation.append(key)
                if found is None:
                    found = bad
                else:
                    found += bad
        return found

    return check


def object_check(
    required: Sequence[str], properties: Sequence[tuple[str, Check]], closed: bool, depth: int
) -> Check:
    """An object node: missing required, then declared properties, then undeclared keys."""
    required = tuple(required)
    properties = tuple(properties)
    declared = frozenset(name for name, _ in properties)
    get = dict.get
    size = dict.__len__

    def extras(value: dict[Any, Any], found: list[Violation] | None) -> list[Violation] | None:
        undeclared: list[Violation] = []
        lossy = False
        for key, item in dict.items(value):
            if key in declared:
                continue
            if not isinstance(key, str):
                lossy = True
            elif closed:
                undeclared.append([_UNDECLARED, key])
            elif not is_lossless(item, depth + 1):
                lossy = True
        if undeclared:
            return undeclared if found is None else found + undeclared
        if lossy and found is None:  # lossless checks only run once the structure is valid
            return [[_LOSSY_OBJECT]]
        return found

    def check(value: object) -> list[Violation] | None:
        if not isinstance(value, dict):
            return [[_MUST_OBJECT]]
        found: list[Violation] | None = None
        for name in required:
            if get(value, name, _ABSENT) is _ABSENT:
                if found is None:
                    found = []
                found.append([None, name])
        seen = 0
        for name, sub in properties:
            item = get(value, name, _ABSENT)
            if item is not _ABSENT:
                seen += 1
                bad = sub(item)
                if bad is not None:
                    for violation in bad:
                        violation.append(name)
                    if found is None:
                        found = bad
                    else:
                        found += bad
        if seen != size(value):
            return extras(value, found)
        return found

    return check


def one_of_check(branches: Sequence[Check]) -> Check:
    """Exactly one branch must pass; every branch is evaluated."""
    branches = tuple(branches)

    def check(value: object) -> list[Violation] | None:
        matched = 0
        for branch in branches:
            if branch(value) is None:
                matched += 1
        if matched == 1:
            return None
        return [[f"must match exactly one oneOf branch (matched {matched})"]]

    return check


def _render(violation: Violation, root: str) -> str:
    text = root
    for index in range(len(violation) - 1, 0, -1):
        segment = violation[index]
        if type(segment) is int:
            text = f"{text}[{segment}]"
        elif text:
            text = f"{text}.{segment}"
        else:
            text = segment
    where = f'"{text or "arguments"}"'
    message = violation[0]
    return f"missing required property {where}" if message is None else f"{where} {message}"


def finish(check: Check, root: str) -> Validator:
    """Wrap a node check into a public validator that renders paths under ``root``."""

    def validate(value: object) -> list[str]:
        try:
            found = check(value)
        except Exception:  # a hostile __iter__/__eq__ is a non-JSON value, never a crash
            found = [[_LOSSY_VALUE]]
        if found is None:
            return []
        return [_render(violation, root) for violation in found]

    return validate


# --------------------------------------------------------------------------- accelerator
# A compiled schema also gets straight-line Python source for its valid path. It only
# reads builtin values of exact types, so no user code (``__eq__``, ``__iter__``,
# ``__class__``) runs before the closure tree would run it too; anything else is a miss.

Predicate: TypeAlias = Callable[[object], bool]
"""Internal: ``True`` only for a value its closure tree certainly accepts."""

_INLINE_LEVELS = 12
"""Deepest indentation the generator writes (the compiler allows 20 nested loops); a node
below it is checked by its own closure, called from the generated code."""

_MAX_NODES = 2000
"""Schema nodes one generated source may visit; shared subtrees are inlined once per use,
so a schema reusing a node at many places could otherwise grow without bound."""

_FAMILIES = {
    "string": "str",
    "number": "num",
    "integer": "num",
    "boolean": "bool",
    "null": "null",
    "object": "obj",
    "array": "arr",
}
"""The JSON type families no value can belong to two of (``oneOf`` dispatch)."""

_FAMILY_TEST = {
    "str": "{t} is str",
    "num": "{t} is int or {t} is float",
    "bool": "{t} is bool",
    "null": "{v} is None",
    "obj": "{t} is dict or {t} is _FD",
    "arr": "{t} is list or {t} is tuple or {t} is _FL",
}

_SCALAR_MISS = {
    "string": "type({v}) is not str",
    "number": "type({v}) is not int and (type({v}) is not float or not _isfinite({v}))",
    "integer": "type({v}) is not int and (type({v}) is not float or not {v}.is_integer())",
    "boolean": "{v} is not True and {v} is not False",
    "null": "{v} is not None",
}
"""When a value of exactly a builtin type fails the scalar check (``_number`` etc.)."""

_OBJECT_MISS = "type({v}) is not dict and type({v}) is not _FD"
_ADMIT_MISS = {
    **{
        kind: "(not _NEG_SMALL < {v} < _SMALL) if type({v}) is int else " + float_miss
        for kind, float_miss in (
            ("number", "(type({v}) is not float or not _isfinite({v}))"),
            ("integer", "(type({v}) is not float or not {v}.is_integer())"),
        )
    },
    "string": "type({v}) is not str or not ({v}.isascii() or _unicode({v}))",
}
"""An admitter's number and string checks: an int must also be short enough for the
snapshot's digit limit (asked first, as ints are the usual case), a string valid Unicode."""
_ARRAY_MISS = "type({v}) is not list and type({v}) is not tuple and type({v}) is not _FL"

_PLAIN_LITERALS = frozenset({str, int, float, bool, type(None)})
_FAIL = "\x00"  # stands for the miss action; schema text never enters the source


class _NotInlined(Exception):
    """Internal: the schema is too large to inline, or (for an admitter) not flat; it gets
    no generated function."""


class _Generator:
    """Writes the body shared by the predicate and the validator of one schema.

    ``admitting`` writes an admitter's instead: its value is the caller's, not yet
    snapshotted, so only a flat object of scalars can be inlined, and each check also
    rules out what the snapshot would reject or change.
    """

    def __init__(self, memo: dict[tuple[int, int], Check], admitting: bool = False) -> None:
        self.memo = memo
        self.admitting = admitting
        self.lines: list[str] = []
        self.names: dict[str, object] = {}
        self.visited = 0

    def bind(self, prefix: str, value: object) -> str:
        name = f"_{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def var(self) -> str:
        self.visited += 1
        if self.visited > _MAX_NODES:
            raise _NotInlined
        return f"x{self.visited}"

    def emit(self, level: int, text: str) -> None:
        self.lines.append("    " * (level + 2) + text)

    def miss_if(self, level: int, condition: str) -> None:
        self.emit(level, f"if {condition}: {_FAIL}")

    def node(self, node: Mapping[str, Any], v: str, depth: int, level: int) -> None:
        """Write the checks of ``node`` on the variable ``v``, or call its closure."""
        self.visited += 1
        if self.visited > _MAX_NODES:
            raise _NotInlined
        kind = node.get("type")
        if level >= _INLINE_LEVELS or not self.inline(node, v, depth, level, kind):
            if self.admitting:
                raise _NotInlined  # a closure checks frozen values, not the caller's
            check = self.bind("c", self.memo[(id(node), depth)])
            self.miss_if(level, f"{check}({v}) is not None")

    def inline(self, node: Mapping[str, Any], v: str, depth: int, level: int, kind: object) -> bool:
        if "oneOf" in node:
            return self.one_of(node["oneOf"], v, depth, level)
        if self.admitting and (kind is None or kind == "array" or (kind == "object" and depth)):
            return False  # a nested or untyped value needs the snapshot's general walk
        if kind is None:
            self.miss_if(level, f"not _lossless({v}, {depth})")
        elif kind == "object":
            return self.object(node, v, depth, level)
        elif kind == "array":
            self.miss_if(level, _ARRAY_MISS.format(v=v))
            items = node.get("items")
            if items is None:
                self.miss_if(level, f"not _lossless({v}, {depth})")
            else:
                item = self.var()
                self.emit(level, f"for {item} in {v}:")
                self.node(items, item, depth + 1, level + 1)
        else:
            return self.scalar(node, v, kind, level)
        return True

    def scalar(self, node: Mapping[str, Any], v: str, kind: Any, level: int) -> bool:
        enum = node.get("enum")
        literals = list(enum or ())
        if "const" in node:
            literals.append(node["const"])
        if any(type(literal) not in _PLAIN_LITERALS for literal in literals):
            return False  # a str subclass in the schema could run its own __eq__
        misses = _ADMIT_MISS if self.admitting else _SCALAR_MISS
        self.miss_if(level, misses.get(kind, _SCALAR_MISS[kind]).format(v=v))
        if enum is not None:
            self.miss_if(level, f"{v} not in {self.bind('e', frozenset(enum))}")
        if "const" in node:
            self.miss_if(level, f"{v} != {self.bind('e', node['const'])}")
        return True

    def object(self, node: Mapping[str, Any], v: str, depth: int, level: int) -> bool:
        properties: Mapping[str, Any] = node.get("properties", {})
        names = node.get("required", ())
        if any(type(name) is not str for name in (*properties, *names)):
            return False  # a str subclass could run its own __hash__/__eq__
        required = set(names)
        if self.admitting:
            # Only a plain dict with str keys: a key equal to a declared name but of
            # another type would otherwise be found by the lookups below.
            self.miss_if(level, f"type({v}) is not dict")
            key = self.var()
            self.emit(level, f"for {key} in {v}:")
            self.miss_if(level + 1, f"type({key}) is not str")
        else:
            self.miss_if(level, _OBJECT_MISS.format(v=v))
        count = sum(1 for name in properties if name in required)
        counter = ""
        for name, child in properties.items():
            key = self.bind("k", name)
            member = self.var()
            if name in required:
                self.emit(level, f"{member} = {v}[{key}]")  # KeyError: a miss
                self.node(child, member, depth + 1, level)
            else:
                if not counter:
                    counter = self.var()
                    self.emit(level, f"{counter} = {count}")
                self.emit(level, f"{member} = {v}.get({key}, _ABSENT)")
                self.emit(level, f"if {member} is not _ABSENT:")
                self.emit(level + 1, f"{counter} += 1")
                self.node(child, member, depth + 1, level + 1)
        size = counter or str(count)
        if self.admitting or node.get("additionalProperties") is False:
            # An admitter leaves any undeclared key (and its value) to the general path.
            self.miss_if(level, f"len({v}) != {size}")
            return True
        declared = self.bind("d", frozenset(properties))
        key, item = self.var(), self.var()
        self.emit(level, f"if len({v}) != {size}:")
        self.emit(level + 1, f"for {key}, {item} in {v}.items():")
        self.miss_if(level + 2, f"type({key}) is not str")
        self.miss_if(level + 2, f"{key} not in {declared} and not _lossless({item}, {depth + 1})")
        return True

    def one_of(self, branches: Sequence[Any], v: str, depth: int, level: int) -> bool:
        """Branches of distinct type families: the value's type picks the only candidate."""
        families = [_FAMILIES.get(branch.get("type")) for branch in branches]
        if None in families or len(set(families)) != len(families):
            return False  # an untyped or nested-oneOf branch, or two that can both match
        t = self.var()
        self.emit(level, f"{t} = type({v})")
        word = "if"
        for branch, family in zip(branches, families, strict=True):
            self.emit(level, f"{word} {_FAMILY_TEST[family].format(t=t, v=v)}:")  # type: ignore[index]
            self.node(branch, v, depth, level + 1)
            word = "elif"
        self.emit(level, f"else: {_FAIL}")
        return True


# --------------------------------------------------------------------------- compile


def _compile(node: Mapping[str, Any], depth: int, memo: dict[tuple[int, int], Check]) -> Check:
    """Translate an already-asserted node; ``depth`` is the nesting of the value it sees."""
    key = (id(node), depth)
    done = memo.get(key)
    if done is not None:
        return done
    kind = node.get("type")
    if "oneOf" in node:
        check = one_of_check([_compile(branch, depth, memo) for branch in node["oneOf"]])
    elif kind is None:
        check = any_check(depth)
    elif kind == "object":
        properties = node.get("properties", {})
        check = object_check(
            node.get("required", ()),
            [(name, _compile(child, depth + 1, memo)) for name, child in properties.items()],
            node.get("additionalProperties") is False,
            depth,
        )
    elif kind == "array":
        items = node.get("items")
        check = array_check(None if items is None else _compile(items, depth + 1, memo), depth)
    else:
        check = scalar_check(kind, node.get("enum"), node.get("const", _ABSENT))
    memo[key] = check
    return check


def _never(value: object) -> bool:
    return False


_SOURCE = "def {name}(v):\n    try:\n{body}\n    except Exception:\n        {miss}\n    {hit}\n"
_CODE_CACHE: dict[str, Any] = {}
"""Compiled accelerators by source: the source holds only structure (names and literals
are bound in the namespace), so every schema of one shape shares one ``compile()``."""


def _generate(
    schema: JsonSchema,
    memo: dict[tuple[int, int], Check],
    name: str,
    miss: str,
    hit: str,
    slow: Validator | None = None,
    admitting: bool = False,
) -> Any:
    """The generated function ``name``; ``None`` when the root itself cannot be inlined
    (a ``oneOf`` whose branches can overlap) or the schema is too big to inline."""
    generator = _Generator(memo, admitting)
    try:
        if not generator.inline(schema, "v", 0, 0, schema.get("type")):
            return None
    except _NotInlined:
        return None
    body = "\n".join(generator.lines).replace(_FAIL, miss)
    source = _SOURCE.format(name=name, body=body, miss=miss, hit=hit)
    code = _CODE_CACHE.get(source)
    if code is None:
        if len(_CODE_CACHE) >= _CACHE_SIZE:
            _CODE_CACHE.clear()
        code = _CODE_CACHE[source] = compile(source, "<dsh_tools accelerator>", "exec")
    namespace: dict[str, Any] = {
        **generator.names,
        "__builtins__": builtins,
        "_ABSENT": _ABSENT,
        "_FD": FrozenDict,
        "_FL": FrozenList,
        "_isfinite": _isfinite,
        "_lossless": is_lossless,
        "_unicode": is_unicode,
        "_slow": slow,
        "_SMALL": SMALL_INT,
        "_NEG_SMALL": NEG_SMALL_INT,
        "_new": dict.__new__,
        "_fill": dict.update,
    }
    exec(code, namespace)
    return namespace[name]


def compile_validator(schema: JsonSchema, *, root: str = "value") -> Validator:
    """Check ``schema`` against the subset once, then return a fast validator for it.

    ``root`` labels the value in messages (``"value" must be a string``); the empty root
    is the argument validator's: ``"arguments" must be an object``, ``"config.host"``.
    Raises :class:`JsonSchemaError` for an unsupported schema.
    """
    assert_supported_json_schema(schema)
    memo: dict[tuple[int, int], Check] = {}
    slow = finish(_compile(schema, 0, memo), root)
    fast = _generate(schema, memo, "_validate", "return _slow(v)", "return []", slow)
    return slow if fast is None else fast


Admitter: TypeAlias = Callable[[object], "FrozenDict | None"]
"""Internal: the frozen copy of a caller's value its schema certainly accepts, else ``None``."""

_ADMIT_HIT = "r = _new(_FD)\n    _fill(r, v)\n    return r"


def compile_admitter(schema: JsonSchema) -> Admitter | None:
    """Snapshot and validation in one step, for the usual call: arguments that are a plain
    dict of scalars.

    The admitter returns what ``snapshot`` would make of such a value once it is certain
    that ``schema`` accepts it, and ``None`` for anything else (a nested or undeclared
    member, a value of another type, one the schema rejects), which then takes the general
    path. ``None`` instead of an admitter when the schema is not a flat object of scalars.
    ``schema`` must already be in the subset (:func:`compile_validator` checks that).
    """
    if schema.get("type") != "object" or "oneOf" in schema:
        return None
    admitter: Admitter | None = _generate(
        schema, {}, "_admit", "return None", _ADMIT_HIT, admitting=True
    )
    return admitter


def _compile_predicate(schema: JsonSchema) -> Predicate:
    """The validator's fast path alone, answering ``True``/``False`` (for tests)."""
    assert_supported_json_schema(schema)
    memo: dict[tuple[int, int], Check] = {}
    _compile(schema, 0, memo)
    fast = _generate(schema, memo, "_accept", "return False", "return True")
    return _never if fast is None else fast


def _compile_closures(schema: JsonSchema, *, root: str = "value") -> Validator:
    """The closure tree alone: the reference the accelerator is tested against."""
    assert_supported_json_schema(schema)
    return finish(_compile(schema, 0, {}), root)


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
