"""The progress step: one call's reports, coalesced, filtered once and delivered in order.

A :class:`Stream` exists only for a call that has a listener (a ``dsh_tools_progress``
implementation in its plan, or the call's own ``on_progress``) or whose plan keeps
decision records (with no listener it only counts, and the last progress passes the
filters when the body is done), and only once its body reported: the body's first
report makes and opens it, so a body that reports nothing costs nothing; without
listener or record the body's context holds ``None`` and a report costs one attribute
check. The body step closes the stream before its result exists, so nothing is
delivered after the result, nor after the body's signal fired.

Coalescing, so a body reporting a million times a second cannot flood a client or slow
itself: a report is delivered at once when the previous delivery is at least
:data:`INTERVAL_S` old; otherwise it waits in the buffer (the latest progress replaces
the one waiting; output is appended, adjacent text of one stream joined, never
reordered) and one shared thread (:class:`_Flusher`) delivers the batch when the
interval is up. Output is delivered
in whole lines: a partial last line (up to :data:`MAX_PARTIAL_CHARS`) waits for its end
or the body's, so a filter sees a line written in pieces at once. A longer one is cut
only where the filters give the same text cut or whole, its last characters waiting
(:mod:`~dsh_tools._pipeline.cuts`), so a secret across a cut is still seen whole. At
most :data:`MAX_PENDING_CHARS` characters of output wait; what a body emits beyond that
before the next delivery is skipped and replaced by one line saying how much, and the
unfinished line on either side of the skip is skipped with it (half a secret is not
shown).

:func:`filtered` is the one place events meet policy: the plan's
``dsh_tools_progress_filter`` implementations, folded over each delivered event.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..progress import DROP, Output, Progress, ProgressListener, StreamSummary
from .cuts import HELD_CHARS, safe_cut
from .loops import stops_the_caller
from .plan import Impl, listener_impl
from .results import message

if TYPE_CHECKING:
    from .._cancel import CancelSignal
    from .._models import ToolDefinition, ToolExecution
    from .plan import Plan

logger = logging.getLogger("dsh_tools")

INTERVAL_S = 0.05
"""The shortest time between two deliveries of one call's events."""

MAX_PENDING_CHARS = 64 * 1024
"""The most output characters waiting between two deliveries."""

MAX_PARTIAL_CHARS = HELD_CHARS
"""The longest partial line that waits for its end before it is delivered."""

Event = Progress | Output


class _Unfinished(Output):
    """A partial line longer than :data:`MAX_PARTIAL_CHARS`: delivered up to a safe cut
    (:func:`~dsh_tools._pipeline.cuts.safe_cut`), the rest put back to wait."""


class _Call(Protocol):
    """What a stream reads of its call (:class:`~dsh_tools._pipeline.call.Call`)."""

    plan: Plan
    tool: ToolDefinition[Any] | None

    def record(self) -> ToolExecution: ...


