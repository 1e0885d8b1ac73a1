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
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ._console import EXIT_OUTPUT_CLOSED, library_log, output_closed, show_unicode_safely
from ._version import __version__

if TYPE_CHECKING:
    from .models import ApprovalOutcome, ApprovalRequest, ToolExecutionResult
    from .plugins import LoadReport
    from .records import DecisionRecord
    from .registry import ToolRegistry

__all__ = [
    "EXIT_CALL_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_PLUGINS",
    "EXIT_USAGE",
    "EXIT_WOULD_ASK",
    "main",
]

EXIT_OK = 0
EXIT_CALL_FAILED = 1
EXIT_USAGE = 2
EXIT_PLUGINS = 3
EXIT_INTERNAL = 4
EXIT_WOULD_ASK = 10
"""``explain``: the call would ask for approval (neither a denial nor a clear run)."""

CLI_AGENT = "cli"
"""The agent id of calls made from the command line (so ``Ask`` can reach a person)."""

_RUNS_TOOLS = frozenset({"call", "explain", "serve-mcp"})
"""Commands whose answer depends on every policy plugin having loaded."""
_RULES_ENTRY_POINT = "dsh_tools_plugins.permissions:default_permissions"


class UsageError(Exception):
    """Bad input from the person at the terminal; printed as one line, exit code 2."""


class _ArgumentsRejected(Exception):
    """argparse refused the command line; ``parser`` is the (sub)command that did."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting, so ``call --json`` can answer in JSON."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentsRejected(self, message)


class _PluginsFailed(Exception):
    """Plugins failed to load where that matters: exit code 3."""

    def __init__(self, message: str, report: LoadReport | None = None) -> None:
        super().__init__(message)
        self.report = report


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
    parser = _Parser(
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
        "--strict",
        action="store_true",
        help="fail (exit 3) if any plugin fails to load or a --block/--only name matches none",
    )
    parser.add_argument(
        "--allow-broken-plugins",
        action="store_true",
        help="let call and serve-mcp run tools although a policy plugin failed to load",
    )
    parser.add_argument(
        "--workspace", metavar="DIR", help="root the workspace tools are confined to (default: .)"
    )
    parser.add_argument("--rules", metavar="FILE", help="permission rules (TOML) to enforce")
    parser.add_argument(
        "--sandbox",
        choices=("auto", "required", "off"),
        help="how run_command sandboxes commands (default: the rules file's [sandbox], or auto)",
    )
    parser.add_argument(
        "--network",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let sandboxed commands use the network (default: the rules file's, or off)",
    )
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
    call.add_argument(
        "--json", action="store_true", help="print the frozen result (or the error) as JSON"
    )
    call.add_argument(
        "--explain", action="store_true", help="print the call's decision record after the result"
    )
    explain = commands.add_parser(
        "explain",
        help="say what a call would do (run, deny, ask) without running it; exit 0, 1 or 10",
    )
    explain.add_argument("name", help="the tool to call")
    explain.add_argument(
        "arguments", nargs="?", default="{}", help="arguments as a JSON object, or - for stdin"
    )
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    commands.add_parser("check", help="validate every installed plugin; exit 1 on problems")
    replay = commands.add_parser("replay", help="render an audit log's calls as cards")
    replay.add_argument("log", help="the JSON Lines audit log (from --audit-log)")
    replay.add_argument("--rotated", action="store_true", help="include rotated files (LOG.N)")
    replay.add_argument("--explain", action="store_true", help="print each call's decision record")
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
    # The workspace and permissions entry points both read these (configured_sandbox).
    if options.sandbox is not None:
        os.environ["DSH_TOOLS_SANDBOX"] = options.sandbox
    if options.network is not None:
        os.environ["DSH_TOOLS_NETWORK"] = "on" if options.network else "off"
    registry = ToolRegistry(approval=TerminalApproval(stdin, stderr))
    report = LoadReport()
    if not options.no_plugins:
        # A broken rules file raises PluginConfigError here: exit 2, nothing runs.
        report = load_plugins(registry, block=options.block, only=options.only)
    _check_report(options, report)
    if options.audit_log is not None:
        from dsh_tools_plugins.audit import AuditLog

        registry.add_plugin(AuditLog(options.audit_log), name="cli-audit-log")
    return registry, report


def _check_report(options: argparse.Namespace, report: LoadReport) -> None:
    """Stop before anything runs when the plugins that loaded are not what was asked for."""
    if options.strict and not report.ok:
        raise _PluginsFailed(
            "some plugins failed to load (run `dsh-tools plugins` for details)", report
        )
    if options.strict and report.unmatched:
        raise _PluginsFailed(
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
        raise _PluginsFailed(
            f"refusing to run tools while a plugin that may hold policy failed to load: "
            f"{names}. Fix it, block it (--block NAME), or pass --allow-broken-plugins to "
            "run without it"
        )


def _summary(text: str) -> str:
    """The description's first sentence (or line), for one-line listings."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    sentence, dot, _ = first.partition(". ")
    return sentence + "." if dot else first


