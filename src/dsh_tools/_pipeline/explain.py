"""The policy dry run: what would happen to a call, without running any of it.

:func:`explain` runs the stages that decide, pre-execute and then the guards, and the body
step's checks (the tool exists, its arguments validate, its preflight passes), on a copy of
the scope's plan that keeps every step (:meth:`dsh_tools._pipeline.plan.Plan.dry_run`).
It never asks the approval service, and never runs a wrapper, the body, post-execute or
an observer. The execution it shows the plugins has ``dry_run=True``, so a deciding
plugin with a side effect (the audit log's guard) skips it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._models import Ask, Deny, ToolExecutionInput
from ..errors import ErrorCode, JsonValueError
from ..records import DecisionStep, Explanation
from .approval import ALLOW, approval_keys, refusal, remembered, unroutable, unrunnable
from .call import Call, Handle, Interrupted, StageFailed, frozen_arguments
from .stages import first_decision, guard

if TYPE_CHECKING:
    from .plan import Plan


async def explain(plan: Plan, handle: Handle, call: ToolExecutionInput) -> Explanation:
    """What a real call would come to: ``run``, ``deny``, ``ask``, ``invalid`` or
    ``refused``."""
    state = Call(
        plan.dry_run(), handle, call, frozen_arguments(call.arguments), plan.tools.get(call.name)
    )
    state.begin(dry_run=True)
    state.trace("call", None, "entered")
    arguments = state.arguments
    if isinstance(arguments, JsonValueError):
        failure = state.not_json(arguments)
        return _explained(state, "invalid", failure.error.message, failure.code)
    approved: Explanation | None = None
    try:
        decision = await first_decision(state) if state.plan.pre else ALLOW
        if isinstance(decision, Ask):
            # Nobody is asked about a call that would be refused whatever the answer (it
            # cannot run, its tool refuses it, a guard denies it); nobody to ask is a
            # denial; a remembered answer decides without asking.
            asked = _steps(state)[-1]
            approved = await _unfit(state) or await _after_policy(state, checked=True)
            if approved.outcome != "run":
                return approved
            known = unroutable(state, decision) or remembered(state, approval_keys(state))
            decision = known or decision
    except StageFailed as failed:
        return _explained(state, "deny", failed.result.error.message, failed.result.code, True)
    except Interrupted:
        return _explained(state, "deny", "the call was cancelled", ErrorCode.ABORTED, True)
    if isinstance(decision, Deny):
        return _denied(state, decision.reason)
    if isinstance(decision, Ask):
        return Explanation("ask", decision.reason, None, asked, approved, _steps(state))
    return approved or await _after_policy(state)


async def _unfit(call: Call) -> Explanation | None:
    """Why the call could not run whatever a person answered (``invalid``: the tool or
    its arguments; ``refused``: the tool's preflight), or ``None``."""
    unfit = unrunnable(call)
    if unfit is not None:
        return _explained(call, "invalid", unfit.error.message, unfit.code)
    try:
        refused = await refusal(call)
    except Interrupted:
        return _explained(call, "deny", "the call was cancelled", ErrorCode.ABORTED, True)
    if refused is not None:
        return _explained(call, "refused", refused.error.message, refused.code)
    return None


async def _after_policy(call: Call, *, checked: bool = False) -> Explanation:
    """The guards, then the body step's checks (unless ``checked`` already), for a call
    policy allowed (or would ask about)."""
    try:
        reason = guard(call) if call.plan.guards else None
    except StageFailed as failed:
        return _explained(call, "deny", failed.result.error.message, failed.result.code, True)
    if reason is not None:
        return _denied(call, reason)
    unfit = None if checked else await _unfit(call)
    return unfit or Explanation("run", steps=_steps(call))


def _denied(call: Call, reason: str) -> Explanation:
    """A denial, unless the call could not run anyway: then what the call reports."""
    unfit = unrunnable(call, unknown=False)
    if unfit is not None:
        return _explained(call, "invalid", unfit.error.message, unfit.code)
    return _explained(call, "deny", reason, ErrorCode.DENIED, True)


def _explained(
    call: Call, outcome: str, reason: str, code: str | ErrorCode, by_last_step: bool = False
) -> Explanation:
    """An explanation whose deciding step, if a plugin decided, is the last one taken."""
    steps = _steps(call)
    decided = steps[-1] if by_last_step and len(steps) > 1 else None
    text = code.value if isinstance(code, ErrorCode) else code
    return Explanation(outcome, reason, text, decided, None, steps)


def _steps(call: Call) -> tuple[DecisionStep, ...]:
    """Every step the dry run has taken so far."""
    return call.decision_record().steps
