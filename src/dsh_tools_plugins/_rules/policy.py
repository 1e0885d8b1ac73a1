"""The permission rules as a policy: the decision for a call among the matching rules
(deny, then ask, then allow, else the default), the reason a model reads, the record a
decision keeps, and the tool globs that match no tool. The public face is
:mod:`dsh_tools_plugins.permissions`."""

from __future__ import annotations

import difflib
import fnmatch
import os
from collections.abc import Iterable, Mapping
from typing import Any

from dsh_tools._models import Allow, Ask, Deny, ToolDefinition, ToolExecution
from dsh_tools._safetext import safe_text
from dsh_tools.hookspecs import hookimpl

from .._reach import CallReach, inside
from ..sandbox._settings import SandboxSettings
from .error import RulesError
from .fields import ACTIONS, Action
from .file import Place, at_top_key, read_document, read_file, read_rules
from .hints import tool_hints
from .limit_tables import LimitTables, read_tables
from .predicates import call_reach, touches
from .rule import Rule
from .sandbox_table import sandbox_from_table

__all__ = ["PermissionRules"]


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
        if default not in ACTIONS:
            raise RulesError(
                f"default must be one of {', '.join(map(repr, ACTIONS))}, got {default!r}",
                source=source,
            )
        self.default: Action = default
        self.source = source
        self.sandbox = sandbox
        self._contained = sandbox is not None and sandbox.contained
        self._guards = tuple(
            (index, rule) for index, rule in enumerate(self.rules, 1) if rule.enforce == "guard"
        )
        self._places: tuple[Place, ...] = ()
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
        (:mod:`dsh_tools._hostfiles`)."""
        return cls.from_toml_text(read_file(path), source=os.fspath(path))

    @classmethod
    def from_toml_text(cls, text: str, source: str = "<string>") -> PermissionRules:
        """Rules from TOML text; ``source`` names it in error messages."""
        document = read_document(text, source)
        rules, places = read_rules(text, source, document)
        sandbox = None
        if "sandbox" in document:
            sandbox = sandbox_from_table(text, source, document["sandbox"])
        default = document.get("default", "ask")
        trusted = document.get("trusted_mcp_servers", [])
        try:
            policy = cls(
                rules, default, source=source, sandbox=sandbox, trusted_mcp_servers=trusted
            )
        except RulesError as error:
            raise at_top_key(error, text, source) from None
        policy._places = places
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
        reach = call_reach(tool, args)
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
        reach = call_reach(tool, args)
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
        if any(touches(place, prefix) for place in places for prefix in prefixes):
            reached.append(safe_text(text))
    if not reached:
        return ""
    named = ", ".join(f'"{text}"' for text in reached)
    return f"; this call could reach {named} below where it starts: give a path that leaves it out"
