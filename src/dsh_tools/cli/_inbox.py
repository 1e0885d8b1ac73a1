"""The approval inbox: a small web app where a person answers pending approval tickets.

One page lists the pending tickets with their cards; each can be approved once or always,
or rejected with feedback for the model. The list follows the store: the page polls a
fragment once a second (with an ``ETag``, so an unchanged list costs a 304) and adds and
removes cards without touching what a person is typing.

Who may use it:

* a random token, printed once with the URL, is required on every request but the bare
  page (which holds no ticket): ``401`` without it. The printed URL carries it in its
  *fragment* (``/#token=...``), which a browser never sends to any server; the page's
  script moves it to ``sessionStorage`` (per origin: scheme, host *and port*), drops it
  from the address and sends it as ``Authorization: Bearer ...``. No cookie holds it:
  cookies ignore ports, so every other port of 127.0.0.1 would receive one;
* on loopback (the default) only a loopback ``Host`` header is accepted, so a page
  elsewhere cannot reach the inbox through DNS rebinding;
* an answer (a ``POST``) must prove it comes from the inbox's own page: its ``Origin``
  must be the inbox's own, or its ``Sec-Fetch-Site`` ``same-origin``; a ``POST`` with
  neither, or with another origin or site, is refused. A page served from another port
  of the same machine is same-*site* but not same-origin; it can neither read the token
  nor send the header without a CORS preflight, which the inbox never grants.

Every response forbids framing and caching, and the page runs only its own inline script
and style (a per-response CSP nonce); no asset comes from anywhere else.

:func:`serve_inbox` runs it; ``dsh-tools approvals serve`` is how a person starts it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlencode

import anyio
import attrs

from .._models import ApprovalOutcome
from .._safetext import safe_text
from ..approvals import (
    ApprovalTicket,
    TicketAnswer,
    TicketError,
    TicketNotFoundError,
    TicketState,
    TicketStore,
)
from ._inbox_page import LASTS, fragment, page

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["CHANNEL", "InboxSecrets", "build_app", "serve_inbox"]

_ANSWERS = {
    ApprovalOutcome.ALLOWED_ONCE.value: ApprovalOutcome.ALLOWED_ONCE,
    ApprovalOutcome.ALLOWED_ALWAYS.value: ApprovalOutcome.ALLOWED_ALWAYS,
    ApprovalOutcome.REJECTED.value: ApprovalOutcome.REJECTED,
}
"""What the page's buttons send, and the outcome each means."""

T = TypeVar("T")
_MAX_FEEDBACK = 2000
CHANNEL = "inbox"
"""The channel the inbox's answers name."""
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


@attrs.frozen
class InboxSecrets:
    """The inbox's token: what a person (the inbox's own page) must present; random
    unless given."""

    token: str = attrs.field(factory=lambda: secrets.token_urlsafe(24), repr=False)

    def token_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())


def _headers(nonce: str | None = None) -> dict[str, str]:
    """Headers every response carries: no framing, no caching, only our own script."""
    own = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {own}; style-src {own}; connect-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",  # "no-referrer" makes a form's Origin "null"
        "Cache-Control": "no-store",
    }


def _etag(tickets: Sequence[ApprovalTicket]) -> str:
    digest = hashlib.sha256("\n".join(ticket.id for ticket in tickets).encode())
    return '"' + digest.hexdigest()[:32] + '"'


def _host_ok(host: str | None, port: int) -> bool:
    return host is not None and host in {f"{name}:{port}" for name in _LOOPBACK_HOSTS}


