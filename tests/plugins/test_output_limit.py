"""OutputLimit: bounded model-facing text, error state kept, full text for the host."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_tools._content import ImageContent, TextContent
from dsh_tools._define import define_tool
from dsh_tools._models import (
    Accept,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ToolError
from dsh_tools.hookspecs import hookimpl
from dsh_tools_plugins.output_limit import OutputLimit

PIXEL = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


def registry_with(limit: OutputLimit) -> ToolRegistry:
    registry = ToolRegistry()

    def emit(args: Any, ctx: Any) -> Any:
        if args.get("fail"):
            raise ToolError(str(args["text"]), code="BROKEN")
        blocks = args.get("blocks")
        if not blocks:
            return str(args["text"])
        return [  # typed blocks are content; plain dicts would be a JSON value
            TextContent(b["text"])
            if b["type"] == "text"
            else ImageContent(b["data"], b["mimeType"])
            for b in blocks
        ]

    registry.register(
        define_tool(
            name="emit",
            description="emit",
            parameters={
                "text": {"type": "string"},
                "blocks": {"type": "array", "items": {"type": "json"}},
                "fail": {"type": "boolean"},
            },
            execute=emit,
        )
    )
    registry.add_plugin(limit)
    return registry


def run(registry: ToolRegistry, call_id: str = "c1", **arguments: Any) -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput(call_id, "emit", arguments))


def texts(result: ToolExecutionResult) -> list[str]:
    return [
        str(block["text"])
        for block in result.content
        if isinstance(block, dict) and block.get("type") == "text"
    ]


def test_long_text_is_cut_with_a_marker_and_kept_for_the_host() -> None:
    limit = OutputLimit(max_chars=10)
    registry = registry_with(limit)

    result = run(registry, text="abcdefghijklmnopqrstuvwxyz")

    assert isinstance(result, ToolExecutionSuccess)
    assert texts(result) == [
        "abcdefghij",
        "[output truncated: showed 10 of 26 characters; the full text is available to the host]",
    ]
    # A bound is not a redaction: the host keeps the value, and the full text through
    # the plugin.
    assert result.value == "abcdefghijklmnopqrstuvwxyz"
    full = limit.full_content("c1")
    assert full == [{"type": "text", "text": "abcdefghijklmnopqrstuvwxyz"}]


def test_text_within_the_limit_is_untouched() -> None:
    limit = OutputLimit(max_chars=10, max_bytes=10)
    registry = registry_with(limit)
    result = run(registry, text="short")
    assert texts(result) == ["short"]
    assert limit.full_content("c1") is None


def test_a_failure_stays_a_failure() -> None:
    registry = registry_with(OutputLimit(max_chars=12))

    result = run(registry, text="x" * 100, fail=True)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "BROKEN"
    assert result.error.message == "x" * 100
    assert texts(result)[0] == "Error: xxxxx"
    assert texts(result)[1].startswith("[output truncated: showed 12 of 107 characters")


def test_bytes_are_cut_on_character_boundaries() -> None:
    registry = registry_with(OutputLimit(max_bytes=7))

    result = run(registry, text="ééééé")  # 10 bytes

    assert texts(result) == [
        "ééé",
        "[output truncated: showed 6 of 10 bytes; the full text is available to the host]",
    ]


def test_blocks_are_bounded_together_and_images_pass_through() -> None:
    registry = registry_with(OutputLimit(max_chars=6))
    blocks = [{"type": "text", "text": "abcd"}, PIXEL, {"type": "text", "text": "efgh"}]

    result = run(registry, blocks=[*blocks, {"type": "text", "text": "dropped"}])

    assert list(result.content) == [
        {"type": "text", "text": "abcd"},
        PIXEL,
        {"type": "text", "text": "ef"},
        {
            "type": "text",
            "text": "[output truncated: showed 6 of 15 characters; "
            "the full text is available to the host]",
        },
    ]


def test_the_tighter_limit_names_its_unit() -> None:
    registry = registry_with(OutputLimit(max_chars=100, max_bytes=4))
    assert texts(run(registry, text="ééééé"))[-1].startswith(
        "[output truncated: showed 4 of 10 bytes"
    )
    registry = registry_with(OutputLimit(max_chars=2, max_bytes=100))
    assert texts(run(registry, text="ééééé"))[-1].startswith(
        "[output truncated: showed 2 of 5 characters"
    )


def test_it_bounds_what_other_post_execute_policies_left() -> None:
    class Verbose:
        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> Accept:
            return Accept(content=[result.text * 10])

    limit = OutputLimit(max_chars=5)
    registry = registry_with(limit)
    registry.add_plugin(Verbose())  # added later, but OutputLimit is trylast

    result = run(registry, text="abc")

    assert texts(result)[0] == "abcab"
    assert limit.full_content("c1") == [{"type": "text", "text": "abc" * 10}]


def test_full_content_is_a_bounded_lru() -> None:
    limit = OutputLimit(max_chars=1, keep_full=2)
    registry = registry_with(limit)
    run(registry, "a", text="aa")
    run(registry, "b", text="bb")
    assert limit.full_content("a") is not None  # "a" is now the most recent
    run(registry, "c", text="cc")
    assert limit.full_content("b") is None
    assert limit.full_content("a") == [{"type": "text", "text": "aa"}]
    assert limit.full_content("c") == [{"type": "text", "text": "cc"}]

    none_kept = OutputLimit(max_chars=1, keep_full=0)
    run(registry_with(none_kept), text="aa")
    assert none_kept.full_content("c1") is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_limits_are_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        OutputLimit(max_chars=bad)
    with pytest.raises(ValueError, match="max_bytes"):
        OutputLimit(max_bytes=bad)
    with pytest.raises(ValueError, match="keep_full"):
        OutputLimit(keep_full=bad)
