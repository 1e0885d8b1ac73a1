"""Case 10: what a progress report costs.

* With nobody listening: a ``def`` tool that reports ``REPORTS`` times per call against the
  same tool reporting nothing, both through the plugin-free ``execute_sync``; the extra
  time divided by ``REPORTS`` is one report, judged against the whole call: <= 0.05x.
* With the MCP bridge listening: an in-process MCP client calls a tool that reports
  ``REPORTS`` times, with a progress callback (so the server relays the reports as
  notifications), against the same call of a tool that reports nothing; one run, the
  calls interleaved. The ratio is for information, with the per-report cost beside it.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from typing import Any

from _harness import Row, Settings, compare_sync, us

from dsh_tools import ToolExecutionInput, ToolRegistry, ToolRunContext, define_tool

REPORTS = 100


def _quiet(args: Any, ctx: ToolRunContext) -> int:
    return 1


def _reporting(args: Any, ctx: ToolRunContext) -> int:
    for done in range(REPORTS):
        ctx.report_progress(done, REPORTS)
    return 1


def _registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(define_tool(name="quiet", description="q", parameters={}, execute=_quiet))
    reg.register(define_tool(name="reporting", description="r", parameters={}, execute=_reporting))
    return reg


def _no_listener(settings: Settings) -> list[Row]:
    reg = _registry()
    quiet, reporting = ToolExecutionInput("c1", "quiet"), ToolExecutionInput("c2", "reporting")
    number = max(100, int(3000 * settings.scale))
    timings = compare_sync(
        {
            "quiet": lambda: reg.execute_sync(quiet),
            "reporting": lambda: reg.execute_sync(reporting),
        },
        number,
        settings.repeat,
    )
    call = timings["quiet"].median
    per_report = max(0.0, timings["reporting"].median - call) / REPORTS
    ratio = per_report / call
    return [
        Row("10", "plugin-free execute_sync, no reports", *us(timings["quiet"])),
        Row(
            "10",
            "one report, no listener",
            per_report * 1e6,
            unit="us",
            baseline="plugin-free execute_sync",
            ratio=ratio,
            target="<= 0.05x",
            met=ratio <= 0.05,
            note=f"({REPORTS} reports per call, minus the call)",
        ),
    ]


async def _mcp_timings(number: int, repeat: int) -> dict[str, list[float]]:
    from mcp import Client

    from dsh_tools.bridges.mcp import build_mcp_server

    async def progress(value: float, total: float | None, message: str | None) -> None:
        return None

    samples: dict[str, list[float]] = {"quiet": [], "reporting": []}
    async with Client(build_mcp_server(_registry())) as client:
        for name in samples:  # warm up
            for _ in range(20):
                await client.call_tool(name, {}, progress_callback=progress)
        for _ in range(repeat):
            for name, kept in samples.items():
                gc.collect()
                gc.disable()
                try:
                    started = time.perf_counter()
                    for _ in range(number):
                        await client.call_tool(name, {}, progress_callback=progress)
                    kept.append((time.perf_counter() - started) / number)
                finally:
                    gc.enable()
    return samples


def _mcp_listening(settings: Settings) -> list[Row]:
    try:
        import mcp  # noqa: F401
    except ImportError:
        return [Row("10", "MCP bridge listening", unit="", note="skipped: needs the mcp extra")]
    number = max(20, int(300 * settings.scale))
    samples = asyncio.run(_mcp_timings(number, settings.repeat))
    quiet = statistics.median(samples["quiet"])
    reporting = statistics.median(samples["reporting"])
    return [
        Row("10", "MCP call_tool, no reports", quiet * 1e6, min(samples["quiet"]) * 1e6),
        Row(
            "10",
            f"MCP call_tool, {REPORTS} reports, client listening",
            reporting * 1e6,
            min(samples["reporting"]) * 1e6,
            baseline="MCP call_tool, no reports",
            ratio=reporting / quiet,
            note=f"{max(0.0, reporting - quiet) / REPORTS * 1e6:.2f} us per report",
        ),
    ]


def run(settings: Settings) -> list[Row]:
    return _no_listener(settings) + _mcp_listening(settings)
