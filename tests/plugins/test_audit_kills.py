"""AuditLog under SIGKILL: writers killed mid-write never leave a torn or mixed record."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh_tools._registry import ToolRegistry
from dsh_tools_plugins.audit import read_audit_log, replay

WRITER = """
import logging, sys
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionInput
from dsh_tools._registry import ToolRegistry
from dsh_tools_plugins.audit import AuditLog

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
path, name, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
registry = ToolRegistry()
registry.register(define_tool(
    name="echo", description="echo",
    parameters={"text": {"type": "string", "required": True}},
    execute=lambda args, ctx: args["text"],
))
registry.add_plugin(AuditLog(path, max_bytes=1 << 40))
print("ready", flush=True)
number = 0
while True:
    number += 1
    text = name * (size + number % 997)
    registry.execute_sync(ToolExecutionInput(f"{name}-{number}", "echo", {"text": text}))
"""

_SIZE = 4 << 20  # each event is a line of about 4 MiB: a kill lands inside its write


def _start(path: Path, name: str, folder: Path) -> subprocess.Popen[bytes]:
    with (folder / f"{name}-{time.monotonic_ns()}.err").open("wb") as errors:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, str(_SIZE)],
            stdout=subprocess.PIPE,
            stderr=errors,
        )
    assert writer.stdout is not None
    assert writer.stdout.readline() == b"ready\n"  # killed while writing, not importing
    writer.stdout.close()
    return writer


def _cuts(folder: Path) -> int:
    return sum(p.read_text().count("cut a torn last record") for p in folder.glob("*.err"))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and flock are POSIX")
def test_writers_killed_mid_write_never_tear_or_mix_a_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    folder = tmp_path / "stderr"
    folder.mkdir()
    chance = random.Random(31)
    writers = {name: _start(path, name, folder) for name in "abc"}
    kills = 0
    try:
        # Kill a random writer at random times until several kills have torn a record
        # (seen by the writer that cut it), or give up after many kills.
        while kills < 60 and (kills < 10 or _cuts(folder) < 2):
            time.sleep(chance.uniform(0.01, 0.2))
            name = chance.choice("abc")
            writers[name].send_signal(signal.SIGKILL)
            writers[name].wait()
            kills += 1
            writers[name] = _start(path, name, folder)
    finally:
        for writer in writers.values():
            writer.send_signal(signal.SIGKILL)
            writer.wait()
    # The last kill may have left a torn tail: the reader skips it, the next writer cuts it.
    before = list(read_audit_log(path))
    last = _start(path, "d", folder)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(e.call_id == "d-1" for e in read_audit_log(path)):
        time.sleep(0.05)
    last.send_signal(signal.SIGKILL)
    last.wait()

    raw = path.read_bytes()
    body = raw[: raw.rfind(b"\n") + 1]  # the final kill may tear the very last record
    records = [json.loads(line) for line in body.splitlines()]  # every line parses
    assert len(records) >= len(before) > 0
    assert _cuts(folder) >= 2, f"no kill tore a record in {kills} kills"
    for record in records:
        text = (
            record["arguments"]["text"]
            if record["event"] == "tool/call"
            else record["content"][0]["text"]
        )
        writer = record["call_id"].split("-")[0]
        assert text == writer * len(text), record["call_id"]  # nothing interleaved
    calls = list(replay(path, ToolRegistry()))
    assert {c.call.call_id[0] for c in calls} >= {"a", "b", "c", "d"}
    assert os.path.exists(f"{path}.lock")
