"""The admin console of ``rag serve``: the page at ``/admin`` and its JSON API.

Routes (every one needs the scope ``admin``: a loopback client has it, a remote one only
with a token that grants it; without it the API answers 403 and the page a plain 403 page)::

    GET  /admin, /admin/rag (redirects)  the page (rag_assets/serve/web/admin.html)
    GET  /admin/api/overview     one card per tier, the services, where runs show
    GET  /admin/api/actions      the recent admin actions, newest first
    POST /admin/api/vaults/add     {"name", "path", "tier": "safe"|"private"}  -> the new vault list
    POST /admin/api/vaults/remove  {"name"}
    POST /admin/api/ingest       {"tier": "safe"|"private"}  -> {"runId", "runUrl"} at once
    GET  /admin/api/runs/<id>    the run's status in the Dagster instance
    POST /admin/api/audit        {"tier": "safe"}  -> the leak audit (masked previews)

POST bodies are JSON sent as ``Content-Type: application/json`` (else 415); bad input is a
400 saying what to do, a second ingest of a tier still running a 409. Every POST is logged,
refusals too, with who and when (:mod:`rag_assets.index.admin_actions`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.authentication import has_required_scope, requires
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from rag_assets.config import RagConfig
from rag_assets.config.vault_edit import VaultEditRefused
from rag_assets.index.admin_actions import AdminAction, recent_actions, record_action
from rag_assets.privacy.vault_file import add_vault_to_file, remove_vault_from_file
from rag_assets.serve.admin_overview import audit_tier, current_config, overview
from rag_assets.serve.web_routes import SECURITY_HEADERS, WEB_DIR

log = logging.getLogger("rag_assets.serve.admin_routes")

ADMIN_SCOPE = "admin"
MAX_BODY_BYTES = 16 * 1024
RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
FORBIDDEN_PAGE = """<!doctype html><html lang="en"><meta charset="utf-8"><title>Admin: not allowed</title>
<h1>403: the admin console needs the scope admin</h1>
<p>Open it on the machine the server runs on (loopback), or <a href="/login">log in</a> with a token that grants admin.</p>
</html>"""


class AdminError(Exception):
    """A request the console refuses; ``status`` is its HTTP status (400, 409, 413, 415)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def admin_routes(cfg: RagConfig) -> list[BaseRoute]:
    """The console's routes, for ``create_app``'s route list."""
    console = AdminConsole(cfg)
    return [
        Route("/admin", console.page, methods=["GET"], name="admin_page"),
        Route("/admin/rag", console.to_page, methods=["GET"]),
        Route("/admin/api/overview", console.overview, methods=["GET"]),
        Route("/admin/api/actions", console.actions, methods=["GET"]),
        Route("/admin/api/vaults/add", guard(console.add_vault), methods=["POST"]),
        Route("/admin/api/vaults/remove", guard(console.remove_vault), methods=["POST"]),
        Route("/admin/api/ingest", guard(console.ingest), methods=["POST"]),
        Route("/admin/api/runs/{run_id}", console.run, methods=["GET"]),
        Route("/admin/api/audit", guard(console.audit), methods=["POST"]),
    ]


