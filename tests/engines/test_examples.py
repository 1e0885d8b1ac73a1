"""The agent examples on each engine run as a person would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example", ["temporal_agent.py", "dbos_agent.py"])
def test_the_agent_example_runs_its_calls_and_the_approved_one_once(
    example: str, tmp_path: Path
) -> None:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
    )

    assert done.returncode == 0, done.stderr
    # The example's own lines: Temporal's dev server is a process of its own writing its
    # banner (three "Temporal ..." lines and a blank one) to the same stdout, before or
    # after them; the example prints no blank line.
    shown = [
        line
        for line in done.stdout.splitlines()
        if line.strip() and not line.startswith("Temporal ")
    ]
    asked = [line for line in shown if line.startswith("pending: dsh-tools --approvals-store ")]
    assert len(asked) == 1
    assert shown[-3:] == [
        "task: keep notes",
        "write_note: noted",
        "read_notes: ship the release on Friday",
    ]
