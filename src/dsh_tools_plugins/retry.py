"""Retry idempotent tools on retryable failures, with exponential backoff.

:class:`RetryPolicy` is a ``dsh_tools_execute`` wrapper. It retries a call only when

* the tool's definition says ``metadata={"idempotent": True}`` (running it twice is
  harmless), and
* the failure's code is one of ``retry_codes`` (by default ``TRANSIENT``, which tool
  bodies raise with ``ToolError(message, code=ErrorCode.TRANSIENT)``, and
  ``TOOL_TIMEOUT``).

Between attempts it waits ``backoff_ms * 2 ** (attempt - 1)``, capped at
``max_backoff_ms`` (with ``jitter=True``, a random point in the upper half of that). It
stops at once when the caller's signal (or the signal an outer wrapper passed) is
cancelled, also in the middle of a wait. It never invents a result: the caller gets the
last result the inner dispatch produced.

The wrapper is ``tryfirst``, so it runs outside the other wrappers: each attempt gets its
own :class:`~dsh_tools_plugins.timeouts.TimeoutPolicy` budget and definition timeout,
which is what makes ``TOOL_TIMEOUT`` retryable at all.

It reads the tool's definition from the hook's ``tool`` argument, so it needs no
registry: ship it through the ``dsh_tools.plugins`` entry point and it loads with no
arguments. Its waits go through :func:`dsh_tools._cancel.sleep`, so under
``execute_sync`` a retry runs with no event loop (a backoff blocks the calling thread).
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from dsh_tools import _cancel as cancel
from dsh_tools._cancel import CancelSignal
from dsh_tools._models import ToolDefinition, ToolExecution, ToolExecutionResult
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl

__all__ = ["RetryPolicy"]

Sleep = Callable[[float], Awaitable[object]]
"""An awaitable sleep taking seconds, like :func:`anyio.sleep`."""


def _non_negative(label: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise DefinitionError(
            f"RetryPolicy {label} must be a non-negative finite number, got {value!r}"
        )
    return float(value)


class RetryPolicy:
    """Retries idempotent tools on retryable failure codes, with exponential backoff.

    :param attempts: total attempts, the first included (``1`` never retries).
    :param backoff_ms: the wait before the first retry; it doubles on each retry.
    :param max_backoff_ms: the longest wait.
    :param retry_codes: failure codes (``ErrorCode`` members or strings) worth retrying.
    :param jitter: wait a random time in ``[delay / 2, delay]`` instead of ``delay``.
    :param rng: the random source for jitter (pass a seeded ``random.Random`` in tests).
    :param sleep: an awaitable sleep taking seconds, instead of waiting for real (for
        tests); a cancellation still stops the retries. By default the wait is
        :func:`dsh_tools._cancel.sleep`, which a cancellation cuts short.

    Raises :class:`~dsh_tools.DefinitionError` for an invalid setting.
    """

    def __init__(
        self,
        attempts: int = 3,
        backoff_ms: float = 100,
        max_backoff_ms: float = 2000,
        retry_codes: Iterable[str | ErrorCode] = ("TRANSIENT", "TOOL_TIMEOUT"),
        *,
        jitter: bool = False,
        rng: random.Random | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise DefinitionError(f"RetryPolicy attempts must be an integer >= 1, got {attempts!r}")
        self.attempts = attempts
        self.backoff_ms = _non_negative("backoff_ms", backoff_ms)
        self.max_backoff_ms = _non_negative("max_backoff_ms", max_backoff_ms)
        if isinstance(retry_codes, str):
            raise DefinitionError(
                f"RetryPolicy retry_codes must be a collection of codes, got {retry_codes!r}"
            )
        self.retry_codes = frozenset(
            code.value if isinstance(code, ErrorCode) else str(code) for code in retry_codes
        )
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._sleep = sleep

    def delay_ms(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the first retry), in ms."""
        delay = min(self.max_backoff_ms, self.backoff_ms * 2.0 ** (retry - 1))
        if self.jitter:
            delay = self._rng.uniform(delay / 2, delay)
        return delay

    def _retries(self, tool: ToolDefinition[Any] | None) -> bool:
        return self.attempts > 1 and tool is not None and tool.metadata.get("idempotent") is True

    def _retryable(self, result: ToolExecutionResult) -> bool:
        return result.is_error and result.error.info.code in self.retry_codes

    @hookimpl(wrapper=True, tryfirst=True)
    def dsh_tools_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> WrapperGenerator:
        dispatch = yield
        if not self._retries(tool):
            return dispatch

        async def retrying(signal: CancelSignal | None = None) -> ToolExecutionResult:
            signals = (execution.signal, signal)
            result = await dispatch(signal)
            for retry in range(1, self.attempts):
                if not self._retryable(result) or _any_cancelled(signals):
                    break
                if not await self._pause(self.delay_ms(retry) / 1000, signals):
                    break
                result = await dispatch(signal)
            return result

        return retrying

    async def _pause(self, seconds: float, signals: tuple[CancelSignal | None, ...]) -> bool:
        """Wait ``seconds``; False (at once) if a signal fires first or meanwhile."""
        if self._sleep is None:
            return await cancel.sleep(seconds, *signals)
        await self._sleep(seconds)
        return not _any_cancelled(signals)


def _any_cancelled(signals: tuple[CancelSignal | None, ...]) -> bool:
    return any(signal is not None and signal.cancelled for signal in signals)
