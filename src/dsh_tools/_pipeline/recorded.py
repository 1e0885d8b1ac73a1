"""A result the call journal recorded, read back: what a replayed or reconciled call
answers instead of running its body.

The journal keeps a finished call's result as :func:`~dsh_tools._models.result_to_json`
made it; :func:`result_from_json` is its inverse, and :func:`marked` says in ``meta``
that the journal answered.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._content import ContextMessage
from .._json import FrozenDict, thaw
from .._models import (
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    failure_result,
)
from ..errors import ErrorCode


def marked(result: ToolExecutionResult, how: str) -> ToolExecutionResult:
    """``result`` with ``meta["journal"] = how``: the journal answered it (its body did
    not run now)."""
    meta = dict(thaw(result.meta)) if isinstance(result.meta, FrozenDict) else {}
    meta["journal"] = how
    return attrs.evolve(result, meta=meta)


def result_from_json(recorded: object) -> ToolExecutionResult:
    """A result from :func:`~dsh_tools._models.result_to_json`'s JSON (a recorded one)."""
    if not isinstance(recorded, FrozenDict):
        return failure_result("the journal holds no readable result", ErrorCode.OUTCOME_UNKNOWN)
    data: dict[str, Any] = thaw(recorded)
    contexts = tuple(
        ContextMessage(c["id"], c["content"], c.get("source"))
        for c in data.get("additionalContexts", ())
    )
    common: dict[str, Any] = {
        "content": data["content"],
        "meta": data.get("meta"),
        "additional_contexts": contexts,
        "concludes_turn": data.get("concludesTurn") is True,
    }
    error = data.get("error")
    if error is not None:
        info = ToolErrorInfo(error["info"]["name"], error["info"]["code"])
        return ToolExecutionFailure(ToolFailure(error["message"], info), **common)
    return ToolExecutionSuccess(data.get("value"), **common)
