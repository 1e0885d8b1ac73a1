"""An approval ticket as a person reads it: its call's card and its record, line by line.

The inbox page and ``dsh-tools approvals show`` both show a ticket this way. Values are
returned as stored; each surface makes them safe for where it writes them.
"""

from __future__ import annotations

import datetime

from .._json import FrozenDict, thaw
from ..presentation._cards import CardError, ToolCallView, fallback_call_view, structure_call_view
from . import ApprovalTicket, JournalEntry, JournalState
from ._tickets import IDEMPOTENCY_KEY

__all__ = [
    "asked_by_text",
    "attempt_text",
    "earlier_attempt_text",
    "grant_text",
    "outcome",
    "outcome_text",
    "ticket_card",
    "ticket_fields",
]


def ticket_card(ticket: ApprovalTicket) -> ToolCallView:
    """The card stored with the ticket; the generic card of its arguments when it holds
    none or one that does not read as a card."""
    if ticket.card is not None:
        try:
            return structure_call_view(thaw(ticket.card))
        except CardError:
            pass
    return fallback_call_view(ticket.tool_name, ticket.arguments)


def asked_by_text(asked_by: FrozenDict | None) -> str | None:
    """Who asked, on one line: ``plugin: rule (file:line)`` from the parts it names."""
    if not asked_by:
        return None
    parts = thaw(asked_by)
    parts.pop(EARLIER, None)  # a line of its own: earlier_attempt_text()
    parts.pop(IDEMPOTENCY_KEY, None)  # the call's, not who asked: ticket_fields()
    plugin, rule = parts.pop("plugin", None), parts.pop("rule", None)
    file, line = parts.pop("file", None), parts.pop("line", None)
    text = ": ".join(str(part) for part in (plugin, rule) if part is not None)
    if file is not None or line is not None:
        place = f"line {line}" if file is None else str(file) if line is None else f"{file}:{line}"
        text = f"{text} ({place})" if text else place
    rest = ", ".join(f"{key}={value}" for key, value in sorted(parts.items()))
    return f"{text}; {rest}" if text and rest else text or rest


def _when(seconds: float) -> str:
    """A moment as UTC text, to the second."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


EARLIER = "earlier_attempt"
"""The key of ``asked_by`` that holds an earlier attempt of the call whose outcome is
unknown (the call journal puts it there; a person's answer settles it)."""


def earlier_attempt_text(ticket: ApprovalTicket) -> str | None:
    """What the ticket shows of an earlier attempt of the same call that may have run:
    when, where, and what approving means; ``None`` when there was none."""
    return attempt_text(None if ticket.asked_by is None else ticket.asked_by.get(EARLIER))


def attempt_text(earlier: object) -> str | None:
    """:func:`earlier_attempt_text` of the earlier attempt itself (as a ticket or an
    :class:`~dsh_tools.ApprovalRequest` holds it): every channel shows it this way."""
    if not isinstance(earlier, FrozenDict):
        return None
    started = earlier.get("started_at")
    when = _when(started) if isinstance(started, (int, float)) else "at an unknown time"
    return (
        f"call {earlier.get('call_id')} started {when} on {earlier.get('owner')} and stopped "
        "without recording its end: it may have run; approving runs this call anyway"
    )


def outcome(entry: JournalEntry | None) -> str | None:
    """What became of a call, in a word: ``running``, ``ran``, ``failed`` or ``died``
    (its process stopped mid-call: it may have run); ``None`` without a journal entry."""
    if entry is None:
        return None
    if entry.state is JournalState.UNKNOWN:
        return "died"
    if entry.state is JournalState.STARTED:
        return "running"
    failed = isinstance(entry.result, FrozenDict) and entry.result.get("isError") is True
    return "failed" if failed else "ran"


def outcome_text(entry: JournalEntry | None) -> str | None:
    """:func:`outcome`, with when and where (and the failure's code)."""
    word = outcome(entry)
    if entry is None or word is None:
        return None
    where = f"started {_when(entry.started_at)} on {entry.owner}"
    if word == "died":
        return f"died: {where}, its end never recorded; it may have run"
    if word == "running":
        return f"running: {where}"
    result = entry.result if isinstance(entry.result, FrozenDict) else FrozenDict()
    error = result.get("error")
    info = error.get("info") if isinstance(error, FrozenDict) else None
    code = f" ({info.get('code')})" if isinstance(info, FrozenDict) else ""
    ended = "" if entry.finished_at is None else f", ended {_when(entry.finished_at)}"
    return f"{word}{code}: {where}{ended}"


def ticket_fields(
    ticket: ApprovalTicket, entry: JournalEntry | None = None
) -> list[tuple[str, str]]:
    """The ticket's record as (name, value) rows, absent values left out; ``entry`` is
    the call journal's entry of the call that took it (what became of the call)."""
    rows: list[tuple[str, str | None]] = [
        ("ticket", ticket.id),
        ("state", ticket.state.value),
        ("tool", ticket.tool_name),
        ("agent", ticket.agent or "(the registry)"),
        ("call", ticket.call_id),
        ("idempotency key", ticket.idempotency_key),
        ("earlier attempt", earlier_attempt_text(ticket)),
        ("asked by", asked_by_text(ticket.asked_by)),
        ("reason", ticket.reason),
        ("created", _when(ticket.created_at)),
        ("expires", _when(ticket.expires_at)),
    ]
    answer = ticket.answer
    if answer is not None:
        at = "" if ticket.answered_at is None else f" at {_when(ticket.answered_at)}"
        rows.append(("answer", f"{answer.outcome.value} by {answer.by} via {answer.channel}{at}"))
        rows.append(("feedback", answer.feedback))
        rows.append(("grant", grant_text(answer.expires_in_s, answer.uses)))
    if ticket.resumed_at is not None:
        rows.append(("resumed", _when(ticket.resumed_at)))
    rows.append(("outcome", outcome_text(entry)))
    return [(name, value) for name, value in rows if value]


def grant_text(expires_in_s: float | None, uses: int | None) -> str | None:
    """When an ``allowed-always`` answer ends, as text (``ends after 1h or 3 uses``), or
    ``None`` for one that never does."""
    ends = []
    if expires_in_s is not None:
        unit = next(
            (name for name, size in _SPANS if expires_in_s >= size and expires_in_s % size == 0),
            "s",
        )
        ends.append(f"{expires_in_s / dict(_SPANS)[unit]:g}{unit}")
    if uses is not None:
        ends.append(f"{uses} use" + ("" if uses == 1 else "s"))
    return "ends after " + " or ".join(ends) if ends else None


_SPANS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
