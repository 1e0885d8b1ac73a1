"""What an engine's activity or step does with a tool call, whichever engine it is: the
call's JSON in, one pass through ``registry.execute`` (or ``registry.resume``), the
result's JSON out. The five stages run there and nowhere else.

Three meanings of "once" meet here and are kept apart:

* at most once per ticket: a ticket's answer is taken by one resume (the store's
  compare-and-set), whichever process or attempt resumes it;
* at most once per key: every call carries a stable call id made from the engine's own
  identity of it (:func:`temporal_call_id`, :func:`dbos_call_id`), its idempotency key
  too, so the same call retried by the engine meets its call journal entry: a finished
  one is replayed;
* unknown: an attempt that started and never reported (a worker died, or timed out) may
  or may not have run its body. The call journal knows whether its body began: a
  retried attempt of a tool that is not idempotent, whose body began, ends
  ``OUTCOME_UNKNOWN``, which a person, a reconcile step or an idempotent tool must
  settle. With a store that keeps no journal, the engine's attempt number decides
  instead (:class:`RetriedAttempts`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs

from dsh_tools import (
    CancelSignal,
    ErrorCode,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    failure_result,
    hookimpl,
)
from dsh_tools._models import result_to_json
from dsh_tools._registry import ToolRegistry
from dsh_tools.approvals import ApprovalKey, TicketError, TicketState, TicketStore
from dsh_tools.progress import Output, Progress

GUARD_NAME = "dsh-tools-engine-attempts"
"""The name :func:`guard_retries` registers :class:`RetriedAttempts` under."""

Json = dict[str, Any]


@attrs.frozen
class Attempt:
    """Which attempt of a call an engine is running: ``number`` counts from 1, and an
    attempt after the first means an earlier one started and never reported."""

    engine: str
    number: int = 1

    @property
    def retried(self) -> bool:
        """Whether an earlier attempt of this call started."""
        return self.number > 1


_ATTEMPT: ContextVar[Attempt | None] = ContextVar("dsh_tools_engine_attempt", default=None)


def rerunnable(tool: ToolDefinition[Any]) -> bool:
    """Whether running ``tool`` twice is harmless: it says it is idempotent or read-only."""
    metadata = tool.metadata
    return metadata.get("idempotent") is True or metadata.get("read_only") is True


def unknown_result(call_id: str, tool: str, attempt: Attempt) -> ToolExecutionResult:
    """``OUTCOME_UNKNOWN``: attempt ``attempt.number`` of a call an earlier attempt started."""
    return failure_result(
        f'the call {call_id} of tool "{tool}" may or may not have run: an earlier attempt '
        f"started it on {attempt.engine} and never reported (its worker stopped or timed "
        f"out), and a tool that is not idempotent does not run again by itself (attempt "
        f"{attempt.number}). Check whether it took effect before calling it again.",
        ErrorCode.OUTCOME_UNKNOWN,
        name="OutcomeUnknown",
    )


class RetriedAttempts:
    """Ends a retried attempt of a call that is not idempotent with ``OUTCOME_UNKNOWN``
    instead of running its body again, when ``registry``'s store keeps no call journal
    (which knows better: whether the earlier attempt's body began); everything else
    passes through.

    An execute wrapper, so the call still passes pre-execute, the guards, post-execute
    and the result observers: the audit log records the unknown outcome."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    @hookimpl(wrapper=True, tryfirst=True)
    def dsh_tools_execute(self, execution: ToolExecution, tool: ToolDefinition[Any] | None) -> Any:
        dispatch = yield
        attempt = _ATTEMPT.get()
        if attempt is None or not attempt.retried or tool is None or rerunnable(tool):
            return dispatch
        if callable(getattr(self.registry.approval_store, "begin_call", None)):
            return dispatch  # the journal judged the attempt before this stage
        unknown = unknown_result(execution.call_id, execution.name, attempt)

        async def not_again(signal: CancelSignal | None = None) -> ToolExecutionResult:
            return unknown

        return not_again


def guard_retries(registry: ToolRegistry) -> None:
    """Add :class:`RetriedAttempts` to ``registry`` once (a second call adds nothing)."""
    if registry.plugin_manager.get_plugin(GUARD_NAME) is None:
        registry.add_plugin(RetriedAttempts(registry), name=GUARD_NAME)


def temporal_call_id(workflow_id: str, run_id: str, activity_id: str) -> str:
    """A Temporal call's id: its workflow run and the activity's id in it, the same for
    every retry of the activity (and distinct after a continue-as-new)."""
    return f"temporal:{workflow_id}/{run_id}/{activity_id}"


def dbos_call_id(workflow_id: str, step_id: int) -> str:
    """A DBOS call's id: its workflow and the step's id in it, the same when DBOS
    recovers the workflow and runs the step again."""
    return f"dbos:{workflow_id}/{step_id}"


@attrs.frozen
class CallRequest:
    """A tool call as a workflow asks for it (plain JSON, so any engine can carry it):
    the tool, its arguments, the agent scope, and a time budget in seconds."""

    name: str
    arguments: Any
    agent: str | None = None
    timeout_s: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallRequest:
        """The request a workflow sent; a malformed one raises ``TypeError``."""
        name, agent, timeout_s = data.get("name"), data.get("agent"), data.get("timeout_s")
        if not isinstance(name, str) or not (agent is None or isinstance(agent, str)):
            raise TypeError(f"a tool call request needs a name and an optional agent: {data!r}")
        if timeout_s is not None and (isinstance(timeout_s, bool) or timeout_s <= 0):
            raise TypeError(f"a tool call's timeout_s must be a positive number: {timeout_s!r}")
        return cls(name, data.get("arguments", {}), agent, timeout_s)

    def signal(self, caller: CancelSignal) -> CancelSignal:
        """``caller``, bounded by this request's time budget when it has one."""
        return caller if self.timeout_s is None else caller.with_timeout(self.timeout_s * 1000)


class LatestProgress:
    """A call's progress listener that keeps only the latest event, as JSON, for an
    engine to carry at its own pace (a heartbeat, a workflow event)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self._lock = threading.Lock()
        self._latest: Json | None = None
        self._taken = True

    def __call__(self, execution: ToolExecution, event: Progress | Output) -> None:
        shown = {"call_id": self.call_id, "tool": execution.name, **event.to_json()}
        with self._lock:
            self._latest, self._taken = shown, False

    @property
    def latest(self) -> Json | None:
        """The latest event (``None`` before the first)."""
        return self._latest

    def fresh(self) -> Json | None:
        """The latest event if it was not taken yet, else ``None``."""
        with self._lock:
            if self._taken:
                return None
            self._taken = True
            return self._latest


def _call_input(
    request: CallRequest, call_id: str, signal: CancelSignal, progress: LatestProgress | None
) -> ToolExecutionInput:
    return ToolExecutionInput(
        call_id,
        request.name,
        request.arguments,
        agent=request.agent,
        signal=request.signal(signal),
        on_progress=progress,
        idempotency_key=call_id,
    )


def _judged(registry: ToolRegistry, call: ToolExecutionInput, attempt: Attempt) -> Attempt:
    """``attempt``, counted as a first one when the earlier attempt only asked a person
    (reads the store: off the loop)."""
    if attempt.retried and _only_asked(registry, call):
        return attrs.evolve(attempt, number=1)
    return attempt


@contextmanager
def _as_attempt(attempt: Attempt) -> Iterator[None]:
    token = _ATTEMPT.set(attempt)
    try:
        yield
    finally:
        _ATTEMPT.reset(token)


async def run_call(
    registry: ToolRegistry,
    request: CallRequest,
    *,
    call_id: str,
    attempt: Attempt,
    signal: CancelSignal,
    progress: LatestProgress | None = None,
) -> Json:
    """One call through ``registry.execute``, as attempt ``attempt`` of call ``call_id``."""
    call = _call_input(request, call_id, signal, progress)
    if attempt.retried:
        import anyio.to_thread

        attempt = await anyio.to_thread.run_sync(_judged, registry, call, attempt)
    with _as_attempt(attempt):
        return result_to_json(await registry.execute(call))


@attrs.frozen
class Step:
    """What a synchronous step knows of the call it runs: the call's id, which attempt
    it is, the signal the call runs under and where its progress goes."""

    call_id: str
    attempt: Attempt
    signal: CancelSignal
    progress: LatestProgress | None = None


def run_call_sync(registry: ToolRegistry, request: CallRequest, step: Step) -> Json:
    """:func:`run_call` through ``registry.execute_sync``: a plain body runs on the
    calling thread, with no event loop unless the call needs one."""
    call = _call_input(request, step.call_id, step.signal, step.progress)
    with _as_attempt(_judged(registry, call, step.attempt)):
        return result_to_json(registry.execute_sync(call))


def _only_asked(registry: ToolRegistry, call: ToolExecutionInput) -> bool:
    """Whether an earlier attempt of ``call`` went no further than asking a person: the
    store holds an open ticket of this very call (its id). Such an attempt ended at the
    ticket, before any body; the answer it waits for was never taken."""
    store = registry.approval_store
    if call.agent is None or not callable(getattr(store, "find_ticket", None)):
        return False
    try:
        key = ApprovalKey.for_call(call.agent, call.name, call.arguments)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # arguments that are not JSON never asked anyone
        return False
    ticket = store.find_ticket(key)  # type: ignore[attr-defined]
    return ticket is not None and ticket.call_id == call.call_id


async def run_resume(
    registry: ToolRegistry,
    ticket_id: str,
    *,
    attempt: Attempt,
    signal: CancelSignal,
    timeout_s: float | None = None,
    progress: LatestProgress | None = None,
) -> Json:
    """The call ticket ``ticket_id`` holds, through ``registry.resume``: at most once per
    ticket. A retried attempt that finds the ticket already resumed reports the outcome
    unknown (the earlier attempt took the answer and never reported), not a denial.
    A retried attempt reads the store off the loop."""
    import anyio.to_thread

    taken_before = attempt.retried and await anyio.to_thread.run_sync(
        _taken_before, registry, ticket_id, attempt
    )
    bounded = signal if timeout_s is None else signal.with_timeout(timeout_s * 1000)
    try:
        result = await registry.resume(ticket_id, signal=bounded, on_progress=progress)
    except TicketError as error:
        return result_to_json(failure_result(error.message, error.code))
    if taken_before:
        return await anyio.to_thread.run_sync(_resumed, registry, ticket_id, attempt, True, result)
    return _resumed(registry, ticket_id, attempt, False, result)


def run_resume_sync(
    registry: ToolRegistry, ticket_id: str, step: Step, timeout_s: float | None = None
) -> Json:
    """:func:`run_resume` through ``registry.resume_sync``."""
    taken_before = _taken_before(registry, ticket_id, step.attempt)
    signal = step.signal if timeout_s is None else step.signal.with_timeout(timeout_s * 1000)
    try:
        result = registry.resume_sync(ticket_id, signal=signal, on_progress=step.progress)
    except TicketError as error:
        return result_to_json(failure_result(error.message, error.code))
    return _resumed(registry, ticket_id, step.attempt, taken_before, result)


def _taken_before(registry: ToolRegistry, ticket_id: str, attempt: Attempt) -> bool:
    """Whether a retried attempt finds its ticket resumed already (by the earlier one)."""
    return attempt.retried and ticket_state(registry, ticket_id) == TicketState.RESUMED.value


def _resumed(
    registry: ToolRegistry,
    ticket_id: str,
    attempt: Attempt,
    taken_before: bool,
    result: ToolExecutionResult,
) -> Json:
    """A resume's result as JSON; the denial of a ticket an earlier attempt took is an
    unknown outcome."""
    if taken_before and result.is_error and result.code == "DENIED":
        ticket = _ticket(registry, ticket_id)
        name = ticket.tool_name if ticket is not None else "?"
        call_id = ticket.call_id if ticket is not None else ticket_id
        return result_to_json(unknown_result(call_id, name, attempt))
    return result_to_json(result)


def ticket_state(registry: ToolRegistry, ticket_id: str) -> str:
    """The ticket's state as its store reports it now (``pending``, ``answered``,
    ``resumed``, ``expired``), or ``missing``."""
    ticket = _ticket(registry, ticket_id)
    return "missing" if ticket is None else ticket.state.value


def _ticket(registry: ToolRegistry, ticket_id: str) -> Any:
    store = registry.approval_store
    if not callable(getattr(store, "get_ticket", None)):
        return None
    tickets: TicketStore = store  # type: ignore[assignment]
    return tickets.get_ticket(ticket_id)
