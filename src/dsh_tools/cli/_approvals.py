"""The ``approvals`` command: list, show, approve and reject approval tickets, or serve
the web inbox where a person does the same (:mod:`dsh_tools.cli._inbox`).

It works on the store the command line names (``--approvals-store``, else
``$DSH_TOOLS_APPROVALS_URL``), else the workspace's SQLite store outside the workspace
(:meth:`~dsh_tools_plugins.approval_store.SqliteApprovalStore.for_workspace`), which is
where a call that asked is waiting. Every text that came from a model, a workspace or a
plugin passes :func:`~dsh_tools._safetext.safe_text` before it is shown.
:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from collections.abc import Sequence
from typing import Any, TextIO, cast

from .._json import thaw
from .._safetext import safe_text
from ..approvals import (
    ApprovalTicket,
    JournalEntry,
    JournalStore,
    TicketAnswer,
    TicketError,
    TicketNotFoundError,
    TicketState,
    TicketStore,
)
from ._exits import EXIT_OK, Refused, UsageError, needs_mcp_extra
from ._serve import listening
from ._store import STORE_ERROR, ChosenStore, named_location, ticket_store

__all__ = ["cmd_approvals", "ticket_json"]


def cmd_approvals(options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``approvals list | show TICKET | approve TICKET | reject TICKET | serve |
    init-store | prune``.

    Whatever stops it names the store it read: a ticket that cannot be shown or answered
    is :class:`~dsh_tools.cli._exits.Refused` (exit 1), with the code of its
    :class:`~dsh_tools.approvals.TicketError` (``NOT_FOUND``, ``ALREADY_ANSWERED``,
    ``APPROVAL_EXPIRED``)."""
    from dsh_tools_plugins.approval_store import ApprovalStoreError

    if options.approvals_command == "init-store":
        return _init_store(options, out)
    chosen = ticket_store(options)
    try:
        return _act(chosen, options, out, err)
    except TicketError as error:
        raise Refused(safe_text(f"{error} (approval store {chosen})"), error.code) from None
    except ApprovalStoreError as error:
        raise UsageError(f"{error} ({chosen.chosen_by})", code=STORE_ERROR) from None


