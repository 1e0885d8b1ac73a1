"""The commands that show what is installed: ``list``, ``plugins``, ``schemas``, ``check``.

:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from ._exits import EXIT_CALL_FAILED, EXIT_OK

if TYPE_CHECKING:
    from .._plugins.loading import LoadReport
    from .._registry import ToolRegistry

__all__ = ["cmd_check", "cmd_list", "cmd_plugins", "cmd_schemas"]


def _summary(text: str) -> str:
    """The description's first sentence (or line), for one-line listings."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    sentence, dot, _ = first.partition(". ")
    return sentence + "." if dot else first


def cmd_list(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
    schemas = registry.schemas()
    if not schemas:
        if options.no_plugins:
            hint = "drop --no-plugins to load the installed plugins"
        elif options.only is not None:
            hint = "--only left out every plugin that has tools"
        else:
            hint = "install a plugin that has tools"
        out.write(f"no tools ({hint})\n")
        return EXIT_OK
    width = max(len(schema.name) for schema in schemas)
    for schema in schemas:
        definition = registry.get(schema.name)
        kind = "raw" if definition is not None and not definition.parameters.get("type") else "tool"
        if definition is not None and definition.metadata.get("read_only") is True:
            kind = "read-only"
        out.write(f"{schema.name:<{width}}  {kind:<9}  {_summary(schema.description)}\n")
    return EXIT_OK


def cmd_schemas(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    from .._checks import declaration_problems
    from ..bridges.wire import declarations

    schemas = registry.schemas()
    problems = declaration_problems(schemas, options.format)
    if problems:
        for problem in problems:
            err.write(f"dsh-tools: error: {problem}\n")
        err.write(
            f"dsh-tools: error: {options.format} would refuse these declarations; nothing "
            "printed (`dsh-tools check` lists what each format refuses)\n"
        )
        return EXIT_CALL_FAILED
    out.write(json.dumps(declarations(schemas, options.format), indent=2) + "\n")
    return EXIT_OK


def cmd_plugins(report: LoadReport, out: TextIO) -> int:
    out.write(report.format().rstrip("\n") + "\n")
    return EXIT_OK


def cmd_check(
    registry: ToolRegistry, report: LoadReport, options: argparse.Namespace, out: TextIO
) -> int:
    """Every problem of the plugins and the registry; then, with none, what the
    permission rules do (a call no rule matches, the tools no rule names)."""
    from .._checks import check_registry
    from ._setup import unmatched_rule_problems

    problems = [failure.message for failure in report.failed]
    problems += check_registry(registry)
    problems += unmatched_rule_problems(registry)
    tools = len(registry.names())
    if problems:
        for problem in problems:
            out.write(f"FAIL {problem}\n")
        out.write(
            f"{len(problems)} problem(s) in {len(report.loaded)} plugin(s), {tools} tool(s)\n"
        )
        return EXIT_CALL_FAILED
    if not options.no_plugins:
        from dsh_tools_plugins.permissions import rules_summary

        out.write("".join(f"{line}\n" for line in rules_summary(registry)))
    out.write(f"ok: {len(report.loaded)} plugin(s), {tools} tool(s), no problems\n")
    return EXIT_OK