def _cmd_list(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
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


def _cmd_schemas(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    from .bridges.wire import declarations
    from .checks import declaration_problems

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


def _read_arguments(text: str, stdin: TextIO) -> object:
    """The call's arguments, as the pipeline takes them.

    Whatever the text holds goes to the pipeline, which fails the call with
    ``INVALID_JSON`` (and the audit log records the attempt) when it is not a lossless
    JSON object. Text the standard parser reads but ours refuses (a lone surrogate, NaN,
    too deep) is passed parsed, so that the pipeline names the exact problem; text that
    does not parse at all is passed as :class:`~dsh_tools.UnreadableArguments`, with the
    parser's reason.
    """
    from .errors import JsonValueError
    from .json import loads
    from .models import UnreadableArguments

    if text == "-":
        buffer = getattr(stdin, "buffer", None)
        # Bytes that are not UTF-8 become lone surrogates, as in command-line arguments.
        text = stdin.read() if buffer is None else buffer.read().decode("utf-8", "surrogateescape")
    try:
        return loads(text, "arguments")
    except JsonValueError as error:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return UnreadableArguments(text, str(error))


def _cmd_call(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, stdin: TextIO, err: TextIO
) -> int:
    import anyio

    from .errors import ErrorCode
    from .models import ToolExecutionFailure, result_to_json
    from .presenting import present_call, present_result
    from .terminal import emit_card, render_call_view, render_result

    # Every attempt runs through the pipeline, an unknown tool or bad JSON included, so
    # that the audit log and every other observer see it.
    call = _cli_call(options, stdin)
    records = _Records()
    if options.explain:
        registry.add_plugin(records, name="cli-explain")
    if not options.json:
        emit_card(render_call_view(present_call(registry, call)), out)
        out.flush()
    result: ToolExecutionResult = anyio.run(_run_with_progress, registry, call, err)
    if options.json:
        data = result_to_json(result)
        if options.explain:
            data["decisionRecord"] = records.last.to_json()
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    else:
        emit_card(render_result(present_result(registry, call, result), result), out)
        if options.explain:
            out.write("\n".join(records.last.lines()) + "\n")
    if isinstance(result, ToolExecutionFailure) and result.code == ErrorCode.UNKNOWN_TOOL:
        err.write(f"dsh-tools: note: known tools: {', '.join(registry.names()) or 'none'}\n")
    return EXIT_CALL_FAILED if result.is_error else EXIT_OK


def _cli_call(options: argparse.Namespace, stdin: TextIO) -> Any:
    """The call the command line describes."""
    from .models import ToolExecutionInput

    return ToolExecutionInput(
        call_id=f"cli-{int(time.time() * 1000)}",
        name=options.name,
        arguments=_read_arguments(options.arguments, stdin),
        agent=CLI_AGENT,
    )


class _Records:
    """A result observer that keeps the decision record of the last call (``--explain``)."""

    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    @property
    def last(self) -> DecisionRecord:
        return self.records[-1]

    def dsh_tools_result(self, record: DecisionRecord) -> None:
        self.records.append(record)


def _cmd_explain(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, stdin: TextIO, err: TextIO
) -> int:
    call = _cli_call(options, stdin)
    explained = registry.explain(call)
    if options.json:
        out.write(json.dumps(explained.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write("\n".join(explained.lines()) + "\n")
    if explained.outcome == "run":
        return EXIT_OK
    return EXIT_WOULD_ASK if explained.outcome == "ask" else EXIT_CALL_FAILED


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

    from .models import PresentableResult, ToolExecutionFailure
    from .terminal import emit_card, render_call_view, render_result

    if os.path.isdir(options.log):
        raise UsageError(f"audit log {options.log!r} is a directory")
    if not os.path.isfile(options.log):
        raise UsageError(f"audit log {options.log!r} does not exist")
    count = 0
    for replayed in replay(options.log, registry, rotated=options.rotated):
        count += 1
        out.write(f"call {replayed.call.call_id}\n")
        emit_card(render_call_view(replayed.call_card), out)
        recorded = replayed.result
        if recorded is None:
            out.write("… no result recorded (the call may still have been running)\n")
            continue
        result: PresentableResult | ToolExecutionFailure = recorded
        if recorded.is_error and replayed.error is not None and replayed.error.info.code:
            # The recorded failure, so that its card shows the code, as `call` does.
            result = ToolExecutionFailure(replayed.error, recorded.content, meta=recorded.meta)
        emit_card(render_result(replayed.result_card, result), out)
        if options.explain:
            record = replayed.record
            lines = ["no decision record (written before records were kept)"]
            out.write("\n".join(lines if record is None else record.lines()) + "\n")
    if count == 0:
        raise UsageError(f"{options.log!r} holds no audit event")
    out.write(f"{count} call(s)\n")
    return EXIT_OK


def _cmd_serve_mcp(registry: ToolRegistry, options: argparse.Namespace) -> int:
    import functools

    import anyio

    try:
        from .bridges.mcp import is_loopback_host, serve_http, serve_stdio
    except ImportError as error:
        raise UsageError(
            "serve-mcp needs the mcp extra: install dsh-tools with it (in a clone: "
            f"pip install '.[mcp]') ({error})"
        ) from None
    if options.http:
        if not options.allow_remote and not is_loopback_host(options.host):
            raise UsageError(
                f"--host {options.host!r} is not a loopback address; the server has no "
                "authentication of its own, so serving other machines needs --allow-remote"
            )
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


def _asks_for_json(argv: Sequence[str]) -> bool:
    """Whether a command line that argparse refused was a ``call ... --json``."""
    return "call" in argv and "--json" in argv[list(argv).index("call") :]


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
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            options = parser.parse_args(arguments)
    except _ArgumentsRejected as rejected:
        if _asks_for_json(arguments):
            return _json_error(out, "UsageError", "USAGE", rejected.message, EXIT_USAGE)
        rejected.parser.print_usage(err)
        err.write(f"{rejected.parser.prog}: error: {rejected.message}\n")
        return EXIT_USAGE
    except SystemExit as exit_request:  # --help and --version print, then exit
        return int(exit_request.code or 0)
    as_json = options.command == "call" and options.json

    def fail(error: BaseException, message: str, code: str, exit_code: int) -> int:
        if options.debug:
            import traceback

            traceback.print_exception(type(error), error, error.__traceback__, file=err)
        if as_json:
            return _json_error(out, type(error).__name__, code, message, exit_code)
        err.write(f"dsh-tools: error: {message}\n")
        return exit_code

    from .errors import DshToolsError

    with library_log(err, options.debug):
        try:
            registry, report = _build(options, stdin, err)
            command: dict[str, Callable[[], int]] = {
                "list": lambda: _cmd_list(registry, options, out),
                "plugins": lambda: _cmd_plugins(report, out),
                "schemas": lambda: _cmd_schemas(registry, options, out, err),
                "call": lambda: _cmd_call(registry, options, out, stdin, err),
                "explain": lambda: _cmd_explain(registry, options, out, stdin, err),
                "check": lambda: _cmd_check(registry, report, out),
                "replay": lambda: _cmd_replay(registry, options, out),
                "serve-mcp": lambda: _cmd_serve_mcp(registry, options),
            }
            return command[options.command]()
        except BrokenPipeError:
            raise  # the reader of our output went away: console_main ends quietly
        except UsageError as error:
            return fail(error, str(error), "USAGE", EXIT_USAGE)
        except _PluginsFailed as error:
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


def _json_error(out: TextIO, name: str, code: str, message: str, exit_code: int) -> int:
    """A failure of the command itself, shaped like a failed result of ``call --json``."""
    failure = {
        "isError": True,
        "error": {"message": message, "info": {"name": name, "code": code}},
        "exitCode": exit_code,
    }
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
