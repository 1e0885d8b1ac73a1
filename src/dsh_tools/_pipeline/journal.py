"""The call journal in the call path: a call of a tool that is not read-only runs at most
once per key, and a repeat of an attempt whose outcome is unknown does not run blindly.

A call is journaled when the plan's approval store keeps a journal
(:class:`~dsh_tools.approvals.JournalStore`), its tool is not ``read_only``, and either
the store is durable (SQLite, PostgreSQL: every call) or the host gave an idempotency
key (the memory store: a crash loses it anyway). Its key is the host's
``idempotency_key``, else the call id. :func:`dispatched` begins the entry before stage 3
(a resumed ticket's call began it when it took the ticket, :func:`with_ticket`, in one
transaction), one thread per store renews the leases of this process's running entries
(:class:`_Renewer`), and the stage's result finishes it. What a begin finds instead:

* a finished entry of the same call: its recorded result, replayed (``meta["journal"]``);
* the key held by another tool or other arguments: ``INVALID_ARGS`` naming the key;
* an entry still running elsewhere, or unknown (its owner died): the tool's
  ``metadata["idempotent"]`` runs it again, its ``reconcile`` step settles it, else
  ``OUTCOME_UNKNOWN``. A call without a host key (over MCP each retry has a new call id)
  is held to the same rule against an earlier attempt of the same agent, tool and
  arguments that never finished: it waits (at most a lease) for one still running, which
  may be a killed process's not yet past its lease, and runs once it finished; a person
  who approved it with that attempt shown on the ticket settles it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import attrs

from .._accounts import account
from .._json import FrozenDict, snapshot
from .._models import (
    ToolDefinition,
    ToolExecutionFailure,
    ToolExecutionResult,
    failure_result,
    result_to_json,
)
from ..approvals import (
    ApprovalTicket,
    JournalBegin,
    JournalConflictError,
    JournalEntry,
    JournalState,
    JournalStore,
    call_digest,
    journal_owner,
)
from ..errors import ErrorCode
from ..records import Origin
from .call import Attempt, Call, StageFailed
from .loops import is_awaitable, on_event_loop
from .recorded import marked, result_from_json
from .render import render
from .scribe import scribe

JOURNAL = Origin("call journal")
"""Who the journal's steps are in a decision record."""
T = TypeVar("T")


def journal_of(call: Call) -> JournalStore | None:
    """The store that journals ``call``, or ``None`` when the call is not journaled."""
    plan, entry = call.plan, call.entry
    if plan.journal is None or entry is None or entry.read_only:
        return None
    if plan.journal_all or call.input.idempotency_key is not None:
        return plan.journal
    return None


async def needs_no_answer(call: Call) -> bool:
    """Whether a call a policy asks about ends without running whatever a person says:
    its key holds a finished entry (replayed, or refused for other arguments) or one
    whose attempt may have run which the tool cannot settle (``OUTCOME_UNKNOWN``). Then
    nobody is asked and no grant is spent: the call goes on to the guards, and stage 3
    ends it from the journal (:func:`dispatched`)."""
    store = journal_of(call)
    if store is None:
        return False
    kept = await _io(call, "read the journal", lambda: store.get_call(_agent(call), call.key))
    if kept is None or isinstance(kept, ToolExecutionFailure):
        return False  # (a store that fails now fails the call at its begin)
    kept = await _outlived(call, store, kept)
    if isinstance(kept, ToolExecutionFailure):
        return False
    if kept.state is JournalState.FINISHED or not kept.same_call(_entry(call, "")):
        return True
    entry = call.entry
    assert entry is not None  # journal_of() journals known tools only
    return not _settles(entry.definition)


def _settles(tool: ToolDefinition[Any]) -> bool:
    """Whether the tool settles an unknown attempt itself: it is idempotent, or has a
    reconcile step."""
    return tool.metadata.get("idempotent") is True or tool.reconcile is not None


