"""Ids made per request (an MCP call's id, the scope key of a client no token names):
unique everywhere and unguessable, without a system call each.

Such an id must never repeat, in any worker or after a restart (the call journal and
the ticket store key calls by them), and nobody may predict one (a client that could
would name another's call as its idempotency key). Each id is 128 bits of the operating
system's random source; they are read :data:`BATCH` at a time, so a request rarely makes
the system call. Taking one is a single ``list.pop``, which no two threads can share;
a forked child drops the ids its parent read, so the two never hand out the same.
"""

from __future__ import annotations

import os

__all__ = ["unguessable_hex"]

BATCH = 64
"""Ids read from the random source at once (about 5 KB held at most)."""

_ready: list[str] = []


def _read_batch() -> None:
    digits = os.urandom(16 * BATCH).hex()
    _ready.extend(digits[start : start + 32] for start in range(0, len(digits), 32))


def unguessable_hex() -> str:
    """32 hex digits (128 bits) no other id of any process has, and nobody can predict."""
    try:
        return _ready.pop()
    except IndexError:
        _read_batch()
        return _ready.pop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ready.clear)
