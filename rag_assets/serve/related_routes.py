"""``GET /related``: a note's links, backlinks and nearest notes by vector, each with the reason.

``/related?note=<collection/slug | slug | title>&tier=public&collection=<vault>&k=5`` answers
:meth:`rag_assets.search.related.Related.to_json` with ``tier``. The tier is opened through
:meth:`rag_assets.serve.tiers.Tiers.index`, as ``/search`` opens it, so the same access rules
hold: the caller's scopes (401/403), the Private tier only where the server serves it (403).
On the Safe tier the note's name is sanitised first, as a question is (the store's names are
sanitised). Errors are ``{"error"}``: 400 for a bad parameter or an unknown note.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rag_assets.index.params import SearchError
from rag_assets.search.related import DEFAULT_SIMILAR, MAX_SIMILAR, related_notes
from rag_assets.serve.access import TierDenied
from rag_assets.serve.http_params import MAX_QUERY_CHARS, check_known, int_param, single
from rag_assets.serve.tiers import BadRequest, Refused, Tiers

RELATED_PARAMS = ("note", "tier", "collection", "k")


def related_routes(tiers: Tiers) -> list[Route]:
    """The ``/related`` route over the server's tiers."""

    def work(request: Request) -> dict[str, Any]:
        """The blocking part: parameters checked, the tier opened through its gate, the note's neighbours."""
        check_known(request, RELATED_PARAMS)
        note = (single(request, "note") or "").strip()
        if not note or len(note) > MAX_QUERY_CHARS:
            raise BadRequest("note is required: collection/slug as search hits give it, a slug, or a title")
        tier = single(request, "tier") or "public"
        k = int_param(request, "k", 0, MAX_SIMILAR)
        index = tiers.index(tier, request)  # the caller's scopes are checked here
        related = related_notes(
            index,
            tiers.question(tier, note),
            collection=single(request, "collection"),
            k=DEFAULT_SIMILAR if k is None else k,
        )
        return {"tier": tier, **related.to_json()}

    async def get(request: Request) -> JSONResponse:
        """Run ``work`` in the thread pool; expected failures become 400/401/403 with ``{"error"}``."""
        try:
            return JSONResponse(await run_in_threadpool(work, request))
        except Refused as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except TierDenied as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except (BadRequest, SearchError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return [Route("/related", get, methods=["GET"])]
