"""The raw JSON Schema subset (behaviors §19, E6) and value validation (§18, E5)."""

from __future__ import annotations

import builtins
import contextlib
import inspect
import math
import traceback
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools._json import MAX_DEPTH, FrozenDict, FrozenList, snapshot
from dsh_tools._schema.codegen import compile_admitter
from dsh_tools._schema.subset import (
    _compile_closures,
    _compile_predicate,
    assert_supported_json_schema,
    assert_supported_output_schema,
    compile_validator,
    validate_json_schema_value,
    validate_structured_value,
)
from dsh_tools.errors import JsonSchemaError, OutputSchemaError
from strategies import KEYS, any_values, json_values, raw_schemas

SUBSET = "type/oneOf/properties/required/additionalProperties/items/enum/const + annotations"


def violations_of(schema: object) -> list[str]:
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema(schema)
    assert caught.value.code == "UNSUPPORTED_SCHEMA"
    assert str(caught.value) == "unsupported JSON schema: " + "; ".join(caught.value.violations)
    return list(caught.value.violations)


# --------------------------------------------------------------------------- subset: accepted


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "string"},
        {"type": "array"},
        {"type": "array", "items": {"type": "integer", "enum": [1, 2.0]}},
        {"oneOf": [{"type": "string"}, {"type": "null"}], "description": "d"},
        {"type": "null", "enum": [None], "const": None},
        {"type": "boolean", "const": True},
        {
            "type": "object",
            "properties": {"a": {}, "toString": {"type": "number", "const": 1.5}},
            "required": ["a", "toString"],
            "additionalProperties": False,
            "title": "t",
            "default": {"a": [1]},
            "examples": [{"a": 1}],
        },
        FrozenDict({"type": "object", "properties": {"a": {"type": "string"}}}),
    ],
)
def test_supported_schemas_pass(schema: dict[str, Any]) -> None:
    assert_supported_json_schema(schema)


def test_a_reused_leaf_is_not_circular() -> None:
    leaf = {"type": "string"}
    assert_supported_json_schema({"type": "object", "properties": {"a": leaf, "b": leaf}})


# --------------------------------------------------------------------------- subset: E6


def test_every_violation_is_collected_in_walk_order() -> None:
    schema = {
        "type": "object",
        "pattern": "x",
        "properties": {"a": {"type": "weird"}, "b": {"type": "string", "minimum": 1}},
    }
    assert violations_of(schema) == [
        f"schema.pattern is not a supported keyword (subset: {SUBSET})",
        "schema.properties.a.type must be one of object/array/string/number/integer/boolean/null",
        f"schema.properties.b.minimum is not a supported keyword (subset: {SUBSET})",
    ]


@pytest.mark.parametrize("keyword", ["anyOf", "allOf", "not", "pattern", "maxLength", "$ref"])
def test_unknown_keywords(keyword: str) -> None:
    assert violations_of({"type": "string", keyword: 1}) == [
        f"schema.{keyword} is not a supported keyword (subset: {SUBSET})"
    ]


@pytest.mark.parametrize(
    "node",
    [None, [], "object", 1, {1: "x"}, (("type", "string"),)],
)
def test_nodes_must_be_schema_objects(node: object) -> None:
    assert violations_of(node) == ["schema must be a schema object"]
    assert violations_of({"type": "object", "properties": {"a": node}}) == [
        "schema.properties.a must be a schema object"
    ]


def test_circular_nodes() -> None:
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["self"] = node
    assert violations_of(node) == ["schema.properties.self is circular"]


def test_annotation_rules() -> None:
    assert violations_of(
        {"description": 1, "title": None, "default": math.nan, "examples": [{1, 2}]}
    ) == [
        "schema.description must be a string",
        "schema.title must be a string",
        "schema.default annotation must be lossless JSON data",
        "schema.examples annotation must be lossless JSON data",
    ]


def test_type_and_one_of_together() -> None:
    schema = {"type": "string", "oneOf": [1], "enum": [1], "bogus": 1}
    assert violations_of(schema) == [
        f"schema.bogus is not a supported keyword (subset: {SUBSET})",
        "schema cannot declare both type and oneOf",
    ]


def test_constraints_without_type_or_one_of() -> None:
    schema = {"const": 1, "items": {}, "enum": [1], "required": [], "properties": {}}
    schema["additionalProperties"] = True
    assert violations_of(schema) == [
        f"schema.{kw} requires type or oneOf"
        for kw in ["properties", "required", "additionalProperties", "items", "enum", "const"]
    ]


