"""Tool arguments: one compiled model per tool, from a DSL spec, an attrs class or the
typed parameters of a function (:func:`fields_model`, for :func:`~dsh_tools.tool`).

An :class:`ArgumentsModel` holds the model-facing parameters JSON Schema and the compiled
validator for it, so a call costs one validation and (for attrs classes) one cattrs
structuring. Validation never coerces: ``"1"`` is not an integer, ``True`` is not a number,
unknown keys of an attrs class are rejected. Only then does a private cattrs converter
build the instance, so the tool body gets precise types with no casts::

    @attrs.frozen
    class ReadArgs:
        path: str = attrs.field(metadata={"description": "Absolute path"})
        limit: Annotated[int, "Max lines"] = 100

Supported field types: ``str int float bool None``, ``list[T]``, ``tuple[T, ...]``,
``dict[str, T]``, ``Literal[...]`` (values of one JSON type), ``enum.Enum`` subclasses with
``str`` or ``int`` values, ``X | None`` and nested attrs classes. A field without a default
is required. A description comes from ``metadata={"description": ...}`` or, failing that,
from the first string in ``Annotated[T, ...]``. ``dict[str, T]`` is sent to the model as an
open object (the enforced subset has no per-value schema) but each value is checked as ``T``;
otherwise typed fields are checked by the validator of their schema, the one a DSL spec of
the same schema gets, so all three ways give the same messages.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import (
    Annotated,
    Any,
    Generic,
    Literal,
    TypeAlias,
    TypeVar,
    Union,
    get_args,
    get_origin,
    overload,
)

import attrs

from .._json import FrozenDict, flat_object, snapshot
from ..errors import DefinitionError, ToolArgsError
from .codegen import Admitter, compile_admitter
from .dsl import schema_spec_to_json_schema
from .subset import assert_supported_json_schema, compile_validator
from .validators import (
    Check,
    Validator,
    array_check,
    finish,
    is_lossless,
    map_check,
    nullable_check,
    object_check,
    scalar_check,
)

__all__ = ["ArgumentsModel", "arguments_model", "raw_arguments_model"]

A = TypeVar("A")


def _is_literal(hint: Any) -> bool:
    return get_origin(hint) is Literal


def _structure_literal(value: object, hint: Any) -> object:
    """Validation already matched the value; return the declared member (2.0 -> 2)."""
    return next(member for member in get_args(hint) if member == value)


_converters: list[Any] = []


def _converter() -> Any:
    """The private cattrs converter, built on first use: only attrs-class parameters need
    it, so tools with DSL parameters never import cattrs (about 15 ms of import time)."""
    if not _converters:
        import cattrs

        converter = cattrs.Converter(detailed_validation=False)
        converter.register_structure_hook_func(_is_literal, _structure_literal)
        converter.register_structure_hook(type(None), lambda value, _: None)
        _converters.append(converter)
    return _converters[0]


class ArgumentsModel(Generic[A]):
    """The parameters schema of one tool and the compiled way to check and build its args.

    ``admit`` is the one-step path for the usual call, used by the pipeline: given the
    caller's raw arguments, it returns their frozen copy when that copy is certainly what
    :meth:`parse` would return (a DSL or raw model, a plain dict of scalars the schema
    accepts), else ``None``, and the caller snapshots and parses as usual.
    """

    __slots__ = ("_build", "_check", "_keeps_frozen", "admit", "json_schema")

    def __init__(
        self,
        json_schema: FrozenDict,
        check: Validator,
        build: Callable[[object], A],
        keeps_frozen: bool = False,
        admit: Admitter | None = None,
    ) -> None:
        self.json_schema = json_schema
        self._check = check
        self._build = build
        self._keeps_frozen = keeps_frozen  # build returns a FrozenDict argument unchanged
        self.admit: Admitter = admit or _admits_nothing

    def violations(self, arguments: object) -> list[str]:
        """Every violation of ``arguments`` (``[]`` when valid); never raises."""
        return self._check(arguments)

    def parse(self, arguments: object) -> A:
        """Validate ``arguments``, then return the typed value the tool body receives.

        Raises :class:`~dsh_tools.errors.ToolArgsError` listing every violation.
        """
        found = self._check(arguments)
        if found:
            raise ToolArgsError(found)
        if self._keeps_frozen and type(arguments) is FrozenDict:
            return arguments  # type: ignore[return-value]  # the pipeline's snapshot
        return self._build(arguments)

    def __repr__(self) -> str:
        return f"ArgumentsModel({dict.__repr__(self.json_schema)})"


def _trusted(arguments: object) -> list[str]:
    return []


def _admits_nothing(arguments: object) -> None:
    return None


def _admit_flat(arguments: object) -> FrozenDict | None:
    """A trusted schema checks nothing: a plain flat dict only needs its snapshot."""
    return flat_object(arguments) if type(arguments) is dict else None


def _frozen_arguments(arguments: object) -> Any:
    return snapshot(arguments, "arguments")


@overload
def arguments_model(parameters: type[A]) -> ArgumentsModel[A]: ...
@overload
def arguments_model(parameters: object) -> ArgumentsModel[Any]: ...
def arguments_model(parameters: object) -> ArgumentsModel[Any]:
    """Compile a DSL parameter spec (args arrive as a ``FrozenDict``) or an attrs class.

    Raises :class:`~dsh_tools.errors.JsonSchemaError` for a bad spec and
    :class:`~dsh_tools.errors.DefinitionError` for a class that cannot be described.
    """
    if isinstance(parameters, type):
        if not attrs.has(parameters):
            raise DefinitionError(
                f"parameters class {parameters.__qualname__} must be an attrs class "
                "(decorate it with @attrs.define or @attrs.frozen)"
            )
        return _class_model(parameters)
    schema = schema_spec_to_json_schema(parameters)
    return ArgumentsModel(
        schema,
        compile_validator(schema, root=""),
        _frozen_arguments,
        True,
        compile_admitter(schema),
    )


def raw_arguments_model(schema: object) -> ArgumentsModel[Any]:
    """A model for a trusted raw JSON Schema: no validation, args arrive snapshotted."""
    frozen = snapshot(schema, "parameters")
    if not isinstance(frozen, FrozenDict):
        raise DefinitionError("raw parameters schema must be a JSON object")
    return ArgumentsModel(frozen, _trusted, _frozen_arguments, True, _admit_flat)


# --------------------------------------------------------------------------- typed fields

_SCALAR_KINDS: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NONE_TYPES = (None, type(None))


@attrs.frozen
class Field:
    """One typed argument, as an attrs field or a function parameter declares it."""

    name: str
    hint: Any
    default: object = attrs.NOTHING
    """``attrs.NOTHING`` when the argument is required."""
    description: str | None = None


class _Unsupported(Exception):
    """Internal: a type with no JSON Schema in the subset; carries what was wrong."""


def _literal_kind(values: tuple[object, ...]) -> str:
    """The one JSON type shared by literal values (bool is never an integer)."""
    kinds = {
        "null" if value is None else _SCALAR_KINDS.get(type(value), "unsupported")
        for value in values
    }
    if len(kinds) != 1 or "unsupported" in kinds or not values:
        raise _Unsupported(f"literal values {list(values)!r} must all be str, int, bool or None")
    return kinds.pop()


class _Describer:
    """Builds (schema, check) for typed fields; remembers the classes in progress."""

    def __init__(self) -> None:
        self.active: set[type] = set()
        self.maps = False
        """A ``dict[str, T]`` was described: the schema cannot say that each value is a
        ``T``, so the model validates with the described checks, not the schema's."""

    def cls(self, cls: type, depth: int) -> tuple[dict[str, Any], Check]:
        name = cls.__qualname__
        if cls in self.active:
            raise _Unsupported(f"{name} contains itself (recursive classes have no JSON Schema)")
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception as error:
            raise DefinitionError(
                f"parameters class {name}: cannot resolve annotations ({error})"
            ) from None
        fields = []
        for field in attrs.fields(cls):
            if field.init:
                hint = hints.get(field.name, field.type)
                description = field.metadata.get("description", annotated_description(hint))
                fields.append(Field(field.name, hint, field.default, description))
        self.active.add(cls)
        described = self.fields(f"parameters class {name}, field", fields, depth)
        self.active.discard(cls)
        return described

    def fields(
        self, owner: str, fields: Sequence[Field], depth: int
    ) -> tuple[dict[str, Any], Check]:
        """A closed object of ``fields``; an unsupported type names ``owner`` and the field."""
        properties: dict[str, Any] = {}
        checks: list[tuple[str, Check]] = []
        required: list[str] = []
        for field in fields:
            try:
                schema, check = self.hint(field.hint, depth + 1)
            except _Unsupported as problem:
                raise DefinitionError(
                    f"{owner} {field.name!r}: unsupported type {field.hint!r}: {problem}"
                ) from None
            if field.description is not None:
                schema["description"] = field.description
            default = field.default
            if default is attrs.NOTHING:
                required.append(field.name)
            else:
                if isinstance(default, enum.Enum):
                    default = default.value
                if is_lossless(default):
                    schema["default"] = default
            properties[field.name] = schema
            checks.append((field.name, check))
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        return schema, object_check(required, checks, True, depth)

    def hint(self, hint: Any, depth: int) -> tuple[dict[str, Any], Check]:
        origin, args = get_origin(hint), get_args(hint)
        if origin is Annotated:
            return self.hint(args[0], depth)
        if hint in _SCALAR_KINDS:
            kind = _SCALAR_KINDS[hint]
            return {"type": kind}, scalar_check(kind)
        if hint in _NONE_TYPES:
            return {"type": "null"}, scalar_check("null")
        if origin is Literal:
            kind = _literal_kind(args)
            return {"type": kind, "enum": list(args)}, scalar_check(kind, args)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            values = tuple(member.value for member in hint)
            kind = _literal_kind(values)
            return {"type": kind, "enum": list(values)}, scalar_check(kind, values)
        if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            items, check = self.hint(args[0], depth + 1)
            return {"type": "array", "items": items}, array_check(check, depth)
        if origin is dict and args and args[0] is str:
            _, check = self.hint(args[1], depth + 1)
            self.maps = True
            return {"type": "object", "additionalProperties": True}, map_check(check)
        if origin is Union or origin is types.UnionType:
            present = [arg for arg in args if arg not in _NONE_TYPES]
            if len(present) == 1 and len(args) == 2:
                schema, check = self.hint(present[0], depth)
                return {"oneOf": [schema, {"type": "null"}]}, nullable_check(check)
            raise _Unsupported("only X | None unions are supported")
        if isinstance(hint, type) and attrs.has(hint):
            return self.cls(hint, depth)
        raise _Unsupported(
            "use str, int, float, bool, None, list, tuple, dict, Literal, Enum, "
            "X | None or an attrs class"
        )

    def model(
        self,
        schema: dict[str, Any],
        check: Check,
        build: Callable[[object], A],
        keeps_frozen: bool = False,
    ) -> ArgumentsModel[A]:
        """The model of a described root: validated like the DSL spec of the same schema
        (one validator, the same messages), unless a ``dict[str, T]`` needs its checks."""
        frozen = FrozenDict(schema)
        if self.maps:
            assert_supported_json_schema(frozen)
            validator = finish(check, "")
        else:
            validator = compile_validator(frozen, root="")
        return ArgumentsModel(frozen, validator, build, keeps_frozen)


