"""Hypothesis strategies shared by the test-suite.

JSON values and non-JSON values (what validators must survive), random DSL value and
parameter specs (always valid, so they must compile), and random raw subset schemas (which
``assert_supported_json_schema`` must accept). Add new strategies below this group.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)

KEYS = st.sampled_from(["a", "b", "c", "path", "host", "x y", "é", "__proto__", ""])


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Plain JSON data: dict/list trees of JSON scalars (tuples stand in for some lists)."""
    return st.recursive(
        JSON_SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(KEYS, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


class _Color(enum.IntEnum):
    RED = 1


class _Opaque:
    """An arbitrary object that is not JSON."""


class AgreesWithEverything:
    """Hostile equality (``mock.ANY`` gone wrong): equal to anything, while its hash,
    repr, str and truth value raise, so no code may ask it for them unguarded."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        raise RuntimeError("hash")

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    __str__ = __repr__

    def __bool__(self) -> bool:
        raise RuntimeError("bool")


NON_JSON_SCALARS = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        b"bytes",
        bytearray(b"x"),
        {1, 2},
        frozenset(),
        object(),
        _Opaque(),
        _Color.RED,
        len,
        complex(1, 2),
        {1: "int key"},
        {("t",): 1},
    ]
)


def any_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON-like trees that may hide non-JSON leaves anywhere."""
    return st.recursive(
        JSON_SCALARS | NON_JSON_SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(KEYS, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


_SCALAR_VALUES = {
    "string": st.text(max_size=4),
    "number": st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False),
    "integer": st.integers(-5, 5),
    "boolean": st.booleans(),
    "null": st.none(),
}


@st.composite
def _scalar_spec(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(_SCALAR_VALUES)))
    spec: dict[str, Any] = {"type": kind}
    values = _SCALAR_VALUES[kind]
    if draw(st.booleans()):
        spec["enum"] = draw(st.lists(values, min_size=1, max_size=3))
        if draw(st.booleans()):
            spec["const"] = draw(st.sampled_from(spec["enum"]))
    elif draw(st.booleans()):
        spec["const"] = draw(values)
    return spec


def _annotated(spec: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    annotations = st.fixed_dictionaries(
        {},
        optional={
            "description": st.text(max_size=5),
            "title": st.text(max_size=5),
            "default": json_values(4),
            "examples": st.lists(json_values(3), max_size=2),
        },
    )
    return st.tuples(spec, annotations).map(lambda pair: {**pair[0], **pair[1]})


def _property_map(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    prop = st.tuples(inner, st.booleans()).map(
        lambda pair: {**pair[0], "required": True} if pair[1] else pair[0]
    )
    return st.dictionaries(KEYS, prop, max_size=3)


def dsl_value_specs() -> st.SearchStrategy[dict[str, Any]]:
    """Valid DSL value specs of every node kind (scalars, json, array, object, oneOf)."""

    def extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        array = st.one_of(
            st.just({"type": "array"}),
            inner.map(lambda items: {"type": "array", "items": items}),
        )
        obj = st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": _property_map(inner),
                "additionalProperties": st.booleans(),
            },
        )
        one_of = st.lists(inner, min_size=2, max_size=3).map(lambda branches: {"oneOf": branches})
        return _annotated(array | obj | one_of)

    leaves = _annotated(_scalar_spec() | st.just({"type": "json"}))
    return st.recursive(leaves, extend, max_leaves=8)


def dsl_parameter_specs() -> st.SearchStrategy[dict[str, Any]]:
    """Valid DSL parameter maps (``name -> property spec``)."""
    return _property_map(dsl_value_specs())


def raw_schemas() -> st.SearchStrategy[dict[str, Any]]:
    """Raw schemas of the enforced subset (compiled from random DSL specs, plus ``{}``)."""
    from dsh_tools._json import thaw
    from dsh_tools._schema.dsl import value_spec_to_json_schema

    return dsl_value_specs().map(lambda spec: thaw(value_spec_to_json_schema(spec)))


# --------------------------------------------------------------------------- hostile text

HOSTILE_TEXTS = (
    "\x1b]0;pwned\x07",  # window title, ended by BEL
    "\x1b]52;c;cm0gLXJmIH4=\x1b\\",  # OSC 52: write the clipboard, ended by ST
    "rm -rf ~\x1b[1A\x1b[2K\r$ ls",  # CSI: up a line, erase it, write another command
    "rm -rf ~\rls -la   ",  # carriage return: the tail overwrites the head
    "a.txt\nsecret.txt:1: forged",  # newline: a second line nobody wrote
    "evil\u202etxt.exe",  # bidi override: read in another order than it runs
    "\x9b2J\x9dtitle\x9c",  # C1 controls: one-byte CSI, OSC and ST
    "ls\x08\x08rm\x7f",  # backspace and DEL
    "x\u2028y\u2066z\U000e0041",  # line separator, isolate, tag character
)
"""One spelling each of the control sequences the safe-text rule makes inert."""


def hostile_texts() -> st.SearchStrategy[str]:
    """Printable text with control characters, bidi controls and separators mixed in."""
    alphabet = st.characters(codec="utf-8") | st.sampled_from(
        ["\x1b", "\x07", "\r", "\n", "\t", "\x9b", "\u202e", "\u2069", "\u2028", "\U000e0020"]
    )
    return st.text(alphabet, max_size=40) | st.sampled_from(HOSTILE_TEXTS)


def is_inert(text: str, *, multiline: bool = False) -> bool:
    """Whether ``text`` holds nothing a terminal or a reader acts on: no control character
    (newline, tab and a line-ending carriage return allowed when ``multiline``), no bidi
    control, no line separator, no tag character, no lone surrogate. Written apart from
    :func:`dsh_tools._safetext.safe_text` (by Unicode category), to check it."""
    import unicodedata

    bidi = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
    for index, char in enumerate(text):
        if multiline and (char in "\n\t" or text[index : index + 2] == "\r\n"):
            continue
        category = unicodedata.category(char)
        if category in {"Cc", "Cs", "Zl", "Zp"} or unicodedata.bidirectional(char) in bidi:
            return False
        if char in "\u061c\u200e\u200f" or 0xE0000 <= ord(char) <= 0xE007F:
            return False
    return True


# --------------------------------------------------------------------------- typed signatures


class Tone(enum.Enum):
    SOFT = "soft"
    LOUD = "loud"


@attrs.frozen
class Point:
    x: int
    y: int


_POINT_SPEC = {
    "type": "object",
    "properties": {
        "x": {"type": "integer", "required": True},
        "y": {"type": "integer", "required": True},
    },
    "additionalProperties": False,
}
_INTEGRAL = st.integers(-5, 5)

TypedHint = tuple[Any, dict[str, Any], st.SearchStrategy[Any]]
"""A parameter type, the DSL value spec it stands for, and values that spec accepts."""

_TYPED_LEAVES: list[TypedHint] = [
    (str, {"type": "string"}, st.text(max_size=4)),
    (int, {"type": "integer"}, _INTEGRAL | _INTEGRAL.map(float)),
    (float, {"type": "number"}, _INTEGRAL | st.floats(-5, 5, allow_nan=False)),
    (bool, {"type": "boolean"}, st.booleans()),
    (type(None), {"type": "null"}, st.none()),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}, st.sampled_from("ab")),
    (Literal[1, 2], {"type": "integer", "enum": [1, 2]}, st.sampled_from([1, 2, 1.0, 2.0])),
    (Tone, {"type": "string", "enum": ["soft", "loud"]}, st.sampled_from(["soft", "loud"])),
    (_Color, {"type": "integer", "enum": [1]}, st.sampled_from([1, 1.0])),
    (
        Point,
        _POINT_SPEC,
        st.fixed_dictionaries({"x": _INTEGRAL, "y": _INTEGRAL | _INTEGRAL.map(float)}),
    ),
]


