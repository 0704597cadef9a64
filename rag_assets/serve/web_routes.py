"""The page for people at ``/``: search, chat and index status in a browser, served by ``rag serve``.

The page is plain HTML, CSS and JavaScript modules shipped in the package
(``rag_assets/serve/web/``; no build step). It talks to the same JSON routes as any other
client (``/search``, ``/status``, ``/ask``), with URLs relative to the page, so it also works
behind a reverse proxy that serves the API under a path prefix.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

WEB_DIR = Path(__file__).with_name("web")
ASSETS_PREFIX = "/web"

# The page loads nothing but its own files, so a strict policy costs nothing and keeps a
# malicious note (its text is shown on the page) from running or loading anything.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on a form's
    # POST (the sign-in form), which the cross-site guard must refuse; other sites still get nothing.
    "Referrer-Policy": "same-origin",
    # The page shows private notes on a loopback server: a shared or back-button cache must not keep them.
    "Cache-Control": "no-store",
}


class _WebAssets(StaticFiles):
    """The page's CSS and JavaScript, with the same security headers as the page."""

    async def get_response(self, path: str, scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"  # revalidated (ETag), so an upgrade shows at once
        return response


async def index_page(request: Request) -> Response:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


def web_routes() -> list[BaseRoute]:
    """``GET /`` (the page) and ``/web/...`` (its assets), to add to the API's routes."""
    return [
        Route("/", index_page, methods=["GET"]),
        Mount(ASSETS_PREFIX, app=_WebAssets(directory=WEB_DIR), name="web"),
    ]