@pytest.mark.parametrize("branches", [[], [{}], "x", None, {"a": {}}])
def test_one_of_needs_two_branches(branches: object) -> None:
    assert violations_of({"oneOf": branches}) == [
        "schema.oneOf must be an array of at least two schemas"
    ]


def test_one_of_branches_then_beside_keywords() -> None:
    schema = {"oneOf": [{"type": "x"}, {}], "items": {}, "const": 1}
    assert violations_of(schema) == [
        "schema.oneOf[0].type must be one of object/array/string/number/integer/boolean/null",
        "schema.items is not supported beside oneOf",
        "schema.const is not supported beside oneOf",
    ]


def test_type_values() -> None:
    assert violations_of({"type": ["string", "null"]}) == [
        "schema.type must be a single type string (type arrays are not supported)"
    ]
    assert violations_of({"type": 3}) == [
        "schema.type must be one of object/array/string/number/integer/boolean/null"
    ]


def test_misplaced_keywords() -> None:
    assert violations_of({"type": "object", "items": {}, "enum": [1]}) == [
        'schema.items is not supported on type "object"',
        'schema.enum is not supported on type "object"',
    ]
    assert violations_of(
        {"type": "array", "const": [], "properties": {}, "required": [], "additionalProperties": 1}
    ) == [
        'schema.properties is not supported on type "array"',
        'schema.required is not supported on type "array"',
        'schema.additionalProperties is not supported on type "array"',
        'schema.const is not supported on type "array"',
    ]
    assert violations_of({"type": "string", "items": {}}) == [
        'schema.items is not supported on type "string"'
    ]


def test_object_rules_come_after_children() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "bad"}},
        "required": ["a", "toString", "b"],
        "additionalProperties": "no",
    }
    assert violations_of(schema) == [
        "schema.properties.a.type must be one of object/array/string/number/integer/boolean/null",
        'schema.required names "toString" which is not in properties',
        'schema.required names "b" which is not in properties',
        "schema.additionalProperties must be a boolean",
    ]


@pytest.mark.parametrize("properties", [[], None, "x", {1: {}}])
def test_properties_must_be_a_record(properties: object) -> None:
    assert violations_of({"type": "object", "properties": properties, "required": ["a"]}) == [
        "schema.properties must be an object of schemas",
        'schema.required names "a" which is not in properties',
    ]


@pytest.mark.parametrize("required", ["a", [1], None, {"a": 1}])
def test_required_must_be_strings(required: object) -> None:
    assert violations_of({"type": "object", "required": required}) == [
        "schema.required must be an array of strings"
    ]


@pytest.mark.parametrize(
    ("kind", "enum"),
    [
        ("number", []),
        ("number", ["1"]),
        ("number", [True]),
        ("integer", [1.5]),
        ("number", [math.nan]),
        ("string", "ab"),
        ("boolean", [0]),
        ("null", [0]),
    ],
)
def test_enum_must_match_the_type(kind: str, enum: object) -> None:
    assert violations_of({"type": kind, "enum": enum}) == [
        f"schema.enum must be a non-empty array of {kind} values"
    ]


@pytest.mark.parametrize(
    ("kind", "const"),
    [("integer", 1.5), ("number", math.inf), ("string", 1), ("boolean", 1), ("null", False)],
)
def test_const_must_match_the_type(kind: str, const: object) -> None:
    assert violations_of({"type": kind, "const": const}) == [f"schema.const must be a {kind} value"]


def test_const_must_be_in_enum() -> None:
    assert violations_of({"type": "string", "enum": ["a"], "const": "b"}) == [
        "schema.const must be one of schema.enum when both are declared"
    ]


def test_too_deep_schemas_fail_cleanly() -> None:
    schema: dict[str, Any] = {}
    for _ in range(100_000):
        schema = {"type": "array", "items": schema}
    found = violations_of(schema)
    assert found == [
        "schema" + ".items" * (MAX_DEPTH - 1) + f" nests deeper than {MAX_DEPTH} levels"
    ]