def with_ticket(call: Call, store: object, ticket: ApprovalTicket) -> ApprovalTicket | None:
    """Take the answered ``ticket`` and begin the call's entry in one transaction of
    ``store``: the ticket taken, or ``None`` (another call took it first). A key the
    journal already holds spends no ticket: ``ticket`` is returned as it is, and stage 3
    finds the entry (:func:`dispatched`). Raises :class:`StageFailed`."""
    journal = cast(JournalStore, store)
    owner = journal_owner()
    lease = call.handle.journal_lease_s

    def begin() -> JournalBegin:
        return journal.begin_call(_entry(call, owner), lease, ticket.id)

    begun = _stored(call, "begin a journal entry", begin)
    if isinstance(begun, ToolExecutionFailure):
        raise StageFailed(begun)
    if begun.started:
        assert begun.entry is not None
        call.attempt = _hold(call, journal, begun.entry)
        return begun.ticket
    return None if begun.entry is None else ticket


def took(call: Call, ticket: ApprovalTicket) -> bool:
    """Whether the resumed ``ticket`` was taken by this very call before (its key's entry
    began with it): the call goes on, and stage 3 ends it from the journal (replayed, or
    its unknown outcome), rather than as a ticket already spent."""
    store = journal_of(call)
    if store is None:
        return False
    kept = _stored(call, "read the journal", lambda: store.get_call(_agent(call), call.key))
    return isinstance(kept, JournalEntry) and kept.ticket_id == ticket.id


async def dispatched(
    call: Call, dispatch: Callable[[], Awaitable[ToolExecutionResult]]
) -> ToolExecutionResult:
    """Stage 3 of a journaled call: begun (unless its ticket began it), run, finished
    with its result; or what the journal holds instead (see the module docstring)."""
    store = journal_of(call)
    if store is None:
        return await dispatch()
    settled = await _begun(call, store)
    if settled is not None:
        await finish(call, settled)  # an entry its ticket began records why it did not run
        return settled
    try:
        result = await dispatch()
    except BaseException:
        _release(call, call.attempt)  # the caller stopped it mid-run: it turns unknown
        raise
    await finish(call, result)
    return result


async def finish(call: Call, result: ToolExecutionResult) -> None:
    """Record ``result`` as the end of the call's own entry, once (a call that took its
    ticket and then ended before stage 3 is finished here too)."""
    await _close(call, call.attempt, result)


async def _close(call: Call, attempt: Attempt | None, result: ToolExecutionResult) -> None:
    """Finish ``attempt`` with ``result``, once, and stop renewing its lease."""
    if attempt is None or attempt.finished:
        return
    attempt.finished = True
    entry, store = attempt.entry, attempt.store
    data = snapshot(result_to_json(result))
    try:
        kept = await _io(
            call,
            "finish a journal entry",
            lambda: store.finish_call(entry.agent, entry.key, entry.owner, data),
        )
    finally:
        _release(call, attempt)
    if call.plan.traced:
        done = "finished" if kept is True else "lost"
        call.trace("journal", JOURNAL.name, done, entry.key, JOURNAL)


async def _begun(call: Call, store: JournalStore) -> ToolExecutionResult | None:
    """Begin the call's entry (``None``: it runs), or what settles it instead. A call
    without a host key first meets an unfinished attempt of the same call under another
    key (a retry with a new call id): in the begin's own transaction, so a call that
    meets none pays one round trip."""
    look = call.input.idempotency_key is None
    if call.attempt is not None:  # its ticket began it
        earlier = await _earlier(call, store, call.attempt.entry) if look else None
        return None if earlier is None else await _after(call, store, earlier)
    begun = await _begin(call, store, look)
    if isinstance(begun, ToolExecutionFailure):
        return begun
    if begun.earlier is not None:
        settled = await _after(call, store, begun.earlier)
        if settled is not None:
            return settled
        begun = await _begin(call, store, False)
        if isinstance(begun, ToolExecutionFailure):
            return begun
    assert begun.entry is not None
    if begun.started:
        call.attempt = _hold(call, store, begun.entry)
        return None
    kept = await _outlived(call, store, begun.entry)
    if isinstance(kept, ToolExecutionFailure):
        return kept
    if kept.state is JournalState.FINISHED:
        return _replayed(call, kept)
    return await _settled(call, store, kept, "key")


