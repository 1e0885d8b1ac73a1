"""Lossless JSON snapshots: what is accepted, what is rejected (with a path), and freezing."""

from __future__ import annotations

import copy
import datetime
import decimal
import enum
import json
import pickle
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given

from dsh_tools._json import (
    MAX_DEPTH,
    FrozenDict,
    FrozenList,
    canonical,
    dumps,
    is_unicode,
    loads,
    snapshot,
    thaw,
    unicode_text,
)
from dsh_tools.errors import DshToolsError, JsonValueError
from strategies import any_values, json_values


@given(json_values())
def test_snapshot_round_trips_through_json_text(value: Any) -> None:
    frozen = snapshot(value)
    assert frozen == value or (isinstance(value, tuple) and frozen == list(value))
    assert json.loads(json.dumps(frozen)) == json.loads(json.dumps(value))
    assert thaw(frozen) == json.loads(json.dumps(value))


@given(json_values())
def test_canonical_text_is_the_same_for_a_frozen_value_and_its_plain_data(value: Any) -> None:
    plain = json.loads(json.dumps(value))
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert canonical(snapshot(value)) == text
    assert canonical(plain) == text


@given(json_values())
def test_snapshot_never_mutates_and_is_idempotent(value: Any) -> None:
    before = copy.deepcopy(value)
    frozen = snapshot(value)
    assert value == before
    assert snapshot(frozen) is frozen


def test_frozen_values_equal_plain_data_and_serialize() -> None:
    frozen = snapshot({"a": [1, 2.5, {"b": None, "c": True}], "d": "x"})
    assert isinstance(frozen, FrozenDict)
    assert isinstance(frozen["a"], FrozenList)
    assert frozen == {"a": [1, 2.5, {"b": None, "c": True}], "d": "x"}
    assert frozen["a"] == [1, 2.5, {"b": None, "c": True}]
    assert json.dumps(frozen) == '{"a": [1, 2.5, {"b": null, "c": true}], "d": "x"}'
    assert hash(frozen) == hash(snapshot({"d": "x", "a": [1, 2.5, {"c": True, "b": None}]}))


def test_bool_stays_bool_and_integral_floats_stay_floats() -> None:
    frozen = snapshot({"t": True, "f": 2.0, "i": 2})
    assert isinstance(frozen, dict)
    assert type(frozen["t"]) is bool
    assert type(frozen["f"]) is float
    assert type(frozen["i"]) is int


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__delitem__("a"),
        lambda d: d.update(x=1),
        lambda d: d.pop("a"),
        lambda d: d.setdefault("x", 1),
        lambda d: d.clear(),
        lambda d: d.popitem(),
    ],
)
def test_frozen_dict_rejects_every_mutation(mutate: Any) -> None:
    frozen = snapshot({"a": 1})
    with pytest.raises(TypeError, match="read-only"):
        mutate(frozen)
    assert frozen == {"a": 1}


def test_frozen_list_compares_with_lists_tuples_and_anything_else() -> None:
    frozen = snapshot([1, 2])
    assert frozen == [1, 2]
    assert frozen == (1, 2)
    assert frozen != [2, 1]
    assert frozen != None  # noqa: E711
    assert frozen != "12"


def test_frozen_list_is_a_tuple() -> None:
    frozen = snapshot([1, [2]])
    assert isinstance(frozen, tuple)
    with pytest.raises(TypeError):
        frozen[0] = 5  # type: ignore[index]


def test_copy_and_pickle_keep_frozen_values() -> None:
    frozen = snapshot({"a": [1, {"b": 2}]})
    assert copy.deepcopy(frozen) is frozen
    assert copy.copy(frozen) is frozen
    restored = pickle.loads(pickle.dumps(frozen))
    assert restored == frozen
    assert isinstance(restored, FrozenDict)


def test_constructors_snapshot_their_input() -> None:
    assert FrozenDict({"a": [1]}) == {"a": [1]}
    assert isinstance(FrozenDict({"a": [1]})["a"], FrozenList)
    assert FrozenList([{"a": 1}]) == [{"a": 1}]
    with pytest.raises(JsonValueError):
        FrozenDict({"a": {1, 2}})


class _Color(enum.IntEnum):
    RED = 1


class _Weird:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("never compare me")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({"a": float("nan")}, "arguments.a", "NaN"),
        ({"a": [float("inf")]}, "arguments.a[0]", "infinite"),
        ({1: "x"}, "arguments", "key 1 of type int"),
        ({"a": {(1, 2): 3}}, "arguments.a", "key (1, 2) of type tuple"),
        ({"a": b"x"}, "arguments.a", "bytes"),
        ({"a": bytearray(b"x")}, "arguments.a", "bytearray"),
        ({"a": [1, {2}]}, "arguments.a[1]", "set"),
        ({"a": frozenset()}, "arguments.a", "frozenset"),
        ({"when": datetime.datetime(2024, 1, 1)}, "arguments.when", "datetime"),
        ({"when": datetime.date(2024, 1, 1)}, "arguments.when", "datetime.date"),
        ({"d": decimal.Decimal("1.5")}, "arguments.d", "Decimal"),
        ({"c": _Color.RED}, "arguments.c", "int subclass"),
        ({"o": object()}, "arguments.o", "object"),
        ({"w": _Weird()}, "arguments.w", "_Weird"),
        ({"f": len}, "arguments.f", "builtin_function_or_method"),
    ],
)
def test_non_json_values_are_rejected_with_their_path(value: Any, path: str, problem: str) -> None:
    with pytest.raises(JsonValueError) as caught:
        snapshot(value, "arguments")
    assert caught.value.path == path
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f'"{path}"')
    assert caught.value.code == "INVALID_JSON"