def _act(chosen: ChosenStore, options: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The action the options name, on the store :func:`cmd_approvals` chose."""
    action = options.approvals_command
    store = cast(TicketStore, chosen.store)
    if action == "serve":
        return _serve(chosen, options, err)
    if action == "prune":
        return _prune(chosen, options, out)
    if action == "list":
        state = None if options.all else TicketState.PENDING
        return _listed(store.list_tickets(state=state), _entries(store), options.json, out)
    if action == "show":
        ticket = store.get_ticket(options.ticket)
        if ticket is None:
            raise TicketNotFoundError(options.ticket)
        entry = _entries(store).get(ticket.id)
        _write(out, ticket_json(ticket, entry)) if options.json else _shown(ticket, entry, out)
        return EXIT_OK
    return _answered(store, options, out)


def _init_store(options: argparse.Namespace, out: TextIO) -> int:
    """``approvals init-store``: create or upgrade the tables of the PostgreSQL store the
    options name (the explicit step; the role needs ``CREATE``), then open it as a worker
    would. A SQLite store, the one named or the workspace's, makes its own file's schema
    when it is opened, so opening it is all this does."""
    from dsh_tools_plugins.approval_postgres import create_schema, is_postgres_url
    from dsh_tools_plugins.approval_store import ApprovalStoreError

    named = named_location(options)
    steps = []
    if named is not None and is_postgres_url(named[1]):
        try:
            steps = create_schema(named[1])
        except ApprovalStoreError as error:
            raise UsageError(f"{named[0].lstrip('$')}: {error}", code=STORE_ERROR) from None
    chosen = ticket_store(options)
    if options.json:
        components = [
            {"component": s.component, "found": s.found, "version": s.version} for s in steps
        ]
        _write(out, {"store": chosen.location, "components": components})
    else:
        out.write(f"approval store {chosen}\n" + "".join(f"{step}\n" for step in steps))
    return EXIT_OK


def _prune(chosen: ChosenStore, options: argparse.Namespace, out: TextIO) -> int:
    """``approvals prune``: drop the call journal's finished entries older than
    ``--older-than`` (default: the store's retention, a week); started and unknown
    entries stay. The processes that run calls on the store prune it too, hourly."""
    text = options.older_than
    older_than_s = None if text is None else _duration("--older-than", text, zero=True)
    store = cast(JournalStore, chosen.store)
    pruned = store.prune_calls(older_than_s)
    kept_s = getattr(store, "journal_retention_s", 0.0) if older_than_s is None else older_than_s
    if options.json:
        _write(out, {"store": chosen.location, "pruned": pruned, "older_than_s": kept_s})
    else:
        out.write(
            f"approval store {chosen}: {pruned} finished journal entries older than "
            f"{_seconds_text(kept_s)} pruned\n"
        )
    return EXIT_OK


def _answered(store: TicketStore, options: argparse.Namespace, out: TextIO) -> int:
    """``approve`` / ``reject``: one answer, by this person, through the command line; an
    answer that came too late, or to an expired or unknown ticket, raises its
    :class:`~dsh_tools.approvals.TicketError`."""
    approve = options.approvals_command == "approve"
    outcome = ("allowed" if approve else "rejected") + ("-always" if options.always else "")
    if outcome == "allowed":
        outcome = "allowed-once"
    if options.by is not None and not options.by.strip():
        raise UsageError("--by needs a name")
    expires_in_s, uses = _grant_end(options) if approve else (None, None)
    answer = TicketAnswer(
        outcome,
        options.by or _person(),
        "cli",
        feedback=options.feedback,
        expires_in_s=expires_in_s,
        uses=uses,
    )
    ticket = store.answer_ticket(options.ticket, answer)
    if options.json:
        _write(out, ticket_json(ticket))
    else:
        out.write(f"{ticket.id}: {outcome} by {safe_text(answer.by)}\n")
    return EXIT_OK


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _grant_end(options: argparse.Namespace) -> tuple[float | None, int | None]:
    """``approve --always``'s ``--expires-in`` (in seconds) and ``--uses``, checked."""
    text, uses = options.expires_in, options.uses
    if (text is not None or uses is not None) and not options.always:
        raise UsageError("--uses and --expires-in go with --always (a grant that ends)")
    if uses is not None and uses < 1:
        raise UsageError(f"--uses must be at least 1, got {uses}")
    if text is None:
        return None, uses
    return _duration("--expires-in", text), uses


def _duration(flag: str, text: str, *, zero: bool = False) -> float:
    """The seconds ``flag``'s ``text`` says (``90s``, ``30m``, ``1h``, ``2d``): positive,
    or with ``zero`` 0 or more."""
    import math
    import re

    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if found is None:
        raise UsageError(
            f"{flag}: {safe_text(text)!r} is not a duration: a number and its unit, "
            "s, m, h or d (such as 90s, 30m, 1h, 2d)"
        )
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if (seconds == 0 and not zero) or seconds == math.inf:
        raise UsageError(f"{flag} must be a positive, finite duration, got {safe_text(text)!r}")
    return seconds


def _seconds_text(seconds: float) -> str:
    """A duration as the largest whole unit that says it exactly (``7d``, ``90s``)."""
    for unit in "dhm":
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _person() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _entries(store: object) -> dict[str, JournalEntry]:
    """The call journal's entries of calls that took a ticket, by ticket (none when the
    store keeps no journal)."""
    list_calls = getattr(store, "list_calls", None)
    if not callable(list_calls):
        return {}
    entries: Sequence[JournalEntry] = list_calls()
    return {entry.ticket_id: entry for entry in entries if entry.ticket_id is not None}


def ticket_json(ticket: ApprovalTicket, entry: JournalEntry | None = None) -> dict[str, Any]:
    """A ticket as plain JSON data (what ``--json`` prints); ``outcome`` says what became
    of the call that took it (``ran``, ``failed``, ``died``, ``running``; see
    :func:`~dsh_tools.approvals._text.outcome`), from its call journal ``entry``."""
    from ..approvals._text import outcome

    answer = ticket.answer
    return {
        "id": ticket.id,
        "state": ticket.state.value,
        "agent": ticket.agent,
        "tool_name": ticket.tool_name,
        "call_id": ticket.call_id,
        "arguments": thaw(ticket.arguments),
        "arguments_sha256": ticket.arguments_sha256,
        "reason": ticket.reason,
        "card": None if ticket.card is None else thaw(ticket.card),
        "asked_by": None if ticket.asked_by is None else thaw(ticket.asked_by),
        "created_at": ticket.created_at,
        "expires_at": ticket.expires_at,
        "answer": None if answer is None else answer.to_json(),
        "answered_at": ticket.answered_at,
        "resumed_at": ticket.resumed_at,
        "outcome": outcome(entry),
        "attempts": None if entry is None else entry.attempts,
    }


def _listed(
    tickets: Sequence[ApprovalTicket],
    entries: dict[str, JournalEntry],
    as_json: bool,
    out: TextIO,
) -> int:
    from ..approvals._text import outcome

    if as_json:
        _write(out, [ticket_json(ticket, entries.get(ticket.id)) for ticket in tickets])
        return EXIT_OK
    if not tickets:
        out.write("no approval tickets waiting\n")
    for ticket in tickets:
        reason = f"  {safe_text(ticket.reason)}" if ticket.reason else ""
        who = safe_text(f"{ticket.agent} {ticket.tool_name}")
        state = ticket.state.value
        ended = outcome(entries.get(ticket.id))
        state = state if ended is None else f"{state}, {ended}"
        out.write(f"{ticket.id}  {state:<8}  {who}  {_age(ticket)}{reason}\n")
    return EXIT_OK


def _shown(ticket: ApprovalTicket, entry: JournalEntry | None, out: TextIO) -> None:
    """The call's card, then the ticket's record: who asked, why, and what became of it."""
    from ..approvals._text import (
        EARLIER,
        earlier_attempt_text,
        grant_text,
        outcome_text,
        ticket_card,
    )
    from ..approvals._tickets import IDEMPOTENCY_KEY
    from ..presentation._terminal import emit_card, render_call_view

    emit_card(render_call_view(ticket_card(ticket)), out)
    lines = [
        f"ticket {ticket.id}: {ticket.state.value}",
        f"  {ticket.agent} asks to run {ticket.tool_name} (call {ticket.call_id})",
        *([f"  idempotency key {ticket.idempotency_key}"] if ticket.idempotency_key else []),
        f"  asked {_age(ticket)}" + (f": {ticket.reason}" if ticket.reason else ""),
    ]
    earlier = earlier_attempt_text(ticket)
    if earlier is not None:
        lines.append(f"  an earlier attempt: {earlier}")
    own = (EARLIER, IDEMPOTENCY_KEY)  # lines of their own
    asked_by = {k: v for k, v in (ticket.asked_by or {}).items() if k not in own}
    if asked_by:
        asker = ", ".join(f"{key} {_plain(value)}" for key, value in asked_by.items())
        lines.append(f"  asked by {asker}")
    answer = ticket.answer
    if answer is not None:
        said = f"  {answer.outcome.value} by {answer.by} via {answer.channel}"
        lines.append(said + (f": {answer.feedback}" if answer.feedback else ""))
        grant = grant_text(answer.expires_in_s, answer.uses)
        if grant is not None:
            lines.append(f"  the grant {grant}")
    ended = outcome_text(entry)
    if ended is not None:
        lines.append(f"  the call {ended}")
    lines.append(f"  arguments sha256 {ticket.arguments_sha256}")
    out.write("".join(safe_text(line) + "\n" for line in lines))


def _plain(value: object) -> str:
    thawed = thaw(value)
    return thawed if isinstance(thawed, str) else json.dumps(thawed, ensure_ascii=False)


def _age(ticket: ApprovalTicket) -> str:
    seconds = max(0, int(time.time() - ticket.created_at))
    if seconds < 120:
        return f"{seconds}s ago"
    return f"{seconds // 60}m ago" if seconds < 7200 else f"{seconds // 3600}h ago"


def _write(out: TextIO, data: object) -> None:
    out.write(json.dumps(data, indent=2, ensure_ascii=True) + "\n")


def _serve(chosen: ChosenStore, options: argparse.Namespace, err: TextIO) -> int:
    """``approvals serve``: the web inbox until Ctrl-C; its store, and its URL, token
    included, are printed on standard error once it listens."""
    import functools

    import anyio

    try:
        from ._inbox import serve_inbox

        listen = listening(
            options,
            "serving the inbox to other machines needs --allow-remote (its token is then "
            "all that guards it)",
        )
    except ImportError as error:
        raise needs_mcp_extra("the inbox (approvals serve)", error) from None
    serve = functools.partial(serve_inbox, cast(TicketStore, chosen.store), **listen)

    async def run() -> None:
        async with anyio.create_task_group() as group:
            url = await group.start(serve)
            err.write(f"dsh-tools: approval store: {chosen}\n")
            err.write(f"dsh-tools: approvals inbox at {url} (Ctrl-C stops it)\n")
            err.flush()

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        err.write("dsh-tools: approvals inbox stopped\n")
    return EXIT_OK
