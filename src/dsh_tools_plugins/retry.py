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
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from dsh_tools.cancel import CancelSignal
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl
from dsh_tools.models import ToolExecution, ToolExecutionResult

if TYPE_CHECKING:
    from dsh_tools.registry import ToolRegistry, ToolScope

__all__ = ["RetryPolicy"]

Sleep = Callable[[float], Awaitable[object]]
"""An awaitable sleep taking seconds, like :func:`anyio.sleep` (the default)."""


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
    :param registry: the registry (or scope) the policy is added to; required, because
        only the tool's definition can say it is idempotent.
    :param jitter: wait a random time in ``[delay / 2, delay]`` instead of ``delay``.
    :param rng: the random source for jitter (pass a seeded ``random.Random`` in tests).
    :param sleep: the awaitable sleep taking seconds (default :func:`anyio.sleep`).

    Raises :class:`~dsh_tools.DefinitionError` for an invalid setting.
    """

    def __init__(
        self,
        attempts: int = 3,
        backoff_ms: float = 100,
        max_backoff_ms: float = 2000,
        retry_codes: Iterable[str | ErrorCode] = ("TRANSIENT", "TOOL_TIMEOUT"),
        *,
        registry: ToolRegistry | ToolScope,
        jitter: bool = False,
        rng: random.Random | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise DefinitionError(f"RetryPolicy attempts must be an integer >= 1, got {attempts!r}")
        if not hasattr(registry, "get") or not hasattr(registry, "scope"):
            raise DefinitionError(
                f"RetryPolicy registry must be a ToolRegistry or ToolScope, got {registry!r}"
            )
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
        self._sleep: Sleep = sleep or anyio.sleep
        self._registry = registry

    def delay_ms(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the first retry), in ms."""
        delay = min(self.max_backoff_ms, self.backoff_ms * 2.0 ** (retry - 1))
        if self.jitter:
            delay = self._rng.uniform(delay / 2, delay)
        return delay

    def _retries(self, execution: ToolExecution) -> bool:
        if self.attempts < 2:
            return False
        definition = self._registry.definition_for(execution.name, execution.agent)
        return definition is not None and definition.metadata.get("idempotent") is True

    def _retryable(self, result: ToolExecutionResult) -> bool:
        return result.is_error and result.error.info.code in self.retry_codes

    @hookimpl(wrapper=True, tryfirst=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> WrapperGenerator:
        dispatch = yield
        if not self._retries(execution):
            return dispatch

        async def retrying(signal: CancelSignal | None = None) -> ToolExecutionResult:
            signals = tuple(s for s in (execution.signal, signal) if s is not None)
            result = await dispatch(signal)
            for retry in range(1, self.attempts):
                if not self._retryable(result) or _any_cancelled(signals):
                    break
                if not await self._pause(self.delay_ms(retry) / 1000, signals):
                    break
                result = await dispatch(signal)
            return result

        return retrying

    async def _pause(self, seconds: float, signals: tuple[CancelSignal, ...]) -> bool:
        """Sleep ``seconds``; False (at once) if a signal fires first or meanwhile."""
        if not signals:
            await self._sleep(seconds)
            return True
        async with anyio.create_task_group() as group:

            async def stop_on(signal: CancelSignal) -> None:
                await signal.wait()
                group.cancel_scope.cancel()

            for signal in signals:
                group.start_soon(stop_on, signal)
            await self._sleep(seconds)
            group.cancel_scope.cancel()
        return not _any_cancelled(signals)


def _any_cancelled(signals: tuple[CancelSignal, ...]) -> bool:
    return any(signal.cancelled for signal in signals)
