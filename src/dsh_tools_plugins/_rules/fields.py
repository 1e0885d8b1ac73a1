"""Each field of a permission rule as it is given, checked and converted; a field that
cannot be one raises :class:`RulesError` naming the field first, which is how a rules
file's error finds the field's line. :class:`~dsh_tools_plugins._rules.rule.Rule` uses these
as its converters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from dsh_tools._json import FrozenDict, snapshot
from dsh_tools.errors import DshToolsError

from .error import RulesError

__all__ = [
    "ACTIONS",
    "Action",
    "action",
    "argument",
    "argument_equals",
    "argv_prefix",
    "argv_rest",
    "command_matches",
    "name",
    "path_prefix",
    "reason",
    "sandboxed",
    "tool",
]

Action = Literal["allow", "deny", "ask"]
ACTIONS: Final[tuple[Action, ...]] = ("allow", "deny", "ask")


def _strings(label: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(item, str) and item for item in value)
    ):
        return tuple(value)
    raise RulesError(f"{label} must be a non-empty string or a list of them, got {value!r}")


def tool(value: object) -> tuple[str, ...]:
    globs = _strings("tool", value)
    if any(not glob for glob in globs):
        raise RulesError(f"tool must not be empty, got {value!r}")
    return globs


def path_prefix(value: object) -> tuple[str, ...] | None:
    return None if value is None else _strings("path_prefix", value)


def action(value: object) -> Action:
    for known in ACTIONS:
        if value == known:
            return known
    raise RulesError(f"action must be one of {', '.join(map(repr, ACTIONS))}, got {value!r}")


def _text(label: str, value: object) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise RulesError(f"{label} must be a non-empty string, got {value!r}")


def argument(value: object) -> str:
    text = _text("argument", value)
    if text is None:
        raise RulesError("argument must be a non-empty string, got None")
    return text


def command_matches(value: object) -> str | None:
    return _text("command_matches", value)


def _words(value: object) -> tuple[str, ...] | None:
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(word, str) and word for word in value)
    ):
        return tuple(value)
    return None


def argv_prefix(value: object) -> tuple[tuple[str, ...], ...] | None:
    """One prefix (a list of words) or several (a list of such lists)."""
    if value is None:
        return None
    single = _words(value)
    if single is not None:
        return (single,)
    if isinstance(value, (list, tuple)) and value:
        several = [_words(item) for item in value]
        if all(prefix is not None for prefix in several):
            return tuple(prefix for prefix in several if prefix is not None)
    raise RulesError(
        'argv_prefix must be a list of non-empty words, like ["git", "status"], or a list '
        f"of such lists; got {value!r}"
    )


def argv_rest(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(glob, str) for glob in value):
        return tuple(value)
    raise RulesError(f"argv_rest must be a list of glob strings (may be empty), got {value!r}")


def name(value: object) -> str | None:
    return _text("name", value)


def reason(value: object) -> str | None:
    return _text("reason", value)


def sandboxed(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RulesError(f"sandboxed must be true or false, got {value!r}")


def argument_equals(value: object) -> FrozenDict | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise RulesError(f"argument_equals must be a non-empty table of values, got {value!r}")
    try:
        frozen = snapshot(dict(value), "argument_equals")
    except DshToolsError as error:
        raise RulesError(error.message) from None
    assert isinstance(frozen, FrozenDict)
    return frozen
