"""Cases 1-3: one tool call through the pipeline, against the peers and a bare call.

1. ``await registry.execute`` of an ``async def`` tool with two integer args, no plugins.
2. The same with five plugins across the stages plus one ``dsh_tools_execute`` wrapper.
3. A plain ``def`` tool through ``execute_sync``: against the peers' call of the same
   ``def`` tool (each runs it in a worker thread), and with four sync plugins plus a
   pass-through metrics wrapper or ``RetryPolicy`` against the plugin-free call (no event
   loop either way). A bare call of the function is printed for information.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import peers
from _harness import Row, Settings, compare_async, compare_sync, ratio_row, us

from dsh_tools import (
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools._cancel import NEVER_CANCELLED
from dsh_tools._context import ToolRunContext
from dsh_tools._json import NEG_SMALL_INT, SMALL_INT, FrozenDict, FrozenList
from dsh_tools._pipeline.results import success_result
from dsh_tools_plugins.retry import RetryPolicy

PARAMETERS: dict[str, Any] = {"a": {"type": "integer"}, "b": {"type": "integer"}}


async def _async_body(args: Any, ctx: object) -> int:
    return args["a"] + args["b"]  # type: ignore[no-any-return]


def _sync_body(args: Any, ctx: object) -> int:
    return args["a"] + args["b"]  # type: ignore[no-any-return]


class PreExecute:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: object) -> None:
        return None


class GuardHook:
    @hookimpl
    def dsh_tools_guard(self, execution: object) -> None:
        return None


class PostExecute:
    @hookimpl
    def dsh_tools_post_execute(self, execution: object, result: object) -> None:
        return None


class ResultObserver:
    def __init__(self) -> None:
        self.seen = 0

    @hookimpl
    def dsh_tools_result(self, execution: object, result: object) -> None:
        self.seen += 1


class RecordObserver:
    """A result observer that asks for each call's decision record (records enabled)."""

    def __init__(self) -> None:
        self.seen = 0

    @hookimpl
    def dsh_tools_result(self, execution: object, result: object, record: object) -> None:
        self.seen += 1


class SecondPreExecute:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: object) -> None:
        return None


class Passthrough:
    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: object) -> Any:
        return (yield)


class Metrics:
    """A pass-through wrapper that times the inner dispatch (what a metrics plugin does)."""

    def __init__(self) -> None:
        self.total = 0.0

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: object) -> Any:
        dispatch = yield

        async def timed(signal: Any = None) -> Any:
            started = time.perf_counter()
            try:
                return await dispatch(signal)
            finally:
                self.total += time.perf_counter() - started

        return timed


def registry(
    plugins: bool, body: Callable[..., Any] = _async_body, wrapper: object | None = None
) -> ToolRegistry:
    """The ``add`` tool; with ``plugins``, four plain plugins (pre-execute, guard,
    post-execute, result) and ``wrapper`` (default: a second pre-execute and a
    pass-through wrapper: case 2's five plugins and a wrapper)."""
    reg = ToolRegistry()
    reg.register(
        define_tool(
            name="add",
            description="Add two integers.",
            parameters=PARAMETERS,
            execute=body,
            metadata={"idempotent": True, "read_only": True},
        )
    )
    if plugins:
        for plugin in (PreExecute(), GuardHook(), PostExecute(), ResultObserver()):
            reg.add_plugin(plugin)
        if wrapper is None:
            reg.add_plugin(SecondPreExecute())
            reg.add_plugin(Passthrough())
        else:
            reg.add_plugin(wrapper)
    return reg


def observed(observer: object) -> ToolRegistry:
    """The ``add`` tool with one result observer (case 2's records row)."""
    reg = registry(plugins=False)
    reg.add_plugin(observer)
    return reg


def dsh_call(reg: ToolRegistry) -> Callable[[], Awaitable[object]]:
    execute = reg.execute
    args = peers.ARGS

    async def call() -> object:
        return await execute(ToolExecutionInput("c1", "add", json.loads(args)))

    return call


