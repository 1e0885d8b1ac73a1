"""The five hooks every tool call passes through, in order, and the two that see a running
call's progress. This module is the contract.

Implement any of them in a plugin class or module, mark each implementation with
:data:`dsh_tools.hookimpl`, and add the plugin with ``registry.add_plugin(plugin)`` (or ship
it through the ``dsh_tools.plugins`` entry point group). Implementations may accept any
subset of a hook's parameters, by name. Plugins added to a scope
(``registry.scope("agent").add_plugin(...)``) only see that scope's calls and its
descendants'.

Every hook gets ``tool``, the :class:`~dsh_tools.ToolDefinition` the call's name resolved
to when the call entered (``None`` for an unknown name), so a policy can read the tool's
``metadata`` or ``timeout_ms`` without holding the registry. Implementations that do not
name it do not get it.

Stages 1, 2, 4 and 5 are run by the pipeline as a loop over the implementations in
pluggy's order (``tryfirst``/``trylast`` honoured, later registrations first), so one
implementation raising can never skip a later one's protection and an ``async def``
implementation is awaited before the next runs. ``wrapper=True`` implementations are
accepted only on :func:`dsh_tools_execute`; the pipeline chains them the way pluggy chains
wrappers (the last registered outermost unless ``tryfirst``/``trylast`` say otherwise; an
error before or after a wrapper's ``yield`` is thrown into the wrappers outside it).

**Dry runs.** ``registry.explain(call)`` runs pre-execute and the guards to say what would
happen to a call, and nothing after them: no approval prompt, no wrapper, no body, no
post-execute, no observer. Its ``execution.dry_run`` is ``True``. A pre-execute or guard
implementation with a side effect (writing an audit entry, counting a rate limit, asking
a remote service to reserve something) must check it and skip the side effect, deciding
exactly as it would for the real call.

**Progress.** While a body runs it may report progress and stream output
(``ctx.report_progress``, ``ctx.emit_output``). Those events are not a stage: they pass
:func:`dsh_tools_progress_filter` (policy over what a person sees before the result) and
reach :func:`dsh_tools_progress` (listeners), both plain functions called in the order
above for each delivered batch, from whichever thread delivers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from typing import Any

    from ._cancel import CancelSignal
    from ._models import (
        PostExecuteDecision,
        PreExecuteDecision,
        ToolDefinition,
        ToolExecution,
        ToolExecutionResult,
    )
    from .progress import Output, Progress
    from .records import DecisionRecord

__all__ = [
    "PROJECT_NAME",
    "Dispatch",
    "WrapperGenerator",
    "dsh_tools_execute",
    "dsh_tools_guard",
    "dsh_tools_post_execute",
    "dsh_tools_pre_execute",
    "dsh_tools_progress",
    "dsh_tools_progress_filter",
    "dsh_tools_result",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "dsh_tools"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Dispatch = Callable[["CancelSignal | None"], Awaitable["ToolExecutionResult"]]
"""Runs the rest of the call (inner wrappers, then the body) and returns its result.

