"""What a tool body gets besides its arguments: :class:`ToolRunContext`.

The tool author's API. The pipeline makes one per body call; tool modules import it from
here (or from ``dsh_tools``), never from the call path's own modules.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from ._content import ContentLike, ContextMessage
from .progress import Output, Progress

if TYPE_CHECKING:
    from ._cancel import CancelSignal
    from ._models import ToolExecution
    from .progress import StreamSummary

__all__ = ["ToolRunContext"]


class _Stream(Protocol):
    """Where a body's reports go (the call path's progress step): opened by the body's
    first report, closed by the body step when it is done."""

    def open(self, signal: CancelSignal) -> None: ...

    def put(self, event: Progress | Output) -> None: ...

    def close(self) -> None: ...

    def summary(self) -> StreamSummary | None: ...


class _Call(Protocol):
    """The call a context belongs to; it makes the execution record on first request."""

    def record(self) -> ToolExecution: ...

    @property
    def key(self) -> str: ...

    def stream_on_demand(self) -> _Stream: ...


_OPENING = threading.Lock()
"""Held while a body's stream is opened on its first report, and while the body step
takes it back: a report after the body's end never opens one."""


class ToolRunContext:
    """What a tool body gets besides its arguments: the call, its signal, two levers and
    two ways to say how it is doing before it returns.

    ``signal`` fires when the caller cancels (or a timeout or wrapper does); an ``async``
    body is also interrupted at its next ``await``. ``signal.deadline``, when set, says
    when the body's time is up. The pipeline makes the context; bodies only use it.
    """

    __slots__ = ("_call", "_concluded", "_contexts", "_on_demand", "_stream", "signal")

    def __init__(
        self,
        call: _Call,
        signal: CancelSignal,
        stream: _Stream | None = None,
        on_demand: bool = False,
    ) -> None:
        self._call = call
        self.signal = signal
        self._contexts: tuple[ContextMessage, ...] = ()
        self._concluded = False
        self._stream = stream
        self._on_demand = on_demand and stream is None
        """Someone listens, or the call keeps a decision record: the first report opens
        the call's stream (a body that reports nothing costs none)."""
        if stream is not None:
            stream.open(signal)  # the body's reports are taken from now on

    def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Say how far the call has come: ``done`` of ``total`` (``None``: unknown), and
        optionally what it is doing, for a person.

        Call it as often as you like, from an ``async`` body, a ``def`` body or a thread
        the body started: reports are coalesced (the latest progress wins) and reach the
        listeners a few times a second at most. With nobody listening (and no decision
        records kept) it does nothing, cheaply, and checks nothing; otherwise a ``done``
        or ``total`` that is not a finite number, or a ``message`` that is not a ``str``,
        raises ``TypeError``.
        After the body returned, or once its signal fired, reports are dropped.
        """
        stream = self._stream
        if stream is None and self._on_demand:
            stream = self._opened()
        if stream is not None:
            stream.put(Progress(done, total, message))

    def emit_output(self, text: str, stream: str = "stdout") -> None:
        """Stream ``text`` as the body produces it, on a named ``stream`` (``"stdout"``,
        ``"stderr"``, ...), so a person sees it before the call ends.

        Output is batched, never reordered, and bounded while waiting for delivery. It
        is a view for whoever watches: it does not become the result; return what the
        model should see. Threads, coalescing and dropping as for
        :meth:`report_progress`.
        """
        sink = self._stream
        if sink is None and self._on_demand:
            sink = self._opened()
        if sink is not None:
            sink.put(Output(text, stream))

    def _opened(self) -> _Stream | None:
        """The call's stream, opened for this body on its first report; ``None`` once
        the body step took the stream back."""
        with _OPENING:
            if self._stream is None and self._on_demand:
                stream = self._call.stream_on_demand()
                stream.open(self.signal)
                self._stream = stream
            return self._stream

    def _detach(self) -> _Stream | None:
        """The body is done (the body step calls this): the stream its reports went to,
        if any; nothing more is taken through this context."""
        if self._on_demand:
            with _OPENING:
                stream, self._stream, self._on_demand = self._stream, None, False
            return stream
        stream, self._stream = self._stream, None
        return stream

    @property
    def execution(self) -> ToolExecution:
        """The call as every stage sees it: identity, frozen arguments, caller's signal."""
        return self._call.record()

    @property
    def idempotency_key(self) -> str:
        """The call's key across repeats: the host's ``idempotency_key``, else its call id.
        Hand it to an external API that accepts idempotency keys (a payment, a mail), so
        a repeat the journal cannot see (an unknown outcome settled by a person) is
        still one effect there."""
        return self._call.key

    def defer_context(self, message: str | ContentLike | ContextMessage) -> None:
        """Queue a user-role message for the next model turn (kept on the result)."""
        if not isinstance(message, ContextMessage):
            execution = self.execution
            blocks = message if isinstance(message, str) else [message]
            message = ContextMessage(
                id=f"{execution.call_id}:context:{len(self._contexts) + 1}",
                content=blocks,
                source=execution.name,
            )
        self._contexts = (*self._contexts, message)

    def conclude_turn(self) -> None:
        """Ask the host to end the agent's turn after this call, if it succeeds."""
        self._concluded = True
