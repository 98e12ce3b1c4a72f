"""GET /docs (Swagger UI) and GET /redoc (ReDoc): off unless `DPPROXY_INTERACTIVE_DOCS` is true.

Both pages run scripts from a public CDN on this origin, the origin whose dashboard keeps an admin key in
sessionStorage, so they are opt-in. When on, the asset versions are pinned (never a floating `@5`) and
each page is sent with a Content-Security-Policy that lets only those exact files and the page's own inline
script (by hash) run, lets the page talk to this origin only, and forbids framing, forms and plugins.
GET /openapi.json, the machine-readable contract, is always served.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

CDN = "https://cdn.jsdelivr.net/npm"
SWAGGER_JS = f"{CDN}/swagger-ui-dist@5.17.14/swagger-ui-bundle.js"
SWAGGER_CSS = f"{CDN}/swagger-ui-dist@5.17.14/swagger-ui.css"
REDOC_JS = f"{CDN}/redoc@2.1.5/bundles/redoc.standalone.js"
_FAVICON = "data:,"  # no third-party favicon request
_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


def content_security_policy(html: str, scripts: tuple[str, ...], styles: tuple[str, ...]) -> str:
    """A strict policy for `html`: the listed files plus the page's inline scripts, by their sha256.

    Example:
        >>> content_security_policy("<script>go()</script>", ("https://x.test/a.js",), ()).split("; ")[:2]
        ["default-src 'none'", "script-src https://x.test/a.js 'sha256-5KYv+PUboo5h+0+YAtGRPbwv5d/QxzHslP4YGnUaxRw='"]
    """
    inline = {kind: [f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
                     for k, body in _INLINE.findall(html) if k == kind] for kind in ("script", "style")}
    return "; ".join((
        "default-src 'none'",
        "script-src " + " ".join((*scripts, *inline["script"])),
        # both UIs set style attributes from script; styles cannot run code, so inline styles are allowed
        "style-src " + " ".join((*styles, "'unsafe-inline'")),
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src blob:",  # ReDoc's search runs in a worker built from a blob
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ))


def _page(html: str, scripts: tuple[str, ...], styles: tuple[str, ...] = ()) -> HTMLResponse:
    return HTMLResponse(html, headers={
        "Content-Security-Policy": content_security_policy(html, scripts, styles),
        "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
    })


def install(app: FastAPI) -> None:
    """Add /docs and /redoc to `app` (which must have been made with docs_url=None, redoc_url=None)."""
    router = APIRouter(include_in_schema=False)
    title = f"{app.title} - API"
    openapi_url = app.openapi_url or "/openapi.json"

    @router.get("/docs")
    async def swagger() -> HTMLResponse:
        html = get_swagger_ui_html(openapi_url=openapi_url, title=title, swagger_js_url=SWAGGER_JS,
                                   swagger_css_url=SWAGGER_CSS, swagger_favicon_url=_FAVICON).body.decode()
        return _page(html, (SWAGGER_JS,), (SWAGGER_CSS,))

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        html = get_redoc_html(openapi_url=openapi_url, title=title, redoc_js_url=REDOC_JS,
                              redoc_favicon_url=_FAVICON, with_google_fonts=False).body.decode()
        return _page(html, (REDOC_JS,))

    app.include_router(router)
