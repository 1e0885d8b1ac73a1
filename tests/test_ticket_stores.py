"""The store contract (``tests/store_contract.py``) on the memory and SQLite stores, and
what only the SQLite store does: tickets shared by every process that opens the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_tools.approvals import MemoryApprovalStore
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from store_contract import StoreContract, entry


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> MemoryApprovalStore:
        return MemoryApprovalStore()


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> SqliteApprovalStore:
        return SqliteApprovalStore(tmp_path / "approvals.sqlite3", poll_s=0.01)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_journal_s_retention_is_set_where_the_store_is_made(kind: str, tmp_path: Path) -> None:
    def made(retention: object) -> Any:
        if kind == "memory":
            return MemoryApprovalStore(journal_retention_s=retention)  # type: ignore[arg-type]
        return SqliteApprovalStore(tmp_path / "a.sqlite3", journal_retention_s=retention)  # type: ignore[arg-type]

    store = made(0.0)  # keep nothing once it finished
    assert store.begin_call(entry(), 60.0).started
    assert store.finish_call("coder", "key-1", "owner-1", "done")
    assert store.prune_calls() == 1
    with pytest.raises(ValueError, match="journal_retention_s must be a finite number"):
        made(-5)