def _check(result: Any) -> None:
    if getattr(result, "is_error", False) or getattr(result, "value", None) != 3:
        raise AssertionError(f"benchmark tool call failed: {result!r}")


def run_async_cases(settings: Settings) -> list[Row]:
    import asyncio

    plain = registry(plugins=False)
    with_plugins = registry(plugins=True)
    _check(asyncio.run(plain.execute(ToolExecutionInput("c1", "add", json.loads(peers.ARGS)))))
    _check(
        asyncio.run(with_plugins.execute(ToolExecutionInput("c1", "add", json.loads(peers.ARGS))))
    )

    add = peers.add
    args = peers.ARGS

    async def bare() -> object:
        return await add(**json.loads(args))

    peer_calls, skipped = peers.installed_peers()
    candidates: dict[str, Callable[[], Awaitable[object]]] = {
        "bare await (json.loads + await)": bare,
        "dsh-tools execute": dsh_call(plain),
        "dsh-tools execute + 5 plugins + wrapper": dsh_call(with_plugins),
        "dsh-tools execute + 1 observer": dsh_call(observed(ResultObserver())),
        "dsh-tools execute + 1 record observer": dsh_call(observed(RecordObserver())),
        **peer_calls,
    }
    number = max(50, int(2000 * settings.scale))
    timings = compare_async(candidates, number, settings.repeat)

    base_name = "bare await (json.loads + await)"
    base = timings[base_name]
    rows = [Row("1", base_name, *us(base), note="baseline")]
    for name in peer_calls:
        rows.append(ratio_row("1", f"peer: {name}", timings[name], base_name, base))
    for name, reason in skipped.items():
        rows.append(Row("1", f"peer: {name}", unit="", note=f"skipped: {reason}"))
    plain_t = timings["dsh-tools execute"]
    plugins_t = timings["dsh-tools execute + 5 plugins + wrapper"]
    rows.append(ratio_row("1", "dsh-tools execute (vs bare)", plain_t, base_name, base))
    rows.append(
        ratio_row("2", "dsh-tools + 5 plugins + wrapper (vs bare)", plugins_t, base_name, base)
    )
    rows.append(
        ratio_row(
            "2",
            "records enabled (an observer naming record)",
            timings["dsh-tools execute + 1 record observer"],
            "the same with a no-op observer",
            timings["dsh-tools execute + 1 observer"],
            limit=1.5,
        )
    )
    if peer_calls:
        fastest = min(peer_calls, key=lambda name: timings[name].median)
        rows.append(
            ratio_row(
                "1",
                "dsh-tools execute",
                plain_t,
                f"fastest peer: {fastest}",
                timings[fastest],
                limit=0.5,
            )
        )
        rows.append(
            ratio_row(
                "2",
                "dsh-tools + 5 plugins + wrapper",
                plugins_t,
                f"fastest peer: {fastest}",
                timings[fastest],
                limit=1.0,
            )
        )
    else:
        rows.append(
            Row(
                "1", "dsh-tools execute vs fastest peer", unit="", note="skipped: no peer installed"
            )
        )
    return rows


def _floor(body: Callable[..., Any]) -> Callable[[ToolExecutionInput], object]:
    """The least any pipeline with these guarantees does for this call, written as one
    straight function with no routing, plan, error handling or other tool shapes: snapshot
    the flat arguments, check the two integers, make the run context, call the body, and
    freeze its value and text block into a success. Informational: it shows how much of
    execute_sync's cost is the guarantees themselves."""
    new_dict, fill, new_tuple = dict.__new__, dict.update, tuple.__new__

    def floor(call: ToolExecutionInput) -> object:
        arguments: Any = call.arguments
        for key, item in arguments.items():
            if (
                type(key) is not str
                or type(item) is not int
                or not NEG_SMALL_INT < item < SMALL_INT
            ):
                raise AssertionError("the floor only takes two small ints")
        frozen = new_dict(FrozenDict)
        fill(frozen, arguments)
        if type(frozen.get("a")) is not int or type(frozen.get("b")) is not int or len(frozen) != 2:
            raise AssertionError("invalid arguments")
        raw = body(frozen, ToolRunContext(call, NEVER_CANCELLED))  # type: ignore[arg-type]
        block = new_dict(FrozenDict)
        fill(block, {"type": "text", "text": int.__repr__(raw)})
        return success_result(raw, new_tuple(FrozenList, (block,)), None, (), False)

    return floor


