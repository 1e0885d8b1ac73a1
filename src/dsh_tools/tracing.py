"""Trace events: what each stage of a call decided, for debugging, metrics and tests.

Pass ``tracer=`` to :class:`~dsh_tools.ToolRegistry` to receive one :class:`TraceEvent` per
step of every call. A tracer observes only; one that raises is logged and ignored. With no
tracer the pipeline pays one ``is None`` check per stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    from .models import ToolExecution
    from .records import Origin

__all__ = ["Stage", "TraceEvent", "Tracer"]

Stage = Literal[
    "call",
    "pre_execute",
    "approval",
    "guard",
    "execute",
    "progress",
    "body",
    "post_execute",
    "finalize",
    "result",
]
"""The steps a call can go through, in pipeline order."""


@attrs.frozen
class TraceEvent:
    """One step of one call.

    ``source`` names the plugin, guard or service that acted (``None`` for the pipeline);
    ``outcome`` is a short human-readable word or decision (``"abstained"``,
    ``"Deny('no')"``, ``"allowed-once"``, a result code); ``detail`` is the object itself
    (the decision, the result) for assertions. ``origin`` says who ``source`` is (a
    plugin's registered name and distribution), ``at`` when the step ended
    (``time.perf_counter()``); :class:`~dsh_tools.records.DecisionRecord` reads both.
    """

    stage: Stage
    execution: ToolExecution
    source: str | None
    outcome: str
    detail: object = None
    origin: Origin | None = None
    at: float = 0.0


Tracer = Callable[[TraceEvent], None]