def _extend_hints(inner: st.SearchStrategy[TypedHint]) -> st.SearchStrategy[TypedHint]:
    listed = inner.map(
        lambda t: (list[t[0]], {"type": "array", "items": t[1]}, st.lists(t[2], max_size=3))
    )
    tupled = inner.map(
        lambda t: (tuple[t[0], ...], {"type": "array", "items": t[1]}, st.lists(t[2], max_size=3))
    )
    optional = inner.filter(lambda t: t[1].get("type", "null") != "null").map(
        lambda t: (t[0] | None, {"oneOf": [t[1], {"type": "null"}]}, t[2] | st.none())
    )
    return listed | tupled | optional


def typed_hints() -> st.SearchStrategy[TypedHint]:
    """Parameter types a tool function may declare, each with its DSL value spec and a
    strategy of values that spec accepts (no ``dict[str, T]``: its values are checked
    beyond what any schema says)."""
    return st.recursive(st.sampled_from(_TYPED_LEAVES), _extend_hints, max_leaves=3)


TypedParameter = tuple[str, Any, dict[str, Any], st.SearchStrategy[Any], bool]
"""A parameter's name, type, DSL property spec, accepted values, and whether required."""


@st.composite
def typed_parameters(draw: st.DrawFn) -> list[TypedParameter]:
    """The parameters of a tool function: distinct names, each required or ``= None``."""
    names = draw(
        st.lists(
            st.sampled_from(["path", "limit", "mode", "tags", "when", "x"]), unique=True, max_size=4
        )
    )
    parameters = []
    for name in names:
        hint, spec, values = draw(typed_hints())
        required = draw(st.booleans())
        spec = {**spec, "required": True} if required else {**spec, "default": None}
        parameters.append((name, hint, spec, values, required))
    return parameters
