"""``dsh-tools approvals``: list, show, approve and reject pending approval tickets, or
serve the web inbox where a person does the same.

The tickets live in the store ``--approvals-store`` names (a SQLite file, or a
``postgresql://`` URL), else ``DSH_TOOLS_APPROVALS_URL``, else the workspace's own SQLite
store (outside the workspace, see
:meth:`~dsh_tools_plugins.approval_store.SqliteApprovalStore.for_workspace`). No plugin is
loaded: answering a ticket runs nothing, so a broken rules file never stops a person from
answering. :mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import getpass
import importlib
import os
from typing import TYPE_CHECKING, Any, TextIO, cast

from ._cli_exits import EXIT_CALL_FAILED, EXIT_OK, UsageError
from ._cli_run import _json_text as json_text
from ._ticket_text import ticket_card, ticket_fields, when
from .approvals import ApprovalTicket, TicketAnswer, TicketError, TicketState, TicketStore
from .json import thaw
from .models import ApprovalOutcome
from .safetext import safe_text
from .terminal import emit_card, render_call_view

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["add_approvals_parser", "cmd_approvals", "ticket_json", "ticket_store"]

CHANNEL = "cli"
"""The channel the command's answers name."""
_POSTGRES = ("postgresql://", "postgres://")


def add_approvals_parser(commands: argparse._SubParsersAction[Any]) -> None:
    """The ``approvals`` command and its subcommands."""
    approvals = commands.add_parser(
        "approvals", help="list, show, approve or reject pending approval tickets; serve the inbox"
    )
    actions = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = actions.add_parser("list", help="the pending tickets (--all: every ticket)")
    listed.add_argument("--all", action="store_true", help="answered and resumed ones too")
    show = actions.add_parser("show", help="a ticket's card and record")
    approve = actions.add_parser("approve", help="let the ticket's call run")
    approve.add_argument(
        "--always", action="store_true", help="and remember it for this agent's same calls"
    )
    reject = actions.add_parser("reject", help="refuse the ticket's call")
    reject.add_argument("--feedback", metavar="TEXT", help="what the model is told instead")
    for action in (show, approve, reject):
        action.add_argument("ticket", help="the ticket's id (t-...)")
    for action in (listed, show, approve, reject):
        action.add_argument("--json", action="store_true", help="print JSON")
    serve = actions.add_parser("serve", help="the web inbox (a token guards it)")
    serve.add_argument("--host", default="127.0.0.1", help="host (loopback by default)")
    serve.add_argument("--port", type=int, default=8765, help="port (0: any free one)")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback host")


def ticket_store(options: argparse.Namespace) -> TicketStore:
    """The ticket store the options (or ``DSH_TOOLS_APPROVALS_URL``) name."""
    location = options.approvals_store or os.environ.get("DSH_TOOLS_APPROVALS_URL")
    if not location:
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        return SqliteApprovalStore.for_workspace(options.workspace or ".")
    if location.startswith(_POSTGRES):
        try:
            module = importlib.import_module("dsh_tools_plugins.approval_postgres")
        except ImportError as error:
            raise UsageError(f"a PostgreSQL approvals store needs psycopg 3 ({error})") from None
        return cast(TicketStore, module.PostgresApprovalStore(location))
    if os.path.isdir(location):
        raise UsageError(f"--approvals-store {location!r} is a directory, not a store file")
    from dsh_tools_plugins.approval_store import SqliteApprovalStore

    return SqliteApprovalStore(location)


def ticket_json(ticket: ApprovalTicket) -> dict[str, Any]:
    """A ticket as the JSON the command prints."""
    answer = ticket.answer
    return {
        "id": ticket.id,
        "state": ticket.state.value,
        "agent": ticket.agent,
        "tool": ticket.tool_name,
        "callId": ticket.call_id,
        "arguments": thaw(ticket.arguments),
        "argumentsSha256": ticket.arguments_sha256,
        "reason": ticket.reason,
        "card": None if ticket.card is None else thaw(ticket.card),
        "askedBy": None if ticket.asked_by is None else thaw(ticket.asked_by),
        "createdAt": ticket.created_at,
        "expiresAt": ticket.expires_at,
        "answer": None
        if answer is None
        else {
            "outcome": answer.outcome.value,
            "by": answer.by,
            "channel": answer.channel,
            "feedback": answer.feedback,
            "anyArguments": answer.any_arguments,
        },
        "answeredAt": ticket.answered_at,
        "resumedAt": ticket.resumed_at,
    }


