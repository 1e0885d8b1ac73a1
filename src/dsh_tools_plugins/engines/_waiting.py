"""A tool call as a workflow runs it, whichever engine: run it; while it waits for a
person, wait durably and look at its ticket now and then; once answered, resume it.

Workflow code: deterministic, and it imports nothing of ``dsh_tools`` (Temporal's
sandbox re-imports a workflow's modules on every run). The steps are a generator of
operations (:data:`Operation`) that each engine's driver performs with its own
primitives, so the logic exists once.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

EXECUTE = "dsh_tools.execute"
"""The activity or step that runs a call through ``registry.execute``."""
RESUME = "dsh_tools.resume"
"""The activity or step that runs an answered ticket's call through ``registry.resume``."""
TICKET_STATE = "dsh_tools.ticket_state"
"""The activity or step that reads a ticket's state from the approval store."""
ANSWERED = "dsh_tools.ticket_answered"
"""The signal (Temporal) or message topic prefix (DBOS) that says "look at the ticket now"."""
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
"""The code of a call whose earlier attempt started and never reported: it may or may not
have run, and it does not run again by itself. The value of
``dsh_tools.ErrorCode.OUTCOME_UNKNOWN``, spelled out for workflow code, which imports
nothing of ``dsh_tools``."""
PROGRESS = "dsh_tools.progress"
"""The workflow event (DBOS) holding a running call's latest progress."""


@dataclass(frozen=True)
class Waiting:
    """How a workflow waits for a person: it looks at the ticket after ``first_s``, then
    at twice the previous interval, at most every ``max_s`` seconds, and at once when
    told (a Temporal signal or DBOS message). Each look is one short activity or step,
    so a long wait costs the workflow's history a few events per look."""

    first_s: float = 1.0
    max_s: float = 120.0

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s:
            raise ValueError(f"Waiting needs 0 < first_s <= max_s, got {self}")


WAITING = Waiting()
"""The default: a first look after a second, then at most every two minutes."""

Operation = tuple[str, Any]
"""``("execute", request)``, ``("wait", (ticket, seconds))``, ``("state", ticket)`` or
``("resume", request)``: what a driver performs and sends the outcome of back."""


def request(
    name: str, arguments: Mapping[str, Any] | None, agent: str | None, timeout_s: float | None
) -> dict[str, Any]:
    """The JSON a workflow sends to the execute activity or step."""
    return {
        "name": name,
        "arguments": dict(arguments or {}),
        "agent": agent,
        "timeout_s": timeout_s,
    }


def pending_ticket(result: Mapping[str, Any]) -> str | None:
    """The ticket a result waits on (``APPROVAL_PENDING``), else ``None``."""
    error = result.get("error") or {}
    if (error.get("info") or {}).get("code") != "APPROVAL_PENDING":
        return None
    ticket = ((result.get("meta") or {}).get("approval") or {}).get("ticket")
    return ticket if isinstance(ticket, str) else None


def steps(call: dict[str, Any], waiting: Waiting) -> Generator[Operation, Any, dict[str, Any]]:
    """The operations of one call, ending with its result (the ``result_to_json`` form)."""
    result: dict[str, Any] = yield ("execute", call)
    while (ticket := pending_ticket(result)) is not None:
        delay = waiting.first_s
        while True:
            yield ("wait", (ticket, delay))
            if (yield ("state", ticket)) != "pending":
                break
            delay = min(delay * 2, waiting.max_s)
        result = yield ("resume", {"ticket": ticket, "timeout_s": call["timeout_s"]})
    return result


def result_text(result: Mapping[str, Any]) -> str:
    """A result's text blocks joined by newlines: what a model reads of it."""
    blocks = result.get("content") or ()
    return "\n".join(b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text")
