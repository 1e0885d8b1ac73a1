"""Permission rules: allow, deny or ask by tool-name glob and argument predicates.

:class:`PermissionRules` is a ``dsh_tools_pre_execute`` policy built from Python
(``PermissionRules([Rule("deny", "run_command", command_matches=r"\\brm\\b")])``) or from a
TOML file (:meth:`PermissionRules.from_toml`)::

    default = "ask"                  # unmatched calls: "allow", "deny" or "ask"

    [[rule]]
    name = "read anywhere"
    action = "allow"
    tool = ["read_file", "grep"]     # one glob or a list (fnmatch syntax)

    [[rule]]
    name = "no system files"
    action = "deny"
    tool = "*"
    path_prefix = ["/etc", "/usr"]   # every path the tool declares, resolved
    enforce = "guard"                # also a guard: no other plugin can re-allow it

A rule matches a call when its tool glob matches the name and every predicate it has
holds. Among the matching rules **deny wins, then ask, then allow**, whatever their order;
no matching rule means ``default``. A ``deny`` becomes the model-facing reason, an
``ask`` goes to the registry's approval service with a reason naming the rule. A default
of ``"allow"`` abstains (returns ``None``), so later pre-execute policies still decide.

Predicates, all optional:

``path_prefix``
    for a tool that declares its path arguments (:class:`~dsh_tools.ToolPaths`; every
    reference tool does): a ``deny`` or ``ask`` rule matches when *any* place the call may
    touch lies inside a prefix, an ``allow`` rule only when *every* place does. Each
    declared argument is resolved the way the tool resolves it, links followed; relative
    prefixes are resolved through the same tool, absolute ones as given; a pattern
    narrows its search root to its literal directory; anything unresolvable matches deny
    and ask rules and never an allow rule (:mod:`dsh_tools_plugins._reach` has the
    details). For a tool that declares none: the argument named by ``argument``
    (default ``"path"``) is a string inside one of the prefixes. Both sides are
    normalised first (``os.path.normpath``: ``a/./b``, ``a//b`` and ``a/x/../b`` are
    ``a/b``) and compared by whole components, so ``/work/src`` covers ``/work/src`` and
    ``/work/src/x`` but not ``/work/srcx``, and ``/work/src/../../etc/passwd`` is *not*
    inside ``/work/src``. Relative paths are compared as written (no working directory
    is assumed); a relative path that climbs out with ``..`` is never inside a relative
    prefix that does not climb as far.
``argv_prefix``
    the program and arguments the call runs start with these words (``["git", "status"]``),
    or with one of several such lists. They are the ``"argv"`` argument (run without a
    shell), or the ``"command"`` argument split with :mod:`shlex` when it is one simple
    command: no operators, redirections, substitutions, expansions, globbing or leading
    variable assignments (:func:`dsh_tools_plugins._shell.simple_argv` has the details).
``argv_rest``
    with ``argv_prefix``: ``fnmatch`` globs that every word after the prefix must match
    (``[]``: nothing may follow the prefix; absent: anything may).
``command_matches``
    a regular expression searched (``re.search``; anchor it with ``^`` yourself) in the
    ``"command"`` argument, or in the ``"command"``/``"argv"`` list joined with spaces.
    Text says nothing about what a shell will run (``git status; rm -rf ~`` starts with
    ``git status``), so an ``allow`` rule may use it only together with ``argv_prefix``;
    alone it is for ``deny`` and ``ask`` rules.
``argument_equals``
    ``{name = value}``: each named argument equals the JSON value (``true`` is not ``1``).
``sandboxed``
    ``true``: the policy's sandbox settings (a ``[sandbox]`` table, see
    :func:`configured_sandbox`) are *contained*, so every command runs in the sandbox
    offline or not at all (mode ``required``, network off); ``false``: they are not.

A predicate whose argument is missing or of the wrong type does not match (except a
declared path argument of the wrong type, which cannot be resolved). So a ``deny`` rule
with ``path_prefix`` does not stop a call of an undeclared tool that has no ``path``: deny
the tool outright, or use the ``ask`` default, when that matters. The argv predicates are stricter
where a call has a command but no plain argv (a compound shell command, both ``command``
and ``argv``, a malformed ``argv``): an ``allow`` rule does not match it, a ``deny`` or
``ask`` rule does, since the command may run anything.

``enforce = "guard"`` (deny rules only) also returns the rule from a ``dsh_tools_guard``
implementation. Pre-execute is ``firstresult``: another plugin's earlier ``Allow`` would
skip these rules, but guards run for every allowed call and nothing can re-allow them.

A rule whose tool glob matches no tool the registry knows (a typo: ``read-file``,
``Read_File``, `` read_file``) can never decide anything. Rules cannot tell when they
load, since tools may be registered after them: :func:`unmatched_rules` (or
:meth:`PermissionRules.unknown_tools`) finds them once every tool is registered, and
``dsh-tools`` warns of them when it starts (an error under ``--strict`` and in
``dsh-tools check``).

Malformed rule files raise :class:`RulesError` naming the file, the line and the rule. It
is a :class:`~dsh_tools.errors.PluginConfigError`, so the ``default_permissions`` entry
point stops :func:`~dsh_tools.plugins.load_plugins` rather than leaving the host without
the rules it asked for. Unknown keys are errors at every level (``acton``,
``comand_matches``), never ignored.
TOML syntax errors carry their own line and column. For a rule that parses but is
invalid, the line is found by counting ``[[rule]]`` headers in the text (the *n*-th
header starts the *n*-th rule), then the offending key's ``key =`` line inside that table
if it is there. Rules written as an inline array (``rule = [{...}]``) have no headers; the
error then points at the ``rule =`` line.
"""