class Stream:
    """One call's progress and output, from the body's reports to its listeners."""

    __slots__ = (
        "_call",
        "_delivering",
        "_last",
        "_last_flush",
        "_listened",
        "_listeners",
        "_lock",
        "_muted",
        "_open",
        "_output",
        "_pending_chars",
        "_progress",
        "_scheduled",
        "_signal",
        "_skipped",
        "_skipping",
        "_summary",
    )

    def __init__(self, call: _Call, own: ProgressListener | None) -> None:
        self._call = call
        listeners = call.plan.listeners
        self._listeners = listeners if own is None else (*listeners, listener_impl(own))
        """The plan's ``dsh_tools_progress`` implementations, then the call's own listener."""
        self._listened = bool(self._listeners)
        """Someone listens; otherwise the stream only counts for the decision record, and
        the last progress passes the filters when the body is done."""
        self._lock = threading.Lock()
        self._delivering = threading.RLock()  # one batch at a time, in order
        self._open = False
        self._signal: CancelSignal | None = None
        self._progress: Progress | None = None
        self._output: list[tuple[str, list[str]]] = []  # runs of one stream's text
        self._pending_chars = self._skipped = 0
        self._skipping = False  # skip up to the next line end: the rest of a skipped line
        self._last_flush = 0.0
        self._scheduled = False  # the flusher will deliver what waits
        self._muted = False
        self._summary = [0, 0, 0, 0, 0]  # progress, output, output chars, delivered, withheld
        self._last: Progress | None = None

    def open(self, signal: CancelSignal) -> None:
        """A body starts under ``signal``: its reports are taken until :meth:`close`."""
        self._call.record()  # made here, on the body's thread, before any delivery needs it
        with self._lock:
            self._open, self._signal = True, signal

    def put(self, event: Event) -> None:
        """Take one report, from any thread; deliver now or when the interval is up."""
        with self._lock:
            signal = self._signal
            if not self._open or signal is None or signal.cancelled:
                return
            counts = self._summary
            if type(event) is Progress:
                counts[0] += 1
                self._progress = event
            else:
                assert type(event) is Output
                counts[1] += 1
                counts[2] += len(event.text)
                if self._listened:
                    self._append(event)
            if self._scheduled or not self._listened:
                return  # delivered by the flusher, or (records only) by close
            due = self._last_flush + INTERVAL_S
            if due > time.monotonic():
                self._scheduled = True
                _FLUSHER.schedule(self, due)
                return
        self.flush()

    def _append(self, event: Output) -> None:
        text = event.text
        if self._skipping:  # the rest of a line whose head was skipped
            end = _line_end(text)
            self._skipped += end or len(text)
            text, self._skipping = (text[end:], False) if end else ("", True)
        room = MAX_PENDING_CHARS - self._pending_chars
        overflow = len(text) > room
        if overflow:
            self._skipped += len(text) - room
            text = text[:room]
        if text:
            self._pending_chars += len(text)
            runs = self._output
            if runs and runs[-1][0] == event.stream:
                runs[-1][1].append(text)
            else:
                runs.append((event.stream, [text]))
        if overflow:
            self._skip_unfinished()

    def _skip_unfinished(self) -> None:
        """Skipping starts: the unfinished line before it is skipped too, and so is the
        rest of the skipped line when it comes."""
        self._skipping = True
        if not self._output:
            return
        name, chunks = self._output[-1]
        text = "".join(chunks)
        end = _line_end(text)
        self._skipped += len(text) - end
        self._pending_chars -= len(text) - end
        self._output[-1:] = [(name, [text[:end]])] if end else []

    def _take(self, final: bool) -> list[Event]:
        outputs = [Output("".join(chunks), name) for name, chunks in self._output]
        held = None if final or not outputs else _partial(outputs[-1])
        self._output, self._pending_chars = [], 0
        if held is not None:
            whole, rest = held
            outputs[-1:] = [whole] if whole.text else []
            if type(rest) is _Unfinished:
                outputs.append(rest)
            else:
                self._output, self._pending_chars = [(rest.stream, [rest.text])], len(rest.text)
        if self._skipped:
            stream = outputs[-1].stream if outputs else "stdout"
            note = f"\n[{self._skipped} characters of output skipped while delivering]\n"
            outputs.append(Output(note, stream))
        batch: list[Event] = list(outputs)
        if self._progress is not None:
            batch.append(self._progress)
        self._progress, self._skipped = None, 0
        self._last_flush = time.monotonic()
        return batch

    def tick(self) -> None:
        """The interval is up (called by the flusher's thread)."""
        with self._lock:
            self._scheduled = False
        self.flush()

    def flush(self, final: bool = False) -> None:
        """Deliver what waits, in order, one batch at a time (a partial last line waits
        unless ``final``)."""
        with self._delivering:
            with self._lock:
                batch = self._take(final)
            if batch:
                self._deliver(batch)

    def close(self) -> None:
        """The body returned (or was interrupted): deliver what waits, unless its signal
        fired, and take nothing more until the next :meth:`open`. When this returns,
        nothing more is delivered."""
        with self._lock:
            self._open = False
            if self._signal is not None and self._signal.cancelled:
                self._output, self._progress = [], None
                self._pending_chars = self._skipped = 0
        self.flush(final=True)  # a tick still due then finds nothing

    def summary(self) -> StreamSummary | None:
        """What the call streamed, or ``None`` when its body reported nothing."""
        progress, output, chars, delivered, withheld = self._summary
        if not progress and not output:
            return None
        return StreamSummary(progress, output, chars, delivered, withheld, self._last)

    def _deliver(self, batch: list[Event]) -> None:
        call = self._call
        execution, tool, plan = call.record(), call.tool, call.plan
        counts = self._summary

        def run(event: Event) -> Event | None:
            return filtered(execution, event, tool, plan.filters)

        for event in batch:
            kept: Event | None = None
            if not self._muted:
                try:
                    kept = self._cut(event, run) if type(event) is _Unfinished else run(event)
                except FilterFailed:
                    self._muted = True  # fail closed: nothing more of this call is shown
            if kept is None:
                counts[4] += 1
                continue
            counts[3] += 1
            if type(kept) is Progress:
                self._last = kept
            for impl in self._listeners:
                _tell(impl, execution, kept, tool)

    def _cut(self, line: _Unfinished, run: Callable[[Output], Event | None]) -> Event | None:
        """The filtered head of ``line`` up to a safe cut; the rest waits again, before
        anything reported since (unless the body's signal fired meanwhile)."""
        at, head = safe_cut(Output(line.text, line.stream), run)
        rest = line.text[at:]
        with self._lock:
            if self._signal is None or not self._signal.cancelled:
                runs = self._output
                if runs and runs[0][0] == line.stream:
                    runs[0][1].insert(0, rest)
                else:
                    runs.insert(0, (line.stream, [rest]))
                self._pending_chars += len(rest)
        return head


