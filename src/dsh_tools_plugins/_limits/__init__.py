"""Limits: who a per-agent limit counts, budgets' spending, and permits shared by processes."""