from __future__ import annotations

import difflib
import enum
import fnmatch
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from dsh_tools.bridges._mcp_hints import FLAGS
from dsh_tools.errors import DshToolsError, PluginConfigError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.hostfiles import HostFileError, open_host_file
from dsh_tools.json import FrozenDict, snapshot
from dsh_tools.models import Allow, Ask, Deny, ToolDefinition, ToolExecution
from dsh_tools.safetext import safe_text

from ._hints import NO_HINTS, ToolHints, Wanted, hints_match, tool_hints
from ._limit_tables import LimitTables, read_tables
from ._reach import CallReach, Reach, inside
from ._shell import simple_argv
from .sandbox import SandboxLimits, SandboxMode, SandboxSettings

if TYPE_CHECKING:
    from dsh_tools.registry import ToolRegistry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "NETWORK_ENV_VAR",
    "RULES_ENV_VAR",
    "SANDBOX_ENV_VAR",
    "Action",
    "PermissionRules",
    "Rule",
    "RulesError",
    "configured_sandbox",
    "default_permissions",
    "default_rules",
    "unmatched_rules",
]

RULES_ENV_VAR: Final = "DSH_TOOLS_RULES"
"""Environment variable naming the TOML rules file :func:`default_permissions` loads."""

SANDBOX_ENV_VAR: Final = "DSH_TOOLS_SANDBOX"
"""Environment variable (``auto``, ``required`` or ``off``; the command's ``--sandbox``)
that overrides the rules file's ``[sandbox] mode``."""

NETWORK_ENV_VAR: Final = "DSH_TOOLS_NETWORK"
"""Environment variable (``on`` or ``off``; the command's ``--network``/``--no-network``)
that overrides the rules file's ``[sandbox] network``."""

Action = Literal["allow", "deny", "ask"]
_ACTIONS: Final[tuple[Action, ...]] = ("allow", "deny", "ask")
_ENFORCE: Final = ("policy", "guard")
_RULE_KEYS: Final = frozenset(
    {
        "action",
        "tool",
        "name",
        "reason",
        "path_prefix",
        "argument",
        "argv_prefix",
        "argv_rest",
        "command_matches",
        "argument_equals",
        "enforce",
        "sandboxed",
        *FLAGS,
    }
)
_TOP_KEYS: Final = frozenset(
    {"budget", "cache", "default", "limits", "rule", "sandbox", "trusted_mcp_servers"}
)
_SANDBOX_KEYS: Final = frozenset(attrs.fields_dict(SandboxSettings))
_SANDBOX_MODES: Final[dict[str, SandboxMode]] = {
    "required": "required",
    "auto": "auto",
    "off": "off",
}
_LIMIT_KEYS: Final = frozenset(attrs.fields_dict(SandboxLimits))


class RulesError(PluginConfigError, ValueError):
    """Permission rules are malformed; the message names the file, line and rule.

    ``source`` is the file (or ``"<string>"``), ``line``/``column`` are 1-based or
    ``None`` when unknown, ``rule_index`` is the 1-based position of the rule (``None``
    for file-level problems) and ``rule_name`` its ``name``, if any.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
        rule_index: int | None = None,
        rule_name: str | None = None,
    ) -> None:
        self.problem = problem
        self.source = source
        self.line = line
        self.column = column
        self.rule_index = rule_index
        self.rule_name = rule_name
        where = ""
        if source is not None:
            where = source
            if line is not None:
                where += f":{line}"
                if column is not None:
                    where += f":{column}"
            where += ": "
        rule = ""
        if rule_index is not None:
            rule = f"rule #{rule_index}"
            if rule_name:
                rule += f" ({rule_name!r})"
            rule += ": "
        elif rule_name:
            rule = f"rule {rule_name!r}: "
        super().__init__(f"{where}{rule}{problem}")


# --------------------------------------------------------------------------- predicates


def _normalise(path: str) -> tuple[bool, tuple[str, ...]]:
    """(is absolute, components) of a normalised path; ``.`` has no components."""
    normal = os.path.normcase(os.path.normpath(path))
    absolute = os.path.isabs(normal)
    parts = tuple(part for part in re.split(r"[\\/]+" if os.sep == "\\" else "/+", normal) if part)
    if parts == (".",):
        parts = ()
    return absolute, parts


def _inside(path: str, prefix: tuple[bool, tuple[str, ...]]) -> bool:
    absolute, parts = _normalise(path)
    prefix_absolute, prefix_parts = prefix
    if absolute != prefix_absolute or parts[: len(prefix_parts)] != prefix_parts:
        return False
    rest = parts[len(prefix_parts) :]
    return not rest or rest[0] != ".."


def _json_equal(left: object, right: object) -> bool:
    """JSON equality: ``True`` is not ``1``, ``1`` equals ``1.0``, ``"1"`` is not ``1``."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    numbers = (int, float)
    if (
        isinstance(left, numbers)
        and isinstance(right, numbers)
        and not isinstance(left, bool)
        and not isinstance(right, bool)
    ):
        return left == right
    return type(left) is type(right) and left == right


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


