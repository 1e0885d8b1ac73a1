"""Case 7: what the bubblewrap sandbox adds to a command's wall time.

``run_command`` with ``argv=["true"]`` through ``execute_sync``, once without the sandbox
and once with it (``sandbox="required"``: namespaces, mounts, the per-call pids cgroup and
rlimits, and the teardown), interleaved in the same run, plus a bare ``subprocess.run``
of the same program for scale. The target is on the difference: the sandbox may add at
most 30 ms, so that nobody wants to turn it off for speed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

from _harness import Row, Settings, Timing, compare_sync, ratio_of

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools_plugins.command import run_command_tool
from dsh_tools_plugins.sandbox import Sandbox, SandboxMode
from dsh_tools_plugins.workspace import Workspace

TARGET_MS = 30.0
_NOBODY = 65534


def _caller(root: str, mode: SandboxMode) -> Callable[[], object]:
    registry = ToolRegistry()
    registry.register(run_command_tool(Workspace(root), sandbox=mode))
    call = ToolExecutionInput("bench", "run_command", {"argv": ["true"]})

    def run() -> object:
        result = registry.execute_sync(call)
        if result.is_error or result.value["exit_code"] != 0:
            raise AssertionError(f"run_command failed: {result.text}")
        return result

    return run


def run(settings: Settings) -> list[Row]:
    state = Sandbox("auto").state()
    if not state.sandboxed:
        return [Row("7", "sandbox start cost", unit="", note=f"skipped: {state.reason}")]
    with tempfile.TemporaryDirectory(prefix="dsh-bench-sandbox-") as root:
        if os.geteuid() == 0:  # a root host runs commands as the workspace's owner
            os.chown(root, _NOBODY, _NOBODY)
        candidates = {
            "bare subprocess.run": lambda: subprocess.run(["true"], check=True),
            "run_command, sandbox off": _caller(root, "off"),
            "run_command, sandboxed": _caller(root, "required"),
        }
        number = max(3, int(8 * settings.scale))
        timings = compare_sync(candidates, number, settings.repeat)
    bare, plain, boxed = (timings[name] for name in candidates)
    added = (boxed.median - plain.median) * 1000
    return [
        _row("bare subprocess.run(['true'])", bare),
        _row("run_command true, sandbox off", plain, "bare subprocess.run", bare),
        _row(
            "run_command true, sandboxed",
            boxed,
            "sandbox off",
            plain,
            target=f"<= +{TARGET_MS:g} ms",
            met=added <= TARGET_MS,
            note=f"adds {added:.1f} ms",
        ),
    ]


def _row(
    name: str,
    timing: Timing,
    baseline: str | None = None,
    against: Timing | None = None,
    **judged: Any,
) -> Row:
    """A row in milliseconds, with its ratio to ``against`` when there is one."""
    ratio = None if against is None else ratio_of(timing, against)
    return Row(
        "7", name, timing.median * 1000, timing.minimum * 1000, "ms", baseline, ratio, **judged
    )