def test_deepest_accepted_schema_can_be_snapshotted() -> None:
    schema: dict[str, Any] = {"type": "string", "enum": ["a"]}
    for _ in range(MAX_DEPTH - 2):
        schema = {"type": "array", "items": schema}
    assert_supported_json_schema(schema)
    snapshot(schema)
    with pytest.raises(JsonSchemaError):
        assert_supported_json_schema({"type": "array", "items": schema})


# --------------------------------------------------------------------------- object-rooted


@pytest.mark.parametrize(
    "schema", [{}, {"type": "string"}, {"type": "array"}, {"oneOf": [{}, {"type": "null"}]}]
)
def test_structured_output_must_be_object_rooted(schema: dict[str, Any]) -> None:
    with pytest.raises(OutputSchemaError) as caught:
        assert_supported_output_schema(schema)
    assert caught.value.violations == (
        'schema.type must be "object" (structured output is object-rooted)',
    )


def test_structured_output_reports_real_problems_first() -> None:
    with pytest.raises(OutputSchemaError) as caught:
        assert_supported_output_schema({"type": "string", "minimum": 1})
    assert caught.value.violations == (
        f"schema.minimum is not a supported keyword (subset: {SUBSET})",
    )
    with pytest.raises(OutputSchemaError):
        assert_supported_output_schema(None)


def test_validate_structured_value() -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    assert_supported_output_schema(schema)
    assert validate_structured_value(schema, {"text": "hi"}) == []
    assert validate_structured_value(schema, {}) == ['missing required property "value.text"']
    with pytest.raises(OutputSchemaError):
        validate_structured_value({"type": "string"}, "x")


# --------------------------------------------------------------------------- values: E5

OBJ = {
    "type": "object",
    "properties": {
        "file": {"type": "string"},
        "nested": {
            "type": "object",
            "properties": {"line": {"type": "integer"}},
            "required": ["line"],
        },
    },
}


def check(schema: dict[str, Any], value: object, root: str = "value") -> list[str]:
    """Both public entry points must agree."""
    found = compile_validator(schema, root=root)(value)
    assert validate_json_schema_value(schema, value, root) == found
    return found


def test_walk_order_example() -> None:
    assert check(OBJ, {"file": 1, "nested": {}}) == [
        '"value.file" must be a string',
        'missing required property "value.nested.line"',
    ]


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("string", 1, "must be a string"),
        ("number", "1", "must be a number"),
        ("number", True, "must be a number"),
        ("number", math.nan, "must be a finite JSON number"),
        ("number", math.inf, "must be a finite JSON number"),
        ("integer", 1.5, "must be an integer"),
        ("integer", True, "must be an integer"),
        ("integer", math.inf, "must be an integer"),
        ("integer", "2", "must be an integer"),
        ("boolean", 0, "must be a boolean"),
        ("null", 0, "must be null"),
        ("array", {"a": 1}, "must be an array"),
        ("array", {1, 2}, "must be an array"),
        ("object", [1], "must be an object"),
        ("object", None, "must be an object"),
    ],
)
def test_type_messages(kind: str, value: object, message: str) -> None:
    assert check({"type": kind}, value) == [f'"value" {message}']


@pytest.mark.parametrize(
    ("kind", "value"),
    [("integer", 2), ("integer", 2.0), ("integer", -0.0), ("number", 2**80), ("number", -0.0)],
)
def test_integral_numbers(kind: str, value: object) -> None:
    assert check({"type": kind}, value) == []


def test_enum_and_const_messages() -> None:
    assert check({"type": "string", "enum": ["red", "grün"]}, "x") == [
        '"value" must be one of ["red","grün"]'
    ]
    assert check({"type": "integer", "enum": [1, 2]}, 3) == ['"value" must be one of [1,2]']
    assert check({"type": "integer", "enum": [1, 2]}, 2.0) == []
    assert check({"type": "string", "const": "a"}, "b") == ['"value" must be "a"']
    assert check({"type": "number", "const": 1}, 2) == ['"value" must be 1']
    assert check({"type": "null", "const": None}, None) == []
    assert check({"type": "boolean", "enum": [True], "const": True}, False) == [
        '"value" must be one of [true]'
    ]
    assert check({"type": "string", "enum": ["a", "b"], "const": "a"}, "b") == [
        '"value" must be "a"'
    ]


def test_missing_required_and_null_is_present() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    assert check(schema, {}) == ['missing required property "value.x"']
    assert check(schema, {"x": None}) == ['"value.x" must be a string']


