"""Before a command runs: the environment its options set, the plugins it loads, and the
checks that stop it when the policy asked for is not what loaded.

:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from ._exits import PluginsFailed, UsageError

if TYPE_CHECKING:
    from .._models import ApprovalOutcome, ApprovalRequest
    from .._plugins.loading import LoadReport
    from .._registry import ToolRegistry
    from ..approvals import ApprovalStore

__all__ = [
    "TerminalApproval",
    "approval_store",
    "build",
    "exported_options",
    "unmatched_rule_problems",
]

logger = logging.getLogger("dsh_tools")

_RUNS_TOOLS = frozenset({"call", "explain", "serve-mcp"})
"""Commands whose answer depends on every policy plugin having loaded."""
_RULES_ENTRY_POINT = "dsh_tools_plugins.permissions:default_permissions"


class TerminalApproval:
    """Answers ``Ask`` with a y/n prompt on a terminal; without one, nobody can answer."""

    def __init__(self, stdin: TextIO, stderr: TextIO) -> None:
        self.stdin = stdin
        self.stderr = stderr

    def answers_now(self, request: ApprovalRequest) -> bool:
        """A person at a terminal answers now, even a call whose ticket is open."""
        return self.stdin.isatty()

    def request(self, request: ApprovalRequest) -> ApprovalOutcome:
        from .._models import ApprovalOutcome

        if not self.stdin.isatty():
            return ApprovalOutcome.UNAVAILABLE
        from .._safetext import safe_text

        reason = f" ({request.reason})" if request.reason else ""
        arguments = json.dumps(_thaw(request.arguments), ensure_ascii=False)
        # One line, shown as written: the arguments and the reason come from the model.
        self.stderr.write(safe_text(f"Allow {request.tool_name} {arguments}{reason}? [y/N] "))
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        return ApprovalOutcome.ALLOWED_ONCE if answer in {"y", "yes"} else ApprovalOutcome.REJECTED


def _thaw(value: object) -> Any:
    from .._json import thaw

    return thaw(value)


def build(
    options: argparse.Namespace, stdin: TextIO, stderr: TextIO
) -> tuple[ToolRegistry, LoadReport]:
    """The registry the command works on, with the plugins the options ask for."""
    from .._plugins.loading import LoadReport, load_plugins
    from .._registry import ToolRegistry

    registry = ToolRegistry(approval=TerminalApproval(stdin, stderr))
    if options.command in ("call", "explain"):  # serve-mcp chooses and names its own
        registry.approval_store = approval_store(options)
    report = LoadReport()
    if not options.no_plugins:
        # A broken rules file raises PluginConfigError here: exit 2, nothing runs.
        with _approvals_location(options.approvals_store):
            report = load_plugins(registry, block=options.block, only=options.only)
    _check_report(options, report)
    _check_rules(options, registry)
    if options.audit_log is not None:
        from dsh_tools_plugins.audit import AuditLog

        registry.add_plugin(AuditLog(options.audit_log), name="cli-audit-log")
    return registry, report


def approval_store(options: argparse.Namespace) -> ApprovalStore | None:
    """The store ``--approvals-store`` (else ``$DSH_TOOLS_APPROVALS_URL``) names, checked
    now (see :func:`~dsh_tools.cli._store.chosen_store`); ``None`` when neither is set."""
    from ._store import chosen_store

    chosen = chosen_store(options)
    return None if chosen is None else chosen.store


@contextlib.contextmanager
def _approvals_location(location: str | None) -> Iterator[None]:
    """While the plugins load, ``--approvals-store`` is where a rules file's limits kept
    in the approval store go (``store = "approvals"``: the entry points read
    ``$DSH_TOOLS_APPROVALS_URL``); the environment is restored afterwards."""
    from dsh_tools_plugins.approval_store import APPROVALS_URL_ENV

    with _restored((APPROVALS_URL_ENV,)):
        if location is not None:
            os.environ[APPROVALS_URL_ENV] = location
        yield


@contextlib.contextmanager
def exported_options(options: argparse.Namespace) -> Iterator[None]:
    """While the command runs, its policy options in the environment, where the entry
    points read them; afterwards the environment as it was, so that a process that runs
    :func:`~dsh_tools.cli.main` in itself (a host, a test) keeps its own settings."""
    with _restored(_EXPORTED):
        _export_options(options)
        yield


_EXPORTED = ("DSH_TOOLS_WORKSPACE", "DSH_TOOLS_RULES", "DSH_TOOLS_SANDBOX", "DSH_TOOLS_NETWORK")
"""The environment variables :func:`_export_options` may set."""


@contextlib.contextmanager
def _restored(names: tuple[str, ...]) -> Iterator[None]:
    """The environment variables ``names`` as they were before, once the block ends."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _export_options(options: argparse.Namespace) -> None:
    """Hand the policy options to the entry points, which read them from the environment."""
    if options.workspace is not None:
        if not os.path.isdir(options.workspace):
            raise UsageError(f"--workspace {options.workspace!r} is not a directory")
        os.environ["DSH_TOOLS_WORKSPACE"] = os.path.abspath(options.workspace)
    elif not os.environ.get("DSH_TOOLS_WORKSPACE", "").strip():
        # The default workspace, named so that host files are checked against it.
        os.environ["DSH_TOOLS_WORKSPACE"] = os.getcwd()
    if options.rules is not None:
        if not os.path.isfile(options.rules):
            raise UsageError(f"--rules {options.rules!r} is not a file")
        _check_host_file(options.rules, "--rules")
        os.environ["DSH_TOOLS_RULES"] = os.path.abspath(options.rules)
    if options.audit_log is not None:
        _check_host_file(options.audit_log, "--audit-log")
    # The workspace and permissions entry points both read these (configured_sandbox).
    if options.sandbox is not None:
        os.environ["DSH_TOOLS_SANDBOX"] = options.sandbox
    if options.network is not None:
        os.environ["DSH_TOOLS_NETWORK"] = "on" if options.network else "off"