Call it with ``None`` to keep the caller's signal, or with a replacement signal for the
inner call (the body then sees a signal that fires when either fires, and the earliest of
their deadlines: ``dispatch(signal.with_timeout(ms))`` bounds the body).
"""


@hookspec(firstresult=True)
def dsh_tools_pre_execute(
    execution: ToolExecution,
    tool: ToolDefinition[Any] | None,
) -> PreExecuteDecision | Awaitable[PreExecuteDecision | None] | None:
    """Decide whether a call may run, before anything else about it happens.

    Return :class:`~dsh_tools.Allow`, :class:`~dsh_tools.Deny` or :class:`~dsh_tools.Ask`
    to decide, or ``None`` to leave the decision to later implementations. The first
    non-``None`` result wins (``firstresult``); when every implementation abstains the call
    is allowed. ``Ask`` goes to the registry's approval service (or is decided by an answer
    it remembered); anything but ``allowed-once`` or ``allowed-always`` becomes a denial.
    May be ``async def``.

    Runs for unknown tool names too (policy sees every name), so a ``Deny`` wins over
    ``UNKNOWN_TOOL``. Runs in dry runs too (``execution.dry_run``): decide as usual, but
    skip any side effect. ``Deny``, ``Ask`` and ``Allow`` take an optional ``detail``
    (a JSON object saying what decided) that decision records keep.

    Raising anything (a code the error carries is named in the message), or returning
    anything that is not a decision, fails the call closed with
    ``POLICY_ERROR``; guards, body and post-execute are skipped.

    :param execution: the call, with frozen arguments; read-only.
    :param tool: the definition the name resolved to (``None`` for an unknown name).

    Use in plugins::

        @hookimpl
        def dsh_tools_pre_execute(execution):
            if execution.name == "run_command":
                return Ask("commands need a person's approval")
            return None
    """


@hookspec
def dsh_tools_guard(execution: ToolExecution, tool: ToolDefinition[Any] | None) -> str | None:
    """Final, monotonic check before dispatch: return a reason string to deny, else ``None``.

    Guards run only when pre-execute (and any approval) allowed the call; for a call
    pre-execute would put to a person they also run once before the person is asked, as
    a dry run (``execution.dry_run``), so a call a guard would deny is denied without
    spending anyone's approval. Any returned
    string denies, the empty string included; no implementation can re-allow a call a
    guard denied, whatever the order. A raising guard denies too (fails closed). Guards
    are plain synchronous functions: they must be quick and cannot await.

    Guards also run in a dry run (``execution.dry_run``, see the module docstring): a
    guard with a side effect must skip it then.

    :param execution: the call, with frozen arguments; read-only.
    :param tool: the definition the name resolved to (``None`` for an unknown name).

    Use in plugins::

        @hookimpl
        def dsh_tools_guard(execution):
            path = (execution.arguments or {}).get("path", "")
            return "no secrets" if ".env" in str(path) else None
    """


@hookspec
def dsh_tools_execute(  # type: ignore[empty-body]
    execution: ToolExecution, tool: ToolDefinition[Any] | None
) -> Dispatch:
    """Wrap the dispatch of an allowed call: timeout, retry, caching, metrics.

    Only ``@hookimpl(wrapper=True)`` implementations are accepted here. ``dispatch = yield``
    gives the inner dispatch (an ``async`` callable taking an optional replacement
    :class:`~dsh_tools.CancelSignal`); return the dispatch to use instead. Your dispatch
    may call the inner one zero times (short-circuit with your own result), once, or
    several times (retry). It cannot change which tool runs or its arguments.

    Results from the inner dispatch are frozen. A success you author yourself is
    normalized through the tool's output contract (value validated, content re-rendered;
    keys of your own ``meta`` object the contract's meta does not set are kept);
    a failure you author is kept as is. Raising anything from your dispatch fails the call
    with ``POLICY_ERROR`` (a code the error carries is named in the message) and skips
    post-execute.

    Under ``execute_sync`` the chain runs without an event loop when nothing in it needs
    one: a dispatch that only awaits the inner dispatch (and :func:`dsh_tools.sleep`)
    is fine; one that awaits anyio, asyncio or trio itself fails the call with
    ``POLICY_ERROR`` saying to use ``await registry.execute(call)``.

    :param execution: the call, with frozen arguments; read-only.
    :param tool: the definition the name resolved to (``None`` for an unknown name); the
        body runs the definition current when it starts.

    Use in plugins::

        @hookimpl(wrapper=True)
        def dsh_tools_execute(execution):
            dispatch = yield

            async def timed(signal=None):
                started = time.perf_counter()
                try:
                    return await dispatch(signal)
                finally:
                    print(execution.name, time.perf_counter() - started)

            return timed
    """


@hookspec
def dsh_tools_post_execute(
    execution: ToolExecution, result: ToolExecutionResult, tool: ToolDefinition[Any] | None
) -> PostExecuteDecision | Awaitable[PostExecuteDecision | None] | None:
    """Inspect a result and keep it, replace its content or value, or block it.

    A fold: each implementation sees the result as the previous ones left it. Return
    ``None`` or ``Accept()`` to keep it; ``Accept(content=...)`` to replace the content
    (the error state is kept: a failure stays a failure; a content that differs
    withholds the ``value`` and ``meta`` it was rendered from, so no other wire sends
    what was replaced, unless ``bounded=True`` says it only shortens the same answer);
    ``Accept(value=...)`` on a success to replace the value (validated and re-rendered
    by the tool's output contract); ``Block(feedback)`` to turn the result into a
    ``BLOCKED`` failure whose content is the feedback verbatim. Every implementation
    runs; after a ``Block`` the rest see the blocked failure. May be ``async def``.
    Raising anything fails the call with ``POLICY_ERROR``.

    Runs for successes, body failures and denials; not after a failure of policy itself.

    :param execution: the call, with frozen arguments; read-only.
    :param result: the frozen result so far.
    :param tool: the definition the name resolved to (``None`` for an unknown name).

    Use in plugins::

        @hookimpl
        def dsh_tools_post_execute(execution, result):
            if not result.is_error and "BEGIN PRIVATE KEY" in str(result.content):
                return Block("the output contained a private key; it was withheld")
            return None
    """


@hookspec
def dsh_tools_result(
    execution: ToolExecution,
    result: ToolExecutionResult,
    tool: ToolDefinition[Any] | None,
    record: DecisionRecord | None,
) -> None:
    """Observe the final, frozen outcome of every call, exactly once per call.

    Return values are ignored: observers cannot change anything. May be ``async def``.
    An observer that raises is logged (logger ``dsh_tools``) and contained; the other
    observers still run and the caller gets the same result object observers saw.

    Name a ``record`` parameter to get each call's
    :class:`~dsh_tools.records.DecisionRecord`: every step of the call (which plugin
    abstained, allowed, denied or asked, the approval answer, the guards, how often the
    body was dispatched, post-execute, timings). Only scopes with such an observer
    collect records; the others pay nothing for them.

    :param execution: the call; ``arguments`` is ``None`` if they were not JSON.
    :param result: the final, JSON-safe result ``execute()`` returns.
    :param tool: the definition the name resolved to (``None`` for an unknown name).
    :param record: the call's decision record (always set when the parameter is named).

    Use in plugins::

        @hookimpl
        def dsh_tools_result(execution, result):
            metrics.count(execution.name, error=result.is_error)
    """


@hookspec
def dsh_tools_progress_filter(
    execution: ToolExecution, event: Progress | Output, tool: ToolDefinition[Any] | None
) -> Progress | Output | object | None:
    """Inspect a progress or output event before anyone sees it; keep, replace or drop it.

    The streamed counterpart of post-execute, for policies that guard what leaves a call:
    a redaction policy that cleans the final content must clean the stream too, or a
    secret reaches the person (and the MCP client, the ACP editor, the terminal, a span)
    before post-execute ever runs. A fold: each implementation sees the event as the
    previous ones left it. Return ``None`` to keep it, a new
    :class:`~dsh_tools.progress.Progress` or :class:`~dsh_tools.progress.Output` to
    replace it, or :data:`~dsh_tools.progress.DROP` to withhold it.

    Events are coalesced before they are filtered: an output event holds the text
    reported since the previous delivery (adjacent text of one stream joined), so a
    secret written in two pieces arrives in one; a line too long to wait whole is cut
    only where filtering the pieces gives the same text as filtering the whole (checked
    by calling the filters on both, so an implementation must be a plain function of
    the event), its last 4,096 characters waiting. A plain function (not ``async``),
    called from whichever thread delivers; keep it quick. Fails closed: an implementation
    that raises or returns anything else withholds that event and every later one of the
    call (logged); the call itself goes on, and its result is untouched.

    :param execution: the call, with frozen arguments; read-only.
    :param event: the event so far.
    :param tool: the definition the name resolved to when the call entered.

    Use in plugins::

        @hookimpl
        def dsh_tools_progress_filter(event):
            if isinstance(event, Output) and "hunter2" in event.text:
                return Output(event.text.replace("hunter2", "********"), event.stream)
            return None
    """


@hookspec
def dsh_tools_progress(
    execution: ToolExecution, event: Progress | Output, tool: ToolDefinition[Any] | None
) -> None:
    """Observe a running call's progress and output, as the filters left them.

    Called for each delivered event, in order, one batch at a time: a
    :class:`~dsh_tools.progress.Progress` (``done``, ``total``, ``message``; the latest
    one of a batch wins) or an :class:`~dsh_tools.progress.Output` (``text``,
    ``stream``). Never called after the call's result exists, nor after its signal
    fired. Return values are ignored. A plain function (not ``async``), called from
    whichever thread delivers (the body's, or a timer's); hand the event to your own
    loop or queue if you need one. An implementation that raises is logged (logger
    ``dsh_tools``) and contained; the call goes on.

    A scope with an implementation gives its calls a progress stream; a scope without
    one (and a call without ``on_progress``) pays nothing for reports.

    :param execution: the call; read-only.
    :param event: the event, after the progress filters.
    :param tool: the definition the name resolved to when the call entered.

    Use in plugins::

        @hookimpl
        def dsh_tools_progress(execution, event):
            if isinstance(event, Progress):
                print(execution.name, event.done, event.total)
    """


WrapperGenerator = Generator[None, Dispatch, Dispatch]
"""The type of a ``dsh_tools_execute`` wrapper implementation."""
