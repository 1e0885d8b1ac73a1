"""Who an MCP request comes from: the agent scope its calls run under.

A client is known, in this order, by

1. the bearer token its requests carry (``Authorization: Bearer <secret>``): its scope is
   ``mcp-`` and the first 32 hex digits of the SHA-256 of the secret, the same on every
   request, every worker process and after a restart, and nobody without the secret can
   name it (only the digest is ever kept: tickets and remembered answers hold the scope);
2. the server's one client (stdio): the scope the host gave it (``client=``, so that a
   restarted server, or one process per call, finds the tickets and answers of the
   last), else one of its own for the process's life;
3. the connection its requests share (the initialize handshake's session), with a key
   of its own no other client of any process has (``mcp-anon-<hex>``: 128 bits that
   nobody can predict, :mod:`dsh_tools.bridges._mcp_ids`);
4. nothing: a request of the per-request protocol (2026-07-28) without a token is a
   client of its own, so nothing it is answered is remembered for another request.

The scope of a client known by 3 or 4 is *anonymous* (``mcp-anon-`` and 32 such hex
digits). Anyone can be such a client again at will, so per-agent limits
(``dsh_tools_plugins.limits``) count every anonymous client of a served scope as one
agent; their answers and tickets stay each client's own.

:mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import TYPE_CHECKING, Any

import attrs
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._accounts import ANONYMOUS_PREFIX
from .._content import TextContent
from .._models import ToolExecutionFailure
from ..errors import DshToolsError, ErrorCode
from ._mcp_ids import unguessable_hex

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from .._models import ToolExecutionResult

__all__ = [
    "ANONYMOUS_PREFIX",
    "MIN_DISTINCT_CHARS",
    "MIN_SECRET_CHARS",
    "ClientIdentityError",
    "ClientScopes",
    "bearer_scope",
    "stable_scope",
    "with_identity_hint",
]

MIN_SECRET_CHARS = 32
"""The fewest characters a bearer token must have to name a client (a guessable secret
would let another client take its scope)."""
MIN_DISTINCT_CHARS = 8
"""The fewest different characters such a token must hold: 32 random hex digits hold
fewer than 8 once in about 25 million draws, a typed or patterned secret (``aaaa...``,
``abcabc...``) almost always."""
_MAKE_ONE = 'make one with `python -c "import secrets; print(secrets.token_urlsafe(32))"`'

_DOMAIN = b"dsh-tools MCP client\x00"


class ClientIdentityError(DshToolsError, ValueError):
    """A request names its client in a way that cannot be trusted (a short token)."""

    default_code = ErrorCode.POLICY_ERROR.value


def bearer_scope(authorization: str | None) -> str | None:
    """The agent scope a request's ``Authorization`` header names, or ``None`` when it
    carries no bearer token. Raises :class:`ClientIdentityError` for a token shorter
    than :data:`MIN_SECRET_CHARS`, or one that is plainly not random (fewer than
    :data:`MIN_DISTINCT_CHARS` different characters, or a shorter text repeated)."""
    if authorization is None:
        return None
    kind, _, secret = authorization.strip().partition(" ")
    if kind.lower() != "bearer":
        return None
    secret = secret.strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ClientIdentityError(
            f"the request's bearer token has {len(secret)} characters; a token that names "
            f"a client needs at least {MIN_SECRET_CHARS} ({_MAKE_ONE})"
        )
    distinct = len(set(secret))
    if distinct < MIN_DISTINCT_CHARS or secret in (secret + secret)[1:-1]:
        raise ClientIdentityError(
            f"the request's bearer token is not random (it has {distinct} different "
            f"characters{', a shorter text repeated' if distinct >= MIN_DISTINCT_CHARS else ''})"
            f"; a token that names a client needs at least {MIN_DISTINCT_CHARS} different "
            f"characters and no repeated pattern, so nobody can guess it ({_MAKE_ONE})"
        )
    digest = hashlib.sha256(_DOMAIN + secret.encode("utf-8", "surrogatepass")).hexdigest()
    return f"mcp-{digest[:32]}"


def stable_scope(*parts: str) -> str:
    """A client scope named by ``parts`` (say, a workspace and an approval store): the
    same for the same parts in every process, and nothing else's (``mcp-`` and 32 hex
    digits of a SHA-256 of its own domain, as a bearer token's is)."""
    digest = hashlib.sha256(_STABLE + "\x00".join(parts).encode("utf-8", "surrogatepass"))
    return f"mcp-{digest.hexdigest()[:32]}"


_STABLE = b"dsh-tools MCP stdio client\x00"


def _authorization(ctx: ServerRequestContext[Any]) -> str | None:
    """The ``Authorization`` header of the HTTP request behind ``ctx``, if any."""
    headers = getattr(ctx.request, "headers", None)
    value = None if headers is None else headers.get("authorization")
    return value if isinstance(value, str) else None


class ClientScopes:
    """The agent scope key of each request's client (see the module docstring).

    :param one_client: every request comes from the server's one client (stdio).
    :param client: that one client's scope key (implies ``one_client``); without it the
        client gets a random one, which a restarted server does not know.
    """

    def __init__(self, *, one_client: bool = False, client: str | None = None) -> None:
        if client is not None and (type(client) is not str or not client or "/" in client):
            raise ValueError(
                f"client must be a scope key, a non-empty string without '/', got {client!r}"
            )
        self.one_client = one_client or client is not None
        self.client = client or f"mcp-{unguessable_hex()}"
        self._keys: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()

    def key(self, ctx: ServerRequestContext[Any]) -> str:
        """The scope key of the client behind ``ctx``; raises
        :class:`ClientIdentityError` when its token cannot name it."""
        named = bearer_scope(_authorization(ctx))
        if named is not None:
            return named
        if self.one_client:
            return self.client
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # A client of its own, anonymous: nothing kept for it, one account for limits.
            return f"{ANONYMOUS_PREFIX}{unguessable_hex()}"
        session = ctx.session
        connection = getattr(session, "_connection", session)
        key = self._keys.get(connection)
        if key is None:
            key = self._keys[connection] = f"{ANONYMOUS_PREFIX}{unguessable_hex()}"
        return key

    def lasting(self, ctx: ServerRequestContext[Any]) -> bool:
        """Whether the client behind ``ctx`` is known beyond this request: by its token,
        as the one client, or by a connection that keeps a session."""
        if self.one_client or bearer_scope(_authorization(ctx)) is not None:
            return True
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return False
        connection = getattr(ctx.session, "_connection", None)
        return ctx.request is None or getattr(connection, "session_id", None) is not None


def with_identity_hint(result: ToolExecutionResult) -> ToolExecutionResult:
    """An ``APPROVAL_PENDING`` result for a client known to this request only, with a line
    saying why its repeated call will not find the ticket and what to send instead."""
    if not isinstance(result, ToolExecutionFailure) or result.code != ErrorCode.APPROVAL_PENDING:
        return result
    hint = TextContent(
        "This client's requests carry no bearer token, so each request is a client of its "
        "own: the same call made again will not find this ticket. Configure the MCP client "
        f"to send `Authorization: Bearer <secret>` (at least {MIN_SECRET_CHARS} characters, "
        "the same on every request)."
    )
    return attrs.evolve(result, content=(*result.content, hint))
