"""Trace events: what each stage of a call decided, for debugging, metrics and tests.

Pass ``tracer=`` to :class:`~dsh_tools.ToolRegistry` to receive one :class:`TraceEvent` per
step of every call. A tracer observes only; one that raises is logged and ignored. With no
tracer the pipeline pays one ``is None`` check per stage.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:
    from ._models import ToolExecution

__all__ = ["Stage", "TraceEvent", "Tracer", "note"]

Stage = Literal[
    "call",
    "pre_execute",
    "approval",
    "guard",
    "journal",
    "execute",
    "progress",
    "body",
    "post_execute",
    "finalize",
    "result",
]
"""The steps a call can go through, in pipeline order."""


@attrs.frozen
class Origin:
    """Who acted in a step: a plugin's registered name (or a guard's or service's name)
    and, when it came from an entry point, the distribution that shipped it."""

    name: str
    distribution: str | None = None


@attrs.frozen
class TraceEvent:
    """One step of one call.

    ``source`` names the plugin, guard or service that acted (``None`` for the pipeline);
    ``outcome`` is a short human-readable word or decision (``"abstained"``,
    ``"Deny('no')"``, ``"allowed-once"``, a result code); ``detail`` is the object itself
    (the decision, the result) for assertions. ``origin`` says who ``source`` is (a
    plugin's registered name and distribution), ``at`` when the step ended
    (``time.perf_counter()``), ``since`` when it began, for a step that knows (the body
    step: its time is the body run's own); :class:`~dsh_tools.records.DecisionRecord`
    reads them.
    """

    stage: Stage
    execution: ToolExecution
    source: str | None
    outcome: str
    detail: object = None
    origin: Origin | None = None
    at: float = 0.0
    since: float | None = None


Tracer = Callable[[TraceEvent], None]


_WRAPPED: ContextVar[Any] = ContextVar("dsh_tools_wrapped_call", default=None)
"""The call whose execute wrappers run in this context, while its steps are recorded."""


def note(source: str, outcome: str) -> None:
    """Record a step of the ``execute`` stage for the call whose wrappers are running.

    For execute wrappers that want what they did in the decision record and the tracer
    (``ConcurrencyLimit`` notes how long a call waited for a permit). ``source`` names the
    wrapper, ``outcome`` says what happened. Does nothing when nobody records the call's
    steps, or outside a wrapper's dispatch.
    """
    call = _WRAPPED.get()
    if call is not None:
        call.trace("execute", source, outcome)
