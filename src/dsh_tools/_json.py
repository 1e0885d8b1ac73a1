"""Lossless JSON values: snapshot any Python value into deep-frozen JSON data, and back.

Everything that crosses the pipeline (arguments, output values, result content) is
snapshotted once into :class:`FrozenDict` / :class:`FrozenList` trees. They are real
``dict`` / ``tuple`` subclasses, so ``json.dumps`` serializes them and they compare equal
to plain dicts and lists, but no stage can mutate what another stage sees.

"Lossless" means ``json.loads(json.dumps(v)) == v`` with no surprises: only ``None``,
``bool``, ``int``, finite ``float``, ``str``, dicts with ``str`` keys and lists/tuples are
accepted. Everything else is rejected with a :class:`~dsh_tools.errors.JsonValueError`
naming the path. Nesting is capped at :data:`MAX_DEPTH` levels, so no walker in this
package (nor ``json.dumps`` or ``==``) can hit ``RecursionError``.
"""

from __future__ import annotations

import json as _stdlib_json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeAlias, Union

from .errors import JsonValueError

__all__ = [
    "MAX_DEPTH",
    "FrozenDict",
    "FrozenList",
    "JsonValue",
    "canonical",
    "dumps",
    "is_unicode",
    "loads",
    "snapshot",
    "thaw",
    "unicode_text",
]

MAX_DEPTH = 200
"""Deepest container nesting accepted; deeper values are rejected with a clean error."""

SMALL_INT = 10**4000
"""Integers strictly between ``-SMALL_INT`` and ``SMALL_INT`` always have a JSON text
(under the interpreter's default 4300-digit conversion limit); larger ones are checked
with :func:`int_has_text`, so the common case costs two comparisons."""
NEG_SMALL_INT = -SMALL_INT
"""The lower bound, kept: writing ``-SMALL_INT`` in a check would build a 1.8 KB integer
on every evaluation."""


def int_has_text(value: int) -> bool:
    """Whether ``int`` ``value`` converts to decimal text under the interpreter's limit
    (``sys.set_int_max_str_digits``); ``json.dumps`` and ``json.loads`` raise past it."""
    if NEG_SMALL_INT < value < SMALL_INT:
        return True
    try:
        int.__repr__(value)
    except ValueError:
        return False
    return True


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode, so UTF-8 (and with it every JSON wire) can carry it.

    Python strings may hold lone surrogates: ``os.fsdecode`` makes them of file-name bytes
    that are not UTF-8, and ``json.loads`` of ``"\\ud800"``. Such text is not JSON here.
    """
    return text.isascii() or _LONE_SURROGATE.search(text) is None


def unicode_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, the replacement character.

    The one rule for showing text that is not valid Unicode (a file name whose bytes are
    not UTF-8, say): shown, recognisably damaged, never sent as is.
    """
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


JsonValue: TypeAlias = Union[bool, int, float, str, "FrozenDict", "FrozenList", None]
"""A snapshotted, deep-frozen JSON value."""


class FrozenDict(dict[str, JsonValue]):
    """A read-only JSON object. Equal to the plain dict with the same items; hashable.

    Constructing one snapshots its input, so a ``FrozenDict`` always holds lossless JSON.
    """

    __slots__ = ()

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        frozen = snapshot(dict(items) if items is not None else {})
        assert isinstance(frozen, dict)
        dict.update(self, frozen)

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("FrozenDict is read-only; thaw() it to get a mutable copy")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (thaw(self),))