def _tools(value: object) -> tuple[str, ...]:
    tools = _strings("tool", value)
    if any(not tool for tool in tools):
        raise RulesError(f"tool must not be empty, got {value!r}")
    return tools


def _prefixes(value: object) -> tuple[str, ...] | None:
    return None if value is None else _strings("path_prefix", value)


def _action(value: object) -> Action:
    for action in _ACTIONS:
        if value == action:
            return action
    raise RulesError(f"action must be one of {', '.join(map(repr, _ACTIONS))}, got {value!r}")


def _text(label: str, value: object) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise RulesError(f"{label} must be a non-empty string, got {value!r}")


def _argument(value: object) -> str:
    text = _text("argument", value)
    if text is None:
        raise RulesError("argument must be a non-empty string, got None")
    return text


def _command(value: object) -> str | None:
    return _text("command_matches", value)


def _words(value: object) -> tuple[str, ...] | None:
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(word, str) and word for word in value)
    ):
        return tuple(value)
    return None


def _argv_prefixes(value: object) -> tuple[tuple[str, ...], ...] | None:
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


def _argv_rest(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(glob, str) for glob in value):
        return tuple(value)
    raise RulesError(f"argv_rest must be a list of glob strings (may be empty), got {value!r}")


def _name(value: object) -> str | None:
    return _text("name", value)


def _reason_text(value: object) -> str | None:
    return _text("reason", value)


