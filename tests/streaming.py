"""What the progress tests share: a command that proves its output is seen while it runs,
and a redaction policy that removes one secret from the final content (post-execute) and
from everything the call streams (the progress filter)."""

from __future__ import annotations

from typing import Any

from dsh_tools import Accept, hookimpl
from dsh_tools.progress import Output, Progress

SECRET = "hunter2"

TICKING = (
    "echo line 0; i=0; while [ ! -f go ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
    "[ -f go ] || echo no go; "
    "for n in $(seq 1 29); do echo line $n; sleep 0.1; done"
)
"""A line every 100 ms for 3 s. After the first line it waits (up to 5 s) for a file named
``go`` in its directory, which a test creates when a client shows that line: if output
arrived only at the end, the command would print ``no go``."""


class Redact:
    """Replaces :data:`SECRET` with ``***`` in results, output and progress messages."""

    @hookimpl
    def dsh_tools_post_execute(self, result: Any) -> Accept | None:
        return None if result.is_error else Accept(content=result.text.replace(SECRET, "***"))

    @hookimpl
    def dsh_tools_progress_filter(self, event: Progress | Output) -> Progress | Output | None:
        if isinstance(event, Output):
            return Output(event.text.replace(SECRET, "***"), event.stream)
        if event.message is not None:
            return Progress(event.done, event.total, event.message.replace(SECRET, "***"))
        return None
