"""The commands that run, explain or replay calls: ``call``, ``explain``, ``replay``.

:mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Any, TextIO

from .._safetext import safe_text
from ._console import json_text
from ._exits import EXIT_CALL_FAILED, EXIT_OK, EXIT_WOULD_ASK, UsageError

if TYPE_CHECKING:
    from .._models import ToolExecutionResult
    from .._registry import ToolRegistry
    from ..records import DecisionRecord

__all__ = ["CLI_AGENT", "cmd_call", "cmd_explain", "cmd_replay"]

CLI_AGENT = "cli"
"""The agent id of calls made from the command line (so ``Ask`` can reach a person)."""


def _read_arguments(text: str, stdin: TextIO) -> object:
    """The call's arguments, as the pipeline takes them.

    Whatever the text holds goes to the pipeline, which fails the call with
    ``INVALID_JSON`` (and the audit log records the attempt) when it is not a lossless
    JSON object. Text the standard parser reads but ours refuses (a lone surrogate, NaN,
    too deep) is passed parsed, so that the pipeline names the exact problem; text that
    does not parse at all is passed as :class:`~dsh_tools.UnreadableArguments`, with the
    parser's reason.
    """
    from .._json import loads
    from .._models import UnreadableArguments
    from ..errors import JsonValueError

    if text == "-":
        buffer = getattr(stdin, "buffer", None)
        # Bytes that are not UTF-8 become lone surrogates, as in command-line arguments.
        text = stdin.read() if buffer is None else buffer.read().decode("utf-8", "surrogateescape")
    try:
        return loads(text, "arguments")
    except JsonValueError as error:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return UnreadableArguments(text, str(error))


def cmd_call(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, stdin: TextIO, err: TextIO
) -> int:
    import anyio

    from .._models import ToolExecutionFailure, result_to_json
    from ..errors import ErrorCode
    from ..presentation._presenting import present_call, present_result
    from ..presentation._terminal import emit_card, render_call_view, render_result
    from ._progress import progress_view, run_showing_progress

    if options.events and not options.json:
        raise UsageError("--events streams JSON lines: use it with --json")
    # Every attempt runs through the pipeline, an unknown tool or bad JSON included, so
    # that the audit log and every other observer see it.
    call = _cli_call(options, stdin)
    records = _Records()
    if options.explain:
        registry.add_plugin(records, name="cli-explain")
    if not options.json:
        emit_card(render_call_view(present_call(registry, call)), out)
        out.flush()
    view = progress_view(call.name, options.json, options.events, out, err)
    result: ToolExecutionResult = anyio.run(run_showing_progress, registry, call, view)
    if options.json:
        data = result_to_json(result)
        if options.explain:
            data["decisionRecord"] = records.last.to_json()
        if options.events:  # the last JSON line of the stream
            out.write(json_text({"type": "result", "result": data}, indent=None))
        else:
            out.write(json_text(data))
    else:
        emit_card(render_result(present_result(registry, call, result), result), out)
        if options.explain:
            _write_lines(records.last.lines(), out)
    if isinstance(result, ToolExecutionFailure) and result.code == ErrorCode.UNKNOWN_TOOL:
        err.write(f"dsh-tools: note: known tools: {', '.join(registry.names()) or 'none'}\n")
    if isinstance(result, ToolExecutionFailure) and result.code == ErrorCode.INVALID_JSON:
        err.write(
            "dsh-tools: note: ARGUMENTS must be one JSON object, such as "
            """'{"path": "notes.txt"}', or - to read it from standard input\n"""
        )
    return EXIT_CALL_FAILED if result.is_error else EXIT_OK


def _write_lines(lines: list[str], out: TextIO) -> None:
    """Write text lines a person reads (a decision record, an explanation), each shown on
    one line: a reason or a call id holding a newline or an escape sequence cannot forge
    a line or act on the terminal."""
    out.write("".join(f"{safe_text(line)}\n" for line in lines))


def _cli_call(options: argparse.Namespace, stdin: TextIO) -> Any:
    """The call the command line describes."""
    from .._models import ToolExecutionInput

    return ToolExecutionInput(
        call_id=f"cli-{int(time.time() * 1000)}",
        name=options.name,
        arguments=_read_arguments(options.arguments, stdin),
        agent=CLI_AGENT,
    )


class _Records:
    """A result observer that keeps the decision record of the last call (``--explain``)."""

    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    @property
    def last(self) -> DecisionRecord:
        return self.records[-1]

    def dsh_tools_result(self, record: DecisionRecord) -> None:
        self.records.append(record)


def cmd_explain(
    registry: ToolRegistry, options: argparse.Namespace, out: TextIO, stdin: TextIO, err: TextIO
) -> int:
    from ._setup import unmatched_rule_problems

    call = _cli_call(options, stdin)
    explained = registry.explain(call)
    unmatched = unmatched_rule_problems(registry) if options.unmatched_rules else None
    if options.json:
        data = explained.to_json()
        if unmatched is not None:
            data["unmatchedRules"] = unmatched
        out.write(json_text(data))
    else:
        lines = explained.lines()
        if unmatched is not None:
            lines.append(
                "permission rules that match no loaded tool:"
                if unmatched
                else "every permission rule matches a loaded tool"
            )
            lines.extend(f"  {problem}" for problem in unmatched)
        _write_lines(lines, out)
    if explained.outcome == "run":
        return EXIT_OK
    return EXIT_WOULD_ASK if explained.outcome == "ask" else EXIT_CALL_FAILED


def cmd_replay(registry: ToolRegistry, options: argparse.Namespace, out: TextIO) -> int:
    from dsh_tools_plugins.audit import replay

    from .._models import PresentableResult, ToolExecutionFailure
    from ..presentation._terminal import emit_card, render_call_view, render_result

    if os.path.isdir(options.log):
        raise UsageError(f"audit log {options.log!r} is a directory")
    if not os.path.isfile(options.log):
        raise UsageError(f"audit log {options.log!r} does not exist")
    if not _holds_an_event(options.log, options.rotated):
        raise UsageError(
            f"{options.log!r} holds no audit event: it is not an audit log (no line in it "
            "is a tool/call or tool/result event; --audit-log writes audit logs)"
        )
    count = 0
    for replayed in replay(options.log, registry, rotated=options.rotated):
        count += 1
        out.write(f"call {safe_text(replayed.call.call_id)}\n")
        emit_card(render_call_view(replayed.call_card), out)
        recorded = replayed.result
        if recorded is None:
            out.write("… no result recorded (the call may still have been running)\n")
            continue
        result: PresentableResult | ToolExecutionFailure = recorded
        if recorded.is_error and replayed.error is not None and replayed.error.info.code:
            # The recorded failure, so that its card shows the code, as `call` does.
            result = ToolExecutionFailure(replayed.error, recorded.content, meta=recorded.meta)
        emit_card(render_result(replayed.result_card, result), out)
        if options.explain:
            record = replayed.record
            lines = ["no decision record (written before records were kept)"]
            _write_lines(lines if record is None else record.lines(), out)
    out.write(f"{count} call(s)\n")
    return EXIT_OK


def _holds_an_event(log: str, rotated: bool) -> bool:
    """Whether ``log`` has at least one audit event; the lines before it are not reported
    here (the replay itself warns about those, once)."""
    import logging

    from dsh_tools_plugins.audit import read_audit_log

    def unreported(record: logging.LogRecord) -> bool:
        return False

    logger = logging.getLogger("dsh_tools")
    logger.addFilter(unreported)
    try:
        return next(iter(read_audit_log(log, rotated=rotated)), None) is not None
    finally:
        logger.removeFilter(unreported)