def _sandboxed(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RulesError(f"sandboxed must be true or false, got {value!r}")


def _equals(value: object) -> FrozenDict | None:
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


@attrs.frozen
class Rule:
    """One permission rule: an action for the calls it matches.

    :param action: ``"allow"``, ``"deny"`` or ``"ask"``.
    :param tool: a tool-name glob (``fnmatch``) or a sequence of them; ``"*"`` is every tool.
    :param path_prefix: a prefix or prefixes the call's paths must be inside (see the
        module docstring for deny/ask and allow).
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

    action: Action = attrs.field(converter=_action)
    tool: tuple[str, ...] = attrs.field(default=("*",), converter=_tools)
    path_prefix: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=_prefixes
    )
    argument: str = attrs.field(default="path", kw_only=True, converter=_argument)
    argv_prefix: tuple[tuple[str, ...], ...] | None = attrs.field(
        default=None, kw_only=True, converter=_argv_prefixes
    )
    argv_rest: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=_argv_rest
    )
    command_matches: str | None = attrs.field(default=None, kw_only=True, converter=_command)
    argument_equals: FrozenDict | None = attrs.field(default=None, kw_only=True, converter=_equals)
    name: str | None = attrs.field(default=None, kw_only=True, converter=_name)
    reason: str | None = attrs.field(default=None, kw_only=True, converter=_reason_text)
    enforce: Literal["policy", "guard"] = attrs.field(default="policy", kw_only=True)
    sandboxed: bool | None = attrs.field(default=None, kw_only=True, converter=_sandboxed)
    read_only: bool | None = attrs.field(default=None, kw_only=True)
    destructive: bool | None = attrs.field(default=None, kw_only=True)
    idempotent: bool | None = attrs.field(default=None, kw_only=True)
    open_world: bool | None = attrs.field(default=None, kw_only=True)
    _wanted: Wanted = attrs.field(init=False, repr=False, eq=False)
    _pattern: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    _normal_prefixes: tuple[tuple[bool, tuple[str, ...]], ...] = attrs.field(
        init=False, repr=False, eq=False
    )

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
            self, "_normal_prefixes", tuple(_normalise(p) for p in self.path_prefix or ())
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
        reach = _call_reach(tool, arguments)
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
            command = _command_text(args)
            if command is None or self._pattern.search(command) is None:
                return False
        if self.argument_equals is not None:
            for key, expected in self.argument_equals.items():
                if key not in args or not _json_equal(args[key], expected):
                    return False
        return True

    def _path_matches(self, args: Mapping[str, object], reach: CallReach | None) -> bool:
        """``path_prefix`` for one call: the places a declared tool reaches, or else the
        text of the one argument the rule names."""
        if reach is None:
            path = args.get(self.argument)
            return isinstance(path, str) and any(
                _inside(path, prefix) for prefix in self._normal_prefixes
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
            _touches(place, prefix)
            for place in places
            for spellings in prefixes
            for prefix in spellings or ()
        )

    def _argv_matches(self, args: Mapping[str, object]) -> bool:
        argv = _call_argv(args)
        if argv is _Command.ABSENT:
            return False
        if argv is _Command.OPAQUE:
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


def _touches(place: Reach, prefix: str) -> bool:
    """Whether ``place`` is inside ``prefix``, or reaches into it from above."""
    return any(
        inside(spelling, prefix) or (place.below and inside(prefix, spelling))
        for spelling in place.spellings
    )


def _reach_note(rule: Rule, reach: CallReach | None) -> str:
    """What a path rule's reason adds when the call is not inside a prefix but reaches
    into one from above (a search of a folder that holds it), or cannot be placed."""
    if rule.path_prefix is None or reach is None:
        return ""
    places = reach.reaches()
    if places is None:
        return "; where this call leads cannot be told, so it may reach what the rule covers"
    reached: list[str] = []
    for text in rule.path_prefix:
        prefixes = reach.prefix(text) or ()
        spellings = [spelling for place in places for spelling in place.spellings]
        if any(inside(spelling, prefix) for spelling in spellings for prefix in prefixes):
            return ""  # the call is inside what the rule covers: its reason says enough
        if any(_touches(place, prefix) for place in places for prefix in prefixes):
            reached.append(safe_text(text))
    if not reached:
        return ""
    named = ", ".join(f'"{text}"' for text in reached)
    return f"; this call could reach {named} below where it starts: give a path that leaves it out"


def _call_reach(
    tool: ToolDefinition[Any] | None, arguments: Mapping[str, object] | None
) -> CallReach | None:
    """The places a call of ``tool`` reaches, when the tool declares its paths."""
    if tool is None or tool.paths is None:
        return None
    return CallReach(tool.paths, tool.parameters, arguments or {})


class _Command(enum.Enum):
    """What a call runs when it has no plain argv."""

    ABSENT = "no command or argv argument"
    OPAQUE = "a command that is not one simple command"


def _call_argv(args: Mapping[str, object]) -> tuple[str, ...] | _Command:
    """The argv a call runs: its ``argv`` list, or its ``command`` string when that is one
    simple command (see :mod:`dsh_tools_plugins._shell`)."""
    command, argv = args.get("command"), args.get("argv")
    if command is None and argv is None:
        return _Command.ABSENT
    if command is None:
        if isinstance(argv, (list, tuple)) and argv and all(isinstance(w, str) for w in argv):
            return tuple(argv)
        return _Command.OPAQUE
    if argv is None and isinstance(command, str):
        return simple_argv(command) or _Command.OPAQUE
    return _Command.OPAQUE


def _command_text(args: Mapping[str, object]) -> str | None:
    for key in ("command", "argv"):
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return " ".join(str(item) for item in value)
    return None


# --------------------------------------------------------------------------- the policy


class PermissionRules:
    """A pre-execute policy (and guard) from an ordered list of :class:`Rule` objects.

    :param rules: the rules; their order only matters for messages (deny wins, then ask,
        then allow).
    :param default: the action for calls no rule matches.
    :param source: where the rules came from (a file path), used in messages.
    :param sandbox: the sandbox ``run_command`` runs commands in (a rules file's
        ``[sandbox]`` table). Rules with ``sandboxed`` match by its ``contained``
        property; the host must give ``run_command`` the same settings
        (:func:`configured_sandbox` does for the entry points). ``None``: not contained.
    :param trusted_mcp_servers: names of MCP servers (``McpToolSource(name=...)``) whose
        tool annotations rules may believe in every direction.
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        default: Action = "ask",
        *,
        source: str | None = None,
        sandbox: SandboxSettings | None = None,
        trusted_mcp_servers: Iterable[str] = (),
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        if isinstance(trusted_mcp_servers, str) or not all(
            isinstance(server, str) for server in trusted_mcp_servers
        ):
            raise RulesError(
                f"trusted_mcp_servers must be a list of server names, got {trusted_mcp_servers!r}",
                source=source,
            )
        self.trusted_mcp_servers = frozenset(trusted_mcp_servers)
        for index, rule in enumerate(self.rules, 1):
            if not isinstance(rule, Rule):
                raise RulesError(
                    f"expected a Rule, got {type(rule).__qualname__}",
                    source=source,
                    rule_index=index,
                )
        if default not in _ACTIONS:
            raise RulesError(
                f"default must be one of {', '.join(map(repr, _ACTIONS))}, got {default!r}",
                source=source,
            )
        self.default: Action = default
        self.source = source
        self.sandbox = sandbox
        self._contained = sandbox is not None and sandbox.contained
        self._guards = tuple(
            (index, rule) for index, rule in enumerate(self.rules, 1) if rule.enforce == "guard"
        )
        self._places: tuple[tuple[int | None, str | None], ...] = ()
        """Each rule's line and text in the rules file (read from TOML text only)."""
        self.limits = LimitTables()
        """What the rules file's ``[limits]``, ``[[budget]]`` and ``[cache]`` tables
        configure; the ``limits``, ``budgets`` and ``cache`` entry points register it."""

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> PermissionRules:
        """Rules from a TOML file; raises :class:`RulesError` naming the file if it cannot
        be read or is malformed, or if it is not a host file the host may trust: a
        symbolic link, a path through one, or a file inside the workspace
        (:mod:`dsh_tools.hostfiles`)."""
        source = os.fspath(path)
        try:
            fd = open_host_file(source, what="the rules file", instead=_KEEP_RULES)
            with os.fdopen(fd, "rb") as handle:
                data = handle.read()
        except HostFileError as error:
            raise RulesError(error.problem, source=source) from None
        except OSError as error:
            raise RulesError(
                f"cannot read the rules file: {error.strerror or error}", source=source
            ) from error
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            raise RulesError("the rules file is not UTF-8 text", source=source, line=line) from None
        return cls.from_toml_text(text, source=source)

    @classmethod
    def from_toml_text(cls, text: str, source: str = "<string>") -> PermissionRules:
        """Rules from TOML text; ``source`` names it in error messages."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            line, column, problem = _toml_position(error, text)
            raise RulesError(
                f"invalid TOML: {problem}", source=source, line=line, column=column
            ) from None
        # A new top-level section (a table such as [sandbox]) is a key in _TOP_KEYS read
        # here; _top_key_line points its errors at the line that sets it.
        unknown = sorted(set(document) - _TOP_KEYS)
        if unknown:
            raise RulesError(
                f"unknown top-level key {unknown[0]!r} "
                f"(known: {', '.join(sorted(_TOP_KEYS))}; rules are [[rule]] tables)",
                source=source,
                line=_top_key_line(text, unknown[0]),
            )
        tables = document.get("rule", [])
        if not isinstance(tables, list):
            raise RulesError(
                "'rule' must be an array of tables ([[rule]])",
                source=source,
                line=_top_key_line(text, "rule"),
            )
        headers = _rule_headers(text)
        rules = []
        for index, table in enumerate(tables, 1):
            rules.append(_rule_from_table(text, source, index, table, headers))
        sandbox = None
        if "sandbox" in document:
            sandbox = _sandbox_from_table(text, source, document["sandbox"])
        default = document.get("default", "ask")
        trusted = document.get("trusted_mcp_servers", [])
        try:
            policy = cls(
                rules, default, source=source, sandbox=sandbox, trusted_mcp_servers=trusted
            )
        except RulesError as error:
            key = "trusted_mcp_servers" if "trusted_mcp_servers" in error.problem else "default"
            raise RulesError(
                error.problem,
                source=source,
                line=_top_key_line(text, key),
            ) from None
        if len(headers) == len(rules):
            policy._places = tuple(_rule_place(text, start) for start in headers)
        policy.limits = read_tables(text, source, document)
        return policy

    # ------------------------------------------------------------------ deciding

    def decide(
        self,
        name: str,
        arguments: Mapping[str, object] | None,
        tool: ToolDefinition[Any] | None = None,
    ) -> Allow | Deny | Ask:
        """The decision for a call: deny, then ask, then allow among the matching rules;
        ``default`` when none matches (``Allow()`` for ``"allow"``). ``tool`` is the
        definition ``name`` resolves to; path rules judge the paths it declares."""
        return self._decide(name, arguments, tool) or Allow()

    def _decide(
        self,
        name: str,
        arguments: Mapping[str, object] | None,
        tool: ToolDefinition[Any] | None,
    ) -> Allow | Deny | Ask | None:
        """Like :meth:`decide`, but ``None`` for an unmatched call under an allow default."""
        allowed = 0  # the first allowing rule's index
        asked: tuple[int, Rule] | None = None
        args: Mapping[str, object] = arguments or {}
        reach = _call_reach(tool, args)
        hints = tool_hints(tool, self.trusted_mcp_servers)
        for index, rule in enumerate(self.rules, 1):
            if not rule._matches(name, args, self._contained, reach, hints):
                continue
            if rule.action == "deny":
                reason = self._reason(rule, index, name, reach)
                return Deny(reason, detail=self._detail(rule, index))
            if rule.action == "ask":
                asked = asked or (index, rule)
            elif not allowed:
                allowed = index
        if asked is not None:
            index, rule = asked
            return Ask(self._reason(rule, index, name, reach), detail=self._detail(rule, index))
        if allowed:
            return Allow(detail=self._detail(self.rules[allowed - 1], allowed))
        default = {"default": self.default, "file": self.source}
        if self.default == "deny":
            reason = f'tool "{name}" is not allowed by the permission rules{self._from()}'
            return Deny(reason, detail=default)
        if self.default == "ask":
            return Ask(f'no permission rule{self._from()} covers tool "{name}"', detail=default)
        return None

    def _detail(self, rule: Rule, index: int) -> dict[str, object]:
        """What decision records show of the deciding rule: where it is and its text."""
        line, text = self._places[index - 1] if index <= len(self._places) else (None, None)
        return {
            "rule": {
                "index": index,
                "name": rule.name,
                "action": rule.action,
                "file": self.source,
                "line": line,
                "text": text,
            }
        }

    def _from(self) -> str:
        """`` in FILE`` for what the model reads; nothing for rules from text, whose
        ``source`` is a placeholder such as ``<string>``, not a place to look."""
        placeholder = self.source is not None and self.source.startswith("<")
        return f" in {self.source}" if self.source and not placeholder else ""

    def _label(self, rule: Rule, index: int) -> str:
        label = repr(rule.name) if rule.name else f"#{index}"
        return f"permission rule {label}{self._from()}"

    def _reason(self, rule: Rule, index: int, name: str, reach: CallReach | None) -> str:
        label = self._label(rule, index)
        if rule.reason:
            reason = f"{rule.reason} ({label})"
        elif rule.action == "deny":
            reason = f'tool "{name}" is denied by {label}'
        else:
            reason = f'{label} asks before tool "{name}" runs'
        return reason + _reach_note(rule, reach)

    @hookimpl
    def dsh_tools_pre_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> Allow | Deny | Ask | None:
        # An unmatched call under an "allow" default abstains, so that later pre-execute
        # policies still decide (when every policy abstains the pipeline allows).
        return self._decide(execution.name, execution.arguments, tool)

    @hookimpl
    def dsh_tools_guard(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> str | None:
        args: Mapping[str, object] = execution.arguments or {}
        reach = _call_reach(tool, args)
        hints = tool_hints(tool, self.trusted_mcp_servers)
        for index, rule in self._guards:
            if rule._matches(execution.name, args, self._contained, reach, hints):
                return self._reason(rule, index, execution.name, reach)
        return None

    def unknown_tools(self, names: Iterable[str]) -> list[RulesError]:
        """Each tool glob of a rule that matches none of ``names`` (the tools the registry
        knows), as a :class:`RulesError` naming the file, the rule's line and the glob, with
        the closest known name when there is one. Such a rule never decides anything."""
        known = sorted(set(names))
        problems = []
        for index, rule in enumerate(self.rules, 1):
            dead = [g for g in rule.tool if not any(fnmatch.fnmatchcase(n, g) for n in known)]
            never = ", so the rule never applies" if len(dead) == len(rule.tool) else ""
            line = self._places[index - 1][0] if index <= len(self._places) else None
            for glob in dead:
                close = difflib.get_close_matches(glob.strip(), known, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                problem = f"tool {glob!r} matches no known tool{never}{hint}"
                problems.append(
                    RulesError(
                        problem,
                        source=self.source,
                        line=line,
                        rule_index=index,
                        rule_name=rule.name,
                    )
                )
        return problems

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source else ""
        return f"<PermissionRules {len(self.rules)} rules, default={self.default!r}{where}>"


def unmatched_rules(registry: ToolRegistry) -> list[RulesError]:
    """The rules of every :class:`PermissionRules` plugin of ``registry`` whose tool globs
    match no tool the registry shows (:meth:`~dsh_tools.ToolRegistry.names`; tools of
    plugins and of connected MCP servers included), as :meth:`PermissionRules.unknown_tools`
    reports them. Call it once every tool is registered. The built-in
    :func:`default_rules` are not checked: they name the reference tools whether or not
    they are loaded."""
    names = registry.names()
    problems = []
    for _, plugin in registry.plugin_manager.list_name_plugin():
        if isinstance(plugin, PermissionRules) and plugin.source != _DEFAULT_SOURCE:
            problems += plugin.unknown_tools(names)
    return problems


# --------------------------------------------------------------------------- TOML helpers

_AT_END = " (at end of document)"
_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*rule[ \t]*\]\][ \t]*(#.*)?$", re.MULTILINE)
_TABLE = re.compile(r"^[ \t]*\[", re.MULTILINE)


def _toml_position(error: Exception, text: str) -> tuple[int | None, int | None, str]:
    """Line, column and message of a TOML error (attributes on 3.14+/tomli 2.1+, else
    parsed from the message; "at end of document" is the last line)."""
    message = str(error)
    if message.endswith(_AT_END):
        return len(text.splitlines()) or 1, None, message[: -len(_AT_END)]
    line = getattr(error, "lineno", None)
    column = getattr(error, "colno", None)
    problem = getattr(error, "msg", None) or message
    found = _POSITION.search(message)
    if found is not None:
        problem = message[: found.start()] if problem == message else problem
        if line is None:
            line, column = int(found.group(1)), int(found.group(2))
    return line, column, problem


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _rule_headers(text: str) -> list[int]:
    """Offsets of the ``[[rule]]`` header lines, in order."""
    return [match.start() for match in _HEADER.finditer(text)]


def _rule_place(text: str, start: int) -> tuple[int, str]:
    """The line of the ``[[rule]]`` header at ``start`` and the rule's text: the header
    and its keys, up to the next table, without comments or blank lines."""
    after_header = text.find("\n", start) + 1 or len(text)
    following = _TABLE.search(text, after_header)
    end = following.start() if following else len(text)
    lines = [line.strip() for line in text[start:end].splitlines()]
    kept = [line for line in lines if line and not line.startswith("#")]
    return _line_of(text, start), "\n".join(kept)


def _first_table(text: str) -> int:
    match = _TABLE.search(text)
    return match.start() if match else len(text)


def _spelled(key: str) -> str:
    """A regex for ``key`` written bare, or in double or single quotes."""
    escaped = re.escape(key)
    return rf"(?:{escaped}|\"{escaped}\"|'{escaped}')"


def _key_line(text: str, key: str, start: int, end: int) -> int | None:
    """The line of ``key =`` between offsets ``start`` and ``end``, if there is one."""
    pattern = re.compile(rf"^[ \t]*{_spelled(key)}[ \t]*=", re.MULTILINE)
    match = pattern.search(text, start, end)
    return _line_of(text, match.start()) if match else None


def _top_key_line(text: str, key: str) -> int | None:
    """The line that sets a top-level ``key``: ``key =`` before the first table, or a
    ``[key]``, ``[key.sub]`` or ``[[key]]`` header."""
    line = _key_line(text, key, 0, _first_table(text))
    if line is not None:
        return line
    header = re.compile(rf"^[ \t]*\[\[?[ \t]*{_spelled(key)}[ \t]*[\].]", re.MULTILINE)
    match = header.search(text)
    return _line_of(text, match.start()) if match else None


def _rule_from_table(
    text: str, source: str, index: int, table: object, headers: Sequence[int]
) -> Rule:
    if index <= len(headers):
        start = headers[index - 1]
        end = headers[index] if index < len(headers) else len(text)
        header_line: int | None = _line_of(text, start)
    else:  # inline array of tables: no headers to count
        start, end = 0, len(text)
        header_line = _key_line(text, "rule", 0, len(text))

    name = table.get("name") if isinstance(table, dict) else None
    rule_name = name if isinstance(name, str) else None

    def fail(problem: str, key: str | None = None) -> RulesError:
        line = header_line
        if key is not None and index <= len(headers):
            line = _key_line(text, key, start, end) or header_line
        return RulesError(problem, source=source, line=line, rule_index=index, rule_name=rule_name)

    if not isinstance(table, dict):
        raise fail(f"a rule must be a table, got {table!r}")
    unknown = sorted(set(table) - _RULE_KEYS)
    if unknown:
        raise fail(
            f"unknown key {unknown[0]!r} (known keys: {', '.join(sorted(_RULE_KEYS))})",
            unknown[0],
        )
    if "action" not in table:
        raise fail("missing 'action' (allow, deny or ask)")
    arguments = dict(table)
    action = arguments.pop("action")
    tool = arguments.pop("tool", "*")
    try:
        return Rule(action, tool, **arguments)
    except RulesError as error:
        key = next((k for k in sorted(_RULE_KEYS) if error.problem.startswith(f"{k} ")), None)
        raise fail(error.problem, key) from None


def _sandbox_from_table(text: str, source: str, table: object) -> SandboxSettings:
    """The ``[sandbox]`` table as :class:`SandboxSettings`; every problem is a
    :class:`RulesError` naming the line of the key at fault."""
    header = re.compile(rf"^[ \t]*\[[ \t]*{_spelled('sandbox')}[ \t]*[\].]", re.MULTILINE)
    found = header.search(text)
    start = end = found.start() if found else 0
    while found is not None:  # [sandbox] and [sandbox.limits] make one region
        following = _TABLE.search(text, found.end())
        end = following.start() if following else len(text)
        found = header.match(text, end) if following else None

    def fail(problem: str, key: str | None = None) -> RulesError:
        line = _key_line(text, key, start, end) if key is not None else None
        return RulesError(problem, source=source, line=line or _top_key_line(text, "sandbox"))

    if not isinstance(table, dict):
        raise fail(f"sandbox must be a table ([sandbox]), got {table!r}")
    for keys, where, given in (
        (_SANDBOX_KEYS, "[sandbox]", table),
        (_LIMIT_KEYS, "[sandbox.limits]", table.get("limits", {})),
    ):
        if not isinstance(given, dict):
            raise fail(f"sandbox.limits must be a table, got {given!r}", "limits")
        unknown = sorted(set(given) - keys)
        if unknown:
            raise fail(
                f"unknown key {unknown[0]!r} in {where} (known keys: {', '.join(sorted(keys))})",
                unknown[0],
            )
    settings = dict(table)
    limits = settings.pop("limits", {})
    for record, given in ((SandboxLimits, limits), (SandboxSettings, settings)):
        for key, value in given.items():
            try:
                record(**{key: value})
            except ValueError as error:
                named = key in str(error).split()  # "sandbox mode must be ...": says which
                raise fail(str(error) if named else f"{key}: {error}", key) from None
    return SandboxSettings(**settings, limits=SandboxLimits(**limits))


# --------------------------------------------------------------------------- defaults


def default_rules(sandbox: SandboxSettings | None = None) -> PermissionRules:
    """The default policy for the reference tools.

    ``read_file``, ``list_dir``, ``glob`` and ``grep`` are allowed; ``write_file`` and
    ``edit_file`` ask. ``run_command`` asks too, unless ``sandbox`` (the settings its
    commands run under) is ``contained``: mode ``required`` and the network off. Then
    every command runs without asking, because the sandbox, not a pattern over the
    command's text, keeps it in the workspace; a command that could reach the network,
    or run outside the sandbox, still asks. Other tools are left to their own policies
    (the rules abstain): installing dsh-tools must not silently disable every
    third-party tool. A host that wants "ask for everything else" passes a rules file
    with ``default = "ask"``.
    """
    return PermissionRules(
        [
            Rule("allow", ("read_file", "list_dir", "glob", "grep"), name="read-only tools"),
            Rule("ask", ("write_file", "edit_file"), name="tools that change files"),
            Rule(
                "ask",
                "run_command",
                sandboxed=False,
                name="commands not confined to an offline sandbox",
            ),
        ],
        default="allow",
        source=_DEFAULT_SOURCE,
        sandbox=sandbox,
    )


_KEEP_RULES: Final = (
    "keep the rules file outside the workspace, for example as ~/.config/dsh-tools/rules.toml"
)

_DEFAULT_SOURCE: Final = "default_rules()"
"""How messages and records name the built-in rules."""


def configured_sandbox() -> SandboxSettings:
    """The sandbox settings the host configured, for the entry points.

    The ``[sandbox]`` table of the rules file named by ``$DSH_TOOLS_RULES`` (when there
    is one), then ``$DSH_TOOLS_SANDBOX`` (the mode) and ``$DSH_TOOLS_NETWORK`` (``on`` or
    ``off``) over it: the command's ``--sandbox`` and ``--network`` set those, so its
    flags win over the file. Without any of them: mode ``auto``, network off. A bad
    value raises :class:`RulesError` naming the variable or the file and line.
    """
    path = os.environ.get(RULES_ENV_VAR, "").strip()
    settings = PermissionRules.from_toml(path).sandbox if path else None
    return _with_overrides(settings or SandboxSettings())


def _with_overrides(settings: SandboxSettings) -> SandboxSettings:
    """``settings`` with ``$DSH_TOOLS_SANDBOX`` and ``$DSH_TOOLS_NETWORK`` applied."""
    mode = os.environ.get(SANDBOX_ENV_VAR, "").strip()
    network = os.environ.get(NETWORK_ENV_VAR, "").strip()
    if mode:
        if mode not in _SANDBOX_MODES:
            raise RulesError(
                f'must be "required", "auto" or "off", got {mode!r}', source=f"${SANDBOX_ENV_VAR}"
            )
        settings = attrs.evolve(settings, mode=_SANDBOX_MODES[mode])
    if network:
        if network not in ("on", "off"):
            raise RulesError(
                f'must be "on" or "off", got {network!r}', source=f"${NETWORK_ENV_VAR}"
            )
        settings = attrs.evolve(settings, network=network == "on")
    return settings


def default_permissions() -> PermissionRules:
    """The ``dsh_tools.plugins`` entry point factory: the rules in the TOML file named by
    ``$DSH_TOOLS_RULES``, or :func:`default_rules` when it is unset or empty; either way
    with the sandbox settings of :func:`configured_sandbox`, which the ``workspace``
    entry point gives ``run_command`` too.

    A set but unreadable or malformed file raises :class:`RulesError`, a
    :class:`~dsh_tools.errors.PluginConfigError`: :func:`~dsh_tools.plugins.load_plugins`
    raises it in turn (strict or not), so a host never runs with no rules, or with the
    defaults, in place of the file it named.
    """
    path = os.environ.get(RULES_ENV_VAR, "").strip()
    if not path:
        return default_rules(_with_overrides(SandboxSettings()))
    rules = PermissionRules.from_toml(path)
    sandbox = _with_overrides(rules.sandbox or SandboxSettings())
    policy = PermissionRules(
        rules.rules,
        rules.default,
        source=rules.source,
        sandbox=sandbox,
        trusted_mcp_servers=rules.trusted_mcp_servers,
    )
    policy._places = rules._places  # where each rule is, for decision records
    return policy