def annotated_description(hint: object) -> str | None:
    """The first string of ``Annotated[T, ...]``, the description it gives, if any."""
    if get_origin(hint) is Annotated:
        return next((item for item in get_args(hint)[1:] if isinstance(item, str)), None)
    return None


def _class_model(cls: type[A]) -> ArgumentsModel[A]:
    describer = _Describer()
    schema, check = describer.cls(cls, 0)
    try:
        structure = _converter().get_structure_hook(cls)
    except Exception as error:  # pragma: no cover - every described type is structurable
        raise DefinitionError(f"parameters class {cls.__qualname__}: {error}") from None

    def build(arguments: object) -> A:
        try:
            return structure(arguments, cls)  # type: ignore[no-any-return]
        except Exception as error:  # the class's own validators refused the arguments
            raise ToolArgsError([f'"arguments" rejected by {cls.__qualname__}: {error}']) from None

    return describer.model(schema, check, build)


# --------------------------------------------------------------------------- functions

Converter: TypeAlias = Callable[[object], object]
"""Turns a validated JSON value into the Python value a parameter declares."""


def fields_model(owner: str, fields: Sequence[Field]) -> ArgumentsModel[Mapping[str, Any]]:
    """A model whose arguments arrive as a mapping of the fields' Python values, ready for
    ``function(**arguments)``: an absent optional field is left out (the function's own
    default applies), ``2.0`` arrives as ``2`` for an ``int``, a list as a ``list``, an
    enum value as its member. Raises :class:`~dsh_tools.errors.DefinitionError` naming
    ``owner`` and the field for a type that cannot be described.
    """
    describer = _Describer()
    schema, check = describer.fields(owner, fields, 0)
    converting = [
        (field.name, convert)
        for field in fields
        if (convert := _conversion(field.hint)) is not None
    ]

    def build(arguments: object) -> Mapping[str, Any]:
        values: dict[str, Any] = dict(arguments)  # type: ignore[call-overload]
        for name, convert in converting:
            if name in values:
                values[name] = convert(values[name])
        return values

    model = describer.model(schema, check, build, keeps_frozen=not converting)
    if all(convert is _to_int or convert is _to_float for _, convert in converting):
        admit = compile_admitter(model.json_schema)
        if admit is not None:
            model.admit = _unconverted(admit, converting) if converting else admit
    return model


