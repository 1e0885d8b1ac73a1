"""Argument models: DSL specs, attrs classes and trusted raw schemas."""

from __future__ import annotations

import enum
import math
from typing import Annotated, Any, Literal, Optional

import attrs
import pytest
from hypothesis import given

from dsh_tools._json import FrozenDict, FrozenList, snapshot
from dsh_tools._schema.arguments import arguments_model, raw_arguments_model
from dsh_tools._schema.subset import assert_supported_json_schema
from dsh_tools.errors import DefinitionError, JsonSchemaError, JsonValueError, ToolArgsError
from strategies import any_values, dsl_parameter_specs


class Mode(str, enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Server:
    host: str
    port: int = 80


@attrs.frozen
class ReadArgs:
    path: str = attrs.field(metadata={"description": "Absolute path"})
    limit: Annotated[int, "Max lines"] = 100
    ratio: float = 1.0
    verbose: bool = False
    tags: list[str] = attrs.field(factory=list)
    pair: tuple[int, ...] = ()
    env: dict[str, int] = attrs.field(factory=dict)
    kind: Literal["a", "b"] = "a"
    size: Literal[1, 2] = 1
    mode: Mode = Mode.FAST
    level: Level = Level.LOW
    server: Optional[Server] = None  # noqa: UP045 - the old spelling must work too
    note: str | None = None
    nothing: None = None


READ = arguments_model(ReadArgs)


def test_schema_from_fields() -> None:
    schema = READ.json_schema
    assert isinstance(schema, FrozenDict)
    assert_supported_json_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["path"]
    assert schema["properties"] == {
        "path": {"type": "string", "description": "Absolute path"},
        "limit": {"type": "integer", "description": "Max lines", "default": 100},
        "ratio": {"type": "number", "default": 1.0},
        "verbose": {"type": "boolean", "default": False},
        "tags": {"type": "array", "items": {"type": "string"}},
        "pair": {"type": "array", "items": {"type": "integer"}, "default": []},
        "env": {"type": "object", "additionalProperties": True},
        "kind": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "size": {"type": "integer", "enum": [1, 2], "default": 1},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        "level": {"type": "integer", "enum": [1, 2], "default": 1},
        "server": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": "integer", "default": 80},
                    },
                    "additionalProperties": False,
                    "required": ["host"],
                },
                {"type": "null"},
            ],
            "default": None,
        },
        "note": {"oneOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "nothing": {"type": "null", "default": None},
    }


def test_parse_structures_an_instance() -> None:
    args = READ.parse(
        {
            "path": "/x",
            "limit": 2.0,
            "ratio": 2,
            "tags": ["t"],
            "pair": [1, 2.0],
            "env": {"A": 1},
            "kind": "b",
            "size": 2.0,
            "mode": "slow",
            "level": 2,
            "server": {"host": "h"},
            "note": None,
        }
    )
    assert args == ReadArgs(
        path="/x",
        limit=2,
        ratio=2.0,
        tags=["t"],
        pair=(1, 2),
        env={"A": 1},
        kind="b",
        size=2,
        mode=Mode.SLOW,
        level=Level.HIGH,
        server=Server("h"),
    )
    assert type(args.limit) is int
    assert type(args.size) is int
    assert type(args.ratio) is float
    assert READ.parse(FrozenDict({"path": "/y", "pair": FrozenList([3])})) == ReadArgs(
        "/y", pair=(3,)
    )


def test_no_coercion_and_no_unknown_keys() -> None:
    bad = {
        "path": 1,
        "limit": "1",
        "ratio": True,
        "verbose": 1,
        "env": {"a": "x"},
        "server": {"port": 1},
        "mode": "x",
        "note": 5,
        "zzz": 1,
    }
    expected = [
        '"path" must be a string',
        '"limit" must be an integer',
        '"ratio" must be a number',
        '"verbose" must be a boolean',
        '"env.a" must be an integer',
        '"mode" must be one of ["fast","slow"]',
        'missing required property "server.host"',
        '"note" must be a string',
        '"zzz" is not a declared property (additionalProperties: false)',
    ]
    assert READ.violations(bad) == expected
    with pytest.raises(ToolArgsError) as caught:
        READ.parse(bad)
    assert caught.value.violations == tuple(expected)
    assert caught.value.code == "INVALID_ARGS"
    assert READ.violations({}) == ['missing required property "path"']
    assert READ.violations([]) == ['"arguments" must be an object']
    assert READ.violations({"path": "/x", "limit": math.nan}) == ['"limit" must be an integer']


def test_class_validators_become_argument_errors() -> None:
    @attrs.frozen
    class Positive:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    with pytest.raises(ToolArgsError) as caught:
        arguments_model(Positive).parse({"n": -1})
    (message,) = caught.value.violations
    assert message.startswith('"arguments" rejected by ')
    assert "'n' must be > 0: -1" in message


def test_init_false_fields_are_not_arguments() -> None:
    @attrs.define
    class Args:
        a: int
        cache: dict[str, int] = attrs.field(init=False, factory=dict)

    model = arguments_model(Args)
    assert list(model.json_schema["properties"]) == ["a"]  # type: ignore[call-overload]
    assert model.parse({"a": 1}).a == 1


@pytest.mark.parametrize(
    ("hint", "problem"),
    [
        (set[int], "unsupported type"),
        (int | str, "only X | None unions are supported"),
        (Literal[1, "a"], "must all be str, int, bool or None"),
        (dict[int, str], "unsupported type"),
        (tuple[int, str], "unsupported type"),
        (bytes, "unsupported type"),
    ],
)
def test_unsupported_field_types(hint: Any, problem: str) -> None:
    Bad = attrs.make_class("Bad", {"field_x": attrs.field(type=hint)})
    with pytest.raises(DefinitionError) as caught:
        arguments_model(Bad)
    assert "parameters class Bad, field 'field_x'" in str(caught.value)
    assert problem in str(caught.value)