def _check_host_file(path: str, option: str) -> None:
    """A usage error when the file an option names is not one the host may use for
    itself: inside the workspace (just exported), or through a symbolic link."""
    from .._hostfiles import HostFileError, check_host_file

    try:
        check_host_file(path, what=option)
    except HostFileError as error:
        raise UsageError(str(error)) from None


def unmatched_rule_problems(registry: ToolRegistry) -> list[str]:
    """The permission rules loaded into ``registry`` that name no tool it has, one line
    each (see :func:`dsh_tools_plugins.permissions.unmatched_rules`)."""
    from dsh_tools_plugins.permissions import unmatched_rules

    return [str(problem) for problem in unmatched_rules(registry)]


def _check_rules(options: argparse.Namespace, registry: ToolRegistry) -> None:
    """Every tool has loaded by now, so a rule whose tool globs match none of them is a
    mistake (a typo in a tool name): a warning, or under ``--strict`` an error. ``check``
    reports such rules as problems itself."""
    if options.no_plugins or options.command == "check":
        return
    problems = unmatched_rule_problems(registry)
    if problems and options.strict:
        raise PluginsFailed(
            f"permission rules name tools that are not loaded (--strict): {'; '.join(problems)}"
        )
    for problem in problems:
        logger.warning("%s", problem)


def _check_report(options: argparse.Namespace, report: LoadReport) -> None:
    """Stop before anything runs when the plugins that loaded are not what was asked for."""
    if options.strict and not report.ok:
        raise PluginsFailed(
            "some plugins failed to load (run `dsh-tools plugins` for details)", report
        )
    if options.strict and report.unmatched:
        raise PluginsFailed(
            f"--block/--only name(s) match no installed entry point: "
            f"{', '.join(report.unmatched)} (--strict)"
        )
    if options.rules is not None and not any(
        record.entry_point == _RULES_ENTRY_POINT for record in report.loaded
    ):
        raise UsageError(
            "--rules needs the default_permissions plugin, which was not loaded "
            "(--no-plugins, --block or --only left it out)"
        )
    broken = report.policy_failures
    if broken and options.command in _RUNS_TOOLS and not options.allow_broken_plugins:
        names = "; ".join(
            f"[{failure.group}] {failure.name} ({failure.distribution} {failure.version})"
            for failure in broken
        )
        raise PluginsFailed(
            f"refusing to run tools while a plugin that may hold policy failed to load: "
            f"{names}. Fix it, block it (--block NAME), or pass --allow-broken-plugins to "
            "run without it"
        )
