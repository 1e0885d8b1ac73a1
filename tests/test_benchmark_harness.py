"""The benchmark harness's judgement of a ratio (benchmarks/_harness.py): a row measured
while the machine was busy says so beside its ratio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def ratio_row(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delitem(sys.modules, "_harness", raising=False)
    import _harness

    return _harness.ratio_row


def test_a_quiet_row_has_only_its_own_note(ratio_row: Any) -> None:
    row = ratio_row("14", "ours", (150e-6, 145e-6), "theirs", (190e-6, 183e-6), 0.8, "kept")
    assert (round(row.ratio, 3), row.met, row.note) == (0.789, True, "kept")


def test_a_row_whose_samples_were_disturbed_says_so(ratio_row: Any) -> None:
    row = ratio_row("14", "ours", (235e-6, 153e-6), "theirs", (247e-6, 193e-6), 0.8)
    assert row.met is False
    assert row.note == "noisy: medians 1.54x and 1.28x their minimums"
