"""The ``dsh-tools`` command line's grammar: global options and one parser per command.

:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from .._version import __version__

__all__ = ["ArgumentsRejected", "build_parser"]


class ArgumentsRejected(Exception):
    """argparse refused the command line; ``parser`` is the (sub)command that did."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


_Options = argparse.ArgumentParser | argparse._ArgumentGroup


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting, so ``call --json`` can answer in JSON."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentsRejected(self, message)


_AFTER = "_after_command"


class _TopParser(_Parser):
    """Adds the values of repeatable global options given after the command to those
    given before it (``--block a call x --block b`` blocks both), and names an unknown
    option before the command as such (argparse would take its value for the command)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        unknown = _unknown_option(self, list(args or ()))
        if unknown is not None:
            self.error(unknown)
        options, rest = super().parse_known_args(args, namespace)
        unknown = _unknown_option(_chosen(self, options), rest, anywhere=True)
        if unknown is not None:
            self.error(unknown)
        for name, value in list(vars(options).items()):
            if name.endswith(_AFTER):
                delattr(options, name)
                before = getattr(options, name.removesuffix(_AFTER))
                setattr(options, name.removesuffix(_AFTER), [*(before or []), *value])
        return options, rest


def _unknown_option(
    parser: argparse.ArgumentParser, args: list[str], *, anywhere: bool = False
) -> str | None:
    """Why the first option in ``args`` that ``parser`` does not know is refused, with
    the known option nearest to it; ``None`` when there is none before the first word
    that is not an option (or, ``anywhere``, none at all that is near a known one)."""
    import difflib

    known = parser._option_string_actions
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            return None
        if not word.startswith("-") or word == "-":
            if anywhere:
                continue
            return None
        name, equals, _ = word.partition("=")
        matches = [option for option in known if option.startswith(name)]
        if name in known or len(matches) == 1:
            action = known[name if name in known else matches[0]]
            index += 0 if equals or action.nargs == 0 else 1
            continue
        if len(matches) > 1:  # argparse names the ambiguity itself
            return None
        options = [option for option in known if option.startswith("--")]
        close = difflib.get_close_matches(name, options, n=1, cutoff=0.8)
        if anywhere and not close:
            return None  # argparse lists every word it did not take
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"unrecognized arguments: {name}{hint}"
    return None


def _chosen(
    parser: argparse.ArgumentParser, options: argparse.Namespace
) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the options chose (``approvals approve``)."""
    chosen = parser
    for dest in ("command", "approvals_command"):
        commands = chosen._subparsers
        name = getattr(options, dest, None)
        if commands is None or name is None:
            break
        for action in commands._group_actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                chosen = action.choices[name]
    return chosen


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then one subcommand."""
    parser = _TopParser(
        prog="dsh-tools",
        description="List, inspect, call and serve the tools of installed dsh-tools plugins.",
    )
    parser.add_argument("--version", action="version", version=f"dsh-tools {__version__}")
    _plugin_options(parser)
    _policy_options(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    _commands(commands)
    for command in commands.choices.values():
        for chosen in (command, *_actions(command)):
            _global_options_after(chosen)
    return parser


def _actions(command: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The subcommands of ``command`` (``approvals list``, ``approvals init-store``)."""
    group = command._subparsers
    if group is None:
        return []
    return [
        parser
        for action in group._group_actions
        if isinstance(action, argparse._SubParsersAction)
        for parser in action.choices.values()
    ]


def _global_options_after(command: argparse.ArgumentParser) -> None:
    """Accept the global options after the command too (``call grep '{}' --workspace X``).

    Their defaults are suppressed, so an option given only before the command keeps its
    value; given in both places, the one after the command wins, as git does for its own.
    """
    group = command.add_argument_group("global options (also accepted before the command)")
    _plugin_options(group)
    _policy_options(group)
    group.add_argument("--debug", action="store_true", help="show tracebacks")
    for action in group._group_actions:
        action.default = argparse.SUPPRESS
        if isinstance(action, argparse._AppendAction):
            action.dest += _AFTER


def _plugin_options(parser: _Options) -> None:
    """Which installed plugins load, and what a failure to load means."""
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
        help=(
            "fail (exit 3) if any plugin fails to load, a --block/--only name matches none, "
            "or a permission rule names no loaded tool"
        ),
    )
    parser.add_argument(
        "--allow-broken-plugins",
        action="store_true",
        help="let call and serve-mcp run tools although a policy plugin failed to load",
    )


def _policy_options(parser: _Options) -> None:
    """The workspace, rules, sandbox and audit log the tools run under."""
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
    parser.add_argument(
        "--approvals-store",
        metavar="URL|FILE",
        help=(
            "keep remembered approvals in this PostgreSQL database (postgresql://...) or "
            "SQLite file, outside the workspace (default: $DSH_TOOLS_APPROVALS_URL, else "
            "kept for one run)"
        ),
    )


