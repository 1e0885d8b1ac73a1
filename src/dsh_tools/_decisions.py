"""What policies decide about a call, and the approval an ``Ask`` asks a person for.

The pre-execute decisions (``Allow``, ``Deny``, ``Ask``), the post-execute ones
(``Accept``, ``Block``), and the approval channel's types: the request it gets, what it
may answer, and the protocol it implements. The outcomes themselves
(``ApprovalOutcome``) belong to :mod:`dsh_tools.approvals`' answers, which import nothing
of this module. Users import them from
:mod:`dsh_tools._models` (``detail_object`` from :mod:`dsh_tools.records`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs

from ._cancel import CancelSignal
from ._content import ContextMessage, content_blocks, context_messages
from ._json import FrozenDict, FrozenList, JsonValue, snapshot
from ._numbers import positive_finite
from .approvals._answers import ApprovalAnswer, ApprovalOutcome
from .errors import JsonValueError

# --------------------------------------------------------------------------- decisions


def detail_object(value: object) -> FrozenDict | None:
    """A decision's structured detail, frozen: ``None`` or a JSON object (raises
    ``TypeError`` naming what is wrong otherwise). A converter for decision classes."""
    if value is None:
        return None
    try:
        frozen = snapshot(value, "detail")
    except JsonValueError as error:
        raise TypeError(f"a decision's detail must be a JSON object: {error.message}") from None
    if type(frozen) is not FrozenDict:
        raise TypeError(f"a decision's detail must be a JSON object, got {type(value).__name__}")
    return frozen


@attrs.frozen
class Allow:
    """Pre-execute: let the call proceed (guards still run). ``detail`` (a JSON object,
    keyword only, as for ``Deny`` and ``Ask``) says what decided; decision records keep
    it (the permission rules put the deciding rule there), the model never sees it, and
    decisions compare (and show in traces) the same whatever their details."""

    detail: FrozenDict | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False, converter=detail_object
    )


@attrs.frozen
class Deny:
    """Pre-execute: refuse the call; ``reason`` becomes the model-facing error.
    ``detail`` (a JSON object) says what decided, for decision records."""

    reason: str = attrs.field(validator=attrs.validators.instance_of(str))
    detail: FrozenDict | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False, converter=detail_object
    )


def _lifetime(instance: object, attribute: object, value: Any) -> None:
    if value is None:
        return
    if not positive_finite(value):
        raise ValueError(f"expires_in_s must be a positive number of seconds, got {value!r}")


@attrs.frozen
class Ask:
    """Pre-execute: ask the approval service; anything but an allowed outcome denies.
    ``detail`` (a JSON object) says what asked, for decision records. ``expires_in_s``
    bounds how long an approval ticket opened for this ask stays open (default: the
    registry's ``approval_expiry_s``)."""

    reason: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    detail: FrozenDict | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False, converter=detail_object
    )
    expires_in_s: float | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False, validator=_lifetime
    )


PreExecuteDecision = Allow | Deny | Ask


class _Unset:
    """Marks an ``Accept`` that does not replace the value (``None`` is a valid value)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


@attrs.frozen
class Accept:
    """Post-execute: keep the result, optionally replacing its ``content`` or its ``value``.

    Replacing both at once is refused: a new value is re-rendered into content by the
    tool's output contract, so a second content would contradict it.

    New ``content`` is a redaction: the ``value`` and ``meta`` it was rendered from are
    withheld from every wire. ``bounded=True`` says the new content only shortens the
    same answer (an output limit): the value and meta are kept for the host, and a
    success stays a success on every wire.
    """

    content: FrozenList | None = attrs.field(
        default=None, converter=attrs.converters.optional(content_blocks)
    )
    value: JsonValue = attrs.field(default=_UNSET)
    additional_contexts: tuple[ContextMessage, ...] = attrs.field(
        default=(), converter=context_messages
    )
    bounded: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.bounded is not False and (self.bounded is not True or self.content is None):
            raise ValueError("Accept(bounded=True) needs the bounded content")
        if self.value is not _UNSET:
            if self.content is not None:
                raise ValueError("Accept cannot replace both value and content")
            object.__setattr__(self, "value", snapshot(self.value))

    @property
    def replaces_value(self) -> bool:
        """True when this decision carries a replacement value."""
        return self.value is not _UNSET


@attrs.frozen
class Block:
    """Post-execute: withhold the result; ``feedback`` becomes the error content verbatim."""

    feedback: FrozenList = attrs.field(converter=content_blocks)
    additional_contexts: tuple[ContextMessage, ...] = attrs.field(
        default=(), converter=context_messages
    )


PostExecuteDecision = Accept | Block


# --------------------------------------------------------------------------- approval


@attrs.frozen
class ApprovalRequest:
    """What an approval service is asked: which agent wants to run which call, and why."""

    agent: str
    tool_name: str
    call_id: str
    arguments: FrozenDict
    reason: str | None
    signal: CancelSignal | None
    earlier_attempt: FrozenDict | None = None
    """An earlier attempt of the same call whose outcome is unknown (it may have run):
    its ``key``, ``call_id``, ``started_at`` and ``owner``, from the call journal;
    ``None`` when there is none. A channel that shows it to the person (see
    :meth:`ApprovalService.request`) settles it with an allowing answer."""


ApprovalReply = ApprovalOutcome | str | ApprovalAnswer
"""What an approval service may answer."""


class ApprovalService(Protocol):
    """Answers ``Ask`` decisions, for example by prompting a person in an editor: with an
    :class:`ApprovalOutcome`, its value as a plain ``str``, or an
    :class:`~dsh_tools.approvals.ApprovalAnswer` (anything else fails the call closed).

    A service may also have ``answers_now(request) -> bool``: ``True`` when a person can
    answer this request now (an MCP client that elicits, a terminal). Such a service is
    asked even when an approval ticket of the same call is still pending, and a person's
    answer closes that ticket; without the method, the call waits on the ticket.

    A service may also have ``shows_earlier_attempt(request) -> bool``: ``True`` when the
    person who answers ``request`` is shown its ``earlier_attempt`` (the MCP elicitation
    does). Their allowing answer then runs the call although that attempt may have run,
    as approving a ticket that shows it does; without the method (or with ``False``), a
    tool that cannot settle the attempt itself ends ``OUTCOME_UNKNOWN``."""

    def request(self, request: ApprovalRequest) -> Awaitable[ApprovalReply] | ApprovalReply: ...


ApprovalChannel = (
    ApprovalService | Callable[[ApprovalRequest], "Awaitable[ApprovalReply] | ApprovalReply"]
)
"""What ``ToolRegistry(approval=...)`` takes: a service, or a plain function (sync or
``async def``) that answers as :meth:`ApprovalService.request` does."""