class AdminConsole:
    """The console's endpoints over one server's configuration and its ingest launcher."""

    def __init__(self, cfg: RagConfig) -> None:
        # Dagster takes seconds to import: only a server (not every `rag` command) pays it.
        from rag_assets.defs.launch import IngestLauncher, LaunchRefused

        self.cfg = cfg
        self.launcher = IngestLauncher()
        self.refusals: tuple[type[Exception], ...] = (VaultEditRefused, AdminError, LaunchRefused)
        # Beside the outputs (like the build's locks), not beside rag.yaml in the user's folder.
        self.lock = cfg.data_dir / "rag-yaml.lock"

    # --- pages -------------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        # Not `requires`: a person without the scope gets a page saying so, not a JSON error.
        if not has_required_scope(request, [ADMIN_SCOPE]):
            return HTMLResponse(FORBIDDEN_PAGE, status_code=403, headers=SECURITY_HEADERS)
        return FileResponse(WEB_DIR / "admin.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    async def to_page(self, request: Request) -> Response:
        return RedirectResponse(request.url_for("admin_page").path, status_code=307)

    # --- reading -----------------------------------------------------------------------------

    @requires(ADMIN_SCOPE, status_code=403)
    async def overview(self, request: Request) -> JSONResponse:
        return await self.answer(lambda: overview(current_config(self.cfg)))

    @requires(ADMIN_SCOPE, status_code=403)
    async def actions(self, request: Request) -> JSONResponse:
        return await self.answer(lambda: {"actions": [a.to_json() for a in recent_actions(self.cfg.public_store_path)]})

    @requires(ADMIN_SCOPE, status_code=403)
    async def run(self, request: Request) -> JSONResponse:
        run_id = request.path_params["run_id"]
        if not RUN_ID.match(run_id):
            return error(400, f"{run_id[:60]!r} is not a run id (a UUID such as the ingest answered)")
        return await self.answer(lambda: self.launcher.progress(run_id) | {"runUrl": self.run_url(run_id)})

    # --- actions (each one logged) -----------------------------------------------------------

    @requires(ADMIN_SCOPE, status_code=403)
    async def add_vault(self, request: Request) -> JSONResponse:
        body = await read_admin_body(request, required=("name", "path", "tier"))
        name, tier = body["name"], body["tier"]

        def work() -> dict[str, Any]:
            running = current_config(self.cfg)
            edit = add_vault_to_file(
                config_file(self.cfg), name=name, path=body["path"], tier=tier, running=running, lock=self.lock
            )
            return {"added": name, "tier": tier, "vaults": [v.name for v in edit.cfg.vaults]}

        return await self.logged(request, "add_vault", work, tier=tier, target=name)

    @requires(ADMIN_SCOPE, status_code=403)
    async def remove_vault(self, request: Request) -> JSONResponse:
        name = (await read_admin_body(request, required=("name",)))["name"]
        tier = await run_in_threadpool(
            lambda: next((v.tier for v in current_config(self.cfg).vaults if v.name == name), None)
        )

        def work() -> dict[str, Any]:
            edit = remove_vault_from_file(config_file(self.cfg), name=name, lock=self.lock)
            return {"removed": name, "vaults": [v.name for v in edit.cfg.vaults]}

        return await self.logged(request, "remove_vault", work, tier=tier, target=name)

    @requires(ADMIN_SCOPE, status_code=403)
    async def ingest(self, request: Request) -> JSONResponse:
        tier = (await read_admin_body(request, required=("tier",)))["tier"]

        def work() -> dict[str, Any]:
            run_id = self.launcher.launch(current_config(self.cfg), vault_tier(tier), who(request))
            return {"runId": run_id, "tier": tier, "runUrl": self.run_url(run_id)}

        return await self.logged(
            request, "ingest", work, tier=tier, outcome="started", detail_of=lambda out: out["runId"]
        )

    @requires(ADMIN_SCOPE, status_code=403)
    async def audit(self, request: Request) -> JSONResponse:
        tier = (await read_admin_body(request, required=("tier",)))["tier"]

        def work() -> dict[str, Any]:
            if tier not in ("safe", "public"):
                raise AdminError("audit the safe tier (or public); the private tier is never sent anywhere")
            return audit_tier(current_config(self.cfg), tier)

        def detail(out: dict[str, Any]) -> str:
            return f"{out['total']} finding(s) in {out['chunksScanned']} chunks"

        return await self.logged(request, "audit", work, tier=tier, detail_of=detail)

    # --- helpers -----------------------------------------------------------------------------

    def run_url(self, run_id: str) -> str:
        return f"{current_config(self.cfg).serve.dagster_url}/runs/{run_id}"

    async def answer(self, work: Callable[[], dict[str, Any]]) -> JSONResponse:
        try:
            return JSONResponse(await run_in_threadpool(work))
        except self.refusals as exc:
            return error(getattr(exc, "status", 400), str(exc))

    async def logged(
        self,
        request: Request,
        action: str,
        work: Callable[[], dict[str, Any]],
        *,
        tier: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail_of: Callable[[dict[str, Any]], str] | None = None,
    ) -> JSONResponse:
        """Run ``work`` in the thread pool, log the action (refused or done) and answer."""
        try:
            out = await run_in_threadpool(work)
        except self.refusals as exc:
            await run_in_threadpool(
                self.log_action, request, action, "refused", tier=tier, target=target, detail=str(exc)
            )
            return error(getattr(exc, "status", 400), str(exc))
        detail = detail_of(out) if detail_of else None
        await run_in_threadpool(self.log_action, request, action, outcome, tier=tier, target=target, detail=detail)
        return JSONResponse(out)

    def log_action(self, request: Request, action: str, outcome: str, **fields: Any) -> None:
        try:
            record_action(self.cfg.public_store_path, AdminAction(who(request), action, outcome, **fields))
        except Exception:  # the log must never turn a done action into an error
            log.warning("could not log the admin action %s", action, exc_info=True)


def who(request: Request) -> str:
    """The requester's name: a token's, ``loopback``; "anonymous" without one."""
    return getattr(request.user, "display_name", "") or "anonymous"


def guard(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """A body the console cannot use (AdminError raised while reading it) as its 4xx."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except AdminError as exc:
            return error(exc.status, str(exc))

    return guarded


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def config_file(cfg: RagConfig):
    if cfg.config_path is None:
        raise AdminError("the server runs without a rag.yaml (built-in defaults): there is no file to add a vault to")
    return cfg.config_path


def vault_tier(value: str) -> str:
    if value not in ("safe", "private"):
        raise AdminError(f"tier must be safe or private (got {value[:40]!r}); the public tier is built by `rag build`")
    return value


async def read_admin_body(request: Request, required: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of a POST, with exactly the ``required`` keys as text; AdminError otherwise."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise AdminError("send the body as Content-Type: application/json", 415)
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise AdminError(f"the request body is over {MAX_BODY_BYTES} bytes", 413)
    example = "{" + ", ".join(f'"{key}": "..."' for key in required) + "}"
    try:
        body = orjson.loads(raw or b"null")
    except ValueError:
        raise AdminError(f"the body must be JSON, e.g. {example}") from None
    if not isinstance(body, dict):
        raise AdminError(f"the body must be a JSON object, e.g. {example}")
    unknown = sorted(set(body) - set(required))
    missing = [key for key in required if not isinstance(body.get(key), str) or not body[key].strip()]
    if unknown or missing:
        problem = f"unknown key(s) {', '.join(unknown)}" if unknown else f"missing or empty {', '.join(missing)}"
        raise AdminError(f"{problem}; send {example}")
    return body