def test_closed_and_open_objects() -> None:
    closed = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert check(closed, {"a": 1, "extra": 2, "toString": 3}) == [
        '"value.extra" is not a declared property (additionalProperties: false)',
        '"value.toString" is not a declared property (additionalProperties: false)',
    ]
    assert check({"type": "object", "additionalProperties": False}, {}) == []
    assert check({"type": "object", "additionalProperties": True}, {"z": [1]}) == []
    assert check({"type": "object"}, {"z": {"deep": [None]}}) == []


def test_one_of_counts_every_branch() -> None:
    schema = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    assert check(schema, 1) == ['"value" must match exactly one oneOf branch (matched 2)']
    assert check(schema, 1.5) == []
    assert check(schema, "x") == ['"value" must match exactly one oneOf branch (matched 0)']


def test_array_items_by_index() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    assert check(schema, ["a", 1, "b", None]) == [
        '"value[1]" must be a string',
        '"value[3]" must be a string',
    ]
    assert check(schema, ("a", "b")) == []


def test_lossless_messages() -> None:
    assert check({}, math.nan) == ['"value" must be a lossless JSON value']
    assert check({}, {1: 2}) == ['"value" must be a lossless JSON value']
    assert check({"type": "object"}, {"x": {1, 2}}) == ['"value" must be a lossless JSON object']
    assert check({"type": "object"}, {1: "x"}) == ['"value" must be a lossless JSON object']
    closed = {"type": "object", "additionalProperties": False}
    assert check(closed, {1: "x"}) == ['"value" must be a lossless JSON object']
    assert check({"type": "array"}, [1, b"x"]) == ['"value" must be a dense lossless JSON array']
    # lossless checks only run once the structure is valid
    typed = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert check(typed, {"a": 1, "b": math.nan}) == ['"value.a" must be a string']


def test_root_labels() -> None:
    schema = {
        "type": "object",
        "properties": {
            "servers": {
                "type": "array",
                "items": {"type": "object", "properties": {"host": {}}, "required": ["host"]},
            }
        },
    }
    assert check(schema, {"servers": [{"host": 1}, {}]}, root="") == [
        'missing required property "servers[1].host"'
    ]
    assert check(schema, "x", root="") == ['"arguments" must be an object']
    assert check(schema, "x", root="result") == ['"result" must be an object']


def test_hostile_values_never_raise() -> None:
    class Exploding(dict[str, Any]):
        def __iter__(self) -> Any:
            raise RuntimeError("boom")

    class BadList(list[Any]):
        def __iter__(self) -> Any:
            raise RuntimeError("boom")

    assert check({"type": "object"}, Exploding(a=1)) == []
    assert check({"type": "array", "items": {}}, BadList([1])) == [
        '"value" must be a lossless JSON value'
    ]


def test_deep_values_fail_cleanly() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    assert check({}, value) == ['"value" must be a lossless JSON value']
    assert check({"type": "array", "items": {"type": "array"}}, value) == [
        '"value[0]" must be a dense lossless JSON array'
    ]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert check({"type": "array"}, cyclic) == ['"value" must be a dense lossless JSON array']


def test_compile_rejects_unsupported_schemas() -> None:
    with pytest.raises(JsonSchemaError):
        compile_validator({"type": "string", "format": "uri"})
    with pytest.raises(JsonSchemaError):
        validate_json_schema_value(FrozenDict({"type": "nope"}), 1)


def test_frozen_schemas_are_compiled_once() -> None:
    schema = FrozenDict({"type": "string"})
    assert validate_json_schema_value(schema, 1) == ['"value" must be a string']
    assert validate_json_schema_value(schema, "x") == []


# --------------------------------------------------------------------------- properties


@given(raw_schemas(), any_values())
def test_validators_never_raise(schema: dict[str, Any], value: object) -> None:
    found = compile_validator(schema)(value)
    assert all(isinstance(message, str) for message in found)


@given(raw_schemas(), json_values())
def test_one_implementation_for_both_entry_points(schema: dict[str, Any], value: object) -> None:
    assert compile_validator(schema)(value) == validate_json_schema_value(schema, value)


@given(raw_schemas())
def test_accepted_schemas_are_lossless_json(schema: dict[str, Any]) -> None:
    assert_supported_json_schema(schema)
    assert snapshot(schema) == schema


