"""Timing helpers and the result row shared by every benchmark case.

Machines here are noisy (absolute times drift 2x between runs), so every comparison is
measured *interleaved in the same run*: each repeat times every candidate once, in turn,
and a figure is only ever judged as a ratio to a baseline measured alongside it. A fast
candidate makes more calls per sample (see :func:`_matched_counts`), so that all samples
last about as long and a burst of noise is as likely to land in any of them. A ratio of
two candidates of one comparison is the median of their per-repeat ratios (see
:func:`ratio_of`).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple


class Timing(NamedTuple):
    """Seconds per operation: the median and minimum of a candidate's samples, the
    samples in the order their repeats ran, and the comparison that measured them."""

    median: float
    minimum: float
    samples: tuple[float, ...] = ()
    comparison: object = None

    def per(self, operations: float) -> Timing:
        """The same timing for one of ``operations`` operations."""
        return Timing(
            self.median / operations,
            self.minimum / operations,
            tuple(sample / operations for sample in self.samples),
            self.comparison,
        )


class Skip(Exception):
    """A candidate that cannot run here (a peer that is not installed, for example)."""


@dataclass
class Settings:
    quick: bool
    repeat: int
    scale: float  # multiplies the per-batch operation counts


@dataclass
class Row:
    """One line of the report. ``median``/``minimum`` are in ``unit``."""

    case: str
    name: str
    median: float | None = None
    minimum: float | None = None
    unit: str = "us"
    baseline: str | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def us(timing: Timing) -> tuple[float, float]:
    return timing.median * 1e6, timing.minimum * 1e6


def _summaries(samples: Mapping[str, list[float]]) -> dict[str, Timing]:
    """The timings of one comparison's candidates, each marked as measured in it."""
    comparison = object()
    return {
        name: Timing(statistics.median(values), min(values), tuple(values), comparison)
        for name, values in samples.items()
    }


def ratio_of(timing: Timing, baseline: Timing) -> float:
    """``timing`` as a multiple of ``baseline``.

    For two candidates of one comparison: the median of their per-repeat ratios. Each
    repeat timed both within moments of each other, so a slowdown of the whole machine
    that lasted a few batches (another tenant's work) slows both and cancels, where a
    ratio of medians takes each median from whichever repeats it happened to fall in.
    Timings of different comparisons: the ratio of their medians."""
    if timing.comparison is None or timing.comparison is not baseline.comparison:
        return timing.median / baseline.median
    return statistics.median(
        mine / theirs for mine, theirs in zip(timing.samples, baseline.samples, strict=True)
    )


_MAX_STRETCH = 50
"""At most this many times ``number`` calls per sample for a fast candidate."""


def _matched_counts(per_call: Mapping[str, float], number: int) -> dict[str, int]:
    """Calls per sample for each candidate: ``number`` for the median-speed one and
    anything slower, proportionally more (up to :data:`_MAX_STRETCH` times) for faster
    ones. A bare call's 5 000 calls take 0.4 ms against a pipeline call's 13 ms, so
    without this a burst of noise would mostly land in the slower sample."""
    reference = statistics.median(per_call.values())
    return {
        name: number * max(1, min(_MAX_STRETCH, round(reference / max(seconds, 1e-9))))
        for name, seconds in per_call.items()
    }


def compare_sync(
    candidates: Mapping[str, Callable[[], object]], number: int, repeat: int
) -> dict[str, Timing]:
    """Per-call (median, min) of each zero-argument callable, interleaved per repeat."""
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    warm = min(number, 200)

    def batch(fn: Callable[[], object], count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return time.perf_counter() - start

    for fn in candidates.values():  # warm up caches, plans, specializations
        batch(fn, warm)
    per_call = {name: batch(fn, warm) / warm for name, fn in candidates.items()}
    counts = _matched_counts(per_call, number)
    for _ in range(repeat):
        for name, fn in candidates.items():
            gc.collect()
            gc.disable()
            try:
                elapsed = batch(fn, counts[name])
            finally:
                gc.enable()
            samples[name].append(elapsed / counts[name])
    return _summaries(samples)


def compare_async(
    candidates: Mapping[str, Callable[[], Awaitable[object]]], number: int, repeat: int
) -> dict[str, Timing]:
    """Like :func:`compare_sync` for coroutine functions, all in one event loop."""
    return asyncio.run(compare_on_loop(candidates, number, repeat))


async def compare_on_loop(
    candidates: Mapping[str, Callable[[], Awaitable[object]]], number: int, repeat: int
) -> dict[str, Timing]:
    """:func:`compare_async` on the running loop (for candidates that need it set up:
    clients connected, servers started)."""

    async def batch(fn: Callable[[], Awaitable[object]], count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            await fn()
        return time.perf_counter() - start

    samples: dict[str, list[float]] = {name: [] for name in candidates}
    warm = min(number, 200)
    for fn in candidates.values():
        await batch(fn, warm)
    per_call = {name: await batch(fn, warm) / warm for name, fn in candidates.items()}
    counts = _matched_counts(per_call, number)
    for _ in range(repeat):
        for name, fn in candidates.items():
            gc.collect()
            gc.disable()
            try:
                elapsed = await batch(fn, counts[name])
            finally:
                gc.enable()
            samples[name].append(elapsed / counts[name])
    return _summaries(samples)


NOISY_SPREAD = 1.25
"""A median this many times its minimum says the samples were disturbed (a quiet run of
the MCP round trip keeps both within about 1.1x)."""


def ratio_row(
    case: str,
    name: str,
    timing: Timing,
    baseline_name: str,
    baseline: Timing,
    limit: float | None = None,
    note: str = "",
) -> Row:
    """A timing row judged against ``baseline`` (:func:`ratio_of`; ``limit`` is the target).

    When either median lies more than :data:`NOISY_SPREAD` times above its minimum, the
    note says so: the machine was busy while it ran, and the ratio says little."""
    median, minimum = us(timing)
    ratio = ratio_of(timing, baseline)
    spreads = (timing.median / timing.minimum, baseline.median / baseline.minimum)
    if max(spreads) > NOISY_SPREAD:
        noisy = "noisy: medians {:.2f}x and {:.2f}x their minimums".format(*spreads)
        note = f"{note}; {noisy}" if note else noisy
    return Row(
        case=case,
        name=name,
        median=median,
        minimum=minimum,
        baseline=baseline_name,
        ratio=ratio,
        target=None if limit is None else f"<= {limit:g}x",
        met=None if limit is None else ratio <= limit,
        note=note,
    )