def _commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """One parser per command, in the order ``--help`` lists them."""
    _command(commands, "list", "the visible tools, one line each")
    _command(commands, "plugins", "what loaded, with versions, and what failed and why")
    schemas = _command(commands, "schemas", "the model-facing schemas as JSON")
    schemas.add_argument(
        "--format",
        default="raw",
        choices=("raw", "openai", "openai-responses", "anthropic", "gemini", "mcp"),
        help="the provider declaration format to print (default: raw)",
    )
    call = _command(commands, "call", "run one call through the full pipeline")
    _call_arguments(call)
    call.add_argument(
        "--json", action="store_true", help="print the frozen result (or the error) as JSON"
    )
    call.add_argument(
        "--explain", action="store_true", help="print the call's decision record after the result"
    )
    call.add_argument(
        "--events",
        action="store_true",
        help="with --json: stream progress and output as JSON lines, then the result as one",
    )
    explain = _command(
        commands,
        "explain",
        "say what a call would do (run, deny, ask) without running it; exit 0, 1 or 10",
    )
    _call_arguments(explain)
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    explain.add_argument(
        "--unmatched-rules",
        action="store_true",
        help="also list the permission rules that match no loaded tool (typos in tool names)",
    )
    _command(commands, "check", "validate every installed plugin; exit 1 on problems")
    replay = _command(commands, "replay", "render an audit log's calls as cards")
    replay.add_argument("log", help="the JSON Lines audit log (from --audit-log)")
    replay.add_argument("--rotated", action="store_true", help="include rotated files (LOG.N)")
    replay.add_argument("--explain", action="store_true", help="print each call's decision record")
    _approvals_command(commands)
    _serve_mcp_command(commands)


def _serve_mcp_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``serve-mcp``: the tools over stdio or streamable HTTP, and what becomes of a call
    that asks when the client cannot be asked."""
    serve = _command(commands, "serve-mcp", "serve the tools over MCP (extra: mcp)")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP host (loopback by default)")
    serve.add_argument("--port", type=int, default=8000, help="HTTP port")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback HTTP host")
    serve.add_argument(
        "--client",
        metavar="NAME",
        help=(
            "over stdio: the client calls as agent mcp-NAME (default: a scope named by the "
            "workspace and the approval store, the same after a restart)"
        ),
    )
    serve.add_argument(
        "--approvals",
        choices=("pending", "deny"),
        default="deny",
        help=(
            "a call that asks, from a client that cannot elicit: pending (a ticket a person "
            "answers with `dsh-tools approvals`) or deny (default)"
        ),
    )
    serve.add_argument(
        "--approval-wait-ms",
        type=float,
        metavar="MS",
        help=(
            "with --approvals pending: hold a call that waits for a person this long before "
            "answering APPROVAL_PENDING (its repeat waits again); an answer ends the wait "
            "at once"
        ),
    )


def _approvals_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``approvals list | show | approve | reject | serve``: the tickets of calls waiting
    for a person, in the approval store; ``init-store`` makes the store's tables;
    ``prune`` drops the call journal's old finished entries."""
    approvals = _command(commands, "approvals", "list, show, approve or reject tickets")
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    listing = _command(actions, "list", "the tickets waiting for an answer")
    listing.add_argument("--all", action="store_true", help="answered and expired ones too")
    show = _command(actions, "show", "a ticket's call card and record")
    approve = _command(actions, "approve", "let the ticket's call run once")
    approve.add_argument(
        "--always", action="store_true", help="and remember it for these arguments"
    )
    approve.add_argument(
        "--expires-in",
        metavar="DURATION",
        help="with --always: the grant ends this long after the call resumes (90s, 30m, 1h, 2d)",
    )
    approve.add_argument(
        "--uses", type=int, metavar="N", help="with --always: the grant allows N later calls"
    )
    approve.add_argument("--feedback", metavar="TEXT", help="a note kept in the call's records")
    reject = _command(actions, "reject", "refuse the ticket's call")
    reject.add_argument("--feedback", metavar="TEXT", help="what the model is told instead")
    reject.add_argument("--always", action="store_true", help="and remember the refusal")
    for action in (show, approve, reject):
        action.add_argument("ticket", help="the ticket id (t-...)")
    for action in (approve, reject):
        action.add_argument("--by", metavar="NAME", help="who answers (default: your user name)")
    for action in (listing, show, approve, reject):
        action.add_argument("--json", action="store_true", help="print JSON")
    init = _command(
        actions,
        "init-store",
        "create or upgrade the approval store's tables (PostgreSQL: as a role that may)",
    )
    init.add_argument("--json", action="store_true", help="print JSON")
    prune = _command(
        actions, "prune", "drop the call journal's finished entries older than its retention"
    )
    prune.add_argument(
        "--older-than",
        metavar="DURATION",
        help="drop those finished this long ago or more (default: the store's retention, 7d)",
    )
    prune.add_argument("--json", action="store_true", help="print JSON")
    serve = _command(actions, "serve", "the web inbox, guarded by a token it prints")
    serve.add_argument("--host", default="127.0.0.1", help="host (loopback by default)")
    serve.add_argument("--port", type=int, default=8765, help="port (0: any free one)")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback host")


def _command(
    commands: argparse._SubParsersAction[Any], name: str, summary: str
) -> argparse.ArgumentParser:
    """A command whose ``--help`` page starts with the summary ``dsh-tools --help`` lists."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=summary[:1].upper() + summary[1:]
    )
    return parser


def _call_arguments(command: argparse.ArgumentParser) -> None:
    """The call ``call`` and ``explain`` take: a tool name and its JSON arguments."""
    command.add_argument("name", help="the tool to call")
    command.add_argument(
        "arguments", nargs="?", default="{}", help="arguments as a JSON object, or - for stdin"
    )