class _Inbox:
    """The request handlers, sharing the store, the secrets and the listening port."""

    def __init__(
        self, store: TicketStore, secrets_: InboxSecrets, port: int, loopback: bool
    ) -> None:
        self.store = store
        self.secrets = secrets_
        self.port = port
        self.loopback = loopback

    def refused(self, request: Request, *, token: bool = True) -> Response | None:
        """The response that turns ``request`` away, or ``None`` when it may go on; the
        token is read from the ``Authorization`` header only (never a cookie or query)."""
        from starlette.responses import PlainTextResponse

        if self.loopback and not _host_ok(request.headers.get("host"), self.port):
            return PlainTextResponse("unknown host", 421, headers=_headers())
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if token and not (scheme.lower() == "bearer" and self.secrets.token_ok(bearer)):
            return PlainTextResponse(_NO_TOKEN, 401, headers=_headers())
        return None

    def cross_origin(self, request: Request) -> bool:
        """Whether a ``POST`` fails to prove it came from the inbox's own page: it must
        name this origin in ``Origin`` or say ``Sec-Fetch-Site: same-origin``, and
        neither header may name anywhere else."""
        fetch_site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        if fetch_site is None and origin is None:
            return True
        own = f"{request.url.scheme}://{request.url.netloc}"
        return fetch_site not in (None, "same-origin") or origin not in (None, own)

    async def home(self, request: Request) -> Response:
        """The page itself: no ticket and no token in it (its script fetches both)."""
        from starlette.responses import HTMLResponse

        turned_away = self.refused(request, token=False)
        if turned_away is not None:
            return turned_away
        nonce = secrets.token_urlsafe(16)
        return HTMLResponse(page(nonce), headers=_headers(nonce))

    async def tickets(self, request: Request) -> Response:
        from starlette.responses import HTMLResponse, Response

        turned_away = self.refused(request)
        if turned_away is not None:
            return turned_away
        tickets = await _stored(self.pending)
        etag = _etag(tickets)
        headers = {**_headers(), "ETag": etag}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return HTMLResponse(fragment(tickets), headers=headers)

    async def answer(self, request: Request) -> Response:
        """One answer, posted by the page's script; the reply is the sentence it shows."""
        from starlette.responses import PlainTextResponse

        turned_away = self.refused(request)
        if turned_away is not None:
            return turned_away
        if self.cross_origin(request):
            return PlainTextResponse("cross-origin request refused\n", 403, headers=_headers())
        form = await request.form(max_files=0, max_fields=8)
        outcome = _ANSWERS.get(str(form.get("outcome", "")))
        lasts = LASTS.get(str(form.get("lasts", "")))
        if outcome is None or lasts is None:
            return PlainTextResponse("unknown answer\n", 400, headers=_headers())
        feedback = str(form.get("feedback", "")).strip()[:_MAX_FEEDBACK] or None
        ticket = request.path_params["ticket"]
        who = f"web ({request.client.host})" if request.client else "web"
        ends = lasts[1:] if outcome is ApprovalOutcome.ALLOWED_ALWAYS else (None, None)
        answer = TicketAnswer(
            outcome, who, CHANNEL, feedback=feedback, expires_in_s=ends[0], uses=ends[1]
        )
        status = await self._answered(ticket, answer)
        said = _STATUS_TEXT[status].format(ticket=safe_text(ticket), answered=outcome.value)
        return PlainTextResponse(said, _STATUS_CODE[status], headers=_headers())

    def pending(self) -> Sequence[ApprovalTicket]:
        return self.store.list_tickets(state=TicketState.PENDING)

    async def _answered(self, ticket: str, answer: TicketAnswer) -> str:
        try:
            await _stored(self.store.answer_ticket, ticket, answer)
        except TicketNotFoundError:
            return "unknown"
        except TicketError:
            return "late"  # answered elsewhere first, or expired
        return "ok"


class _StoreFailed(Exception):
    """The ticket store could not be read or written: the inbox answers ``503`` and
    nothing is answered."""


async def _stored(operation: Callable[..., T], *arguments: object) -> T:
    """``operation`` on the store, in a worker thread (stores block); a failure other
    than a ticket's own (:class:`TicketError`) becomes :class:`_StoreFailed`."""
    try:
        return await anyio.to_thread.run_sync(operation, *arguments)
    except TicketError:
        raise
    except Exception as error:
        raise _StoreFailed(f"{type(error).__name__}: {error}") from error


async def _store_failed(request: Request, error: Exception) -> Response:
    from starlette.responses import PlainTextResponse

    text = f"the approvals store cannot be used; nothing was answered: {error}"
    return PlainTextResponse(safe_text(text) + "\n", 503, headers=_headers())


_STATUS_TEXT = {
    "ok": "Ticket {ticket}: {answered}.",
    "late": "Ticket {ticket} was answered or expired before this answer: nothing changed.",
    "unknown": "There is no ticket {ticket}.",
}
"""What the page shows after an answer, by what became of it."""
_STATUS_CODE = {"ok": 200, "late": 409, "unknown": 404}
_NO_TOKEN = "a token is required: open the URL the inbox printed when it started\n"


def build_app(
    store: TicketStore, secrets_: InboxSecrets, *, port: int, loopback: bool = True
) -> Starlette:
    """The inbox as a Starlette app for a server listening on ``port``; ``loopback``
    accepts only loopback ``Host`` headers."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    inbox = _Inbox(store, secrets_, port, loopback)
    return Starlette(
        exception_handlers={_StoreFailed: _store_failed},
        routes=[
            Route("/", inbox.home, methods=["GET"]),
            Route("/tickets", inbox.tickets, methods=["GET"]),
            Route("/tickets/{ticket}", inbox.answer, methods=["POST"]),
        ],
    )


async def serve_inbox(
    store: TicketStore,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_remote: bool = False,
    secrets_: InboxSecrets | None = None,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the inbox at ``http://host:port/`` until cancelled (asyncio: uvicorn).

    Listens on loopback unless ``allow_remote``; ``port=0`` picks a free port. Started
    with ``task_group.start``, reports the URL to open, token included, once listening.
    """
    import uvicorn

    from ..bridges._mcp_http import _bound_socket, _run_until_cancelled, _url, is_loopback_host

    loopback = is_loopback_host(host)
    if not loopback and not allow_remote:
        raise ValueError(
            f"the inbox listens on loopback only; {host!r} is not a loopback address "
            "(pass allow_remote to serve other machines: the token is then all that guards it)"
        )
    chosen = secrets_ or InboxSecrets()
    sock = _bound_socket(host, port)
    bound = sock.getsockname()[1]
    app = build_app(store, chosen, port=bound, loopback=loopback)
    url = _url(host, bound, "/#" + urlencode({"token": chosen.token}))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    await _run_until_cancelled(uvicorn.Server(config), sock, url, task_status)