@given(any_values())
def test_assertion_raises_nothing_but_schema_errors(schema: object) -> None:
    with contextlib.suppress(JsonSchemaError):
        assert_supported_json_schema(schema)


@given(st.sampled_from(["string", "number", "integer", "boolean", "null"]), json_values())
def test_scalar_validation_matches_python_types(kind: str, value: object) -> None:
    ok = {
        "string": isinstance(value, str),
        "number": type(value) in (int, float),
        "integer": type(value) is int or (type(value) is float and value.is_integer()),  # type: ignore[union-attr]
        "boolean": type(value) is bool,
        "null": value is None,
    }[kind]
    assert (check({"type": kind}, value) == []) == ok


class _Hostile:
    """Comparing or hashing it raises: validators must still answer."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    def __hash__(self) -> int:
        raise RuntimeError("no hashing me")


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "string", "enum": ["a"]},
        {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        {"oneOf": [{"type": "null"}, {"type": "array"}]},
    ],
)
def test_hostile_leaves_never_raise(schema: dict[str, Any]) -> None:
    assert compile_validator(schema)(_Hostile()) != []
    assert compile_validator(schema)({"a": _Hostile()}) != []


def test_mappings_that_are_not_dicts_are_not_objects() -> None:
    assert check({"type": "object"}, MappingProxyType({"a": 1})) == ['"value" must be an object']
    assert check({}, MappingProxyType({"a": 1})) == ['"value" must be a lossless JSON value']


# --------------------------------------------------------------------------- accelerator


class _Text(str):
    """A str subclass: a string to the closures, a miss for the accelerator."""


_TRICKY = st.sampled_from(
    [
        *[None, True, False, 0, 1, 2.0, 2.5, -0.0, 2**80, math.nan, math.inf, -math.inf],
        *["", "a", _Text("a"), [], (), {}, FrozenDict(), FrozenList(), b"x", {1: 2}],
    ]
)

_VALID_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=3) | st.builds(_Text, st.text(max_size=2)),
    "number": st.integers(-3, 3) | st.floats(-3, 3, allow_nan=False) | st.just(2**80),
    "integer": st.integers(-3, 3) | st.sampled_from([2.0, -0.0, 2**80]),
    "boolean": st.booleans(),
    "null": st.none(),
}
_NEAR_MISSES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.sampled_from([1, None, b"a", ["a"]]),
    "number": st.sampled_from([True, math.nan, math.inf, "1", None]),
    "integer": st.sampled_from([2.5, True, False, math.inf, math.nan, "2", None]),
    "boolean": st.sampled_from([0, 1, "true", None]),
    "null": st.sampled_from([0, False, "", (), {}]),
}


def _object_value(
    members: dict[str, Any], drop: set[str], extra: dict[Any, Any], frozen: bool
) -> object:
    value = {name: item for name, item in members.items() if name not in drop}
    value.update((key, item) for key, item in extra.items() if key not in members)
    return _frozen(value) if frozen else value


def _frozen(value: object) -> object:
    """The snapshot of ``value`` when it has one (what the pipeline passes), else itself."""
    try:
        return snapshot(value)
    except Exception:
        return value


def near_values(schema: Any, clean: bool) -> st.SearchStrategy[Any]:
    """Values shaped by ``schema``: mostly valid when ``clean`` (so the fast path is taken),
    else with the classic near misses (bool for int, NaN, missing and undeclared keys)."""
    if "oneOf" in schema:
        base = st.one_of([near_values(branch, clean) for branch in schema["oneOf"]])
    elif "type" not in schema:
        base = json_values(4) if clean else any_values(4)
    elif schema["type"] == "object":
        properties = schema.get("properties", {})
        names = sorted(properties)
        base = st.builds(
            _object_value,
            st.fixed_dictionaries(
                {name: near_values(sub, clean) for name, sub in properties.items()}
            ),
            st.just(set()) if clean or not names else st.sets(st.sampled_from(names), max_size=2),
            st.just({}) if clean else st.dictionaries(KEYS | st.just(1), any_values(3), max_size=2),
            st.booleans(),
        )
    elif schema["type"] == "array":
        items = near_values(schema["items"], clean) if "items" in schema else json_values(3)
        base = st.lists(items, max_size=3).flatmap(
            lambda members: st.sampled_from([members, tuple(members), _frozen(members)])
        )
    else:
        kind = schema["type"]
        literals = list(schema.get("enum", ())) + ([schema["const"]] if "const" in schema else [])
        base = st.sampled_from(literals) if literals else _VALID_SCALARS[kind]
        if not clean:
            base = base | _VALID_SCALARS[kind] | _NEAR_MISSES[kind]
    return base if clean else base | _TRICKY


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _plain(value: object) -> bool:
    """Made only of exact builtin JSON-ish types, the values the accelerator answers for."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind in (dict, FrozenDict):
        return all(type(key) is str and _plain(item) for key, item in value.items())  # type: ignore[attr-defined]
    if kind in (list, tuple, FrozenList):
        return all(_plain(item) for item in value)  # type: ignore[attr-defined]
    return False


