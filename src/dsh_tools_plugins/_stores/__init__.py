"""The ticket stores' databases: SQLite and PostgreSQL schemas, rows and notifications."""
