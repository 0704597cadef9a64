"""Signing the web page in with a token: ``GET /login``, ``POST /login``, ``POST /logout``, and the
CSRF guard on every state-changing request a session cookie authenticates.

``POST /login`` takes the token as a form field, verifies it like a Bearer token and sets two
cookies: ``rag_session`` (a random session id, never the token; HttpOnly, SameSite=Strict) and
``rag_csrf`` (a random value the page's script reads). Sessions are kept in memory, for
``SESSION_HOURS`` at most, and each request re-reads the session's token record, so a revoked or
expired token signs its sessions out at once; a restart signs everyone out.

CSRF: double submit. A request authenticated by the session cookie that changes state (any
method but GET, HEAD, OPTIONS) must carry the ``rag_csrf`` cookie's value in the
``X-CSRF-Token`` header (the page's fetches) or, for the login and logout forms, in a
``csrf_token`` form field; otherwise it is a 403. A page on another site can make the browser
send the cookies but cannot read ``rag_csrf`` to repeat it. Bearer requests need no CSRF token:
a browser never adds an Authorization header on its own.
"""

from __future__ import annotations

import hmac
import html
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from rag_assets.serve.access import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE
from rag_assets.serve.tokens import TokenRecord, TokenStore
from rag_assets.serve.web_routes import SECURITY_HEADERS

SESSION_HOURS = 12
MAX_SESSIONS = 10_000
MAX_FORM_BYTES = 4096
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
FORM_PATHS = ("/login", "/logout")  # they check the csrf_token form field themselves


@dataclass(frozen=True)
class Session:
    token_id: str
    expires_at: float  # time.monotonic()


class SessionStore:
    """Session id -> the token it was opened with, in memory."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, record: TokenRecord) -> str:
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:  # drop the expired ones, then the oldest
                self._sessions = {k: s for k, s in self._sessions.items() if s.expires_at > now}
                while len(self._sessions) >= MAX_SESSIONS:
                    self._sessions.pop(next(iter(self._sessions)))
            self._sessions[session_id] = Session(record.id, now + SESSION_HOURS * 3600)
        return session_id

    def record(self, session_id: str, tokens: TokenStore) -> TokenRecord | None:
        """The session's token record while both are valid, else None (and the session is dropped)."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return None
        record = tokens.find(session.token_id) if session.expires_at > time.monotonic() else None
        if record is None:
            self.close(session_id)
        return record

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


def csrf_matches(expected: str | None, given: str | None) -> bool:
    return bool(expected and given and hmac.compare_digest(expected.encode(), given.encode()))


class CsrfGuard:
    """ASGI middleware (inside the authentication middleware): 403 for a cookie-authenticated,
    state-changing request without the matching ``X-CSRF-Token`` header."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS and scope["path"] not in FORM_PATHS:
            user = scope.get("user")
            if getattr(user, "via", None) == "cookie":
                request = Request(scope)
                if not csrf_matches(request.cookies.get(CSRF_COOKIE), request.headers.get(CSRF_HEADER)):
                    response = JSONResponse(
                        {
                            "error": "missing or wrong CSRF token: a signed-in page must send the rag_csrf cookie's "
                            "value in the X-CSRF-Token header (reload the page, or sign in again at /login)"
                        },
                        status_code=403,
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _cookie_flags(request: Request) -> dict[str, Any]:
    return {"path": "/", "samesite": "strict", "secure": request.url.scheme == "https"}


def _page(body: str, csrf: str, status: int = 200) -> HTMLResponse:
    document = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in: rag-assets</title><link rel="stylesheet" href="web/app.css"></head>
<body><main class="panels"><section class="panel login-panel"><h1>Sign in</h1>{body}</section></main></body></html>"""
    return HTMLResponse(document, status_code=status, headers=SECURITY_HEADERS)


def _login_form(csrf: str, message: str = "") -> str:
    note = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    return f"""{note}
<p>The Public tier is open to everyone. The Safe tier (and the Private tier, where the server allows it)
needs a token from the server's owner (<code>rag token create</code>).</p>
<form method="post" action="login">
<input type="hidden" name="csrf_token" value="{html.escape(csrf)}">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
<p><a href="./">Back to the search</a></p>"""


def _with_csrf_cookie(response: Response, request: Request, csrf: str) -> Response:
    # Readable by the page's script on purpose (not HttpOnly): it repeats the value in X-CSRF-Token.
    response.set_cookie(CSRF_COOKIE, csrf, max_age=SESSION_HOURS * 3600, httponly=False, **_cookie_flags(request))
    return response


async def _form(request: Request) -> dict[str, str]:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            return {}
    fields = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=10)
    return {key: values[-1] for key, values in fields.items()}


def login_routes(tokens: TokenStore | None, sessions: SessionStore) -> list[Route]:
    """``GET``/``POST /login`` and ``POST /logout`` over ``tokens`` and ``sessions``."""

    async def login_page(request: Request) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        return _with_csrf_cookie(_page(_login_form(csrf), csrf), request, csrf)

    async def login(request: Request) -> Response:
        form = await _form(request)
        csrf = request.cookies.get(CSRF_COOKIE)
        if not csrf_matches(csrf, form.get("csrf_token")):
            fresh = secrets.token_urlsafe(24)
            page = _page(_login_form(fresh, "The form expired; sign in again."), fresh, 403)
            return _with_csrf_cookie(page, request, fresh)
        assert csrf is not None  # csrf_matches refuses a missing cookie
        token = form.get("token", "").strip()
        record = await run_in_threadpool(tokens.verify, token) if tokens is not None and token else None
        if record is None:
            return _page(_login_form(csrf, "That token is not valid (unknown, revoked or expired)."), csrf, 401)
        response = RedirectResponse("./", status_code=303)
        response.set_cookie(
            SESSION_COOKIE, sessions.open(record), max_age=SESSION_HOURS * 3600, httponly=True, **_cookie_flags(request)
        )
        return _with_csrf_cookie(response, request, secrets.token_urlsafe(24))  # a new value per session

    async def logout(request: Request) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE)
        given = request.headers.get(CSRF_HEADER) or (await _form(request)).get("csrf_token")
        if not csrf_matches(csrf, given):
            return JSONResponse({"error": "missing or wrong CSRF token; sign out from the page"}, status_code=403)
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            sessions.close(session_id)
        response = RedirectResponse("./", status_code=303)
        response.delete_cookie(SESSION_COOKIE, **_cookie_flags(request))
        return response

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
