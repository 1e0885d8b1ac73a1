"""The benchmark harness's judgement of a ratio (benchmarks/_harness.py): two candidates
of one comparison are judged by their per-repeat ratios, and a row measured while the
machine was busy says so beside its ratio."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delitem(sys.modules, "_harness", raising=False)
    import _harness

    return _harness


def test_a_quiet_row_has_only_its_own_note(harness: ModuleType) -> None:
    ours, theirs = harness.Timing(150e-6, 145e-6), harness.Timing(190e-6, 183e-6)
    row = harness.ratio_row("14", "ours", ours, "theirs", theirs, 0.8, "kept")
    assert (round(row.ratio, 3), row.met, row.note) == (0.789, True, "kept")


def test_a_row_whose_samples_were_disturbed_says_so(harness: ModuleType) -> None:
    ours, theirs = harness.Timing(235e-6, 153e-6), harness.Timing(247e-6, 193e-6)
    row = harness.ratio_row("14", "ours", ours, "theirs", theirs, 0.8)
    assert row.met is False
    assert row.note == "noisy: medians 1.54x and 1.28x their minimums"


def test_candidates_of_one_comparison_are_judged_repeat_by_repeat(harness: ModuleType) -> None:
    """The machine ran at half speed for both in the last two repeats, and a burst slowed
    only ours in the third: each repeat but that one says 0.8x, the medians 1.6x."""
    ours = [80e-6, 80e-6, 160e-6, 160e-6, 160e-6]
    theirs = [100e-6, 100e-6, 100e-6, 200e-6, 200e-6]
    timings = harness.compare_sync({"ours": lambda: None, "theirs": lambda: None}, 5, 5)
    comparison = timings["ours"].comparison  # one comparison, with the samples above
    assert comparison is timings["theirs"].comparison
    mine = harness.Timing(160e-6, 80e-6, tuple(ours), comparison)
    baseline = harness.Timing(100e-6, 100e-6, tuple(theirs), comparison)
    assert harness.ratio_of(mine, baseline) == pytest.approx(0.8)
    apart = harness.Timing(160e-6, 80e-6, tuple(ours), object())
    assert harness.ratio_of(apart, baseline) == pytest.approx(1.6)  # two comparisons: medians


def test_a_timing_per_operation_keeps_its_ratio(harness: ModuleType) -> None:
    timings = harness.compare_sync({"a": lambda: sum(range(50)), "b": lambda: None}, 20, 3)
    a, b = timings["a"], timings["b"]
    assert harness.ratio_of(a.per(20), b.per(20)) == pytest.approx(harness.ratio_of(a, b))
    assert a.per(20).median == pytest.approx(a.median / 20)
