"""The store contract (``tests/store_contract.py``) on the memory and SQLite stores, and
what only the SQLite store does: tickets shared by every process that opens the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_tools.approvals import MemoryApprovalStore
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from store_contract import StoreContract


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> MemoryApprovalStore:
        return MemoryApprovalStore()


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> SqliteApprovalStore:
        return SqliteApprovalStore(tmp_path / "approvals.sqlite3", poll_s=0.01)
