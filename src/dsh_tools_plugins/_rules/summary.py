"""The permission rules told to a person: what each rule does to which tools, and what a
call no rule matches gets (``dsh-tools check`` prints it). The public face is
:mod:`dsh_tools_plugins.permissions`."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dsh_tools._safetext import safe_text

if TYPE_CHECKING:
    from .policy import PermissionRules
    from .rule import Rule

__all__ = ["summary"]

_VERBS = {"allow": "run without asking", "ask": "ask a person first", "deny": "denied"}
"""What the calls a rule of each action matches do."""
_PREDICATES = (
    "path_prefix",
    "argv_prefix",
    "command_matches",
    "argument_equals",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
)


def summary(policy: PermissionRules, names: Iterable[str], built_in: bool) -> list[str]:
    """One line for the rules' source, one per rule, and one for the calls no rule
    matches, with the tools of ``names`` no rule names (they get the default)."""
    known = sorted(set(names))
    source = policy.source or "given in Python"
    if built_in:
        source = "the built-in default_rules() (no rules file: --rules FILE names one)"
    lines = [f"permission rules: {source}"]
    for index, rule in enumerate(policy.rules, 1):
        tools = ", ".join(rule.tool)
        label = repr(rule.name) if rule.name else f"#{index}"
        lines.append(f"  {tools}: {_VERBS[rule.action]}{_when(policy, rule)} (rule {label})")
    unnamed = ", ".join(name for name in known if not _named(policy.rules, name)) or "none"
    lines.append(
        f'  any other tool or call: {_VERBS[policy.default]} (default = "{policy.default}"); '
        f"loaded tools no rule names: {unnamed}"
    )
    return [safe_text(line) for line in lines]


def _when(policy: PermissionRules, rule: Rule) -> str:
    """The conditions a rule has besides its tools, in words."""
    conditions = [name for name in _PREDICATES if getattr(rule, name) is not None]
    said = f" when {', '.join(conditions)} match" if conditions else ""
    if rule.sandboxed is not None:
        contained = policy.sandbox is not None and policy.sandbox.contained
        state = "are" if contained else "are not"
        not_ = "" if rule.sandboxed else "not "
        said += (
            f" while commands are {not_}sure to run sandboxed offline; now they {state} "
            f"({_sandbox(policy)})"
        )
    return said


def _sandbox(policy: PermissionRules) -> str:
    settings = policy.sandbox
    if settings is None:
        return "no sandbox settings"
    return f"sandbox {settings.mode}, network {'on' if settings.network else 'off'}"


def _named(rules: Iterable[Rule], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for rule in rules for glob in rule.tool)