def run_sync_case(settings: Settings) -> list[Row]:
    plain = registry(plugins=False, body=_sync_body)
    metrics = registry(plugins=True, body=_sync_body, wrapper=Metrics())
    retrying = registry(plugins=True, body=_sync_body, wrapper=RetryPolicy())
    args = peers.ARGS
    for reg in (plain, metrics, retrying):
        _check(reg.execute_sync(ToolExecutionInput("c1", "add", json.loads(args))))
    parsed = {"a": 1, "b": 2}
    ready = ToolExecutionInput("c1", "add", parsed)

    def from_text(reg: ToolRegistry) -> Callable[[], object]:
        execute_sync = reg.execute_sync
        return lambda: execute_sync(ToolExecutionInput("c1", "add", json.loads(args)))

    floor_call = _floor(_sync_body)
    _check(floor_call(ready))
    number = max(100, int(5000 * settings.scale))
    timings = compare_sync(
        {
            "bare call": lambda: _sync_body(parsed, None),
            "execute_sync": lambda: plain.execute_sync(ready),
            "+ 4 plugins + metrics wrapper": lambda: metrics.execute_sync(ready),
            "+ 4 plugins + RetryPolicy": lambda: retrying.execute_sync(ready),
            "floor": lambda: floor_call(ready),
            "execute_sync from text": from_text(plain),
        },
        number,
        settings.repeat,
    )
    # An event loop per call or a thread hop costs about a hundred times more: far fewer
    # rounds suffice.
    loop = compare_sync({"loop": lambda: anyio.run(plain.execute, ready)}, max(20, number // 50), 3)
    peer_calls, skipped = peers.installed_peers(peers.add_sync)
    peer_timings = compare_async(peer_calls, max(20, number // 50), settings.repeat)
    base = timings["execute_sync"]
    rows = [
        Row("3", "bare call fn(args, None)", *us(timings["bare call"]), note="baseline"),
        *(
            ratio_row("3", f"peer (def tool): {name}", peer_timings[name], "execute_sync", base)
            for name in peer_calls
        ),
        *(
            Row("3", f"peer: {name}", unit="", note=f"skipped: {why}")
            for name, why in skipped.items()
        ),
    ]
    if peer_calls:
        fastest = min(peer_calls, key=lambda name: peer_timings[name].median)
        against = f"fastest peer, def tool: {fastest}"
        rows.append(
            ratio_row("3", "dsh-tools execute_sync", base, against, peer_timings[fastest], 0.05)
        )
        rows.append(
            ratio_row(
                "3",
                "dsh-tools execute_sync + json.loads + input",
                timings["execute_sync from text"],
                against,
                peer_timings[fastest],
                note="what a host adds per call, for information",
            )
        )
    for name in ("+ 4 plugins + metrics wrapper", "+ 4 plugins + RetryPolicy"):
        rows.append(
            ratio_row("3", f"execute_sync {name}", timings[name], "execute_sync", base, limit=5)
        )
    bare = timings["bare call"]
    for label, timing in (
        ("dsh-tools execute_sync", base),
        ("floor: the guarantees alone, hand-inlined", timings["floor"]),
        ("an event loop per call (anyio.run(execute))", loop["loop"]),
    ):
        rows.append(ratio_row("3", label, timing, "bare call", bare))
    return rows
