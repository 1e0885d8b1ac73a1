"""Remember the results of read-only and idempotent tools, per agent and arguments.

:class:`ResultCache` is a ``dsh_tools_execute`` wrapper. It caches only the successes of
tools whose definition says ``metadata={"read_only": True}`` or ``{"idempotent": True}``,
per agent id, tool name and arguments: an entry answers a call whose arguments have the
same canonical JSON (:func:`dsh_tools._json.canonical`, what remembered approvals hash).
It is found by their hash, so a miss never encodes them; a hit compares them exactly
(``1``, ``1.0`` and ``true`` are equal Python values, not the same JSON). An entry lives
``ttl_s`` seconds; past ``max_entries`` the least recently used one goes.

A hit runs no body, but it is still a result of the wrapper stage: post-execute and the
result observers see it as any other, its ``meta`` says ``{"cache": "hit"}`` and the
decision record has a ``ResultCache`` step saying ``hit``.

Invalidation is conservative: a call of any tool that is not read-only clears every
entry, of every agent scope, before its body runs and again when it ends; a read that was
running meanwhile does not store its result. Scopes share what tools reach (sibling
agents, two MCP clients of one server work in one workspace), and which files a write
touched is the tool's secret, so no scope's entry can be proven fresh after another's
write. So ``read_file`` after ``write_file`` never answers from before the write, in any
scope.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

import attrs

from dsh_tools._cancel import CancelSignal
from dsh_tools._json import FrozenDict, canonical
from dsh_tools._models import (
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from dsh_tools._numbers import positive_finite
from dsh_tools._tracing import note
from dsh_tools.errors import DefinitionError
from dsh_tools.hookspecs import WrapperGenerator, hookimpl

__all__ = ["ResultCache"]

_Key = tuple[str | None, str, int]
"""Where a call's entry is: its agent, its tool and the hash of its arguments."""

_Entry = tuple[float, ToolExecutionSuccess, FrozenDict | None]
"""When an entry expires, its result, and the arguments it answers."""


def _related(one: str | None, other: str | None) -> bool:
    """Whether two agent scopes are the same, or one is inside the other."""
    if one is None or other is None or one == other:
        return True
    return one.startswith(other + "/") or other.startswith(one + "/")


class ResultCache:
    """Caches successes of read-only and idempotent tools.

    :param ttl_s: how long an entry answers (seconds, positive).
    :param max_entries: how many entries at most (the least recently used goes first).

    Raises :class:`~dsh_tools.DefinitionError` for a bad setting.
    """

    def __init__(self, ttl_s: float = 300, max_entries: int = 1024) -> None:
        if not positive_finite(ttl_s):
            raise DefinitionError(
                f"ResultCache ttl_s must be a positive finite number, got {ttl_s!r}"
            )
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise DefinitionError(
                f"ResultCache max_entries must be an integer >= 1, got {max_entries!r}"
            )
        self.ttl_s = float(ttl_s)
        self.max_entries = max_entries
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._generation = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self, agent: str | None = None, *, everything: bool = False) -> None:
        """Drop the entries of ``agent``'s scope and the scopes above and below it (or
        ``everything``); reads running now will not store their results."""
        with self._lock:
            self._generation += 1
            for key in list(self._entries):
                if everything or _related(key[0], agent):
                    del self._entries[key]

    def _lookup(self, key: _Key, arguments: FrozenDict | None) -> ToolExecutionSuccess | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None or canonical(found[2]) != canonical(arguments):
                return None  # another call's arguments, of the same hash
            if found[0] <= time.monotonic():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return found[1]

    def _store(
        self, key: _Key, arguments: FrozenDict | None, result: ToolExecutionSuccess, generation: int
    ) -> None:
        entries = self._entries
        with self._lock:
            if generation != self._generation:
                return  # something wrote meanwhile: this result may be stale
            if key in entries:
                entries.move_to_end(key)  # a new key goes in last: the most recent
            entries[key] = (time.monotonic() + self.ttl_s, result, arguments)
            while len(entries) > self.max_entries:
                entries.popitem(False)

    def _hit(self, key: _Key | None, arguments: FrozenDict | None) -> ToolExecutionSuccess | None:
        if key is None or key not in self._entries:  # a miss changes nothing: no lock
            return None
        hit = self._lookup(key, arguments)
        if hit is None:
            return None
        note("ResultCache", "hit")
        return attrs.evolve(hit, meta={"cache": "hit"})

    @hookimpl(wrapper=True)
    def dsh_tools_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> WrapperGenerator:
        dispatch = yield
        if tool is None:
            return dispatch
        metadata = tool.metadata
        arguments = execution.arguments
        if metadata.get("read_only") is True:
            if arguments is None:
                return dispatch
            read = (execution.agent, execution.name, hash(arguments))

            async def caching(signal: CancelSignal | None = None) -> ToolExecutionResult:
                # A miss runs this function, the body and _store, nothing more.
                if read in self._entries:
                    hit = self._hit(read, arguments)
                    if hit is not None:
                        return hit
                generation = self._generation
                result: ToolExecutionResult = await dispatch(signal)
                if isinstance(result, ToolExecutionSuccess):
                    self._store(read, arguments, result, generation)
                return result

            return caching
        key = _key(execution) if metadata.get("idempotent") is True else None

        async def invalidating(signal: CancelSignal | None = None) -> ToolExecutionResult:
            hit = self._hit(key, arguments)  # an idempotent call nothing has undone since
            if hit is not None:
                return hit
            self.clear(everything=True)  # any scope may read what this call writes
            try:
                result: ToolExecutionResult = await dispatch(signal)
            finally:
                self.clear(everything=True)
            if key is not None and isinstance(result, ToolExecutionSuccess):
                self._store(key, arguments, result, self._generation)
            return result

        return invalidating


def _key(execution: ToolExecution) -> _Key | None:
    """Where a call's entry is: its agent, its tool and the hash of its arguments."""
    if execution.arguments is None:
        return None
    return (execution.agent, execution.name, hash(execution.arguments))
