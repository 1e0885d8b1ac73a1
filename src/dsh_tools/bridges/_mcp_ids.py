"""Ids made per request (an MCP call's id, the scope key of a client no token names):
unique everywhere and unguessable, without a system call each.

Such an id must never repeat, in any worker or after a restart (the call journal and
the ticket store key calls by them), and nobody may predict one (a client that could
would name another's call as its idempotency key). ``os.urandom`` gives both, at the
cost of a system call on every request. Here each process draws one secret key and
numbers its ids instead: an id is the keyed BLAKE2b of its number (a pseudorandom
function: without the key, the next id is as unpredictable as a random one), distinct
numbers never give the same id within the process, and another process, or a child
forked from this one, has a key of its own.
"""

from __future__ import annotations

import hashlib
import itertools
import os

__all__ = ["unguessable_hex"]

_key = b""
_numbers = itertools.count()


def _draw_key() -> None:
    global _key, _numbers
    _key, _numbers = os.urandom(32), itertools.count()


def unguessable_hex() -> str:
    """32 hex digits (128 bits) no other id of any process has, and nobody can predict."""
    number = next(_numbers).to_bytes(8, "little")
    return hashlib.blake2b(number, key=_key, digest_size=16).hexdigest()


_draw_key()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_draw_key)