class Mixed(enum.Enum):
    A = "a"
    B = 1


@attrs.frozen
class MixedArgs:
    m: Mixed


@attrs.frozen
class Node:
    children: list[Node]


def test_mixed_enum_is_unsupported() -> None:
    with pytest.raises(DefinitionError, match="field 'm'"):
        arguments_model(MixedArgs)


def test_recursive_classes_are_rejected() -> None:
    with pytest.raises(DefinitionError, match="contains itself"):
        arguments_model(Node)


def test_non_attrs_classes_are_rejected() -> None:
    class Plain:
        a: int

    with pytest.raises(DefinitionError, match="must be an attrs class"):
        arguments_model(Plain)


def test_unresolvable_annotations() -> None:
    @attrs.frozen
    class Args:
        a: Missing  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(DefinitionError, match="cannot resolve annotations"):
        arguments_model(Args)


def test_dsl_spec_model() -> None:
    model = arguments_model({"path": {"type": "string", "required": True}})
    assert model.json_schema == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    parsed = model.parse({"path": "/x", "extra": [1]})
    assert isinstance(parsed, FrozenDict)
    assert parsed == {"path": "/x", "extra": [1]}
    assert model.violations({"path": 2}) == ['"path" must be a string']
    with pytest.raises(ToolArgsError, match='invalid arguments: missing required property "path"'):
        model.parse({})
    with pytest.raises(JsonSchemaError):
        arguments_model({"path": {"type": "weird"}})


def test_raw_model_is_trusted() -> None:
    model = raw_arguments_model({"type": "object", "properties": {"a": {"type": "string"}}})
    assert model.violations({"a": 1}) == []
    assert model.parse({"a": 1}) == {"a": 1}
    with pytest.raises(JsonValueError):
        model.parse({"a": {1, 2}})
    with pytest.raises(DefinitionError):
        raw_arguments_model([])


def test_deep_arguments_fail_cleanly() -> None:
    model = arguments_model({"data": {"type": "json"}})
    value: Any = {}
    for _ in range(100_000):
        value = {"x": value}
    assert model.violations({"data": value}) == ['"data" must be a lossless JSON value']
    assert READ.violations(value) == [
        'missing required property "path"',
        '"x" is not a declared property (additionalProperties: false)',
    ]


@given(dsl_parameter_specs(), any_values())
def test_models_never_raise_from_violations(spec: dict[str, Any], args: object) -> None:
    model = arguments_model(spec)
    found = model.violations(args)
    if not found:
        assert model.parse(args) == args


@given(any_values())
def test_class_models_never_raise_from_violations(args: object) -> None:
    found = READ.violations(args)
    if not found:
        assert isinstance(READ.parse(args), ReadArgs)


def test_a_flood_of_violations_is_summarised_in_the_message() -> None:
    model = arguments_model({"items": {"type": "array", "items": {"type": "integer"}}})
    with pytest.raises(ToolArgsError) as caught:
        model.parse({"items": ["x"] * 5000})
    assert len(caught.value.violations) == 5000
    assert caught.value.message.endswith("; … and 4980 more")
    assert len(caught.value.message) < 2000


def test_parse_returns_the_pipelines_snapshot_itself() -> None:
    model = arguments_model({"a": {"type": "integer", "required": True}, "b": {"type": "json"}})
    frozen = FrozenDict({"a": 1, "b": [1, {"c": None}]})
    assert model.parse(frozen) is frozen
    plain = {"a": 2.0, "b": [1]}
    parsed = model.parse(plain)
    assert isinstance(parsed, FrozenDict)
    assert parsed is not plain
    assert parsed == plain
    assert isinstance(parsed["b"], FrozenList)
    with pytest.raises(ToolArgsError, match='"a" must be an integer'):
        model.parse(FrozenDict({"a": True}))
    raw = raw_arguments_model({"type": "object"})
    assert raw.parse(frozen) is frozen
    assert isinstance(READ.parse(FrozenDict({"path": "/x"})), ReadArgs)


@given(dsl_parameter_specs(), any_values())
def test_parse_agrees_on_plain_and_frozen_arguments(spec: dict[str, Any], args: object) -> None:
    model = arguments_model(spec)
    try:
        frozen = snapshot(args)
    except JsonValueError:
        return
    assert model.violations(frozen) == model.violations(args)
    if not model.violations(frozen):
        assert model.parse(frozen) is frozen
        assert model.parse(args) == frozen


@given(dsl_parameter_specs(), any_values())
def test_what_a_model_admits_is_what_it_would_parse(spec: dict[str, Any], args: object) -> None:
    model = arguments_model(spec)
    admitted = model.admit(args)
    if admitted is not None:
        assert type(admitted) is FrozenDict
        assert admitted == model.parse(args) == snapshot(args)


def test_models_admit_the_usual_flat_call() -> None:
    model = arguments_model({"a": {"type": "integer", "required": True}, "b": {"type": "string"}})
    assert model.admit({"a": 1, "b": "x"}) == {"a": 1, "b": "x"}
    assert model.admit({"a": "1"}) is None  # invalid: left to parse, which says why
    assert model.admit({"a": 1, "c": [1]}) is None  # valid, but nested: left to the snapshot
    raw = raw_arguments_model({"type": "object"})
    assert raw.admit({"a": 1, "b": "x"}) == {"a": 1, "b": "x"}
    assert raw.admit({"a": [1]}) is None
    assert raw.admit([1]) is None
    assert READ.admit({"path": "/x"}) is None  # the body gets an attrs instance
