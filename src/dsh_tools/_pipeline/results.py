"""How the call path makes results: fast from parts it already checked, or from an error.

Every constructor here ends in ``_result``, like the public :func:`~dsh_tools.failure_result`.
The fast ones skip the converters of :class:`~dsh_tools.ToolExecutionSuccess` (they would
only find the same frozen values again); they are derived from ``attrs.fields``, so a
field added to the class gets its default here too, or fails at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from .._content import ContextMessage
from .._json import FrozenList, JsonValue
from .._models import (
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
)
from .._schema.codegen import compiled
from ..errors import DshToolsError, ErrorCode
from .loops import stops_the_caller

R = TypeVar("R", bound=attrs.AttrsInstance)

_new = object.__new__


def trusted_constructor(cls: type[R], names: tuple[str, ...]) -> Callable[..., R]:
    """A constructor of the dict-backed attrs class ``cls`` taking the fields ``names``
    positionally and as they are (the caller vouches for them); every other field gets
    its default. Raises ``TypeError`` for a field with no plain default to give.

    Written as source from ``attrs.fields`` (as attrs writes ``__init__``), so it costs
    what a hand-written one would and cannot miss a field.
    """
    fields = attrs.fields(cls)
    unknown = set(names) - {field.name for field in fields}
    if unknown:
        raise TypeError(f"{cls.__qualname__} has no field {sorted(unknown)}")
    defaults: dict[str, Any] = {}
    for field in fields:
        if field.name in names:
            continue
        if field.default is attrs.NOTHING or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            raise TypeError(
                f"{cls.__qualname__}.{field.name} has no plain default; a trusted "
                "constructor must be given it"
            )
        defaults[field.name] = field.default
    name = f"trusted_{cls.__name__}"
    lines = [f"def {name}({', '.join(names)}):", "    r = _new(_cls)", "    d = r.__dict__"]
    lines += [f"    d[{field!r}] = _defaults[{field!r}]" for field in defaults]
    lines += [f"    d[{field!r}] = {field}" for field in names]
    lines.append("    return r")
    namespace: dict[str, Any] = {"_new": _new, "_cls": cls, "_defaults": defaults}
    exec(compiled("\n".join(lines) + "\n", "constructor"), namespace)
    construct: Callable[..., R] = namespace[name]
    return construct


success_result: Callable[
    [JsonValue, FrozenList, JsonValue, tuple[ContextMessage, ...], bool], ToolExecutionSuccess
] = trusted_constructor(
    ToolExecutionSuccess, ("value", "content", "meta", "additional_contexts", "concludes_turn")
)
"""``success_result(value, content, meta, contexts, concludes_turn)`` from frozen parts."""


def message(error: BaseException) -> str:
    """What an exception says, for a result: its message, else its class name; never
    raises (a plugin's exception may not even print). One that is not an ``Exception``
    (``SystemExit``, a stray ``CancelledError``) is named, since its text alone (an exit
    status, often nothing) says little."""
    try:
        text = error.message if isinstance(error, DshToolsError) else str(error)
    except BaseException as raised:  # a plugin's __str__ is its code: contained likewise
        if stops_the_caller(raised):
            raise
        return "<unprintable thrown value>"
    if isinstance(error, Exception):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_POLICY_FAULTS = frozenset({ErrorCode.POLICY_ERROR, ErrorCode.DENIED})
"""Codes of a failing policy stage: a raising plugin is a fault of policy whatever it
raised, so the code it carried goes in the message instead."""


def error_result(
    error: BaseException,
    default_code: ErrorCode,
    prefix: str = "",
    contexts: tuple[ContextMessage, ...] = (),
) -> ToolExecutionFailure:
    """The failure an exception makes: for a body or a renderer, its own code when it
    carries one; for a policy stage (``default_code`` ``POLICY_ERROR`` or ``DENIED``),
    always that code, with the raised one named in the message."""
    text = prefix + message(error)
    code = default_code.value
    if isinstance(error, DshToolsError):
        if default_code not in _POLICY_FAULTS:
            code = error.code
        elif error.code != code:
            text += f" (it raised code {error.code})"
    return failure_result(text, code, name=type(error).__name__, contexts=contexts)


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` for messages, shortened; a plugin's object whose ``repr`` raises
    must not turn a clean failure into an escaping exception."""
    try:
        text = repr(value)
    except BaseException as raised:
        if stops_the_caller(raised):
            raise
        return f"<unprintable {type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code(result: ToolExecutionResult) -> str:
    """A result's code for traces: ``ok`` for a success."""
    return result.error.info.code if isinstance(result, ToolExecutionFailure) else "ok"