def _checks(schema: Any) -> tuple[Any, Any]:
    return compile_validator(schema), _compile_predicate(schema)


def _differential(schema: Any, value: object) -> None:
    validator = compile_validator(schema, root="")
    accept = _compile_predicate(schema)
    reference = _compile_closures(schema, root="")(value)
    assert validator(value) == reference
    accepted = accept(value)
    assert type(accepted) is bool
    if accepted:
        assert reference == []
    generated = accept.__name__ == "_accept"
    if generated and _plain(value):  # no false misses on plain data, so it accelerates
        assert accepted == (reference == [])


@settings(max_examples=200)
@given(st.data())
def test_accelerator_matches_the_closure_tree(data: st.DataObject) -> None:
    schema = data.draw(raw_schemas())
    value = data.draw(near_values(schema, data.draw(st.booleans())) | any_values(4))
    _differential(schema, value)


_EDGE_VALUES = [
    *[None, True, False, 0, 1, -1, 2.0, -0.0, 2.5, 2**80, math.nan, math.inf, -math.inf],
    *["", "x", _Text("x"), b"x", bytearray(b"x"), [], ["x"], (), {}, {"x": 1}, {1: 2}],
    *[FrozenDict(), FrozenList(), _Hostile(), object()],
]


@pytest.mark.parametrize("kind", ["string", "number", "integer", "boolean", "null"])
@pytest.mark.parametrize("value", _EDGE_VALUES, ids=repr)
def test_accelerator_on_every_scalar_edge(kind: str, value: object) -> None:
    _differential({"type": kind}, value)
    nested = {"type": "object", "properties": {"p": {"type": kind}}, "required": ["p"]}
    _differential(nested, {"p": value})
    _differential({"type": "array", "items": {"type": kind}}, [value])
    _differential({"oneOf": [{"type": kind}, {"type": "array"}]}, value)


_ARGS_SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "number", "enum": [1, 2.5]},
        "s": {"type": "string", "const": "x"},
        "flag": {"type": "boolean"},
        "n": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "both": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "any": {},
        "raw": {"type": "array"},
        "cfg": {
            "type": "object",
            "properties": {"host": {"type": "string"}},
            "required": ["host"],
        },
    },
    "required": ["a", "n"],
    "additionalProperties": False,
}


@given(near_values(_ARGS_SCHEMA, clean=True) | near_values(_ARGS_SCHEMA, clean=False))
def test_accelerator_on_an_argument_shaped_schema(value: object) -> None:
    _differential(_ARGS_SCHEMA, value)


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "n": None},
        {"a": 2.0, "n": "x", "b": 2.5, "s": "x", "flag": False, "both": 1.5},
        {"a": 1, "n": None, "tags": ("x",), "any": {"k": [1]}, "raw": [None], "cfg": {"host": ""}},
        {"a": True, "n": None},
        {"a": 1, "n": None, "b": 2},
        {"a": 1, "n": None, "both": 1},
        {"a": 1, "n": _Text("x")},
        {"a": 1},
        {"a": 1, "n": None, "extra": 1},
        {"a": 1, "n": None, "cfg": {}},
        {"a": 1, "n": None, "cfg": {"host": "h", 1: 2}},
        {"a": 1, "n": None, "any": math.nan},
        {"a": math.inf, "n": None},
    ],
)
def test_accelerator_examples(value: dict[Any, Any]) -> None:
    _differential(_ARGS_SCHEMA, value)
    _differential(_ARGS_SCHEMA, _frozen(value))


def test_the_small_schema_is_accelerated() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    validator, accept = _checks(schema)
    assert accept({"a": 1, "b": 2}) is True
    assert accept(snapshot({"a": 1, "b": 2.0})) is True
    assert accept({"a": 1, "b": True}) is False
    assert validator({"a": 1, "b": 2}) == []
    assert validator({"a": 1, "b": True}) == ['"value.b" must be an integer']


