"""The one thread per process that watches the DBOS tool calls running in it: every
``watch_s`` seconds it looks whether each call's workflow was cancelled (then fires the
call's signal) and publishes the call's latest progress as a workflow event.

One thread rather than a watcher per call, so a step costs no task, loop or thread of
its own: the call runs on the step's thread (``execute_sync``) or the workflow's loop.
The thread runs while calls do and ends when none is left.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dbos import DBOS

from dsh_tools import CancelSignal
from dsh_tools._pipeline.loops import on_event_loop, soon

from ._calls import LatestProgress
from ._waiting import PROGRESS

_log = logging.getLogger("dsh_tools")


class AnyThreadSignal(CancelSignal):
    """A signal the watcher fires from its own thread: a callback added on an event loop
    runs on that loop (``soon``); the list of callbacks changes under a lock, and the
    callbacks run after it is let go (one that waits for a thread adding or removing a
    callback of this signal must not wait forever)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        if on_event_loop():
            callback = soon(callback)  # type: ignore[arg-type]
        with self._lock:
            if not self._cancelled:
                return functools.partial(self._locked, super().add_callback(callback))
        return super().add_callback(callback)  # cancelled already: it is called at once

    def _locked(self, remove: Callable[[], None]) -> None:
        with self._lock:
            remove()

    def fire(self, reason: str) -> None:
        with self._lock:
            callbacks = self._claim(reason)
        for callback in callbacks:
            callback()

    async def wait(self) -> None:
        import anyio

        event = anyio.Event()
        remove = self.add_callback(event.set)
        try:
            await event.wait()
        finally:
            remove()


class _Running:
    """One running call as the watcher sees it."""

    __slots__ = ("context", "progress", "signal", "workflow_id")

    def __init__(self, workflow_id: str, progress: LatestProgress) -> None:
        self.workflow_id = workflow_id
        self.progress = progress
        self.signal = AnyThreadSignal()
        self.context = contextvars.copy_context()  # the step's: where its events go


class Watcher:
    """The running calls of this process and the thread that looks at them."""

    def __init__(self) -> None:
        self.every = 1.0
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, workflow_id: str, progress: LatestProgress) -> Iterator[CancelSignal]:
        """The signal of a call of ``workflow_id`` watched while the block runs."""
        running = _Running(workflow_id, progress)
        with self._lock:
            self._running[id(running)] = running
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="dsh_tools DBOS watcher", daemon=True
                )
                self._thread.start()
        try:
            yield running.signal
        finally:
            with self._lock:
                del self._running[id(running)]

    def _watch(self) -> None:
        while True:
            with self._lock:
                if not self._running:
                    self._thread = None
                    return
            time.sleep(self.every)
            with self._lock:
                calls = list(self._running.values())
            for running in calls:
                try:
                    _look(running)
                except Exception:  # a look that fails is tried again; the call goes on
                    _log.warning("could not watch DBOS workflow %s", running.workflow_id,
                                 exc_info=True)  # fmt: skip


def _look(running: _Running) -> None:
    status = DBOS.get_workflow_status(running.workflow_id)
    if status is not None and status.status == "CANCELLED":
        running.signal.fire("the workflow was cancelled")
    fresh = running.progress.fresh()
    if fresh is not None and not running.signal.cancelled:
        running.context.run(DBOS.set_event, PROGRESS, fresh)


WATCHER = Watcher()
"""This process's watcher."""
