"""The ids an MCP server makes per request (call ids, anonymous clients' scope keys):
never the same twice, in this process or in a child forked from it."""

from __future__ import annotations

import os
import re
import sys

import pytest

from dsh_tools.bridges._mcp_ids import unguessable_hex


def test_an_id_is_32_hex_digits_and_none_repeats() -> None:
    ids = [unguessable_hex() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", made) for made in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads running
def test_a_forked_worker_never_makes_its_parents_ids() -> None:
    """A server forked into workers (after its first ids were made) must not hand out
    the ids its parent, or a sibling, hands out next: the journal keys calls by them."""
    unguessable_hex()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side, reported through the pipe
        try:
            os.write(write, " ".join(unguessable_hex() for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = set(pipe.read().split())
    os.waitpid(child, 0)
    parents = {unguessable_hex() for _ in range(50)}
    assert len(childs) == 50
    assert not childs & parents


def test_ids_differ_from_one_process_to_the_next() -> None:
    import subprocess

    program = "from dsh_tools.bridges._mcp_ids import unguessable_hex; print(unguessable_hex())"
    made = {
        subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(made) == 2
