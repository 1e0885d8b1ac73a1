"""dsh-tools: host LLM tools as plugins and run every call through a guarded pipeline."""

from ._version import __version__

__all__ = ["__version__"]
