"""RetryPolicy: idempotent tools, retryable codes, exponential backoff, cancellation."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from dsh_tools._cancel import CancelSource
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import DefinitionError, ErrorCode, ToolError
from dsh_tools_plugins.retry import RetryPolicy
from dsh_tools_plugins.timeouts import TimeoutPolicy


class Flaky:
    """A body that fails with ``code`` for its first ``failures`` calls."""

    def __init__(self, failures: int, code: str | ErrorCode = ErrorCode.TRANSIENT) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0

    def __call__(self, args: Any, ctx: ToolRunContext) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ToolError(f"blip {self.calls}", code=self.code)
        return f"ok after {self.calls}"


class Sleeps:
    """An injectable sleep that records the waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def setup(body: Any, *, idempotent: bool = True, **options: Any) -> tuple[ToolRegistry, Sleeps]:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="fetch",
            parameters={},
            execute=body,
            metadata={"idempotent": idempotent},
        )
    )
    sleeps = Sleeps()
    registry.add_plugin(RetryPolicy(sleep=sleeps, **options))
    return registry, sleeps


def run(registry: ToolRegistry, **options: Any) -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput("c1", "fetch", **options))


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


def test_transient_failures_of_an_idempotent_tool_are_retried_with_backoff() -> None:
    body = Flaky(2)
    registry, sleeps = setup(body, attempts=3, backoff_ms=100)

    result = run(registry)

    assert isinstance(result, ToolExecutionSuccess)
    assert result.value == "ok after 3"
    assert body.calls == 3
    assert sleeps.waits == [0.1, 0.2]


def test_backoff_doubles_up_to_the_cap() -> None:
    body = Flaky(10)
    registry, sleeps = setup(body, attempts=6, backoff_ms=100, max_backoff_ms=500)

    result = failure(run(registry))

    assert body.calls == 6
    assert sleeps.waits == [0.1, 0.2, 0.4, 0.5, 0.5]
    # No invented result: the caller gets the last attempt's failure.
    assert result.code == "TRANSIENT"
    assert result.error.message == "blip 6"


def test_jitter_is_deterministic_with_a_seeded_rng() -> None:
    registry, sleeps = setup(Flaky(10), attempts=4, jitter=True, rng=random.Random(7))
    run(registry)
    expected_rng = random.Random(7)
    expected = [expected_rng.uniform(d / 2, d) / 1000 for d in (100, 200, 400)]
    assert sleeps.waits == pytest.approx(expected)
    assert all(0.05 <= wait <= 0.4 for wait in sleeps.waits)


def test_a_tool_that_is_not_idempotent_runs_once() -> None:
    body = Flaky(1)
    registry, sleeps = setup(body, idempotent=False)

    assert failure(run(registry)).code == "TRANSIENT"
    assert body.calls == 1
    assert sleeps.waits == []


@pytest.mark.parametrize("code", [ErrorCode.TOOL_ERROR, "ENOSPC"])
def test_only_retryable_codes_are_retried(code: str | ErrorCode) -> None:
    body = Flaky(1, code)
    registry, _ = setup(body)

    result = failure(run(registry))

    assert body.calls == 1
    assert result.error.message == "blip 1"


def test_retry_codes_are_configurable() -> None:
    body = Flaky(1, "ENOSPC")
    registry, _ = setup(body, retry_codes=["ENOSPC"])
    assert isinstance(run(registry), ToolExecutionSuccess)
    assert body.calls == 2


def test_invalid_arguments_are_not_retried() -> None:
    calls: list[int] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="fetch",
            parameters={"url": {"type": "string", "required": True}},
            execute=lambda args, ctx: calls.append(1),
            metadata={"idempotent": True},
        )
    )
    registry.add_plugin(RetryPolicy(backoff_ms=0, retry_codes=["INVALID_ARGS", "TRANSIENT"]))
    # INVALID_ARGS was made retryable on purpose: it fails again each time, no body runs.
    result = failure(registry.execute_sync(ToolExecutionInput("c1", "fetch", {"url": 1})))
    assert result.code == "INVALID_ARGS"
    assert calls == []


@pytest.mark.anyio
async def test_timeouts_are_retried_per_attempt() -> None:
    attempts: list[int] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await anyio.sleep(5)
        return "second time lucky"

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="fetch",
            parameters={},
            execute=body,
            metadata={"idempotent": True},
        )
    )
    # Registration order does not matter: the retry wrapper is tryfirst (outermost).
    registry.add_plugin(RetryPolicy(backoff_ms=1))
    registry.add_plugin(TimeoutPolicy(default_ms=30))

    result = await registry.execute(ToolExecutionInput("c1", "fetch"))

    assert isinstance(result, ToolExecutionSuccess), result
    assert len(attempts) == 2


@pytest.mark.anyio
async def test_cancellation_during_backoff_stops_at_once() -> None:
    source = CancelSource()
    body = Flaky(10)
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="fetch",
            parameters={},
            execute=body,
            metadata={"idempotent": True},
        )
    )
    registry.add_plugin(RetryPolicy(attempts=5, backoff_ms=10_000))

    async def cancel_soon() -> None:
        await anyio.sleep(0.03)
        source.cancel("stop")

    with anyio.fail_after(3):  # would take 70 s of backoff without the cancellation
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_soon)
            result = await registry.execute(ToolExecutionInput("c1", "fetch", signal=source.signal))

    assert body.calls == 1
    assert failure(result).error.message == "blip 1"  # the last inner result, not invented


def test_a_cancelled_caller_gets_no_retry() -> None:
    source = CancelSource()

    def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel()
        raise ToolError("blip", code=ErrorCode.TRANSIENT)

    registry, sleeps = setup(body)

    result = failure(run(registry, signal=source.signal))

    assert result.code == "TRANSIENT"
    assert sleeps.waits == []


def test_settings_are_validated() -> None:
    with pytest.raises(DefinitionError, match="attempts"):
        RetryPolicy(0)
    with pytest.raises(DefinitionError, match="backoff_ms"):
        RetryPolicy(backoff_ms=-1)
    with pytest.raises(DefinitionError, match="retry_codes"):
        RetryPolicy(retry_codes="TRANSIENT")