async def _begin(
    call: Call, store: JournalStore, earlier: bool
) -> JournalBegin | ToolExecutionFailure:
    """One begin of the call's own entry, by a new owner of this attempt."""
    entry, lease = _entry(call, journal_owner()), call.handle.journal_lease_s
    begin = functools.partial(store.begin_call, entry, lease, earlier=earlier)
    return await _io(call, "begin a journal entry", begin)


async def _outlived(
    call: Call, store: JournalStore, kept: JournalEntry
) -> JournalEntry | ToolExecutionFailure:
    """``kept`` once it no longer runs (finished, or unknown: its owner died), waiting
    at most one lease of this registry for it (without holding a thread on a loop); an
    entry still running then is someone else's live call."""
    lease, agent, key = call.handle.journal_lease_s, kept.agent, kept.key
    deadline = time.monotonic() + lease + 1.0
    while kept.state is JournalState.STARTED and time.monotonic() < deadline:
        if call.cancelled():
            break
        await _pause(min(0.25, lease / 4))
        seen = await _io(call, "read the journal", lambda: store.get_call(agent, key))
        if seen is None or isinstance(seen, ToolExecutionFailure):
            return seen or kept
        kept = seen
    return kept


async def _pause(seconds: float) -> None:
    if on_event_loop():
        import anyio

        await anyio.sleep(seconds)
    else:
        time.sleep(seconds)


async def _earlier(call: Call, store: JournalStore, own: JournalEntry) -> JournalEntry | None:
    """An attempt of the same agent, tool and arguments under another key that began
    before ``own`` (the call's entry) and never finished. Only one that began before:
    two such calls that began together wait for the older, never for each other."""
    found = await _io(call, "read the journal", lambda: _attempts(call, store))
    if isinstance(found, ToolExecutionFailure):
        raise StageFailed(found)
    for entry in found:  # oldest first: the call's own entry ends the look
        if entry.key == own.key:
            return None
        if entry.state is not JournalState.FINISHED:
            return entry
    return None


def _attempts(call: Call, store: JournalStore) -> Sequence[JournalEntry]:
    """The attempts of the same agent, tool and arguments, oldest first (an indexed
    lookup)."""
    return store.list_calls(agent=_agent(call), tool=call.name, arguments_sha256=_digest(call))


async def _after(
    call: Call, store: JournalStore, earlier: JournalEntry
) -> ToolExecutionResult | None:
    """A repeat's earlier attempt that never finished, once it no longer runs (waiting at
    most one lease): ``None`` lets the call run when it finished meanwhile, else it is
    settled as unknown (:func:`_settled`)."""
    kept = await _outlived(call, store, earlier)
    if isinstance(kept, ToolExecutionFailure):
        return kept
    if kept.state is JournalState.FINISHED:
        return None
    return await _settled(call, store, kept, "repeat")


