"""Case 5: import cost and plugin-loading startup, each in a fresh subprocess.

* ``import dsh_tools`` and its first real use (``ToolRegistry`` + ``define_tool``): wall
  time measured inside the child around the import, and the peak RSS it added
  (``ru_maxrss`` after minus before); median of several children.
* 50 plugin distributions: ``.dist-info`` directories with ``dsh_tools.tools`` /
  ``guards`` / ``plugins`` entry points and their modules, generated into a temporary
  directory put on ``sys.path``; the child times ``ToolRegistry()`` + ``load_plugins``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import Row, Settings

# Peak RSS comes from /proc/self/status VmHWM (reset by exec), not ru_maxrss: Linux keeps
# ru_maxrss across fork+exec, so a child would report the benchmark parent's peak.
_IMPORT_PROBE = """
import time


def peak_kb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


before = peak_kb()
start = time.perf_counter()
{code}
elapsed = time.perf_counter() - start
after = peak_kb()
import json
print(json.dumps({{"seconds": elapsed, "rss_added_kb": after - before, "rss_kb": after}}))
"""

_LOAD_PROBE = """
import sys
sys.path.insert(0, {path!r})
from dsh_tools import ToolRegistry, load_plugins, define_tool, hookimpl
import time
start = time.perf_counter()
registry = ToolRegistry()
report = load_plugins(registry)
elapsed = time.perf_counter() - start
import json
print(json.dumps({{"seconds": elapsed, "loaded": len(report.loaded),
                   "failed": [f.message for f in report.failed],
                   "tools": len(registry.names())}}))
"""

_PLUGIN_MODULE = """\
from dsh_tools import define_tool, hookimpl


def _echo(args, ctx):
    return args["x"]


TOOLS = [
    define_tool(
        name="tool_{i}",
        description="Echo x (plugin {i}).",
        parameters={{"x": {{"type": "integer", "description": "a number"}}}},
        execute=_echo,
    )
]


def guard(execution):
    return None


class Plugin:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return None

    @hookimpl
    def dsh_tools_result(self, execution, result):
        return None
"""

_ENTRY_POINTS = """\
[dsh_tools.tools]
tools_{i} = bench_plugin_{i}:TOOLS

[dsh_tools.guards]
guard_{i} = bench_plugin_{i}:guard

[dsh_tools.plugins]
plugin_{i} = bench_plugin_{i}:Plugin
"""

PLUGIN_COUNT = 50

IMPORTS = {
    "import dsh_tools": "import dsh_tools",
    "import + first use (ToolRegistry, define_tool)": (
        "import dsh_tools\nfrom dsh_tools import ToolRegistry, define_tool\nToolRegistry()"
    ),
}

PEER_IMPORTS = {
    "peer import: openai-agents": "import agents",
    "peer import: pydantic-ai": "import pydantic_ai",
    "peer import: mcp server": "import mcp.server.mcpserver",
    "peer import: langchain-core tools": "import langchain_core.tools",
}


def _child(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _imports(label: str, code: str, runs: int, limit: bool) -> list[Row]:
    try:
        _child(_IMPORT_PROBE.format(code=code))  # warm the bytecode caches
        samples = [_child(_IMPORT_PROBE.format(code=code)) for _ in range(runs)]
    except RuntimeError as error:
        return [Row("5", label, unit="", note=f"skipped: {error}")]
    ms = [float(s["seconds"]) * 1000 for s in samples]  # type: ignore[arg-type]
    mb = [float(s["rss_added_kb"]) / 1024 for s in samples]  # type: ignore[arg-type]
    total = statistics.median(float(s["rss_kb"]) / 1024 for s in samples)  # type: ignore[arg-type]
    med_ms, med_mb = statistics.median(ms), statistics.median(mb)
    return [
        Row(
            "5",
            f"{label}: wall",
            med_ms,
            min(ms),
            "ms",
            target="<= 150 ms" if limit else None,
            met=med_ms <= 150 if limit else None,
        ),
        Row(
            "5",
            f"{label}: peak RSS added",
            med_mb,
            min(mb),
            "MB",
            target="<= 20 MB" if limit else None,
            met=med_mb <= 20 if limit else None,
            note=f"process peak {total:.1f} MB",
        ),
    ]


def make_plugin_dists(root: Path, count: int = PLUGIN_COUNT) -> None:
    """``count`` distributions, each with a tool list, a guard and a plugin class."""
    for i in range(count):
        (root / f"bench_plugin_{i}.py").write_text(_PLUGIN_MODULE.format(i=i))
        info = root / f"bench_plugin_{i}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: bench-plugin-{i}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(_ENTRY_POINTS.format(i=i))


def _plugins(runs: int) -> list[Row]:
    with (
        tempfile.TemporaryDirectory(prefix="dsh-bench-plugins-") as tmp,
        tempfile.TemporaryDirectory(prefix="dsh-bench-empty-") as empty,
    ):
        make_plugin_dists(Path(tmp))
        rows: list[Row] = []
        figures: dict[str, float] = {}
        for label, path in (("no plugin distributions", empty), ("50 plugin distributions", tmp)):
            _child(_LOAD_PROBE.format(path=path))  # warm the bytecode caches
            samples = [_child(_LOAD_PROBE.format(path=path)) for _ in range(runs)]
            for sample in samples:
                if sample["failed"]:
                    raise AssertionError(f"plugins failed to load: {sample['failed']}")
            ms = [float(s["seconds"]) * 1000 for s in samples]  # type: ignore[arg-type]
            figures[label] = statistics.median(ms)
            rows.append(
                Row(
                    "5",
                    f"ToolRegistry() + load_plugins: {label}",
                    figures[label],
                    min(ms),
                    "ms",
                    note=f"{samples[0]['loaded']} entry points, {samples[0]['tools']} tools",
                )
            )
        loaded = rows[-1]
        loaded.baseline = "no plugin distributions"
        loaded.ratio = figures["50 plugin distributions"] / figures["no plugin distributions"]
        loaded.target = "<= 300 ms"
        loaded.met = figures["50 plugin distributions"] <= 300
        return rows


def run(settings: Settings) -> list[Row]:
    runs = 3 if settings.quick else 7
    rows: list[Row] = []
    for label, code in IMPORTS.items():
        rows += _imports(label, code, runs, limit=True)
    if not settings.quick:
        for label, code in PEER_IMPORTS.items():
            rows += _imports(label, code, 3, limit=False)
    rows += _plugins(runs)
    return rows
