"""The dashboard's HTTP application: login and logout, the security headers every answer carries, the path prefix,
and the routes (the pages in dashboard.pages and dashboard.planning). Nothing is served without
a session except the login page, the health endpoint and the static files."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from clients.errors import PermissionDenied, TunefleetError, Unauthenticated
from dashboard import pages, planning
from dashboard.sessions import SESSION_COOKIE, Session
from dashboard.web import HERE, Dashboard, checked_form, login_redirect, page, same_origin

log = structlog.get_logger("dashboard")
# Script and style only from this server (the charts' library is shipped in static/vendor); inline style attributes
# are allowed for the bars' widths; no framing (clickjacking of the Cancel button).
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


async def login_form(request: Request) -> Response:
    dash: Dashboard = request.app.state.dashboard
    return dash.render(request, "login.html", error="")


async def login(request: Request) -> Response:
    dash: Dashboard = request.app.state.dashboard
    if not same_origin(request):
        return PlainTextResponse("cross-site login refused", status_code=403)
    token = str((await request.form()).get("token", "")).strip()
    client = dash.backends.executor(token)
    try:
        who = await run_in_threadpool(client.who_am_i)
    except (Unauthenticated, PermissionDenied):
        return dash.render(request, "login.html", status_code=401,
                           error="The executor does not know this token; ask an admin of the fleet for one.")
    except TunefleetError as exc:
        return dash.render(request, "login.html", status_code=503,
                           error=f"The executor at {dash.backends.executor_address} did not answer ({exc}).")
    session = dash.sessions.create(token, who.principal, who.team, who.role)
    log.info("dashboard.login", principal=who.principal, team=who.team, role=who.role)
    base = request.scope.get("root_path", "")
    response = RedirectResponse(f"{base}/jobs", status_code=303)
    response.set_cookie(SESSION_COOKIE, session.session_id, httponly=True, samesite="strict",
                        secure=dash.config.cookie_secure, path=base or "/")
    return response


@page
async def logout(dash: Dashboard, request: Request, session: Session) -> Response:
    if await checked_form(request, session) is None:
        return PlainTextResponse("refused: the form did not come from this dashboard", status_code=403)
    dash.sessions.end(session.session_id)
    response = login_redirect(request)
    response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path", "") or "/")
    return response


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links: the same icon the pages link (an SVG)."""
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml",
                        headers={"cache-control": "max-age=86400"})


async def home(request: Request) -> Response:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs", status_code=303)


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response (pure ASGI: streaming responses pass through untouched)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]
                message["headers"] = headers
            await send(message)
        await self.app(scope, receive, with_headers)


class PathPrefix:
    """Serves the app under `prefix` (an ingress path) whether the ingress strips it or passes it on: the app's
    links and cookie carry the prefix (root_path), and a request path arrives with it either way."""

    def __init__(self, app: Any, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and self.prefix:
            path = scope["path"]
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                path = self.prefix + path
            scope = {**scope, "root_path": self.prefix, "path": path}
        await self.app(scope, receive, send)


def create_app(dash: Dashboard, root_path: str = "") -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await dash.backends.close()

    app = Starlette(routes=[
        Route("/", home),
        Route("/healthz", healthz),
        Route("/favicon.ico", favicon),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        *pages.ROUTES,
        *planning.ROUTES,
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ], lifespan=lifespan)
    app.state.dashboard = dash
    return SecurityHeaders(PathPrefix(app, root_path))