def cmd_approvals(options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = ticket_store(options)
    actions: dict[str, Callable[[], int]] = {
        "list": lambda: _list(store, options, out),
        "show": lambda: _show(store, options, out),
        "approve": lambda: _answer(store, options, out, err),
        "reject": lambda: _answer(store, options, out, err),
        "serve": lambda: _serve(store, options, err),
    }
    return actions[options.action]()


def _list(store: TicketStore, options: argparse.Namespace, out: TextIO) -> int:
    tickets = store.list_tickets(state=None if options.all else TicketState.PENDING)
    if options.json:
        out.write(json_text([ticket_json(ticket) for ticket in tickets]))
        return EXIT_OK
    for ticket in tickets:
        title = ticket_card(ticket).title
        line = f"{ticket.id}  {ticket.state.value}  {ticket.tool_name}  {ticket.agent}  {title}"
        out.write(safe_text(line) + "\n")
    if not tickets:
        out.write("no pending tickets\n" if not options.all else "no tickets\n")
    return EXIT_OK


def _known(store: TicketStore, ticket_id: str) -> ApprovalTicket:
    ticket = store.get_ticket(ticket_id)
    if ticket is None:
        raise UsageError(f"no approval ticket {safe_text(ticket_id)!r} in the store")
    return ticket


def _show(store: TicketStore, options: argparse.Namespace, out: TextIO) -> int:
    ticket = _known(store, options.ticket)
    if options.json:
        shown = {**ticket_json(ticket), "cardText": render_call_view(ticket_card(ticket))}
        out.write(json_text(shown))
        return EXIT_OK
    emit_card(render_call_view(ticket_card(ticket)), out)
    out.write(
        "".join(safe_text(f"  {name}: {value}") + "\n" for name, value in ticket_fields(ticket))
    )
    return EXIT_OK


def _answer(store: TicketStore, options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if options.action == "approve":
        outcome = ApprovalOutcome.ALLOWED_ALWAYS if options.always else ApprovalOutcome.ALLOWED_ONCE
        feedback = None
    else:
        outcome, feedback = ApprovalOutcome.REJECTED, options.feedback
    _known(store, options.ticket)
    answer = TicketAnswer(outcome, _who(), CHANNEL, feedback=feedback)
    try:
        ticket = store.answer_ticket(options.ticket, answer)
    except TicketError as error:
        err.write(f"dsh-tools: error: {safe_text(str(error))}\n")
        return EXIT_CALL_FAILED
    if options.json:
        out.write(json_text(ticket_json(ticket)))
    else:
        at = "" if ticket.answered_at is None else f" at {when(ticket.answered_at)}"
        out.write(safe_text(f"{ticket.id}: {outcome.value}{at}") + "\n")
    return EXIT_OK


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _serve(store: TicketStore, options: argparse.Namespace, err: TextIO) -> int:
    import functools

    import anyio

    try:
        from ._inbox import serve_inbox
        from .bridges._mcp_http import is_loopback_host
    except ImportError as error:
        raise UsageError(f"the inbox needs the mcp extra (starlette, uvicorn) ({error})") from None
    if not options.allow_remote and not is_loopback_host(options.host):
        raise UsageError(
            f"--host {options.host!r} is not a loopback address; serving the inbox to other "
            "machines needs --allow-remote (its token is then all that guards it)"
        )

    async def run() -> None:
        serve = functools.partial(
            serve_inbox,
            store,
            host=options.host,
            port=options.port,
            allow_remote=options.allow_remote,
        )
        async with anyio.create_task_group() as group:
            url = await group.start(serve)
            err.write(f"dsh-tools: approvals inbox at {url} (Ctrl-C stops it)\n")
            err.flush()

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        err.write("dsh-tools: approvals inbox stopped\n")
    return EXIT_OK
