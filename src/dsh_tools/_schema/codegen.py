"""Generated validators: straight-line Python source per schema, for the valid path.

Every tool call validates its arguments, so a valid value must cost next to nothing. In
front of the closure tree (:mod:`dsh_tools._schema.validators`) sits an accelerator: source
generated per schema (one call, no loop over the schema) that answers "certainly valid"
by the tree's own rules, or "not sure". It only reads values of exact builtin types
(``str int float bool None``, ``dict``/``FrozenDict``, ``list``/``tuple``/``FrozenList``),
so no user ``__eq__``, ``__iter__`` or ``__class__`` runs; anything else, any exception,
and any value it does not accept go to the closure tree, which gives the verdict and the
messages exactly as without it. Property names and literals are bound as constants in the
namespace, never written into the source, so no schema text can inject code. Nodes it
cannot inline exactly (a ``oneOf`` whose branches can both match, anything nested too
deep) call their own closure from it.

An *admitter* is the same generator run on the caller's raw arguments (see
:func:`compile_admitter`). Generated source is registered with :mod:`linecache`, so a
traceback through it shows its lines.
"""

from __future__ import annotations

import builtins
import itertools
import linecache
import math
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any, TypeAlias

from .._json import (
    NEG_SMALL_INT,
    SMALL_INT,
    FrozenDict,
    FrozenList,
    is_unicode,
)
from .validators import ABSENT, Check, Validator, is_lossless

JsonSchema: TypeAlias = Mapping[str, Any]

Predicate: TypeAlias = Callable[[object], bool]
"""``True`` only for a value its closure tree certainly accepts."""

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


_SOURCE = "def {name}(v):\n    try:\n{body}\n    except Exception:\n        {miss}\n    {hit}\n"
_CACHE_SIZE = 256
_serial = itertools.count(1)
_CODE_CACHE: dict[str, tuple[CodeType, str]] = {}
"""Compiled functions by source, with the file name their source is shown under: the
source holds only structure (names and literals are bound in the namespace), so every
schema of one shape shares one ``compile()``."""


def compiled(source: str, kind: str = "validator") -> CodeType:
    """``source`` compiled once, and registered with :mod:`linecache` (as attrs and cattrs
    do with theirs) so tracebacks and ``inspect.getsource`` show generated code."""
    cached = _CODE_CACHE.get(source)
    if cached is not None:
        return cached[0]
    if len(_CODE_CACHE) >= _CACHE_SIZE:
        for _code, old in _CODE_CACHE.values():
            linecache.cache.pop(old, None)
        _CODE_CACHE.clear()
    filename = f"<dsh_tools generated {kind} {next(_serial)}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _CODE_CACHE[source] = (code, filename)
    return code


def generate(
    schema: JsonSchema,
    memo: dict[tuple[int, int], Check],
    name: str,
    miss: str,
    hit: str,
    slow: Validator | None = None,
    admitting: bool = False,
) -> Any:
    """The generated function ``name``; ``None`` when the root itself cannot be inlined
    (a ``oneOf`` whose branches can overlap) or the schema is too big to inline.

    ``memo`` holds the closure of every node (from :func:`compile_checks`): a node the
    generator does not inline calls its closure. ``miss`` and ``hit`` are the statements
    that end the function when the value is not certainly valid, and when it is.
    """
    generator = _Generator(memo, admitting)
    try:
        if not generator.inline(schema, "v", 0, 0, schema.get("type")):
            return None
    except _NotInlined:
        return None
    body = "\n".join(generator.lines).replace(_FAIL, miss)
    namespace: dict[str, Any] = {
        **generator.names,
        "__builtins__": builtins,
        "_ABSENT": ABSENT,
        "_FD": FrozenDict,
        "_FL": FrozenList,
        "_isfinite": math.isfinite,
        "_lossless": is_lossless,
        "_unicode": is_unicode,
        "_slow": slow,
        "_SMALL": SMALL_INT,
        "_NEG_SMALL": NEG_SMALL_INT,
        "_new": dict.__new__,  # with _fill: trusted_frozen_dict, inlined for the usual call
        "_fill": dict.update,
    }
    exec(compiled(_SOURCE.format(name=name, body=body, miss=miss, hit=hit)), namespace)
    return namespace[name]


Admitter: TypeAlias = Callable[[object], "FrozenDict | None"]
"""The frozen copy of a caller's value its schema certainly accepts, else ``None``."""

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
    admitter: Admitter | None = generate(
        schema, {}, "_admit", "return None", _ADMIT_HIT, admitting=True
    )
    return admitter
