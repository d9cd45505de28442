"""GET /inspector: the memory inspector page, a person's view into one agent's
memory (search with the explain breakdown, a memory with its full text, its
nexus-key neighbourhood as a graph, its episode and roles, PLAYBOOK.md, stats
over time). Plain HTML, CSS and JavaScript shipped as package data: no build
step, nothing fetched from another origin. The page calls the API's own routes
with the key a person types in (kept in the tab's sessionStorage).

The three files are read once when the routes are built and served from an
allowlist (no path from a request ever reaches the file system), each with a
content hash as its ETag; the page itself carries a Content-Security-Policy that
allows only this origin, because it shows text agents stored (never parsed as
HTML by the script; the policy is the second line of defence)."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from grimoire.infra.http.errors import ApiError, json_response

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "PAGE", "StaticAsset", "inspector_routes"]

logger = logging.getLogger(__name__)

PACKAGE: Final = "grimoire.infra.http"
FOLDER: Final = "static"
PAGE: Final = "inspector.html"
#: The files under /inspector/static/ and their media types.
ASSETS: Final = {
    "inspector.js": "text/javascript; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
}
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    # Revalidate every load (the ETag makes that a 304): an upgrade shows at once.
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True, slots=True)
class StaticAsset:
    body: bytes
    media_type: str

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'

    def response(self, request: Request, extra: dict[str, str] | None = None) -> Response:
        headers = {**_HEADERS, "ETag": self.etag, **(extra or {})}
        if self.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def _read(name: str, media_type: str) -> StaticAsset:
    body = resources.files(PACKAGE).joinpath(FOLDER, name).read_bytes()
    return StaticAsset(body, media_type)


def inspector_routes() -> list[Route | Mount]:
    """GET /inspector (the page) and GET /inspector/static/{name} (its script and
    style sheet). Plain routes (no Mount), so they list like every API route."""
    page = _read(PAGE, "text/html; charset=utf-8")
    assets = {name: _read(name, media_type) for name, media_type in ASSETS.items()}

    async def inspector_page(request: Request) -> Response:
        return page.response(request, {"Content-Security-Policy": CONTENT_SECURITY_POLICY})

    async def inspector_asset(request: Request) -> Response:
        name = str(request.path_params["name"])
        asset = assets.get(name)
        if asset is None:
            refused = ApiError(404, "not_found", f"no inspector file {name!r}")
            return json_response(refused.body(), refused.status)
        return asset.response(request)

    return [
        Route("/inspector", inspector_page, methods=["GET"]),
        Route("/inspector/static/{name}", inspector_asset, methods=["GET"]),
    ]
