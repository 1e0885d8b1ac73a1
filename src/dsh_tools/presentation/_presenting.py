"""Run a tool's presenters for one call: live, and when a log is replayed.

:func:`present_call` gives the pending card of a call and :func:`present_result` the
completed card of its result. Both resolve the tool exactly as execution would for the
call's agent (shadowing and restrictions included, B029), so the card matches the
definition that ran, and both are total: whatever the presenter or the logged arguments
do, they return a card (or ``None`` for "render the raw result") and never raise.

The fallback, for a call, is :func:`~dsh_tools.presentation.fallback_call_view`: a
generic card titled with the tool name that shows the raw arguments. It is used when

* no tool of that name is visible to the call's agent (or the agent names no scope),
* the tool has no ``present_call``,
* the arguments do not validate against the tool's parameters (soft validation, B192:
  an older log may hold arguments of an older schema),
* the presenter returns ``None``, raises, or returns something that is not a call card
  (an ``async def`` presenter is not supported: its coroutine is closed, never awaited).

For a result the same cases give ``None``: keep the pending title and show the raw
result content (B223). Failures are logged on the ``dsh_tools`` logger (invalid arguments
at debug level, since replaying old logs makes them routine; a broken presenter as a
warning with its traceback).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol, get_args

from .._json import FrozenDict, JsonValue, snapshot
from .._models import (
    PresentableResult,
    ToolDefinition,
    ToolExecutionInput,
    ToolExecutionResult,
)
from ..errors import JsonValueError
from ._cards import ToolCallView, ToolResultView, fallback_call_view

__all__ = ["present_call", "present_result", "presentable_result"]

logger = logging.getLogger("dsh_tools")


class _View(Protocol):
    """What a card needs of a registry or scope: the definition a call would run."""

    def definition_for(self, name: str, agent: str | None = None) -> ToolDefinition[Any] | None: ...


# The cards a presenter may return: the members of each union, so a new card is listed once.
_CALL_CARDS: tuple[type[Any], ...] = get_args(ToolCallView)
_RESULT_CARDS: tuple[type[Any], ...] = get_args(ToolResultView)


def present_call(view: _View, call: ToolExecutionInput) -> ToolCallView:
    """The pending-state card of ``call``, as the tool that would run it presents it.

    ``view`` is the registry or a scope; ``call.agent`` (when set) names the scope whose
    definition is used (``"parent/child"`` for nested scopes; through a scope it must be
    that scope or one of its descendants). Never raises: every failure gives the generic
    fallback card.
    """
    raw = _json_arguments(call)
    arguments = raw if isinstance(raw, FrozenDict) else None
    fallback = fallback_call_view(call.name, raw)
    definition = _definition(view, call)
    if definition is None or definition.present_call is None or arguments is None:
        return fallback
    parsed = _parse(definition, arguments)
    if parsed is _INVALID:
        return fallback
    presenter = definition.present_call
    card = _run(call.name, "present_call", lambda: presenter(parsed), _CALL_CARDS)
    return card if isinstance(card, _CALL_CARDS) else fallback


def present_result(
    view: _View,
    call: ToolExecutionInput,
    result: ToolExecutionResult | PresentableResult,
) -> ToolResultView | None:
    """The completed-state card of ``result``, or ``None`` to keep the pending title and
    render the raw result content.

    ``result`` may be the full result or its durable projection (content, error flag and
    meta, as persisted with the log). Never raises: every failure gives ``None``.
    """
    definition = _definition(view, call)
    if definition is None or definition.present_result is None:
        return None
    arguments = _json_arguments(call)
    if not isinstance(arguments, FrozenDict):
        return None
    parsed = _parse(definition, arguments)
    if parsed is _INVALID:
        return None
    try:
        projection = presentable_result(result)
    except Exception:
        logger.warning("present_result(%r): the result is malformed", call.name, exc_info=True)
        return None
    presenter = definition.present_result
    card = _run(call.name, "present_result", lambda: presenter(parsed, projection), _RESULT_CARDS)
    return card if isinstance(card, _RESULT_CARDS) else None


def presentable_result(result: ToolExecutionResult | PresentableResult) -> PresentableResult:
    """The projection a result presenter gets: final content, failure flag and ``meta``."""
    if isinstance(result, PresentableResult):
        return result
    return PresentableResult(content=result.content, is_error=result.is_error, meta=result.meta)


# ---------------------------------------------------------------------------- helpers


class _Invalid:
    def __repr__(self) -> str:
        return "<invalid arguments>"


_INVALID: Any = _Invalid()


def _json_arguments(call: ToolExecutionInput) -> JsonValue:
    """The call's arguments as frozen JSON, or ``None`` when they are not JSON at all."""
    try:
        return snapshot(call.arguments, "arguments")
    except JsonValueError:
        logger.debug("present(%r): arguments are not JSON", call.name)
        return None


def _definition(view: _View, call: ToolExecutionInput) -> Any:
    """The definition a call by ``call.agent`` runs, through ``view``; ``None`` if none."""
    try:
        return view.definition_for(call.name, call.agent)
    except Exception:  # a registry that cannot plan must not break a replay
        logger.debug("present(%r): cannot resolve agent %r", call.name, call.agent, exc_info=True)
        return None


def _parse(definition: ToolDefinition[Any], arguments: FrozenDict) -> Any:
    """Soft validation (B192): the typed arguments, or ``_INVALID`` instead of raising."""
    model = definition.arguments
    try:
        problems = model.violations(arguments)
        if problems:
            logger.debug("present(%r): arguments do not validate: %s", definition.name, problems)
            return _INVALID
        return model.parse(arguments)
    except Exception:  # an attrs class whose own validators refuse the arguments
        logger.debug("present(%r): arguments rejected", definition.name, exc_info=True)
        return _INVALID


def _run(
    name: str, hook: str, presenter: Callable[[], object], cards: tuple[type[Any], ...]
) -> object:
    """Call a presenter; what it returned when that is one of ``cards``, else ``None``."""
    try:
        card = presenter()
    except Exception:
        logger.warning("%s of tool %r raised; using the fallback", hook, name, exc_info=True)
        return None
    if card is None or isinstance(card, cards):
        return card
    if inspect.iscoroutine(card):
        card.close()  # never awaited: presenters are synchronous and pure
        logger.warning("%s of tool %r is async; presenters must be synchronous", hook, name)
        return None
    logger.warning(
        "%s of tool %r returned %s, not a card; using the fallback",
        hook,
        name,
        type(card).__qualname__,
    )
    return None