def test_overlapping_one_of_roots_and_huge_schemas_fall_back() -> None:
    overlapping = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    validator, accept = _checks(overlapping)
    assert accept(1.5) is False
    assert validator(1.5) == []
    assert validator(1) == ['"value" must match exactly one oneOf branch (matched 2)']
    node: dict[str, Any] = {"type": "string"}
    for _ in range(12):  # a shared node: 4 096 paths through a small schema
        node = {"type": "object", "properties": {"l": node, "r": node}}
    validator, accept = _checks(node)
    assert accept({}) is False
    assert validator({"l": {"r": 1}}) == ['"value.l.r" must be an object']


def test_deep_schemas_call_the_closures_below_the_inline_limit() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    value: Any = 1
    for _ in range(40):
        schema = {"type": "array", "items": schema}
        value = [value]
    validator, accept = _checks(schema)
    assert accept(value) is True
    assert validator(value) == []
    bad = value
    for _ in range(39):
        bad = bad[0]
    bad[0] = "x"
    assert accept(value) is False
    assert validator(value) == [f'"value{"[0]" * 40}" must be an integer']


HOSTILE_NAMES = [
    "a\nimport builtins; builtins.DSH_INJECTED = True\n",
    "'); builtins.DSH_INJECTED = True; ('",
    '"""',
    "\\",
    "__import__('os').system('false')",
    "{v}",
    "\x00",
    "é\u2028ß",
    "",
    "_k0",
    "v",
]


def test_hostile_property_names_cannot_inject_code() -> None:
    schema = {
        "type": "object",
        "properties": {
            name: {"type": "string", "enum": [name, "x"], "const": name} for name in HOSTILE_NAMES
        },
        "required": HOSTILE_NAMES[:3],
        "additionalProperties": False,
    }
    validator, accept = compile_validator(schema), _compile_predicate(schema)
    assert validator.__name__ == "_validate"
    good = {name: name for name in HOSTILE_NAMES}
    assert accept(good) is True
    assert accept(snapshot(good)) is True
    assert validator(good) == []
    bad = {**good, HOSTILE_NAMES[4]: "x"}
    assert accept(bad) is False
    assert validator(bad) == [f'"value.{HOSTILE_NAMES[4]}" must be "{HOSTILE_NAMES[4]}"']
    assert validator({"{v}": "{v}"}) == [
        f'missing required property "value.{name}"' for name in HOSTILE_NAMES[:3]
    ]
    assert not hasattr(builtins, "DSH_INJECTED")
    for code in (validator.__code__, accept.__code__):  # type: ignore[attr-defined]
        assert not set(HOSTILE_NAMES) & {c for c in code.co_consts if isinstance(c, str)}


def test_str_subclasses_in_schemas_are_left_to_the_closures() -> None:
    schema = {
        "type": "object",
        "properties": {
            _Text("a"): {"type": "string", "enum": [_Text("x"), "y"]},
            "b": {"type": "string", "const": _Text("z")},
        },
        "required": [_Text("a")],
    }
    for value in ({"a": "x"}, {"a": "y", "b": "z"}, {"a": "q"}, {"b": "z"}, {"a": "x", "b": 1}):
        _differential(schema, value)
        _differential(schema, snapshot(value))


# --------------------------------------------------------------------------- admitter


class _LookAlike:
    """Hashes and compares like the key ``"a"`` but is no str: a dict lookup finds it."""

    def __hash__(self) -> int:
        return hash("a")

    def __eq__(self, other: object) -> bool:
        return other == "a"


