"""ResultCache: read-only results answered again, never stale after a write."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dsh_tools._define import define_tool
from dsh_tools._models import Block, ToolExecution, ToolExecutionInput, ToolExecutionResult
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import DefinitionError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.testing import CallRecorder
from dsh_tools_plugins.cache import ResultCache


class Files:
    """A tiny file system behind read_file / write_file / stamp tools, counting reads."""

    def __init__(self) -> None:
        self.data = {"a.txt": "one"}
        self.reads = 0

    def read(self, args: dict[str, Any], ctx: Any) -> str:
        self.reads += 1
        return self.data[args["path"]]

    def write(self, args: dict[str, Any], ctx: Any) -> str:
        self.data[args["path"]] = args["text"]
        return "written"


PATH = {"path": {"type": "string", "required": True}}


def setup(cache: ResultCache) -> tuple[ToolRegistry, Files, CallRecorder]:
    files = Files()
    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(
        define_tool(
            name="read_file",
            description="r",
            parameters=PATH,
            execute=files.read,
            metadata={"read_only": True},
        )
    )
    registry.register(
        define_tool(
            name="write_file",
            description="w",
            parameters={**PATH, "text": {"type": "string", "required": True}},
            execute=files.write,
        )
    )
    registry.add_plugin(cache)
    return registry, files, recorder


def read(registry: Any, call_id: str, path: str = "a.txt") -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput(call_id, "read_file", {"path": path}))


def test_a_repeated_read_is_answered_from_the_cache_and_says_so() -> None:
    registry, files, recorder = setup(ResultCache())

    first = read(registry, "r1")
    second = read(registry, "r2")

    assert files.reads == 1
    assert second.text == first.text == "one"
    assert first.meta is None
    assert second.meta == {"cache": "hit"}
    steps = [(s.stage, s.source, s.decision) for s in recorder.call("r2").record.steps]
    assert ("execute", "ResultCache", "hit") in steps


def test_a_read_after_a_write_in_the_same_scope_is_never_stale() -> None:
    registry, files, _ = setup(ResultCache())
    agent = registry.scope("agent")
    read(agent, "r1")

    agent.execute_sync(ToolExecutionInput("w", "write_file", {"path": "a.txt", "text": "two"}))

    assert read(agent, "r2").text == "two"
    assert files.reads == 2


def test_a_write_in_a_child_scope_clears_the_parents_entries_too() -> None:
    registry, _, _ = setup(ResultCache())
    read(registry, "r1")
    registry.scope("child").execute_sync(
        ToolExecutionInput("w", "write_file", {"path": "a.txt", "text": "two"})
    )
    assert read(registry, "r2").text == "two"


def test_a_write_by_a_sibling_scope_clears_every_scopes_entries() -> None:
    """``team/b`` writes the file ``team/a`` read (two MCP clients of one server are such
    siblings): ``team/a``'s next read, and an unrelated scope's, see the write."""
    registry, files, _ = setup(ResultCache())
    team = registry.scope("team")
    reader, writer, elsewhere = team.scope("a"), team.scope("b"), registry.scope("other")
    assert read(reader, "r1").text == read(elsewhere, "r2").text == "one"
    writer.execute_sync(ToolExecutionInput("w", "write_file", {"path": "a.txt", "text": "two"}))
    assert read(reader, "r3").text == "two"
    assert read(elsewhere, "r4").text == "two"
    assert files.reads == 4


def test_a_write_in_a_nested_scope_clears_the_entries_of_the_scope_above_it() -> None:
    registry, files, _ = setup(ResultCache())
    outer = registry.scope("a")
    read(outer, "r1")
    outer.scope("b").execute_sync(
        ToolExecutionInput("w", "write_file", {"path": "a.txt", "text": "two"})
    )
    assert read(outer, "r2").text == "two"
    assert files.reads == 2


def test_a_read_that_overlapped_a_write_does_not_keep_what_it_read() -> None:
    data = {"a.txt": "one"}
    reads: list[str] = []

    async def slow_read(args: dict[str, Any], ctx: Any) -> str:
        text = data[args["path"]]
        reads.append(text)
        await wrote.wait()  # the write lands while this read is running
        return text

    registry, _, _ = setup(ResultCache())
    registry.register(
        define_tool(
            name="slow_read",
            description="r",
            parameters=PATH,
            execute=slow_read,
            metadata={"read_only": True},
        )
    )

    async def write_while_reading() -> None:
        async with anyio.create_task_group() as group:
            call = ToolExecutionInput("r1", "slow_read", {"path": "a.txt"})
            group.start_soon(registry.execute, call)
            while not reads:
                await anyio.sleep(0.001)
            data["a.txt"] = "two"
            await registry.execute(
                ToolExecutionInput("w", "write_file", {"path": "a.txt", "text": "two"})
            )
            wrote.set()

    wrote = anyio.Event()
    anyio.run(write_while_reading)
    wrote = anyio.Event()
    wrote.set()
    again = registry.execute_sync(ToolExecutionInput("r2", "slow_read", {"path": "a.txt"}))
    assert again.text == "two"
    assert reads == ["one", "two"]


def test_entries_are_per_agent_and_arguments_and_bounded() -> None:
    cache = ResultCache(max_entries=2)
    registry, files, _ = setup(cache)
    files.data.update({"b.txt": "b", "c.txt": "c"})
    read(registry, "1", "a.txt")
    read(registry.scope("other"), "2", "a.txt")
    read(registry, "3", "b.txt")
    assert files.reads == 3
    assert len(cache) == 2
    read(registry, "4", "a.txt")  # the oldest entry went
    assert files.reads == 4


def test_only_arguments_with_the_same_json_share_an_entry() -> None:
    answers: list[str] = []

    def shown(args: Any, ctx: Any) -> str:
        answers.append(repr(args["value"]))
        return answers[-1]

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="show",
            description="s",
            parameters={"value": {"type": "json", "required": True}},
            execute=shown,
            metadata={"read_only": True},
        )
    )
    registry.add_plugin(ResultCache())

    def call(value: object) -> str:
        arguments = {"value": value}
        return registry.execute_sync(ToolExecutionInput("c", "show", arguments)).text

    # Equal Python values (1 == 1.0 == True, {"a": 1, "b": 2} == {"b": 2, "a": 1}) of
    # another JSON text each run; the same JSON in another key order is answered again.
    seen = [call(1), call(1.0), call(True), call({"a": 1, "b": 2}), call({"b": 2, "a": 1})]

    assert answers == ["1", "1.0", "True", "FrozenDict({'a': 1, 'b': 2})"]
    assert seen == [*answers, answers[-1]]


def test_a_cached_result_still_passes_post_execute() -> None:
    registry, files, _ = setup(ResultCache())

    class Withhold:
        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> Block | None:
            if result.meta == {"cache": "hit"}:
                return Block("no cached answers today")
            return None

    read(registry, "r1")
    registry.add_plugin(Withhold())
    blocked = read(registry, "r2")

    assert blocked.is_error
    assert blocked.text == "no cached answers today"
    assert files.reads == 1


def test_tools_that_are_neither_read_only_nor_idempotent_are_never_cached() -> None:
    cache = ResultCache()
    registry, _, _ = setup(cache)
    for call_id in ("w1", "w2"):
        registry.execute_sync(ToolExecutionInput(call_id, "write_file", {"path": "x", "text": "t"}))
    assert len(cache) == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(DefinitionError, match="ttl_s must be a positive finite number"):
        ResultCache(ttl_s=0)
    with pytest.raises(DefinitionError, match="max_entries must be an integer >= 1"):
        ResultCache(max_entries=0)


def test_an_entry_past_its_lifetime_is_read_again() -> None:
    cache = ResultCache(ttl_s=60)
    registry, files, _ = setup(cache)
    read(registry, "r1")
    for key, (expires, result, arguments) in list(cache._entries.items()):
        cache._entries[key] = (expires - 60, result, arguments)  # a minute later
    read(registry, "r2")
    assert files.reads == 2
