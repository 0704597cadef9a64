"""A stand-in for the access control of issue 24 until it is merged: replaced by
rag_assets.serve.access on merge (drop this module and its one line in http.py).

The admin routes are guarded with ``starlette.authentication.requires("admin")``, which
needs ``request.auth``. This backend gives loopback clients the scopes the access branch
gives them (everything, ``admin`` included) and every other client ``["public"]``, so the
console works on a loopback server and is refused (403) anywhere else.
"""

from __future__ import annotations

from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser, UnauthenticatedUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

from rag_assets.config.providers import is_loopback_host

LOOPBACK_SCOPES = ["authenticated", "public", "safe", "private", "admin"]


class LoopbackAdminBackend(AuthenticationBackend):
    """Loopback clients: every scope, as user ``loopback``; anyone else: ``public`` only."""

    async def authenticate(self, conn: HTTPConnection):
        host = conn.client.host if conn.client else ""
        if host and is_loopback_host(host):
            return AuthCredentials(LOOPBACK_SCOPES), SimpleUser("loopback")
        return AuthCredentials(["public"]), UnauthenticatedUser()


def with_auth_stub(middleware: list[Middleware]) -> list[Middleware]:
    """``middleware`` plus the stub's AuthenticationMiddleware, unless one is there already."""
    if any(m.cls is AuthenticationMiddleware for m in middleware):
        return middleware
    return [*middleware, Middleware(AuthenticationMiddleware, backend=LoopbackAdminBackend())]
