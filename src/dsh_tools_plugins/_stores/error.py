"""The durable stores' one error, which both stores raise and the public modules
(:mod:`dsh_tools_plugins.approval_store`, :mod:`dsh_tools_plugins.approval_postgres`)
name: here, so neither store's modules import the other's."""

from __future__ import annotations

from dsh_tools.errors import DshToolsError, ErrorCode

__all__ = ["ApprovalStoreError"]


class ApprovalStoreError(DshToolsError):
    """The approval store's file could not be read or written."""

    default_code = ErrorCode.POLICY_ERROR.value
