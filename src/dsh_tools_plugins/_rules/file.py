"""Reading a permission rules file: the host file, its TOML, and each ``[[rule]]`` table
into a :class:`~dsh_tools_plugins._rules.rule.Rule`, with every error naming the file, the
line and the rule, and each rule's line and text kept for decision records. The public
face is :meth:`PermissionRules.from_toml <dsh_tools_plugins.permissions.PermissionRules>`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from dsh_tools._hostfiles import HostFileError, open_host_file
from dsh_tools.bridges._mcp_hints import FLAGS

from .error import RulesError
from .rule import Rule
from .toml_places import TABLE, key_line, line_of, toml_position, top_key_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["Place", "at_top_key", "read_document", "read_file", "read_rules"]

Place = tuple[int | None, str | None]
"""A rule's line in the rules file and its text (``None`` when unknown)."""

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
_KEEP_RULES: Final = (
    "keep the rules file outside the workspace, for example as ~/.config/dsh-tools/rules.toml"
)
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*rule[ \t]*\]\][ \t]*(#.*)?$", re.MULTILINE)


def read_file(path: str | os.PathLike[str]) -> str:
    """The text of the rules file at ``path``; raises :class:`RulesError` naming the file
    if it cannot be read, is not UTF-8, or is not a host file the host may trust."""
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
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise RulesError("the rules file is not UTF-8 text", source=source, line=line) from None


def read_document(text: str, source: str) -> dict[str, Any]:
    """The TOML document ``text``, whose top-level keys must all be known."""
    try:
        document: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line, column, problem = toml_position(error, text)
        raise RulesError(
            f"invalid TOML: {problem}", source=source, line=line, column=column
        ) from None
    # A new top-level section (a table such as [sandbox]) is a key in _TOP_KEYS read
    # by the policy; top_key_line points its errors at the line that sets it.
    unknown = sorted(set(document) - _TOP_KEYS)
    if unknown:
        raise RulesError(
            f"unknown top-level key {unknown[0]!r} "
            f"(known: {', '.join(sorted(_TOP_KEYS))}; rules are [[rule]] tables)",
            source=source,
            line=top_key_line(text, unknown[0]),
        )
    return document


def read_rules(
    text: str, source: str, document: Mapping[str, Any]
) -> tuple[list[Rule], tuple[Place, ...]]:
    """The document's ``[[rule]]`` tables as rules, and where each is written (nothing
    when they are not all ``[[rule]]`` headers)."""
    tables = document.get("rule", [])
    if not isinstance(tables, list):
        raise RulesError(
            "'rule' must be an array of tables ([[rule]])",
            source=source,
            line=top_key_line(text, "rule"),
        )
    headers = [match.start() for match in _HEADER.finditer(text)]
    rules = []
    for index, table in enumerate(tables, 1):
        rules.append(_rule_from_table(text, source, index, table, headers))
    places: tuple[Place, ...] = ()
    if len(headers) == len(rules):
        places = tuple(_rule_place(text, start) for start in headers)
    return rules, places


def at_top_key(error: RulesError, text: str, source: str) -> RulesError:
    """``error`` of the policy's ``default`` or ``trusted_mcp_servers``, at its line."""
    key = "trusted_mcp_servers" if "trusted_mcp_servers" in error.problem else "default"
    return RulesError(error.problem, source=source, line=top_key_line(text, key))


def _rule_place(text: str, start: int) -> Place:
    """The line of the ``[[rule]]`` header at ``start`` and the rule's text: the header
    and its keys, up to the next table, without comments or blank lines."""
    after_header = text.find("\n", start) + 1 or len(text)
    following = TABLE.search(text, after_header)
    end = following.start() if following else len(text)
    lines = [line.strip() for line in text[start:end].splitlines()]
    kept = [line for line in lines if line and not line.startswith("#")]
    return line_of(text, start), "\n".join(kept)


def _rule_from_table(
    text: str, source: str, index: int, table: object, headers: Sequence[int]
) -> Rule:
    if index <= len(headers):
        start = headers[index - 1]
        end = headers[index] if index < len(headers) else len(text)
        header_line: int | None = line_of(text, start)
    else:  # inline array of tables: no headers to count
        start, end = 0, len(text)
        header_line = key_line(text, "rule", 0, len(text))

    name = table.get("name") if isinstance(table, dict) else None
    rule_name = name if isinstance(name, str) else None

    def fail(problem: str, key: str | None = None) -> RulesError:
        line = header_line
        if key is not None and index <= len(headers):
            line = key_line(text, key, start, end) or header_line
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
