"""First-party dsh-tools plugins: policies and reference tools, each its own module.

Reference tools, all confined to one workspace root:

* ``workspace``: :class:`~dsh_tools_plugins.workspace.Workspace`, path confinement.
* ``files``: ``read_file``, ``write_file``, ``edit_file``, ``list_dir``.
* ``search``: ``glob``, ``grep``.
* ``command``: ``run_command``; ``sandbox``: how its commands start, and what they reach.
* ``tools``: ``workspace_tools()``, all seven bound to one workspace (entry point).

Importing this package imports none of them.
"""
