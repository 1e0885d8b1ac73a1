"""The ``dsh-tools`` command: list, inspect, call and serve the installed tools.

Every command loads the installed plugins first (``--no-plugins``, ``--block``, ``--only``
change that). Errors print one line (``dsh-tools: error: ...``) unless ``--debug``; under
``call --json`` they are a JSON object on standard output instead. The library's warnings,
such as a plugin that failed to load, print as ``dsh-tools: warning: ...`` lines.

Tools only run with the policy the user asked for: a broken rules file stops the command
(exit 2), and ``call`` and ``serve-mcp`` refuse to run while an entry point that could hold
policy failed to load (exit 3), unless ``--allow-broken-plugins`` says to go on without it.

Exit codes: 0 success; 1 the tool call failed (an ``is_error`` result), ``check`` found
problems, ``schemas`` found declarations its format refuses, or ``explain`` found the call
would be denied or is invalid; 2 bad usage or input; 3 a plugin failed to load where that
matters; 4 an unexpected internal error; 10 ``explain``: the call would ask a person for
approval; 141 standard output was closed early (``| head``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

from ._approvals import cmd_approvals
from ._console import library_log, output_closed, show_unicode_safely
from ._exits import (
    EXIT_CALL_FAILED,
    EXIT_INTERNAL,
    EXIT_OUTPUT_CLOSED,
    EXIT_PLUGINS,
    EXIT_USAGE,
    EXIT_WOULD_ASK,
    PluginsFailed,
    Refused,
    UsageError,
)
from ._exits import EXIT_OK as EXIT_OK
from ._inspect import cmd_check, cmd_list, cmd_plugins, cmd_schemas
from ._parser import ArgumentsRejected, build_parser
from ._run import cmd_call, cmd_explain, cmd_replay
from ._serve import cmd_serve_mcp
from ._setup import build, exported_options

if TYPE_CHECKING:
    from .._plugins.loading import LoadReport
    from .._registry import ToolRegistry

__all__ = [
    "EXIT_CALL_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_PLUGINS",
    "EXIT_USAGE",
    "EXIT_WOULD_ASK",
    "main",
]


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    stdin = stdin or sys.stdin
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    options = _parse(list(sys.argv[1:] if argv is None else argv), out, err)
    if isinstance(options, int):
        return options
    with library_log(err, options.debug):
        return _run(options, stdin, out, err)


def _parse(arguments: list[str], out: TextIO, err: TextIO) -> argparse.Namespace | int:
    """The options; or the exit code, when argparse refused them or printed help or version."""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return build_parser().parse_args(arguments)
    except ArgumentsRejected as rejected:
        command = _asks_for_json(arguments)
        if command is not None:
            return _json_error(out, command, "UsageError", "USAGE", rejected.message, EXIT_USAGE)
        rejected.parser.print_usage(err)
        err.write(f"{rejected.parser.prog}: error: {rejected.message}\n")
        return EXIT_USAGE
    except SystemExit as exit_request:  # --help and --version print, then exit
        return int(exit_request.code or 0)


def _asks_for_json(argv: Sequence[str]) -> str | None:
    """The command (``call`` or ``approvals``) of a command line that argparse refused and
    that asked for ``--json``, or ``None``."""
    for command in _ANSWERS_IN_JSON:
        if command in argv and "--json" in argv[list(argv).index(command) :]:
            return command
    return None


_ANSWERS_IN_JSON = ("call", "approvals")
"""The commands whose failures, under ``--json``, are JSON on standard output."""


def _run(options: argparse.Namespace, stdin: TextIO, out: TextIO, err: TextIO) -> int:
    """Run the command the options name; each way it can fail has its exit code."""
    from ..errors import DshToolsError

    def fail(error: BaseException, message: str, code: str, exit_code: int) -> int:
        return _failed(options, out, err, error, message, code, exit_code)

    try:
        with exported_options(options):
            registry, report = build(options, stdin, err)
            return _commands(registry, report, options, stdin, out, err)[options.command]()
    except BrokenPipeError:
        raise  # the reader of our output went away: console_main ends quietly
    except UsageError as error:
        return fail(error, str(error), error.code, EXIT_USAGE)
    except Refused as error:
        return fail(error, str(error), error.code, EXIT_CALL_FAILED)
    except PluginsFailed as error:
        if error.report is not None:
            err.write(error.report.format().rstrip("\n") + "\n")
        return fail(error, str(error), "PLUGIN_ERROR", EXIT_PLUGINS)
    except KeyboardInterrupt as error:
        return fail(error, "interrupted", "INTERRUPTED", EXIT_CALL_FAILED)
    except DshToolsError as error:
        # A broken rules file (RulesError, a PluginConfigError) names file, line, rule.
        return fail(error, f"{type(error).__name__}: {error}", error.code, EXIT_USAGE)
    except Exception as error:
        return fail(error, f"{type(error).__name__}: {error}", "INTERNAL", EXIT_INTERNAL)


def _commands(
    registry: ToolRegistry,
    report: LoadReport,
    options: argparse.Namespace,
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
) -> dict[str, Callable[[], int]]:
    """Each command, ready to run on the registry the options built."""
    return {
        "list": lambda: cmd_list(registry, options, out),
        "plugins": lambda: cmd_plugins(report, out),
        "schemas": lambda: cmd_schemas(registry, options, out, err),
        "call": lambda: cmd_call(registry, options, out, stdin, err),
        "explain": lambda: cmd_explain(registry, options, out, stdin, err),
        "check": lambda: cmd_check(registry, report, options, out),
        "replay": lambda: cmd_replay(registry, options, out),
        "serve-mcp": lambda: cmd_serve_mcp(registry, options, err),
        "approvals": lambda: cmd_approvals(options, out, err),
    }


def _failed(
    options: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    error: BaseException,
    message: str,
    code: str,
    exit_code: int,
) -> int:
    """A failed command: its traceback under ``--debug``, then one line on standard error,
    or, under ``call --json`` and ``approvals ... --json``, a JSON object on standard
    output."""
    if options.debug:
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__, file=err)
    if options.command in _ANSWERS_IN_JSON and getattr(options, "json", False):
        return _json_error(out, options.command, type(error).__name__, code, message, exit_code)
    err.write(f"dsh-tools: error: {message}\n")
    return exit_code


def _json_error(
    out: TextIO, command: str, name: str, code: str, message: str, exit_code: int
) -> int:
    """A failure of the command itself: for ``call``, shaped like a failed result of
    ``call --json``; for ``approvals``, ``{"error": {"message", "code"}, "exitCode"}``."""
    failure: dict[str, object] = {"error": {"message": message, "code": code}}
    if command == "call":
        failure = {
            "isError": True,
            "error": {"message": message, "info": {"name": name, "code": code}},
        }
    failure["exitCode"] = exit_code
    out.write(json.dumps(failure, indent=2, ensure_ascii=False) + "\n")
    return exit_code


def console_main() -> NoReturn:
    """Entry point of the ``dsh-tools`` console script and ``python -m dsh_tools``."""
    show_unicode_safely(sys.stdout, sys.stderr)
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = output_closed()
    sys.exit(code)
