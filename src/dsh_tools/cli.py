"""The ``dsh-tools`` command: list, inspect, call and serve the installed tools.

Every command loads the installed plugins first (``--no-plugins``, ``--block``, ``--only``
change that). Errors print one line (``dsh-tools: error: ...``) unless ``--debug``.

Exit codes: 0 success; 1 the tool call failed (an ``is_error`` result) or ``check`` found
problems; 2 bad usage or input; 3 a plugin failed to load where that matters (``check``,
``--strict``); 4 an unexpected internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ._version import __version__

if TYPE_CHECKING:
    from .models import ApprovalOutcome, ApprovalRequest, ToolExecutionResult
    from .plugins import LoadReport
    from .registry import ToolRegistry

__all__ = ["EXIT_CALL_FAILED", "EXIT_INTERNAL", "EXIT_PLUGINS", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_CALL_FAILED = 1
EXIT_USAGE = 2
EXIT_PLUGINS = 3
EXIT_INTERNAL = 4

CLI_AGENT = "cli"
"""The agent id of calls made from the command line (so ``Ask`` can reach a person)."""


class UsageError(Exception):
    """Bad input from the person at the terminal; printed as one line, exit code 2."""


class TerminalApproval:
    """Answers ``Ask`` with a y/n prompt on a terminal; without one, nobody can answer."""

    def __init__(self, stdin: TextIO, stderr: TextIO) -> None:
        self.stdin = stdin
        self.stderr = stderr

    def request(self, request: ApprovalRequest) -> ApprovalOutcome:
        from .models import ApprovalOutcome

        if not self.stdin.isatty():
            return ApprovalOutcome.UNAVAILABLE
        reason = f" ({request.reason})" if request.reason else ""
        arguments = json.dumps(_thaw(request.arguments), ensure_ascii=False)
        self.stderr.write(f"Allow {request.tool_name} {arguments}{reason}? [y/N] ")
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        return ApprovalOutcome.ALLOWED_ONCE if answer in {"y", "yes"} else ApprovalOutcome.REJECTED


def _thaw(value: object) -> Any:
    from .json import thaw

    return thaw(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh-tools",
        description="List, inspect, call and serve the tools of installed dsh-tools plugins.",
    )
    parser.add_argument("--version", action="version", version=f"dsh-tools {__version__}")
    parser.add_argument("--no-plugins", action="store_true", help="load no installed plugin")
    parser.add_argument(
        "--block", action="append", default=[], metavar="NAME", help="never load this plugin"
    )
    parser.add_argument(
        "--only", action="append", default=None, metavar="NAME", help="load only these plugins"
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail (exit 3) if any plugin fails to load"
    )
    parser.add_argument(
        "--workspace", metavar="DIR", help="root the workspace tools are confined to (default: .)"
    )
    parser.add_argument("--rules", metavar="FILE", help="permission rules (TOML) to enforce")
    parser.add_argument("--audit-log", metavar="FILE", help="append every call to this JSONL log")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("list", help="the visible tools, one line each")
    commands.add_parser("plugins", help="what loaded, with versions, and what failed and why")
    schemas = commands.add_parser("schemas", help="the model-facing schemas as JSON")
    schemas.add_argument(
        "--format",
        default="raw",
        choices=("raw", "openai", "openai-responses", "anthropic", "gemini", "mcp"),
    )
    call = commands.add_parser("call", help="run one call through the full pipeline")
    call.add_argument("name", help="the tool to call")
    call.add_argument(
        "arguments", nargs="?", default="{}", help="arguments as a JSON object, or - for stdin"
    )
    call.add_argument("--json", action="store_true", help="print the frozen result as JSON")
    commands.add_parser("check", help="validate every installed plugin; exit 1 on problems")
    replay = commands.add_parser("replay", help="render an audit log's calls as cards")
    replay.add_argument("log", help="the JSON Lines audit log (from --audit-log)")
    replay.add_argument("--rotated", action="store_true", help="include rotated files (LOG.N)")
    serve = commands.add_parser("serve-mcp", help="serve the tools over MCP (extra: mcp)")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP host (loopback by default)")
    serve.add_argument("--port", type=int, default=8000, help="HTTP port")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback HTTP host")
    return parser


def _build(
    options: argparse.Namespace, stdin: TextIO, stderr: TextIO
) -> tuple[ToolRegistry, LoadReport]:
    from .plugins import LoadReport, load_plugins
    from .registry import ToolRegistry

    if options.workspace is not None:
        if not os.path.isdir(options.workspace):
            raise UsageError(f"--workspace {options.workspace!r} is not a directory")
        os.environ["DSH_TOOLS_WORKSPACE"] = os.path.abspath(options.workspace)
    if options.rules is not None:
        if not os.path.isfile(options.rules):
            raise UsageError(f"--rules {options.rules!r} is not a file")
        os.environ["DSH_TOOLS_RULES"] = os.path.abspath(options.rules)
    registry = ToolRegistry(approval=TerminalApproval(stdin, stderr))
    report = LoadReport()
    if not options.no_plugins:
        report = load_plugins(registry, block=options.block, only=options.only)
        if options.strict and not report.ok:
            raise _PluginsFailed(report)
    if options.audit_log is not None:
        from dsh_tools_plugins.audit import AuditLog

        registry.add_plugin(AuditLog(options.audit_log), name="cli-audit-log")
    return registry, report


class _PluginsFailed(Exception):
    def __init__(self, report: LoadReport) -> None:
        super().__init__("some plugins failed to load (run `dsh-tools plugins` for details)")
        self.report = report


def _summary(text: str) -> str:
    """The description's first sentence (or line), for one-line listings."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    sentence, dot, _ = first.partition(". ")
    return sentence + "." if dot else first


