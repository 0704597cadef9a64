"""Who may read what, the same on every way into ``rag serve``: HTTP routes, the web page and MCP.

Starlette's :class:`~starlette.middleware.authentication.AuthenticationMiddleware` runs
:class:`AccessBackend` on every request; routes then read ``request.auth.scopes`` (a list) and
``request.user.display_name``:

- a loopback client of a server bound to loopback (the default ``rag serve``): the machine's
  owner, ``["authenticated", "public", "safe", "private", "admin"]``, user ``"loopback"``;
  unless the request carries a reverse proxy's header (``Forwarded``, ``X-Forwarded-For``,
  ``X-Real-IP``, ...): through a proxy on this machine anyone's address is loopback;
- ``Authorization: Bearer <token>`` or the web page's session cookie (:mod:`.login`):
  ``["authenticated", "public", *the token's scopes]``, ``private`` only when the server was
  started with ``--allow-private-remote``; user: the token's name;
- anyone else: ``["public"]``, user ``""``.

A Bearer token that is not valid (unknown, revoked, expired, malformed) is a 401 on any route,
so a client learns at once that its credentials are wrong rather than silently reading Public.
An ``Authorization`` header of another scheme (``Basic``, from a reverse proxy's own sign-in) is
not this server's to judge: it is ignored, and opens nothing.

A tier named by a request (query parameter, JSON body, MCP tool argument) is checked by
:func:`check_tier_access`, which :meth:`rag_assets.serve.tiers.Tiers.index` calls for every
caller: a route cannot reach a tier's store without passing it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from rag_assets.config.providers import is_loopback_host
from rag_assets.serve.tokens import TokenRecord, TokenStore

AUTHENTICATED = "authenticated"
LOOPBACK_SCOPES = (AUTHENTICATED, "public", "safe", "private", "admin")
ANONYMOUS_SCOPES = ("public",)
SESSION_COOKIE = "rag_session"
CSRF_COOKIE = "rag_csrf"
CSRF_HEADER = "x-csrf-token"
# The owner's own processes (`rag mcp` over stdio, preloading at start-up): every scope.
OWNER = AuthCredentials(list(LOOPBACK_SCOPES))


class RagUser(BaseUser):
    """The caller: ``display_name`` is the token's name, ``"loopback"`` or ``""`` (anonymous);
    ``via`` says how it was recognised: loopback, bearer, cookie or anonymous."""

    def __init__(self, name: str, via: str) -> None:
        self.name = name
        self.via = via

    @property
    def is_authenticated(self) -> bool:
        return self.via != "anonymous"

    @property
    def display_name(self) -> str:
        return self.name


class TierDenied(Exception):
    """A tier this caller may not read: 401 without (valid) credentials, 403 with a token lacking the scope."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def token_scopes(record: TokenRecord, allow_private_remote: bool) -> list[str]:
    """A token holder's scopes: ``private`` only counts on a server started with allow_private_remote."""
    granted = [s for s in record.scopes if s != "private" or allow_private_remote]
    return [AUTHENTICATED, "public", *dict.fromkeys(granted)]


def scopes_of(who: Any) -> Sequence[str]:
    """The scopes of a request, an ASGI scope, AuthCredentials or a scope list. A request no
    authentication middleware has seen is anonymous: nothing vouched for it."""
    if isinstance(who, HTTPConnection):
        who = who.scope
    if isinstance(who, Mapping):
        who = who.get("auth")
    if isinstance(who, AuthCredentials):
        return who.scopes
    if isinstance(who, (list, tuple)):
        return who
    return ANONYMOUS_SCOPES


def check_tier_access(who: Any, tier: str) -> None:
    """Raise :class:`TierDenied` unless ``who`` (see :func:`scopes_of`) may read ``tier``."""
    scopes = scopes_of(who)
    if tier == "public" or tier in scopes:
        return
    signed_in = AUTHENTICATED in scopes
    if tier == "private":
        raise TierDenied(
            403 if signed_in else 401,
            "the private tier is only served to this machine (a server bound to 127.0.0.1, or `rag mcp`), or to a "
            "token with scope private on a server started with --allow-private-remote",
        )
    if signed_in:
        raise TierDenied(
            403,
            f"this token lacks scope {tier}; the server's owner can create one with "
            f"`rag token create --name NAME --scope {tier}`",
        )
    raise TierDenied(
        401,
        f"the {tier} tier needs a token with scope {tier}: send `Authorization: Bearer <token>` "
        "or sign in at /login (the server's owner creates tokens with `rag token create`)",
    )


# Headers a reverse proxy adds. Behind a proxy on this machine every client's address is
# loopback, so a request carrying one is not known to come from the owner (uvicorn replaces the
# address from X-Forwarded-For only, and keeps loopback when the header names it).
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip", "cf-connecting-ip", "true-client-ip")


def is_loopback_client(conn: HTTPConnection) -> bool:
    client = conn.client
    return client is not None and is_loopback_host(client.host or "")


def is_owner(conn: HTTPConnection) -> bool:
    """A loopback client that no proxy forwarded (see PROXY_HEADERS)."""
    return is_loopback_client(conn) and not any(name in conn.headers for name in PROXY_HEADERS)


class AccessBackend(AuthenticationBackend):
    """Scopes for each request (see the module docstring)."""

    def __init__(
        self, tokens: TokenStore | None, sessions: Any, *, bound_loopback: bool, allow_private_remote: bool
    ) -> None:
        self.tokens = tokens
        self.sessions = sessions  # rag_assets.serve.login.SessionStore
        self.bound_loopback = bound_loopback
        self.allow_private_remote = allow_private_remote

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser]:
        if self.bound_loopback and is_owner(conn):
            return AuthCredentials(list(LOOPBACK_SCOPES)), RagUser("loopback", "loopback")  # a list per request
        header = conn.headers.get("authorization")
        if header is not None and header.partition(" ")[0].lower() == "bearer":
            record = await self._bearer(header)
            return AuthCredentials(token_scopes(record, self.allow_private_remote)), RagUser(record.name, "bearer")
        session_id = conn.cookies.get(SESSION_COOKIE)
        if session_id and self.tokens is not None:
            record = self.sessions.record(session_id, self.tokens)
            if record is not None:
                return AuthCredentials(token_scopes(record, self.allow_private_remote)), RagUser(record.name, "cookie")
        return AuthCredentials(list(ANONYMOUS_SCOPES)), RagUser("", "anonymous")

    async def _bearer(self, header: str) -> TokenRecord:
        token = header.partition(" ")[2].strip()
        if not token:
            raise AuthenticationError("send the token as `Authorization: Bearer <token>`")
        record = None
        if self.tokens is not None:
            known, record = self.tokens.cached(token)
            if not known:  # scrypt: tens of milliseconds, off the event loop
                record = await run_in_threadpool(self.tokens.verify, token)
        if record is None:
            raise AuthenticationError(
                "the token is not valid (unknown, revoked or expired); ask the server's owner for a new one "
                "(`rag token create`)"
            )
        return record


def auth_error(conn: HTTPConnection, exc: Exception) -> Response:
    """The 401 for credentials that do not hold (the message never repeats the token)."""
    return JSONResponse({"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="rag"'})