def _unconverted(admit: Admitter, converting: Sequence[tuple[str, Converter]]) -> Admitter:
    """``admit``, declining a call whose numbers :func:`fields_model`'s build would convert
    (``2.0`` for an ``int``): what it admits must be exactly what parse would return."""

    def admit_unconverted(arguments: object) -> FrozenDict | None:
        admitted = admit(arguments)
        if admitted is not None:
            for name, convert in converting:
                value = admitted.get(name)
                if convert(value) is not value:
                    return None
        return admitted

    return admit_unconverted


def _to_int(value: object) -> object:
    """An integer arrives as an ``int``, though JSON may spell it ``2.0``."""
    return int(value) if type(value) is float else value


def _to_float(value: object) -> object:
    """A number arrives as a ``float``, though JSON may spell it ``2``."""
    return float(value) if type(value) is int else value


def _conversion(hint: Any) -> Converter | None:
    """How a validated JSON value becomes the Python value ``hint`` declares; ``None``
    when it already is one (``str``, ``bool``, ``None`` and their literals)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _conversion(args[0])
    if hint in _NONE_TYPES or hint is str or hint is bool:
        return None
    if hint is int:
        return _to_int
    if hint is float:
        return _to_float
    if origin is Literal:
        if all(member is None or type(member) in (str, bool) for member in args):
            return None
        return lambda value: _structure_literal(value, hint)
    if origin is Union or origin is types.UnionType:  # X | None, the one union described
        (present,) = (arg for arg in args if arg not in _NONE_TYPES)
        inner = _conversion(present)
        if inner is None or inner is _to_int or inner is _to_float:
            return inner  # each passes None through
        return lambda value: None if value is None else inner(value)
    structure = _converter().get_structure_hook(hint)
    return lambda value: structure(value, hint)