def _cmd_list(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
    schemas = registry.schemas()
    if not schemas:
        out.write("no tools (install a plugin, or drop --no-plugins)\n")
        return EXIT_OK
    width = max(len(schema.name) for schema in schemas)
    for schema in schemas:
        definition = registry.get(schema.name)
        kind = "raw" if definition is not None and not definition.parameters.get("type") else "tool"
        if definition is not None and definition.metadata.get("read_only") is True:
            kind = "read-only"
        out.write(f"{schema.name:<{width}}  {kind:<9}  {_summary(schema.description)}\n")
    return EXIT_OK


def _cmd_schemas(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
    from .bridges.wire import declarations

    out.write(json.dumps(declarations(registry.schemas(), options.format), indent=2) + "\n")
    return EXIT_OK


def _read_arguments(text: str, stdin: TextIO) -> object:
    from .errors import JsonValueError
    from .json import loads

    source = stdin.read() if text == "-" else text
    try:
        value = loads(source, "arguments")
    except JsonValueError as error:
        raise UsageError(f"arguments: {error}") from None
    if not isinstance(value, dict):
        raise UsageError('arguments must be a JSON object, for example \'{"path": "README.md"}\'')
    return value


def _cmd_call(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, stdin: TextIO, err: TextIO
) -> int:
    import anyio

    from .models import ToolExecutionInput, result_to_json
    from .terminal import emit_card, render_call_view, render_result

    arguments = _read_arguments(options.arguments, stdin)
    call = ToolExecutionInput(
        call_id=f"cli-{int(time.time() * 1000)}",
        name=options.name,
        arguments=arguments,
        agent=CLI_AGENT,
    )
    if registry.get(options.name) is None:
        known = ", ".join(registry.names()) or "none"
        raise UsageError(f"unknown tool {options.name!r} (known: {known})")
    from .presenting import present_call, present_result

    if not options.json:
        emit_card(render_call_view(present_call(registry, call)), out)
        out.flush()
    result: ToolExecutionResult = anyio.run(_run_with_progress, registry, call, err)
    if options.json:
        out.write(json.dumps(result_to_json(result), indent=2, ensure_ascii=False) + "\n")
    else:
        emit_card(render_result(present_result(registry, call, result), result), out)
    return EXIT_CALL_FAILED if result.is_error else EXIT_OK


async def _run_with_progress(registry: ToolRegistry, call: Any, err: TextIO) -> ToolExecutionResult:
    """Run the call; on a terminal, show elapsed time every second while it runs."""
    import anyio

    if not err.isatty():
        return await registry.execute(call)
    started = time.monotonic()

    async def ticker() -> None:
        while True:
            await anyio.sleep(1)
            err.write(f"\r… {call.name} running for {time.monotonic() - started:.0f}s")
            err.flush()

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        try:
            result = await registry.execute(call)
        finally:
            group.cancel_scope.cancel()
            err.write("\r\x1b[K")
    return result


def _cmd_replay(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
    from dsh_tools_plugins.audit import replay

    from .terminal import emit_card, render_call_view, render_result

    if not os.path.isfile(options.log):
        raise UsageError(f"audit log {options.log!r} does not exist")
    count = 0
    for replayed in replay(options.log, registry, rotated=options.rotated):
        count += 1
        out.write(f"call {replayed.call.call_id}\n")
        emit_card(render_call_view(replayed.call_card), out)
        if replayed.result is None:
            out.write("… no result recorded (the call may still have been running)\n")
        else:
            emit_card(render_result(replayed.result_card, replayed.result), out)
    out.write(f"{count} call(s)\n")
    return EXIT_OK


def _cmd_serve_mcp(registry: ToolRegistry, options: argparse.Namespace) -> int:
    import functools

    import anyio

    try:
        from .bridges.mcp import serve_http, serve_stdio
    except ImportError as error:
        raise UsageError(
            f"serve-mcp needs the mcp extra: pip install 'dsh-tools[mcp]' ({error})"
        ) from None
    if options.http:
        serve = functools.partial(
            serve_http,
            registry,
            host=options.host,
            port=options.port,
            allow_remote=options.allow_remote,
        )
        anyio.run(serve)
    else:
        anyio.run(functools.partial(serve_stdio, registry))
    return EXIT_OK


def _cmd_plugins(report: LoadReport, out: TextIO) -> int:
    out.write(report.format().rstrip("\n") + "\n")
    return EXIT_OK


def _cmd_check(registry: ToolRegistry, report: LoadReport, out: TextIO) -> int:
    from .checks import check_registry

    problems = [failure.message for failure in report.failed]
    problems += check_registry(registry)
    tools = len(registry.names())
    if problems:
        for problem in problems:
            out.write(f"FAIL {problem}\n")
        out.write(
            f"{len(problems)} problem(s) in {len(report.loaded)} plugin(s), {tools} tool(s)\n"
        )
        return EXIT_CALL_FAILED
    out.write(f"ok: {len(report.loaded)} plugin(s), {tools} tool(s), no problems\n")
    return EXIT_OK


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
    parser = _parser()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            options = parser.parse_args(argv)
    except SystemExit as exit_request:
        return int(exit_request.code or 0)
    try:
        registry, report = _build(options, stdin, err)
        command: dict[str, Callable[[], int]] = {
            "list": lambda: _cmd_list(registry, options, out),
            "plugins": lambda: _cmd_plugins(report, out),
            "schemas": lambda: _cmd_schemas(registry, options, out),
            "call": lambda: _cmd_call(registry, options, out, stdin, err),
            "check": lambda: _cmd_check(registry, report, out),
            "replay": lambda: _cmd_replay(registry, options, out),
            "serve-mcp": lambda: _cmd_serve_mcp(registry, options),
        }
        return command[options.command]()
    except UsageError as error:
        return _fail(err, str(error), EXIT_USAGE, options.debug)
    except _PluginsFailed as error:
        err.write(error.report.format().rstrip("\n") + "\n")
        return _fail(err, str(error), EXIT_PLUGINS, options.debug)
    except KeyboardInterrupt:
        return _fail(err, "interrupted", EXIT_CALL_FAILED, options.debug)
    except Exception as error:
        from .errors import DshToolsError

        code = EXIT_USAGE if isinstance(error, DshToolsError) else EXIT_INTERNAL
        return _fail(err, f"{type(error).__name__}: {error}", code, options.debug)


def _fail(err: TextIO, message: str, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc(file=err)
    err.write(f"dsh-tools: error: {message}\n")
    return code


def console_main() -> NoReturn:
    """Entry point of the ``dsh-tools`` console script and ``python -m dsh_tools``."""
    sys.exit(main())
