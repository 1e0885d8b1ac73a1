"""The typed schema DSL (behaviors §17, E7) and ``validate_args`` (§18)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given

from dsh_tools import ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools._json import MAX_DEPTH, FrozenDict
from dsh_tools._schema.dsl import (
    SchemaSpec,
    schema_spec_to_json_schema,
    validate_args,
    value_spec_to_json_schema,
)
from dsh_tools._schema.subset import assert_supported_json_schema, compile_validator
from dsh_tools.errors import JsonSchemaError
from strategies import any_values, dsl_parameter_specs, dsl_value_specs, json_values

TYPE_WORDS = "string/number/integer/boolean/null/array/object/json"


def dsl_error(compile_it: Any, spec: object) -> list[str]:
    with pytest.raises(JsonSchemaError) as caught:
        compile_it(spec)
    return list(caught.value.violations)


# --------------------------------------------------------------------------- compilation


def test_required_flags_become_a_required_list() -> None:
    spec: SchemaSpec = {
        "path": {"type": "string", "required": True, "description": "Absolute path"},
        "offset": {"type": "number"},
        "limit": {"type": "number", "description": "Max lines"},
    }
    schema = schema_spec_to_json_schema(spec)
    assert isinstance(schema, FrozenDict)
    assert schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path"},
            "offset": {"type": "number"},
            "limit": {"type": "number", "description": "Max lines"},
        },
        "required": ["path"],
    }
    assert schema_spec_to_json_schema({"a": {"type": "string"}}) == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
    }
    assert schema_spec_to_json_schema({}) == {"type": "object", "properties": {}}


def test_nested_objects_keep_their_own_required() -> None:
    spec: SchemaSpec = {
        "config": {
            "type": "object",
            "additionalProperties": True,
            "required": True,
            "properties": {
                "host": {"type": "string", "required": True},
                "port": {"type": "number"},
            },
        }
    }
    assert schema_spec_to_json_schema(spec) == {
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "additionalProperties": True,
                "properties": {"host": {"type": "string"}, "port": {"type": "number"}},
                "required": ["host"],
            }
        },
        "required": ["config"],
    }


def test_objects_are_open_unless_closed() -> None:
    assert value_spec_to_json_schema({"type": "object"}) == {"type": "object"}
    closed = value_spec_to_json_schema(
        {"type": "object", "additionalProperties": False, "properties": {}}
    )
    assert closed == {"type": "object", "additionalProperties": False, "properties": {}}
    assert compile_validator(closed)({}) == []
    assert compile_validator(closed)({"a": 1}) == [
        '"value.a" is not a declared property (additionalProperties: false)'
    ]
    assert compile_validator(value_spec_to_json_schema({"type": "object"}))({"a": [1]}) == []


@pytest.mark.parametrize("kind", ["string", "number", "integer", "boolean", "null"])
def test_scalars_copy_only_given_keys(kind: str) -> None:
    assert value_spec_to_json_schema({"type": kind}) == {"type": kind}  # type: ignore[typeddict-item]


def test_every_keyword_is_copied() -> None:
    spec: dict[str, Any] = {
        "type": "integer",
        "enum": [1, 2],
        "const": 1,
        "description": "d",
        "title": "t",
        "default": 1,
        "examples": [2],
    }
    assert value_spec_to_json_schema(spec) == spec
    assert value_spec_to_json_schema({"type": "array"}) == {"type": "array"}
    assert value_spec_to_json_schema({"type": "array", "items": {"type": "null"}}) == {
        "type": "array",
        "items": {"type": "null"},
    }
    assert value_spec_to_json_schema({"type": "json", "title": "any"}) == {"title": "any"}
    assert value_spec_to_json_schema(
        {"oneOf": [{"type": "string"}, {"type": "json"}], "description": "x"}
    ) == {"oneOf": [{"type": "string"}, {}], "description": "x"}


def test_default_is_never_applied() -> None:
    spec: SchemaSpec = {"limit": {"type": "number", "default": 25}}
    assert validate_args(spec, {}) == []


def test_one_of_property_may_be_required() -> None:
    spec: SchemaSpec = {"v": {"oneOf": [{"type": "string"}, {"type": "null"}], "required": True}}
    assert schema_spec_to_json_schema(spec)["required"] == ["v"]


def test_odd_property_names_are_data() -> None:
    spec: SchemaSpec = {"__proto__": {"type": "string", "required": True}}
    assert validate_args(spec, {}) == ['missing required property "__proto__"']


def test_reused_sub_specs_are_not_circular() -> None:
    leaf: dict[str, Any] = {"type": "string"}
    assert schema_spec_to_json_schema({"a": leaf, "b": leaf})["properties"] == {
        "a": {"type": "string"},
        "b": {"type": "string"},
    }


def test_the_parameter_root_is_open_unless_the_author_closes_it() -> None:
    properties: dict[str, Any] = {"path": {"type": "string", "required": True}}
    registry = ToolRegistry()
    for name, parameters in (
        ("open", properties),
        ("closed", {"type": "object", "properties": properties, "additionalProperties": False}),
    ):
        registry.register(
            define_tool(
                name=name, description=name, parameters=parameters, execute=lambda a, c: "ran"
            )
        )

    def run(name: str) -> Any:
        return registry.execute_sync(ToolExecutionInput("1", name, {"path": "a", "lines": 5}))

    assert run("open").text == "ran"
    refused = run("closed")
    assert refused.code == "INVALID_ARGS"
    assert refused.error.message == (
        'invalid arguments: "lines" is not a declared property (additionalProperties: false)'
    )
    assert registry.get("closed").parameters == {  # type: ignore[union-attr]
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }


def test_an_object_root_always_lists_its_properties() -> None:
    assert schema_spec_to_json_schema({"type": "object", "additionalProperties": False}) == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert schema_spec_to_json_schema(
        {"title": "Search", "type": "object", "properties": {"q": {"type": "string"}}}
    ) == {"type": "object", "properties": {"q": {"type": "string"}}, "title": "Search"}


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        (
            {"type": "array", "items": {"type": "string"}},
            'parameters.type must be "object": a tool\'s arguments are an object',
        ),
        (
            {"type": "object", "required": True},
            "parameters.required is not supported by the value schema DSL",
        ),
        (
            {"type": "object", "properties": {"q": {"type": "text"}}},
            f"parameters.properties.q.type must be {TYPE_WORDS}, or use oneOf",
        ),
    ],
)
def test_object_root_errors(spec: object, violation: str) -> None:
    assert dsl_error(schema_spec_to_json_schema, spec) == [violation]


@pytest.mark.parametrize(
    ("literal", "kind"),
    [(1, "integer"), (1.5, "number"), ("auto", "string"), (True, "boolean"), (None, "null")],
)
def test_a_const_without_type_takes_the_type_of_its_value(literal: object, kind: str) -> None:
    spec: Any = {"const": literal}
    assert value_spec_to_json_schema(spec) == {"type": kind, "const": literal}


def test_a_union_of_constants_needs_no_types() -> None:
    spec: SchemaSpec = {
        "level": {"oneOf": [{"const": 1}, {"const": 2}, {"const": "max"}], "required": True}
    }

    assert schema_spec_to_json_schema(spec)["properties"]["level"] == {
        "oneOf": [
            {"type": "integer", "const": 1},
            {"type": "integer", "const": 2},
            {"type": "string", "const": "max"},
        ]
    }
    assert validate_args(spec, {"level": 2}) == []
    assert validate_args(spec, {"level": "max"}) == []
    assert validate_args(spec, {"level": True}) == [
        '"level" must match exactly one oneOf branch (matched 0)'
    ]


def test_a_const_without_type_must_be_a_scalar() -> None:
    assert dsl_error(value_spec_to_json_schema, {"const": [1]}) == [
        "schema.const must be a string, number, boolean or null to stand without a type"
    ]


# --------------------------------------------------------------------------- E7


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        (
            {"type": "string", "extra": True},
            "schema.extra is not supported by the value schema DSL",
        ),
        (
            {"type": "string", "minLength": 1},
            "schema.minLength is not supported by the value schema DSL",
        ),
        ({"type": "array", "enum": [1]}, "schema.enum is not supported by the value schema DSL"),
        ({"type": "json", "const": 1}, "schema.const is not supported by the value schema DSL"),
        ({"type": "object", "items": {}}, "schema.items is not supported by the value schema DSL"),
        (
            {"type": "string", "required": True},
            "schema.required is not supported by the value schema DSL",
        ),
        (
            {"type": "array", "items": {"type": "string", "required": True}},
            "schema.items.required is not supported by the value schema DSL",
        ),
        (
            {"oneOf": [{"type": "string", "required": True}, {"type": "null"}]},
            "schema.oneOf[0].required is not supported by the value schema DSL",
        ),
        (
            {"oneOf": [{"type": "string"}, {"type": "null"}], "enum": ["a"]},
            "schema.enum is not supported by the value schema DSL",
        ),
        (
            {},
            f"schema.type must be {TYPE_WORDS}, or use oneOf",
        ),
        (
            {"type": "weird"},
            f"schema.type must be {TYPE_WORDS}, or use oneOf",
        ),
        (
            {"type": ["string"]},
            f"schema.type must be {TYPE_WORDS}, or use oneOf",
        ),
        ({"type": "array", "items": 42}, "schema.items must be a value schema object"),
        ({"type": "array", "items": None}, "schema.items must be a value schema object"),
        (
            {"type": "object", "properties": {"bad": 42}},
            "schema.properties.bad must be a value schema object",
        ),
        (
            {"type": "object", "properties": [1]},
            "schema.properties must be an object of value schemas",
        ),
        ({"type": "string", "oneOf": []}, "schema cannot declare both type and oneOf"),
        ({"oneOf": "x"}, "schema.oneOf must be an array of at least two value schemas"),
        (
            {"oneOf": [{"type": "string"}]},
            "schema.oneOf must be an array of at least two value schemas",
        ),
        (
            {"type": "object", "additionalProperties": "yes"},
            "schema.additionalProperties must be explicitly true or false",
        ),
        (
            {"type": "string", "enum": "ab"},
            "schema.enum must be a non-empty array of scalar values",
        ),
        ({"type": "string", "enum": []}, "schema.enum must be a non-empty array of scalar values"),
        (
            {"type": "string", "enum": [["a"]]},
            "schema.enum must be a non-empty array of scalar values",
        ),
        (
            {"type": "number", "enum": [math.nan]},
            "schema.enum must be a non-empty array of scalar values",
        ),
        ({"type": "string", "description": 1}, "schema.description must be a string"),
        ({"type": "string", "title": 1}, "schema.title must be a string"),
        (
            {"type": "string", "default": {1, 2}},
            "schema.default annotation must be lossless JSON data",
        ),
        (
            {"type": "string", "examples": [b"x"]},
            "schema.examples annotation must be lossless JSON data",
        ),
        (None, "schema must be a value schema object"),
        ({1: "x"}, "schema must be a value schema object"),
    ],
)
def test_value_spec_errors(spec: object, violation: str) -> None:
    assert dsl_error(value_spec_to_json_schema, spec) == [violation]


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        (
            {"value": {"type": "string", "required": False}},
            "parameters.value.required must be true when present",
        ),
        (
            {"value": {"type": "string", "required": "yes"}},
            "parameters.value.required must be true when present",
        ),
        ({"bad": 42}, "parameters.bad must be a value schema object"),
        ([], "parameters must be an object of value schemas"),
        (None, "parameters must be an object of value schemas"),
        ({1: {"type": "string"}}, "parameters must be an object of value schemas"),
        (
            {"x": {"type": "array", "items": {"type": "object", "properties": {"y": {}}}}},
            "parameters.x.items.properties.y.type must be "
            "string/number/integer/boolean/null/array/object/json, or use oneOf",
        ),
    ],
)
def test_parameter_spec_errors(spec: object, violation: str) -> None:
    assert dsl_error(schema_spec_to_json_schema, spec) == [violation]


def test_only_the_first_author_problem_is_reported() -> None:
    spec = {"a": {"type": "weird"}, "b": {"type": "string", "extra": 1}}
    assert dsl_error(schema_spec_to_json_schema, spec) == [
        f"parameters.a.type must be {TYPE_WORDS}, or use oneOf"
    ]


def test_type_errors_of_literals_come_from_the_raw_subset() -> None:
    spec: SchemaSpec = {"n": {"type": "number", "enum": ["1", "2"]}}
    assert dsl_error(schema_spec_to_json_schema, spec) == [
        "schema.properties.n.enum must be a non-empty array of number values"
    ]
    assert dsl_error(value_spec_to_json_schema, {"type": "integer", "const": 1.5}) == [
        "schema.const must be a integer value"
    ]
    assert dsl_error(
        value_spec_to_json_schema, {"type": "string", "enum": ["a"], "const": "b"}
    ) == ["schema.const must be one of schema.enum when both are declared"]


def test_circular_specs() -> None:
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["self"] = node
    assert dsl_error(value_spec_to_json_schema, node) == ["schema.properties.self is circular"]
    items: dict[str, Any] = {"type": "array"}
    items["items"] = items
    assert dsl_error(schema_spec_to_json_schema, {"x": items}) == ["parameters.x.items is circular"]


def test_deep_specs_fail_cleanly() -> None:
    spec: dict[str, Any] = {"type": "string"}
    for _ in range(100_000):
        spec = {"type": "array", "items": spec}
    found = dsl_error(value_spec_to_json_schema, spec)
    assert found == [
        "schema" + ".items" * (MAX_DEPTH - 1) + f" nests deeper than {MAX_DEPTH} levels"
    ]
    nested: dict[str, Any] = {"type": "string"}
    for _ in range(100_000):
        nested = {"type": "object", "properties": {"a": nested}}
    (message,) = dsl_error(schema_spec_to_json_schema, {"a": nested})
    assert message.startswith("parameters.a.properties.a.")
    assert message.endswith(f"nests deeper than {MAX_DEPTH} levels")


# --------------------------------------------------------------------------- validate_args


SPEC: SchemaSpec = {
    "path": {"type": "string", "required": True},
    "config": {
        "type": "object",
        "properties": {"host": {"type": "string", "required": True}},
        "additionalProperties": False,
    },
    "servers": {
        "type": "array",
        "items": {"type": "object", "properties": {"host": {"type": "string", "required": True}}},
    },
    "color": {"type": "string", "enum": ["red", "green"]},
    "n": {"type": "number"},
    "i": {"type": "integer"},
    "b": {"type": "boolean"},
    "x": {"type": "null"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "bag": {"type": "object"},
    "v": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
    "k": {"type": "string", "const": "a"},
}


@pytest.mark.parametrize("args", [None, "s", [], 1, 1.5, True])
def test_root_must_be_an_object(args: object) -> None:
    assert validate_args(SPEC, args) == ['"arguments" must be an object']


def test_argument_messages() -> None:
    args = {
        "config": {"extra": 1},
        "servers": [{"host": "a"}, {}],
        "color": "blue",
        "n": math.inf,
        "i": 1.5,
        "b": "yes",
        "x": 0,
        "tags": ["a", 2],
        "bag": [],
        "v": 1,
        "k": "b",
        "undeclared": "fine: the parameter root is open",
    }
    assert validate_args(SPEC, args) == [
        'missing required property "path"',
        'missing required property "config.host"',
        '"config.extra" is not a declared property (additionalProperties: false)',
        'missing required property "servers[1].host"',
        '"color" must be one of ["red","green"]',
        '"n" must be a finite JSON number',
        '"i" must be an integer',
        '"b" must be a boolean',
        '"x" must be null',
        '"tags[1]" must be a string',
        '"bag" must be an object',
        '"v" must match exactly one oneOf branch (matched 2)',
        '"k" must be "a"',
    ]
    assert validate_args(SPEC, {"path": None}) == ['"path" must be a string']
    assert validate_args(SPEC, {"path": "/x", "i": 2.0, "v": 0.5}) == []


def test_a_nullable_value_reports_what_its_other_branch_wants() -> None:
    """``oneOf [X, null]`` (``X | None``) names X's own violations, as an attrs field
    ``X | None`` does, instead of "matched 0": the model learns what to fix."""
    spec: SchemaSpec = {
        "note": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "at": {
            "oneOf": [
                {"type": "null"},
                {"type": "object", "properties": {"x": {"type": "integer", "required": True}}},
            ]
        },
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    }

    assert validate_args(spec, {"note": None, "at": None}) == []
    assert validate_args(spec, {"note": 5, "at": {"x": "1"}, "either": None}) == [
        '"note" must be a string',
        '"at.x" must be an integer',
        '"either" must match exactly one oneOf branch (matched 0)',
    ]
    assert validate_args(spec, {"at": {}}) == ['missing required property "at.x"']


def test_validate_args_raises_only_for_bad_specs() -> None:
    with pytest.raises(JsonSchemaError):
        validate_args({"a": {"type": "weird"}}, {})


# --------------------------------------------------------------------------- properties


@given(dsl_value_specs())
def test_valid_value_specs_compile_into_the_subset(spec: dict[str, Any]) -> None:
    schema = value_spec_to_json_schema(spec)
    assert_supported_json_schema(schema)
    assert "required" not in schema or schema.get("type") == "object"


@given(dsl_parameter_specs(), any_values())
def test_validate_args_never_raises(spec: dict[str, Any], args: object) -> None:
    assert all(isinstance(message, str) for message in validate_args(spec, args))


@given(dsl_parameter_specs(), json_values())
def test_validate_args_is_the_compiled_validator(spec: dict[str, Any], args: object) -> None:
    schema = schema_spec_to_json_schema(spec)
    assert validate_args(spec, args) == compile_validator(schema, root="")(args)
    assert validate_args(spec, dict.fromkeys(spec)) == validate_args(
        spec, FrozenDict(dict.fromkeys(spec))
    )
