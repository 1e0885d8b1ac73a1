"""Tool calls on durable engines: Temporal (``engines.temporal``) and DBOS (``engines.dbos``).

Each engine runs a call as one activity or step whose work is ``registry.execute`` (all
five stages, in the worker), and waits for a pending approval in the workflow, durably.
Importing this package imports neither engine, nor ``dsh_tools``.
"""