async def _settled(
    call: Call, store: JournalStore, kept: JournalEntry, how: str
) -> ToolExecutionResult | None:
    """An earlier attempt that is running or unknown, settled by the tool or a person:
    ``None`` lets the call run (on the earlier entry, which it now owns, when ``how`` is
    ``"key"``; else the earlier one is finished with a note of who settled it)."""
    tool = call.entry.definition if call.entry is not None else None
    assert tool is not None  # journal_of() journals known tools only
    shown = _shown(call, kept)
    if kept.state is not JournalState.UNKNOWN or not (shown or _settles(tool)):
        return _unknown(call, kept, how)
    owner, lease = journal_owner(), call.handle.journal_lease_s
    retaken = await _io(
        call,
        "retake a journal entry",
        lambda: store.retake_call(kept.agent, kept.key, owner, lease),
    )
    if retaken is None or isinstance(retaken, ToolExecutionFailure):
        return retaken or _unknown(call, kept, how)  # (None: another caller settled it)
    attempt = _hold(call, store, retaken)
    if how == "key":
        call.attempt = attempt
    # The tool knows best whether its effect happened; a person decides only without.
    why = "" if tool.reconcile is not None else "idempotent" if _settles(tool) else "a person"
    if not why:
        assert tool.reconcile is not None
        reconciled = await _reconciled(call, tool.reconcile, kept, attempt)
        if reconciled is not None:
            return reconciled
        why = "reconciled: it did not take effect"
    if call.plan.traced:
        call.trace("journal", JOURNAL.name, f"runs again ({why})", kept.key, JOURNAL)
    if how == "repeat":
        text = f"its outcome stayed unknown; call {call.input.call_id} ran after it ({why})"
        await _close(call, attempt, failure_result(text, ErrorCode.OUTCOME_UNKNOWN))
    return None


async def _reconciled(
    call: Call, reconcile: Callable[..., object], kept: JournalEntry, attempt: Attempt
) -> ToolExecutionResult | None:
    """The tool's ``reconcile`` step on the unknown attempt ``kept`` (``attempt`` owns
    its entry now): the result of an effect that happened, which finishes it; ``None``
    when it did not. A reconcile that fails settles nothing: the entry turns unknown
    again when its lease runs out."""
    entry = call.entry
    assert entry is not None
    try:
        parsed = call.parse(entry)
        value = reconcile(parsed, kept)
        if is_awaitable(value):
            value = await call.settle(value)
    except BaseException as error:
        _release(call, attempt)
        return call.contained(error, ErrorCode.TOOL_ERROR, "reconcile failed: ")
    if value is None:
        return None
    result: ToolExecutionResult
    try:
        result = render(entry, value, parsed, (), False, call.input.parent)
    except BaseException as error:
        _release(call, attempt)
        return call.contained(error, ErrorCode.TOOL_ERROR, "reconcile failed: ")
    if call.plan.traced:
        call.trace("journal", JOURNAL.name, "reconciled", kept.key, JOURNAL)
    await _close(call, attempt, result)
    return marked(result, "reconciled")


def _shown(call: Call, earlier: JournalEntry) -> bool:
    """Whether a person approved this call on a ticket, or through a channel, that
    showed ``earlier``."""
    if call.shown_earlier == earlier.key:
        return True
    ticket = call.ticket
    shown = None if ticket is None else _asked(ticket).get("earlier_attempt")
    return isinstance(shown, FrozenDict) and shown.get("key") == earlier.key


def _asked(ticket: ApprovalTicket) -> FrozenDict:
    asked = ticket.asked_by
    return asked if isinstance(asked, FrozenDict) else FrozenDict()


async def earlier_attempt(call: Call) -> dict[str, Any] | None:
    """What a person asked about the call (its ticket, an approval service) is shown of
    an unknown earlier attempt of it (when, where: it may have run), or ``None``; their
    yes then settles it. A courtesy: the begin step reads the journal again."""
    store = journal_of(call)
    if store is None:
        return None
    found = await _io(call, "read the journal", lambda: _attempts(call, store))
    if isinstance(found, ToolExecutionFailure):
        return None
    entry = next((e for e in found if e.state is JournalState.UNKNOWN), None)
    if entry is None:
        return None
    return {
        "key": entry.key,
        "call_id": entry.call_id,
        "started_at": entry.started_at,
        "owner": entry.owner,
    }