def test_cycles_are_rejected_but_shared_references_are_fine() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(JsonValueError, match="circular"):
        snapshot(loop)
    shared = {"x": 1}
    assert snapshot({"a": shared, "b": shared}) == {"a": {"x": 1}, "b": {"x": 1}}


def test_dict_subclasses_are_read_from_their_storage_not_their_overrides() -> None:
    class Lying(dict[str, Any]):
        def items(self) -> Any:
            raise RuntimeError("getter misbehaves")

        def __getitem__(self, key: str) -> Any:
            raise RuntimeError("getter misbehaves")

    assert snapshot(Lying(a=1)) == {"a": 1}
    assert snapshot(OrderedDict(a=1)) == {"a": 1}


def test_str_subclasses_become_plain_str() -> None:
    class Name(str):
        pass

    frozen = snapshot({"n": Name("x")})
    assert isinstance(frozen, dict)
    assert type(frozen["n"]) is str


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def test_nesting_up_to_the_cap_is_accepted() -> None:
    assert snapshot(_nested(MAX_DEPTH - 1)) is not None


@pytest.mark.parametrize("depth", [MAX_DEPTH, 100_000])
def test_deeper_nesting_fails_cleanly(depth: int) -> None:
    with pytest.raises(JsonValueError, match=f"nests deeper than {MAX_DEPTH} levels"):
        snapshot(_nested(depth))


def test_loads_parses_into_frozen_values_and_rejects_bad_text() -> None:
    assert loads('{"a": [1, 2]}') == {"a": [1, 2]}
    assert isinstance(loads('{"a": [1, 2]}'), FrozenDict)
    with pytest.raises(JsonValueError, match="not valid JSON"):
        loads('{"a": NaN}')
    with pytest.raises(JsonValueError, match="not valid JSON"):
        loads("{oops")
    with pytest.raises(JsonValueError, match="deeper"):
        loads("[" * 100_000 + "]" * 100_000)


def test_dumps_is_compact_and_keeps_non_ascii() -> None:
    assert dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    with pytest.raises(JsonValueError):
        dumps({"a": {1}})


@given(any_values())
def test_snapshot_either_freezes_or_raises_a_dsh_tools_error(value: Any) -> None:
    rejected: DshToolsError | None = None
    try:
        frozen = snapshot(value)
    except DshToolsError as error:
        rejected = error
    if rejected is None:
        assert json.loads(json.dumps(frozen)) == thaw(frozen)
    else:
        assert isinstance(rejected, JsonValueError)
        assert rejected.path.startswith("value")


_NOT_UTF8_NAME = "caf\udce9.txt"  # what os.fsdecode makes of the latin-1 bytes b"caf\xe9.txt"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (_NOT_UTF8_NAME, "value"),
        ("\ud800", "value"),
        ({"name": _NOT_UTF8_NAME}, "value.name"),
        ({"a": 1, "nested": {"name": "é\ud800"}}, "value.nested.name"),
        (["ok", _NOT_UTF8_NAME], "value[1]"),
        ({_NOT_UTF8_NAME: 1}, "value"),
    ],
)
def test_text_that_is_not_valid_unicode_is_not_json(value: Any, path: str) -> None:
    with pytest.raises(JsonValueError) as caught:
        snapshot(value)
    assert caught.value.path == path
    assert "lone surrogate" in caught.value.message
    assert "not valid Unicode" in caught.value.message
    with pytest.raises(JsonValueError):
        dumps(value)


def test_valid_non_ascii_text_stays_json_and_encodes_as_utf8() -> None:
    value = {"name": "café 😀", "items": ["ü", "中文"]}
    frozen = snapshot(value)
    assert frozen == value
    assert (
        dumps(frozen).encode("utf-8")
        == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert loads('"\\ud83d\\ude00"') == "😀"  # a surrogate pair is one valid character


def test_loads_rejects_escaped_lone_surrogates() -> None:
    with pytest.raises(JsonValueError, match="lone surrogate U\\+D800"):
        loads('{"path": "\\ud800"}', "arguments")


def test_unicode_text_shows_damaged_names_with_the_replacement_character() -> None:
    assert not is_unicode(_NOT_UTF8_NAME)
    assert unicode_text(_NOT_UTF8_NAME) == "caf\ufffd.txt"
    assert is_unicode(unicode_text(_NOT_UTF8_NAME))
    assert unicode_text("café") == "café"
    assert snapshot(unicode_text(_NOT_UTF8_NAME)) == "caf\ufffd.txt"
