"""What a tool body gets besides its arguments: :class:`ToolRunContext`.

The tool author's API. The pipeline makes one per body call; tool modules import it from
here (or from ``dsh_tools``), never from the call path's own modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .content import ContentLike, ContextMessage

if TYPE_CHECKING:
    from .cancel import CancelSignal
    from .models import ToolExecution

__all__ = ["ToolRunContext"]


class _Call(Protocol):
    """The call a context belongs to; it makes the execution record on first request."""

    def record(self) -> ToolExecution: ...


class ToolRunContext:
    """What a tool body gets besides its arguments: the call, its signal, and two levers.

    ``signal`` fires when the caller cancels (or a timeout or wrapper does); an ``async``
    body is also interrupted at its next ``await``. ``signal.deadline``, when set, says
    when the body's time is up. The pipeline makes the context; bodies only use it.
    """

    __slots__ = ("_call", "_concluded", "_contexts", "signal")

    def __init__(self, call: _Call, signal: CancelSignal) -> None:
        self._call = call
        self.signal = signal
        self._contexts: tuple[ContextMessage, ...] = ()
        self._concluded = False

    @property
    def execution(self) -> ToolExecution:
        """The call as every stage sees it: identity, frozen arguments, caller's signal."""
        return self._call.record()

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