_FLAT_PROPERTIES = {
    "a": {"type": "integer"},
    "b": {"type": "number", "enum": [1, 2.5]},
    "s": {"type": "string", "const": "x"},
    "flag": {"type": "boolean"},
    "n": {"oneOf": [{"type": "string"}, {"type": "null"}]},
}
_FLAT_SCHEMAS = [
    {"type": "object", "properties": _FLAT_PROPERTIES, "required": ["a", "n"]},
    {**{"type": "object", "properties": _FLAT_PROPERTIES}, "additionalProperties": False},
    {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
]


def _flat_and_plain(value: object, schema: Any) -> bool:
    """A plain dict of scalars an admitter must take: declared str keys, exact builtin
    scalars, ints short enough for JSON text, finite floats."""
    if type(value) is not dict:
        return False
    for key, item in value.items():
        if type(key) is not str or key not in schema["properties"]:
            return False
        if type(item) not in _PLAIN or item != item or item in (math.inf, -math.inf):
            return False
        if type(item) is int and abs(item) >= 10**4000:
            return False
    return True


def _admit_differential(schema: Any, value: object) -> None:
    """The admitter answers as snapshot-then-validate would, or leaves the value to them."""
    admit = compile_admitter(schema)
    assert admit is not None
    admitted = admit(value)
    valid = _compile_closures(schema, root="")
    if admitted is None:
        if _flat_and_plain(value, schema):  # no false misses: the usual call is admitted
            assert valid(snapshot(value)) != []
        return
    frozen = snapshot(value, "arguments")
    assert type(admitted) is FrozenDict
    assert list(admitted.items()) == list(frozen.items())  # type: ignore[union-attr]
    assert [type(item) for item in admitted.values()] == [type(item) for item in frozen.values()]  # type: ignore[union-attr]
    assert valid(frozen) == []
    assert admitted is not value


@settings(max_examples=200)
@given(st.data())
def test_the_admitter_matches_snapshot_then_validation(data: st.DataObject) -> None:
    schema = data.draw(st.sampled_from(_FLAT_SCHEMAS))
    value = data.draw(near_values(schema, data.draw(st.booleans())) | any_values(4))
    _admit_differential(schema, value)


_ADMITTED = [{"x": 1}, {"x": 2.0}, {"x": 2**80}]
_LEFT = [
    *[{"x": True}, {"x": 10**4000}, {"x": math.inf}, {"x": 1, "y": [1]}, {"x": 1, "y": 2}],
    *[{_Text("x"): 1}, {_LookAlike(): 1, "x": 1}, {"x": 1, 1: 2}, {}],
    *[FrozenDict({"x": 1}), MappingProxyType({"x": 1}), [("x", 1)], None],
]


@pytest.mark.parametrize(
    ("value", "admitted"),
    [*[(value, True) for value in _ADMITTED], *[(value, False) for value in _LEFT]],
    ids=lambda value: f"{type(value).__name__}:{value!r}",
)
def test_the_admitter_leaves_anything_unusual_to_the_general_path(
    value: object, admitted: bool
) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    admit = compile_admitter(schema)
    assert admit is not None
    assert (admit(value) is not None) is admitted
    _admit_differential(schema, value)


def test_the_admitter_copies_in_the_callers_order() -> None:
    admit = compile_admitter(_FLAT_SCHEMAS[0])
    assert admit is not None
    value = {"n": None, "flag": True, "a": -3}
    admitted = admit(value)
    assert list(admitted) == ["n", "flag", "a"]  # type: ignore[arg-type]
    value["a"] = 4  # the caller's dict is copied, never kept
    assert admitted == {"n": None, "flag": True, "a": -3}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "properties": {"cfg": {"type": "object"}}},
        {"type": "object", "properties": {"any": {}}},
        {"type": "string"},
        {"oneOf": [{"type": "object"}, {"type": "null"}]},
        {
            "type": "object",
            "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
        },
    ],
)
def test_only_flat_objects_of_scalars_get_an_admitter(schema: dict[str, Any]) -> None:
    assert compile_admitter(schema) is None


# --------------------------------------------------------------------------- generated source


def test_generated_validators_show_their_source_in_tracebacks() -> None:
    """Generated source is registered with linecache (as attrs and cattrs do), so a
    traceback through a generated validator shows the line that ran."""

    class Stop(BaseException):
        """Not an Exception: nothing on the way catches it."""

    class Hostile(str):
        def __hash__(self) -> int:
            raise Stop

    validator = compile_validator({"type": "string", "enum": ["a", "b"]})
    source = inspect.getsource(validator)
    assert source.startswith("def _validate(v):\n")
    assert "return _slow(v)" in source

    with pytest.raises(Stop) as caught:
        validator(Hostile("a"))
    [generated] = [frame for frame in traceback.extract_tb(caught.tb) if frame.name == "_validate"]
    assert generated.filename.startswith("<dsh_tools generated validator ")
    assert generated.line is not None
    assert generated.line.startswith("if type(v) is not str")