def _unknown(call: Call, kept: JournalEntry, how: str) -> ToolExecutionFailure:
    """``OUTCOME_UNKNOWN``: an earlier attempt is running, or died; it may have run."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(kept.started_at))
    which = f"under key {kept.key!r}" if how == "key" else f"(call {kept.call_id})"
    if kept.state is JournalState.STARTED:
        state = "is still running (or its process died less than a lease ago)"
        advice = (
            "Call it again later to get its result."
            if how == "key"  # without a key, a later call is a new call: it runs again
            else "Check whether it took effect before calling it again."
        )
    else:
        state = "stopped without recording its end (its process died)"
        advice = (
            "Check whether it took effect before calling it again; a person may approve "
            "a new attempt, or call it with a new idempotency key."
        )
    text = (
        f'tool "{call.name}": an earlier attempt {which}, started {when} on {kept.owner}, '
        f"{state}: it may or may not have run, so this call did not run. {advice}"
    )
    if call.plan.traced:
        seen = f"earlier attempt {kept.state.value}"
        call.trace("journal", JOURNAL.name, seen, kept.key, JOURNAL)
    failure = failure_result(text, ErrorCode.OUTCOME_UNKNOWN)
    meta = {"journal": {"state": kept.state.value, "key": kept.key, "call_id": kept.call_id}}
    return attrs.evolve(failure, meta=meta)


def _conflict(call: Call, error: JournalConflictError) -> ToolExecutionFailure:
    if call.plan.traced:
        call.trace("journal", JOURNAL.name, "key conflict", error.asked.key, JOURNAL)
    return failure_result(str(error), ErrorCode.INVALID_ARGS)


def _replayed(call: Call, kept: JournalEntry) -> ToolExecutionResult:
    """The recorded result of a finished call, marked replayed: the body did not run."""
    if call.plan.traced:
        call.trace("journal", JOURNAL.name, "replayed", kept.key, JOURNAL)
    return marked(result_from_json(kept.result), "replayed")


def _entry(call: Call, owner: str) -> JournalEntry:
    return JournalEntry(_agent(call), call.key, call.name, _digest(call), call.input.call_id, owner)


def _agent(call: Call) -> str:
    """Whose calls the entry is among: the agent; every anonymous MCP client under one
    scope is one (:func:`~dsh_tools._accounts.account`), so a retry over a new
    connection meets its earlier attempt."""
    return account(call.input.agent) or ""


def _digest(call: Call) -> str:
    arguments = call.arguments
    assert isinstance(arguments, FrozenDict)  # a call with non-JSON arguments never begins
    return call_digest(call.name, arguments)


def _stored(call: Call, what: str, operation: Callable[[], T]) -> T | ToolExecutionFailure:
    """``operation`` on the journal, or the failure it made (:func:`_failed`)."""
    try:
        return operation()
    except BaseException as error:
        return _failed(call, what, error)


async def _io(call: Call, what: str, operation: Callable[[], T]) -> T | ToolExecutionFailure:
    """:func:`_stored`; on a loop, with a store that does I/O, on the store's scribe
    thread (:mod:`dsh_tools._pipeline.scribe`): the loop is never blocked, and no call
    holds a thread of its own."""
    store = call.plan.journal
    if store is None or not on_event_loop() or not call.plan.journal_all:
        return _stored(call, what, operation)
    try:
        return await scribe(store).run(operation)
    except BaseException as error:
        return _failed(call, what, error)


def _failed(call: Call, what: str, error: BaseException) -> ToolExecutionFailure:
    """A conflict is the call's ``INVALID_ARGS``; any other failure of the store fails
    the call closed (``POLICY_ERROR`` naming the store)."""
    if isinstance(error, JournalConflictError):
        return _conflict(call, error)
    store = type(call.plan.approval_store).__qualname__
    prefix = f'approval store {store} failed to {what} for tool "{call.name}": '
    return call.contained(
        error, ErrorCode.POLICY_ERROR, prefix, "journal", origin=JOURNAL, doing=f"{what} "
    )


def _hold(call: Call, store: JournalStore, entry: JournalEntry) -> Attempt:
    """The call owns ``entry`` now: its lease is renewed until :func:`_release`."""
    scribe(store).hold(entry, call.handle.journal_lease_s)
    return Attempt(store, entry)


def _release(call: Call, attempt: Attempt | None) -> None:
    if attempt is not None:
        scribe(attempt.store).release(attempt.entry)
