"""Run the dsh-tools benchmarks and print a table of medians, minimums, ratios and targets.

    python benchmarks/run.py            # full run (a few minutes)
    python benchmarks/run.py --quick    # short run (under two minutes)
    python benchmarks/run.py --json results.json --case 1 --case 4

Peers (openai-agents, pydantic-ai, mcp, langchain-core, fastjsonschema, jsonschema) come
from the ``bench`` extra; any that is missing is reported as skipped. Every ratio is taken
against a baseline measured interleaved in the same run: on a noisy machine only ratios
are comparable between runs, absolute times are not.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Settings

CASES: dict[str, tuple[str, str]] = {
    "1": ("execute vs peers (cases 1-2)", "case_execute:run_async_cases"),
    "3": ("execute_sync vs peers, with plugins", "case_execute:run_sync_case"),
    "4": ("argument validation", "case_validate:run"),
    "5": ("import and plugin startup", "case_startup:run"),
    "6": ("scale and memory", "case_scale:run"),
    "7": ("sandbox start cost", "case_sandbox:run"),
    "8": ("grep over a 10 000-file tree", "case_search:run"),
    "9": ("OpenTelemetry plugin overhead", "case_telemetry:run"),
    "10": ("progress reports, unheard and over MCP", "case_progress:run"),
    "11": ("approvals on one PostgreSQL server", "case_approvals:run"),
    "12": ("ConcurrencyLimit and ResultCache overhead", "case_limits:run"),
    "13": ("tool calls on Temporal and DBOS", "case_engines:run"),
    "14": ("an MCP server against the official one", "case_mcp:run"),
    "15": ("a thousand calls waiting for a person in one worker", "case_waiting:run"),
    "16": ("the call journal's cost", "case_journal:run"),
}


def _load(spec: str) -> Callable[[Settings], list[Row]]:
    import importlib

    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("us", "ms") and value < 10:
        return f"{value:.2f} {unit}"
    if unit == "KB" or unit == "MB":
        return f"{value:.2f} {unit}"
    return f"{value:.1f} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def _status(row: Row) -> str:
    if row.met is None:
        return ""
    return "met" if row.met else "NOT MET"


def table(rows: list[Row]) -> str:
    header = ("case", "figure", "median", "min", "ratio", "baseline", "target", "status", "note")
    lines = [header]
    for row in rows:
        lines.append(
            (
                row.case,
                row.name,
                _fmt(row.median, row.unit),
                _fmt(row.minimum, row.unit),
                "-" if row.ratio is None else f"{row.ratio:.2f}x",
                row.baseline or "",
                row.target or "",
                _status(row),
                row.note,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        out.append(("  ".join(cells) + "  " + line[-1]).rstrip())
    out.insert(1, "-" * min(160, len(out[0])))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter batches")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument(
        "--case",
        action="append",
        choices=sorted(CASES),
        help="run only these cases (repeatable; 1 covers cases 1 and 2)",
    )
    args = parser.parse_args(argv)
    settings = (
        Settings(quick=True, repeat=5, scale=0.25)
        if args.quick
        else Settings(quick=False, repeat=15, scale=1.0)
    )
    selected = args.case or sorted(CASES)
    rows: list[Row] = []
    started = time.perf_counter()
    for key in selected:
        title, spec = CASES[key]
        print(f"running case {key}: {title} ...", file=sys.stderr, flush=True)
        case_start = time.perf_counter()
        try:
            rows += _load(spec)(settings)
        except Exception as error:  # one broken case must not hide the others
            rows.append(Row(key, title, unit="", note=f"ERROR: {type(error).__name__}: {error}"))
        print(f"  done in {time.perf_counter() - case_start:.1f} s", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    print(table(rows))
    judged = [row for row in rows if row.met is not None]
    met = sum(1 for row in judged if row.met)
    print(
        f"\n{met}/{len(judged)} targets met; {elapsed:.0f} s; Python {platform.python_version()}"
        f" on {platform.machine()}; {'quick' if settings.quick else 'full'} run"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "machine": platform.machine(),
                    "quick": settings.quick,
                    "seconds": elapsed,
                    "rows": [row.as_json() for row in rows],
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
