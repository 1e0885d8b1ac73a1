"""Plugins from other distributions: finding their entry points, loading each kind, and the
settings they are loaded with."""
