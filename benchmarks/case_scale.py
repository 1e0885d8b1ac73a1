"""Case 6: cost per tool as the registry grows, and memory per in-flight call.

* ``schemas()`` (per tool listed) and ``get()`` (per lookup) through a scope nested three
  deep (``a/b/c``), with 10, 1 000 and 10 000 tools spread over the global layer and the
  scopes; both warm (plan cached) and cold (first call after a registration, which
  rebuilds the plan). Flat means the 10 000-tool figure stays within 2x of the 10-tool one.
* 10 000 concurrent ``execute`` calls in one event loop, every body parked on an event:
  traced memory while all are in flight, per call (tracemalloc), against the same number
  of bare tasks awaiting the same body.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import attrs
from _harness import Row, Settings, Timing, compare_sync, ratio_of, us

from dsh_tools import ToolExecutionInput, ToolRegistry, ToolScope, define_tool

SIZES = (10, 1_000, 10_000)
IN_FLIGHT = 10_000


def _echo(args: Any, ctx: object) -> object:
    return args["x"]


def build(size: int) -> tuple[ToolRegistry, ToolScope, list[str]]:
    """``size`` tools: half global, the rest split over scopes a, a/b and a/b/c."""
    template = define_tool(
        name="tool_0",
        description="Echo x.",
        parameters={"x": {"type": "integer", "description": "a number"}},
        execute=_echo,
    )
    registry = ToolRegistry()
    a = registry.scope("a")
    b = a.scope("b")
    c = b.scope("c")
    layers = [registry, registry, a, b, c, registry, a, b]
    names = []
    for index in range(size):
        name = f"tool_{index}"
        layers[index % len(layers)].register(attrs.evolve(template, name=name))
        names.append(name)
    return registry, c, names


LOOKUPS = 200


def _getter(scope: ToolScope, names: list[str]) -> Callable[[], object]:
    """:data:`LOOKUPS` ``get()`` calls spread over the registry's names."""
    picks = (names * (LOOKUPS // len(names) + 1))[:: max(1, len(names) // LOOKUPS)][:LOOKUPS]
    get = scope.get

    def lookups() -> object:
        for name in picks:
            get(name)
        return None

    return lookups


def _per_tool(
    scopes: dict[int, tuple[ToolRegistry, ToolScope, list[str]]], settings: Settings
) -> list[Row]:
    probe = define_tool(name="probe", description="Probe.", parameters={}, execute=_echo)
    groups: dict[str, tuple[str, dict[int, Callable[[], object]]]] = {
        "schemas() warm": ("per tool", {}),
        "schemas() cold": ("per tool", {}),
        "get() warm": ("per lookup", {}),
    }
    for size, (registry, scope, names) in scopes.items():
        groups["schemas() warm"][1][size] = scope.schemas
        groups["get() warm"][1][size] = _getter(scope, names)

        def cold(registry: ToolRegistry = registry, scope: ToolScope = scope) -> object:
            registry.register(probe)()  # register + dispose: invalidates the cached plans
            return scope.schemas()

        groups["schemas() cold"][1][size] = cold
    rows: list[Row] = []
    for kind, (per, fns) in groups.items():
        timings: dict[int, Timing] = {}
        for size, fn in fns.items():
            divisor = size if per == "per tool" else LOOKUPS
            work = size if per == "per tool" else LOOKUPS
            budget = 2_000_000 if "warm" in kind else 100_000
            number = max(3, int(budget // work * settings.scale))
            timings[size] = compare_sync({kind: fn}, number, settings.repeat)[kind].per(divisor)
        small = timings[SIZES[0]]
        for size, timing in timings.items():
            row = Row(
                "6",
                f"{kind}, {size} tools ({per})",
                *us(timing),
                baseline=f"{SIZES[0]} tools",
                ratio=ratio_of(timing, small),
            )
            if size == SIZES[-1]:
                row.target = "<= 2x"
                row.met = row.ratio <= 2
            rows.append(row)
    return rows


async def _in_flight(registry: ToolRegistry | None, gate: asyncio.Event, count: int) -> int:
    """Start ``count`` calls, wait until all are parked, return traced bytes in flight."""
    started = 0
    args = json.dumps({"x": 1})

    async def body(arguments: Any, ctx: object) -> object:
        nonlocal started
        started += 1
        await gate.wait()
        return 1

    async def bare() -> object:
        nonlocal started
        started += 1
        await gate.wait()
        return 1

    if registry is not None:
        registry.register(
            define_tool(
                name="park",
                description="Park.",
                parameters={"x": {"type": "integer"}},
                execute=body,
            )
        )
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    if registry is not None:
        tasks = [
            asyncio.ensure_future(
                registry.execute(ToolExecutionInput(f"c{i}", "park", json.loads(args)))
            )
            for i in range(count)
        ]
    else:
        tasks = [asyncio.ensure_future(bare()) for _ in range(count)]
    while started < count:
        await asyncio.sleep(0)
    during = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gate.set()
    results = await asyncio.gather(*tasks)
    if registry is not None and any(getattr(r, "is_error", True) for r in results):
        raise AssertionError("a parked benchmark call failed")
    return during - before


def _memory(settings: Settings) -> list[Row]:
    count = IN_FLIGHT
    runs = 1 if settings.quick else 3
    bare_samples = []
    dsh_samples = []
    elapsed = []
    for _ in range(runs):
        bare_samples.append(asyncio.run(_in_flight(None, asyncio.Event(), count)) / count)
        start = time.perf_counter()
        dsh_samples.append(asyncio.run(_in_flight(ToolRegistry(), asyncio.Event(), count)) / count)
        elapsed.append(time.perf_counter() - start)
    bare = sorted(bare_samples)[len(bare_samples) // 2] / 1024
    dsh = sorted(dsh_samples)[len(dsh_samples) // 2] / 1024
    return [
        Row(
            "6",
            f"{count} bare tasks in flight (per task)",
            bare,
            min(bare_samples) / 1024,
            "KB",
            note="baseline",
        ),
        Row(
            "6",
            f"{count} concurrent execute (per in-flight call)",
            dsh,
            min(dsh_samples) / 1024,
            "KB",
            baseline="bare task",
            ratio=dsh / bare,
            target="< 10 KB",
            met=dsh < 10,
            note=f"all {count} started+finished in {min(elapsed):.2f} s (traced)",
        ),
    ]


def run(settings: Settings) -> list[Row]:
    scopes = {size: build(size) for size in SIZES}
    rows = _per_tool(scopes, settings)
    rows += _memory(settings)
    return rows
