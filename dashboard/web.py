"""What every page handler shares: the dashboard's state (its services, sessions, templates, sampled utilisation),
rendering and error pages, the session check, and the CSRF and same-origin check of a form that changes something."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from clients.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TunefleetError,
    Unauthenticated,
    Unavailable,
)
from dashboard.backends import Backends
from dashboard.sessions import SESSION_COOKIE, Session, SessionStore
from dashboard.utilisation import Utilisation

HERE = Path(__file__).parent
# The status a service's error becomes, and whether the page may say more than a generic line.
ERROR_STATUS = {NotFound: 404, PermissionDenied: 403, InvalidArgument: 400, FailedPrecondition: 409,
                Unavailable: 503}


@dataclass(frozen=True)
class DashboardConfig:
    cookie_secure: bool = False  # set behind HTTPS: the cookie is then never sent in plaintext
    title: str = "tunefleet"


class Dashboard:
    """What every handler shares: the services, the sessions, the templates and the sampled utilisation."""

    def __init__(self, backends: Backends, config: DashboardConfig, sessions: SessionStore | None = None,
                 utilisation: Utilisation | None = None) -> None:
        self.backends = backends
        self.config = config
        self.sessions = sessions or SessionStore()
        self.utilisation = utilisation or Utilisation()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes by default

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE, ""))

    def render(self, request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
        base = request.scope.get("root_path", "")
        return self.templates.TemplateResponse(request, template, {
            "base": base, "session": self.session(request), "title": self.config.title, **context},
            status_code=status_code)

    def error_page(self, request: Request, exc: TunefleetError) -> Response:
        if isinstance(exc, Unauthenticated):  # the session's token was taken out of the identities file
            self.sessions.end(request.cookies.get(SESSION_COOKIE, ""))
            return login_redirect(request)
        status = next((code for kind, code in ERROR_STATUS.items() if isinstance(exc, kind)), 502)
        return self.render(request, "error.html", status_code=status, status=status, message=str(exc))


def login_redirect(request: Request) -> Response:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/login", status_code=303)


Handler = Callable[[Dashboard, Request, Session], Awaitable[Response]]


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A handler that needs a session (else: to the login page) and whose service errors become error pages."""
    async def endpoint(request: Request) -> Response:
        dash: Dashboard = request.app.state.dashboard
        session = dash.session(request)
        if session is None:
            if request.method == "GET" and "text/event-stream" not in request.headers.get("accept", ""):
                return login_redirect(request)
            return PlainTextResponse("log in first", status_code=401)
        try:
            return await handler(dash, request, session)
        except TunefleetError as exc:
            return dash.error_page(request, exc)
    return endpoint


def same_origin(request: Request) -> bool:
    """A state-changing POST must come from a page of this site: its Origin (sent by browsers on every POST) names
    this host. A missing Origin (an old client) falls back on the CSRF token alone."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin.split("://", 1)[-1] == request.headers.get("host", "")


async def checked_form(request: Request, session: Session) -> dict[str, str] | None:
    """The POSTed form when it carries this session's CSRF token and comes from this site; else None."""
    form = await request.form()
    fields = {k: str(v) for k, v in form.items()}
    if not same_origin(request) or not session.csrf_ok(fields.get("csrf", "")):
        return None
    return fields