class _Flusher:
    """One daemon thread that delivers each stream's waiting batch when its interval is up
    (starting a thread per call would cost more than the reports it carries)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Stream]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, stream: Stream, due: float) -> None:
        with self._condition:
            heapq.heappush(self._due, (due, next(self._order), stream))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="dsh_tools progress", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._condition.wait(wait)
                stream = heapq.heappop(self._due)[2]
            stream.tick()

    def forget_thread(self) -> None:
        """In a forked child the thread is gone: the next schedule starts one."""
        self._due, self._thread, self._condition = [], None, threading.Condition()


_FLUSHER = _Flusher()
os.register_at_fork(after_in_child=_FLUSHER.forget_thread)


def _partial(output: Output) -> tuple[Output, Output] | None:
    """``output`` split after its last line end (``\n`` or ``\r``), when a partial line
    follows it: a short one waits for its end, so a filter sees each line whole; a long
    one comes back :class:`_Unfinished`, to be cut where that is safe."""
    text = output.text
    end = max(text.rfind("\n"), text.rfind("\r")) + 1
    if end == len(text):
        return None
    kind = _Unfinished if len(text) - end > MAX_PARTIAL_CHARS else Output
    return Output(text[:end], output.stream), kind(text[end:], output.stream)


def _line_end(text: str) -> int:
    """Where the first line of ``text`` ends (after its ``\n`` or ``\r``); 0 if none does."""
    ends = [at for at in (text.find("\n"), text.find("\r")) if at >= 0]
    return min(ends) + 1 if ends else 0


class FilterFailed(Exception):
    """A progress filter raised or answered nonsense (already logged)."""


def filtered(
    execution: ToolExecution,
    event: Event,
    tool: ToolDefinition[Any] | None,
    filters: tuple[Impl, ...],
) -> Event | None:
    """The progress filter step: ``event`` through each filter in order (each sees the
    previous one's replacement); ``None`` when one withheld it. Raises
    :class:`FilterFailed` when one raised or returned something that is not an event
    (logged; the caller fails closed)."""
    for impl in filters:
        try:
            answer = impl.call(execution, event, tool)
        except BaseException as error:
            if stops_the_caller(error):
                raise
            logger.warning(
                "progress filter %s raised on %r: %s; the call's stream is withheld",
                impl.label,
                execution.name,
                message(error),
            )
            raise FilterFailed from None
        if answer is None:
            continue
        if answer is DROP:
            return None
        if type(answer) not in (Progress, Output):
            logger.warning(
                "progress filter %s returned %r on %r (expected None, DROP, Progress or "
                "Output); the call's stream is withheld",
                impl.label,
                answer,
                execution.name,
            )
            raise FilterFailed
        event = answer
    return event


def _tell(listener: Impl, execution: ToolExecution, event: Event, tool: Any) -> None:
    """Call one listener; a failure is logged and contained (the call goes on)."""
    try:
        listener.call(execution, event, tool)
    except BaseException as error:
        if stops_the_caller(error):
            raise
        logger.warning(
            "progress listener %s failed on %r: %s", listener.label, execution.name, message(error)
        )