class FrozenList(tuple[JsonValue, ...]):
    """A read-only JSON array: a tuple that also compares equal to the equivalent list."""

    __slots__ = ()

    def __new__(cls, items: Iterable[Any] = ()) -> FrozenList:
        frozen = snapshot(list(items))
        assert isinstance(frozen, FrozenList)
        return frozen

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        if isinstance(other, tuple):
            return tuple.__eq__(self, other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"FrozenList({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (thaw(self),))


_new_dict = dict.__new__
_fill_dict = dict.update


def trusted_frozen_dict(items: dict[str, JsonValue]) -> FrozenDict:
    """Wrap items that are already frozen JSON; internal fast path, no checks.

    The one place (with :func:`trusted_frozen_list`) a ``FrozenDict`` is made without
    ``__init__``, which only snapshots: every other fast path calls these.
    """
    result = _new_dict(FrozenDict)
    _fill_dict(result, items)
    return result


def trusted_frozen_list(items: list[JsonValue] | tuple[JsonValue, ...]) -> FrozenList:
    """Wrap items that are already frozen JSON; internal fast path, no checks."""
    return _new_tuple(FrozenList, items)


_new_tuple = tuple.__new__
_FROZEN = frozenset({FrozenDict, FrozenList})
"""Types whose instances were snapshotted when made, so a snapshot returns them as is."""


class _Rejected(Exception):
    """Internal: carries a problem up the walk while each level adds its path segment."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.segments: list[str] = []


def _describe(value: object) -> str:
    """Why ``value`` is not JSON, phrased for a person fixing the caller."""
    kind = type(value)
    name = kind.__qualname__
    if isinstance(value, str):
        found = _LONE_SURROGATE.search(value)
        if found is not None:
            return (
                f"holds the lone surrogate U+{ord(found.group()):04X} at index {found.start()}, "
                "which is not valid Unicode (UTF-8, and so JSON text, cannot carry it)"
            )
    if isinstance(value, float) and kind is float:
        if math.isnan(value):
            return "is NaN, which JSON cannot represent"
        return "is infinite, which JSON cannot represent"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"is {name}; JSON has no bytes (encode it, for example as base64 text)"
    if isinstance(value, (set, frozenset)):
        return f"is a {name}; JSON has no sets (use a list)"
    module = getattr(kind, "__module__", "")
    if module == "datetime":
        return f"is a datetime.{name}; JSON has no dates (use an ISO-8601 string)"
    if kind is int:
        return (
            f"is an integer of {value.bit_length()} bits, too long for JSON text "  # type: ignore[attr-defined]
            "(the interpreter converts at most sys.get_int_max_str_digits() digits)"
        )
    if isinstance(value, int):
        return f"is a {name} (an int subclass), not a plain JSON number (pass int(value))"
    if isinstance(value, float):
        return f"is a {name} (a float subclass), not a plain JSON number (pass float(value))"
    if isinstance(value, Mapping):
        return f"is a {name}, not a JSON object (pass a dict)"
    return f"is of type {name}, which is not a JSON value"


def _freeze(value: object, depth: int, active: set[int]) -> JsonValue:
    kind = type(value)
    if kind is bool or value is None:
        return value  # type: ignore[return-value]
    if kind is str:
        if value.isascii() or is_unicode(value):  # type: ignore[attr-defined,arg-type]
            return value  # type: ignore[return-value]
        raise _Rejected(_describe(value))
    if kind is int:
        if int_has_text(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        raise _Rejected(_describe(value))
    if kind is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        raise _Rejected(_describe(value))
    if kind is FrozenDict or kind is FrozenList:
        return value  # type: ignore[return-value]
    if issubclass(kind, dict):
        return _freeze_object(value, depth, active)  # type: ignore[arg-type]
    if issubclass(kind, (list, tuple)):
        return _freeze_array(value, depth, active)  # type: ignore[arg-type]
    if issubclass(kind, str):
        return _freeze(str.__str__(value), depth, active)
    raise _Rejected(_describe(value))


def _enter(value: object, depth: int, active: set[int]) -> int:
    if depth >= MAX_DEPTH:
        raise _Rejected(f"nests deeper than {MAX_DEPTH} levels")
    ident = id(value)
    if ident in active:
        raise _Rejected("is circular (it contains itself)")
    active.add(ident)
    return ident


def _freeze_object(value: dict[Any, Any], depth: int, active: set[int]) -> FrozenDict:
    ident = _enter(value, depth, active)
    out: dict[str, JsonValue] = {}
    for key, item in dict.items(value):
        if type(key) is not str:
            if not isinstance(key, str):
                raise _Rejected(
                    f"has the key {key!r} of type {type(key).__qualname__}; "
                    "JSON object keys must be strings"
                )
            key = str.__str__(key)
        if not (key.isascii() or is_unicode(key)):
            raise _Rejected(f"has a key that {_describe(key)}")
        kind = type(item)
        # Scalars and already-frozen members inline: no call, no try per member.
        if (
            (kind is str and item.isascii())
            or kind is bool
            or item is None
            or kind in _FROZEN
            or (kind is int and NEG_SMALL_INT < item < SMALL_INT)
        ):
            out[key] = item
            continue
        try:
            out[key] = _freeze(item, depth + 1, active)
        except _Rejected as rejected:
            rejected.segments.append(f".{key}")
            raise
    active.discard(ident)
    return trusted_frozen_dict(out)


def _freeze_array(value: list[Any] | tuple[Any, ...], depth: int, active: set[int]) -> FrozenList:
    ident = _enter(value, depth, active)
    items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
    out: list[JsonValue] = []
    append = out.append
    for index, item in enumerate(items):
        kind = type(item)
        if (
            (kind is str and item.isascii())
            or kind is bool
            or item is None
            or kind in _FROZEN
            or (kind is int and NEG_SMALL_INT < item < SMALL_INT)
        ):
            append(item)
            continue
        try:
            append(_freeze(item, depth + 1, active))
        except _Rejected as rejected:
            rejected.segments.append(f"[{index}]")
            raise
    active.discard(ident)
    return trusted_frozen_list(out)


def flat_object(value: dict[Any, Any]) -> FrozenDict | None:
    """The frozen copy of a dict whose keys are ASCII ``str`` and whose members are ASCII
    strings, booleans, ``None``, ordinary ints or frozen values; ``None`` for any other dict.

    Tool arguments usually look like this, and such a dict cannot nest or contain itself,
    so it skips the general walk's depth and cycle bookkeeping.
    """
    for key, item in dict.items(value):
        kind = type(item)
        if (
            type(key) is not str
            or not key.isascii()
            or not (
                (kind is str and item.isascii())
                or (kind is int and NEG_SMALL_INT < item < SMALL_INT)
                or kind is bool
                or item is None
                or kind in _FROZEN
            )
        ):
            return None
    return trusted_frozen_dict(value)


def snapshot(value: object, label: str = "value") -> JsonValue:
    """Copy ``value`` into deep-frozen lossless JSON, or raise :class:`JsonValueError`.

    The caller's object is only read, never changed. Already-frozen values are returned
    as they are (they were checked when they were made). ``label`` names the root in error
    paths, for example ``arguments`` gives ``"arguments.items[2]" is a set; ...``.
    """
    kind = type(value)
    if kind is dict:
        flat = flat_object(value)  # type: ignore[arg-type]
        if flat is not None:
            return flat
    elif (
        (kind is str and value.isascii())  # type: ignore[attr-defined]
        or kind is bool
        or value is None
        or kind in _FROZEN
        or (kind is int and NEG_SMALL_INT < value < SMALL_INT)  # type: ignore[operator]
    ):
        return value  # type: ignore[return-value]
    try:
        return _freeze(value, 0, set())
    except _Rejected as rejected:
        path = label + "".join(reversed(rejected.segments))
        raise JsonValueError(path, rejected.problem) from None


def _thaw(value: JsonValue) -> Any:
    if isinstance(value, dict):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def thaw(value: object) -> Any:
    """Plain, mutable ``dict``/``list`` data equal to ``value`` (which must be JSON)."""
    return _thaw(snapshot(value))


_ENCODER = _stdlib_json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_encode = _ENCODER.encode
_SCALAR_TEXT = {True: "true", False: "false", None: "null"}


def dumps(value: object) -> str:
    """Compact JSON text for a lossless JSON value (non-ASCII kept as is)."""
    kind = type(value)
    if kind is int and NEG_SMALL_INT < value < SMALL_INT:  # type: ignore[operator]
        return int.__repr__(value)
    if kind is str and value.isascii():  # type: ignore[attr-defined]
        return _encode(value)
    if kind is bool or value is None:
        return _SCALAR_TEXT[value]  # type: ignore[index]
    return _encode(snapshot(value))


_CANONICAL = _stdlib_json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
)
# The stdlib's C encoder, made once for frozen values: ``JSONEncoder.encode`` builds one
# (and a cycle check) on every call, which is most of its cost for a small value.
_c_make_encoder: Any = getattr(_stdlib_json.encoder, "c_make_encoder", None)
_FROZEN_ENCODER = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None,  # no cycle check: a frozen value is acyclic by construction
        _CANONICAL.default,
        _stdlib_json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )
)


def canonical(value: object) -> str:
    """The canonical JSON text of ``value``: sorted keys, no whitespace, ASCII only (what
    :func:`dsh_tools.approvals.call_digest` hashes, a cached result's key)."""
    if _FROZEN_ENCODER is not None and type(value) in _FROZEN:
        return "".join(_FROZEN_ENCODER(value, 0))
    return _CANONICAL.encode(value)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str | bytes, label: str = "value") -> JsonValue:
    """Parse JSON text into a deep-frozen value; bad or too-deep text gives JsonValueError."""
    try:
        parsed = _stdlib_json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise JsonValueError(label, f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise JsonValueError(label, f"is not valid JSON text: {error}") from None
    return snapshot(parsed, label)
