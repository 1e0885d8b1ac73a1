"""One permission rule, and whether it matches a call: its tool glob, then each
predicate it has (see the predicates in :mod:`dsh_tools_plugins.permissions`). The
public face is :mod:`dsh_tools_plugins.permissions`."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from dsh_tools._json import FrozenDict
from dsh_tools._models import ToolDefinition
from dsh_tools.bridges._mcp_hints import FLAGS

from .._reach import CallReach, inside
from . import fields as field
from .error import RulesError
from .fields import Action
from .hints import NO_HINTS, ToolHints, Wanted, hints_match, tool_hints
from .predicates import (
    Command,
    Prefix,
    call_argv,
    call_reach,
    command_text,
    json_equal,
    normalise,
    touches,
    within,
)

__all__ = ["Rule"]

_ENFORCE: Final = ("policy", "guard")


@attrs.frozen
class Rule:
    """One permission rule: an action for the calls it matches.

    :param action: ``"allow"``, ``"deny"`` or ``"ask"``.
    :param tool: a tool-name glob (``fnmatch``) or a sequence of them; ``"*"`` is every tool.
    :param path_prefix: a prefix or prefixes the call's paths must be inside (see
        :mod:`dsh_tools_plugins.permissions` for deny/ask and allow).
    :param argument: the argument ``path_prefix`` reads for a tool that declares no
        path arguments (default ``"path"``); a declaring tool's arguments are all read.
    :param argv_prefix: words (or a list of word lists) the call's argv must start with.
    :param argv_rest: with ``argv_prefix``, globs every further argv word must match.
    :param command_matches: a regex searched in the ``command`` (or ``argv``) argument;
        an ``allow`` rule may use it only together with ``argv_prefix``.
    :param argument_equals: ``{argument: value}`` pairs that must all be equal.
    :param name: how messages name the rule (default: its position).
    :param reason: the model-facing reason for ``deny`` and ``ask``.
    :param enforce: ``"guard"`` (deny rules only) also enforces the rule as a guard.
    :param sandboxed: ``True`` matches only while commands are sure to run in the sandbox
        offline (the policy's sandbox settings are ``contained``), ``False`` only while
        they are not.
    :param read_only: match only tools whose ``read_only`` flag is this (``destructive``,
        ``idempotent`` and ``open_world`` likewise); an imported MCP tool's annotations
        count when the policy trusts its server, and otherwise only for ask and deny
        rules (a remote hint can only make a decision stricter).

    Raises :class:`RulesError` for an invalid field.
    """

    action: Action = attrs.field(converter=field.action)
    tool: tuple[str, ...] = attrs.field(default=("*",), converter=field.tool)
    path_prefix: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=field.path_prefix
    )
    argument: str = attrs.field(default="path", kw_only=True, converter=field.argument)
    argv_prefix: tuple[tuple[str, ...], ...] | None = attrs.field(
        default=None, kw_only=True, converter=field.argv_prefix
    )
    argv_rest: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=field.argv_rest
    )
    command_matches: str | None = attrs.field(
        default=None, kw_only=True, converter=field.command_matches
    )
    argument_equals: FrozenDict | None = attrs.field(
        default=None, kw_only=True, converter=field.argument_equals
    )
    name: str | None = attrs.field(default=None, kw_only=True, converter=field.name)
    reason: str | None = attrs.field(default=None, kw_only=True, converter=field.reason)
    enforce: Literal["policy", "guard"] = attrs.field(default="policy", kw_only=True)
    sandboxed: bool | None = attrs.field(default=None, kw_only=True, converter=field.sandboxed)
    read_only: bool | None = attrs.field(default=None, kw_only=True)
    destructive: bool | None = attrs.field(default=None, kw_only=True)
    idempotent: bool | None = attrs.field(default=None, kw_only=True)
    open_world: bool | None = attrs.field(default=None, kw_only=True)
    _wanted: Wanted = attrs.field(init=False, repr=False, eq=False)
    _pattern: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    _normal_prefixes: tuple[Prefix, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.enforce not in _ENFORCE:
            raise RulesError(
                f"enforce must be one of {', '.join(map(repr, _ENFORCE))}, got {self.enforce!r}"
            )
        if self.enforce == "guard" and self.action != "deny":
            raise RulesError(f'enforce = "guard" is only for deny rules, not {self.action!r}')
        if self.argv_rest is not None and self.argv_prefix is None:
            raise RulesError("argv_rest needs argv_prefix (the words the rest follows)")
        if self.action == "allow" and self.command_matches is not None and not self.argv_prefix:
            raise RulesError(
                "command_matches cannot make an allow rule safe: a regular expression over "
                'shell text also matches "git status; rm -rf ~". Allow by program and '
                "arguments with argv_prefix (and argv_rest), or use command_matches in a "
                "deny or ask rule"
            )
        pattern = None
        if self.command_matches is not None:
            try:
                pattern = re.compile(self.command_matches)
            except re.error as error:
                raise RulesError(
                    f"command_matches is not a valid regular expression: {error}"
                ) from None
        object.__setattr__(self, "_pattern", pattern)
        wanted = tuple(
            (flag, value) for flag in FLAGS if (value := getattr(self, flag)) is not None
        )
        for flag, value in wanted:
            if not isinstance(value, bool):
                raise RulesError(f"{flag} must be true or false, got {value!r}")
        object.__setattr__(self, "_wanted", wanted)
        object.__setattr__(
            self, "_normal_prefixes", tuple(normalise(p) for p in self.path_prefix or ())
        )

    def matches(
        self,
        name: str,
        arguments: Mapping[str, object] | None,
        *,
        contained: bool = False,
        tool: ToolDefinition[Any] | None = None,
    ) -> bool:
        """Whether this rule applies to a call of ``name`` with ``arguments``;
        ``contained`` says whether commands are sure to run in the sandbox, offline;
        ``tool`` is the definition the name resolves to, whose declared path arguments
        ``path_prefix`` judges (see :class:`~dsh_tools.ToolPaths`)."""
        reach = call_reach(tool, arguments)
        return self._matches(name, arguments or {}, contained, reach, tool_hints(tool, ()))

    def _matches(
        self,
        name: str,
        args: Mapping[str, object],
        contained: bool,
        reach: CallReach | None,
        hints: ToolHints = NO_HINTS,
    ) -> bool:
        if not any(fnmatch.fnmatchcase(name, glob) for glob in self.tool):
            return False
        if self.sandboxed is not None and self.sandboxed != contained:
            return False
        if self._wanted and not hints_match(self._wanted, hints, self.action != "allow"):
            return False
        if self.path_prefix is not None and not self._path_matches(args, reach):
            return False
        if self.argv_prefix is not None and not self._argv_matches(args):
            return False
        if self._pattern is not None:
            command = command_text(args)
            if command is None or self._pattern.search(command) is None:
                return False
        if self.argument_equals is not None:
            for key, expected in self.argument_equals.items():
                if key not in args or not json_equal(args[key], expected):
                    return False
        return True

    def _path_matches(self, args: Mapping[str, object], reach: CallReach | None) -> bool:
        """``path_prefix`` for one call: the places a declared tool reaches, or else the
        text of the one argument the rule names."""
        if reach is None:
            path = args.get(self.argument)
            return isinstance(path, str) and any(
                within(path, prefix) for prefix in self._normal_prefixes
            )
        places = reach.reaches()
        prefixes = [reach.prefix(text) for text in self.path_prefix or ()]
        if self.action == "allow":
            # Every place the call touches, however spelled, lies inside a prefix.
            known = [spelling for spellings in prefixes for spelling in spellings or ()]
            return bool(places) and all(
                any(inside(spelling, prefix) for prefix in known)
                for place in places or ()
                for spelling in place.spellings
            )
        # deny and ask: any place may lie inside a prefix; what is unknown may be anywhere
        if places is None or None in prefixes:
            return True
        return any(
            touches(place, prefix)
            for place in places
            for spellings in prefixes
            for prefix in spellings or ()
        )

    def _argv_matches(self, args: Mapping[str, object]) -> bool:
        argv = call_argv(args)
        if argv is Command.ABSENT:
            return False
        if argv is Command.OPAQUE:
            # Whatever the command runs may be what a deny or ask rule is about.
            return self.action != "allow"
        for prefix in self.argv_prefix or ():
            if argv[: len(prefix)] == prefix:
                rest = argv[len(prefix) :]
                if self.argv_rest is None or all(
                    any(fnmatch.fnmatchcase(word, glob) for glob in self.argv_rest) for word in rest
                ):
                    return True
        return False
