"""The closure tree of a compiled JSON Schema: the one place violations come from.

Each schema node compiles once (:func:`compile_checks`) into a small closure, a
:data:`Check`; :func:`finish` turns the root into a public validator. Paths are only
assembled, innermost segment first, for the violations that are reported. The generated
accelerator in :mod:`dsh_tools._schema.codegen` answers "certainly valid" in front of this tree
and leaves every other verdict, and every message, to it.
"""

from __future__ import annotations

import json as _stdlib_json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .._json import MAX_DEPTH, FrozenDict, FrozenList, int_has_text, is_unicode

Validator: TypeAlias = Callable[[object], list[str]]
"""A compiled validator: the violations of a value, ``[]`` when it is valid."""

Violation: TypeAlias = list[Any]
"""``[message, innermost segment, ..., outermost segment]``; a ``None`` message means
"missing required property"; ``str`` segments are keys, ``int`` are indexes."""

Check: TypeAlias = Callable[[object], "list[Violation] | None"]
"""One compiled schema node; ``None`` when the value is valid."""

ABSENT: Any = object()
"""Marks a member or keyword that is not there (``None`` is JSON null)."""
_isfinite = math.isfinite


def is_lossless(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is lossless JSON (the rules of :func:`~dsh_tools._json.snapshot`)
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


def scalar_check(kind: str, enum: Sequence[object] | None = None, const: object = ABSENT) -> Check:
    """A scalar node; ``enum`` is checked before ``const`` and only one miss is reported."""
    base = _SCALAR_CHECKS[kind]
    if enum is None and const is ABSENT:
        return base
    members = None if enum is None else frozenset(enum)
    enum_miss = "" if enum is None else f"must be one of {_compact(list(enum))}"
    const_miss = "" if const is ABSENT else f"must be {_compact(const)}"

    def check(value: object) -> list[Violation] | None:
        found = base(value)
        if found is not None:
            return found
        if members is not None and value not in members:
            return [[enum_miss]]
        if const is not ABSENT and value != const:
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
        return _members(enumerate(value), items)

    return check


def _members(members: Iterable[tuple[str | int, object]], check: Check) -> list[Violation] | None:
    """The violations of every member (``(where, value)``) that fails ``check``, each
    placed under its ``where``."""
    found: list[Violation] | None = None
    for where, item in members:
        bad = check(item)
        if bad is not None:
            found = _located(found, bad, where)
    return found


def _located(
    found: list[Violation] | None, bad: list[Violation], where: str | int
) -> list[Violation]:
    """``bad`` (a member's violations) placed under ``where`` and added to ``found``."""
    for violation in bad:
        violation.append(where)
    if found is None:
        return bad
    found += bad
    return found


def map_check(values: Check) -> Check:
    """An object whose every member must pass ``values`` (typed ``dict[str, T]`` fields)."""

    def check(value: object) -> list[Violation] | None:
        if not isinstance(value, dict):
            return [[_MUST_OBJECT]]
        if not all(isinstance(key, str) for key in dict.keys(value)):
            return [[_LOSSY_OBJECT]]
        return _members(dict.items(value), values)

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
            if get(value, name, ABSENT) is ABSENT:
                if found is None:
                    found = []
                found.append([None, name])
        seen = 0
        for name, sub in properties:
            item = get(value, name, ABSENT)
            if item is not ABSENT:
                seen += 1
                bad = sub(item)
                if bad is not None:
                    found = _located(found, bad, name)
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


def nullable_check(check: Check) -> Check:
    """``oneOf [X, null]`` where X never accepts null (``str | None``): the verdict of
    counting branches, with X's own messages (``"note" must be a string``, ``"server.port"
    must be an integer``) instead of "matched 0", so a model learns what to fix."""

    def nullable(value: object) -> list[Violation] | None:
        return None if value is None else check(value)

    return nullable


def _null_partner(branches: Sequence[Any]) -> Any:
    """The other branch of ``oneOf [X, {"type": "null"}]`` (either order) when X is typed
    and not null, so it rejects null; else ``None``."""
    if len(branches) != 2:
        return None
    for null, other in (branches, branches[::-1]):
        if null.get("type") == "null" and other.get("type", "null") != "null":
            return other
    return None


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


def compile_checks(
    node: Mapping[str, Any], depth: int, memo: dict[tuple[int, int], Check]
) -> Check:
    """Translate an already-asserted node; ``depth`` is the nesting of the value it sees."""
    key = (id(node), depth)
    done = memo.get(key)
    if done is not None:
        return done
    kind = node.get("type")
    if "oneOf" in node:
        other = _null_partner(node["oneOf"])
        if other is not None:
            check = nullable_check(compile_checks(other, depth, memo))
        else:
            check = one_of_check([compile_checks(b, depth, memo) for b in node["oneOf"]])
    elif kind is None:
        check = any_check(depth)
    elif kind == "object":
        properties = node.get("properties", {})
        check = object_check(
            node.get("required", ()),
            [(name, compile_checks(child, depth + 1, memo)) for name, child in properties.items()],
            node.get("additionalProperties") is False,
            depth,
        )
    elif kind == "array":
        items = node.get("items")
        check = array_check(
            None if items is None else compile_checks(items, depth + 1, memo), depth
        )
    else:
        check = scalar_check(kind, node.get("enum"), node.get("const", ABSENT))
    memo[key] = check
    return check
