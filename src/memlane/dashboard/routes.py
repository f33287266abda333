"""The dashboard's routes: server-rendered pages (Jinja2, autoescaped), its static files, the
login flow and its few JSON actions. Thin: every page calls one
:class:`memlane.dashboard.service.DashboardService` method and renders a template.

Pages: ``/`` (Health), ``/memories`` and ``/memories/{id}``, ``/sessions`` and
``/sessions/{key}``, ``/predictor``, ``/knowledge`` and ``/knowledge/entities/{id}``, ``/logs``. Login:
``POST /api/dashboard/login-code`` (the token only) -> ``GET /login?code=...`` (sets the session
cookie, redirects to ``/``) and ``POST /api/dashboard/logout``. Actions (JSON in, JSON out, the
one error shape): ``POST /api/dashboard/memories/{id}/flag-wrong`` and
``POST /api/dashboard/review/{id}``; the pages also call the memory API itself (remember,
PATCH, DELETE, recover) same-origin with JSON bodies.

Every page answers with a strict Content-Security-Policy (scripts, styles, images and fetches
from the daemon only; no inline script), ``X-Frame-Options: DENY``, ``Referrer-Policy:
no-referrer`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, ConfigDict, Field
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memlane import __version__
from memlane.dashboard.auth import UNAUTHORIZED_PAGE, DashboardAuth, cookie_value, expired_cookie, session_cookie
from memlane.dashboard.service import PAGE_SIZE, REVIEW_ACTIONS, WRONG_REASONS, DashboardService, page_number
from memlane.errors import MemlaneError

HERE = Path(__file__).parent
#: The Content-Security-Policy of every page.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
#: Memory types offered by "Add a memory" (any other type can be typed in).
TEACH_TYPES = ("fact", "preference", "decision", "gotcha", "workflow_recipe", "procedure", "note")


class LoginNeedsToken(MemlaneError):
    """A login code asked for with a dashboard session instead of the token."""

    status = 403
    code = "forbidden"


class LoginCodeOut(BaseModel):
    code: str = Field(..., description="One-time login code.")
    url: str = Field(..., description="The login URL to open in a browser.")
    expires_in_s: float = Field(..., description="Seconds the code stays valid.")


class FlagWrongIn(BaseModel):
    """The correction modal's answer."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field(..., description=f"One of {', '.join(WRONG_REASONS)}.")
    corrected: str | None = Field(
        None, description="The corrected text (inaccurate, too_specific; optional for outdated)."
    )
    original_id: str | None = Field(None, max_length=64, description="duplicate: the memory it duplicates.")
    note: str | None = Field(None, max_length=2000, description="What is wrong, in the user's words.")


class ReviewIn(BaseModel):
    """One session-end review decision."""

    model_config = ConfigDict(extra="forbid", strict=True)
    action: str = Field(..., description=f"One of {', '.join(REVIEW_ACTIONS)}.")
    content: str | None = Field(None, description="edit: the new text.")


def _short(text: Any, n: int = 240) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def _ts(value: Any) -> str:
    """``2026-01-01T10:00:00.123Z`` -> ``2026-01-01 10:00`` (anything else as given)."""
    if not value:
        return ""
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    s = str(value)
    return s[:16].replace("T", " ") if len(s) >= 16 and s[10:11] == "T" else s


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def templates() -> Jinja2Templates:
    """The page templates, autoescaped (memory text is data: never rendered as markup)."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(short=_short, ts=_ts, num=_num)
    env.globals.update(version=__version__, PAGE_SIZE=PAGE_SIZE, WRONG_REASONS=WRONG_REASONS, TEACH_TYPES=TEACH_TYPES)
    return Jinja2Templates(env=env)


def _qs(request: Request, **overrides: Any) -> str:
    """The current query string with ``overrides`` (None removes a key), as ``?a=b``."""
    params = dict(request.query_params)
    for k, v in overrides.items():
        if v is None:
            params.pop(k, None)
        else:
            params[k] = str(v)
    return "?" + urlencode(params) if params else "?"


def _opt(request: Request, name: str) -> str | None:
    v = request.query_params.get(name)
    return v if v not in (None, "") else None


def install(app: FastAPI, container: Any, auth: DashboardAuth) -> None:
    """Mount the static files and include the dashboard's routes on ``app``."""
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
    app.include_router(router(container, auth))


def router(container: Any, auth: DashboardAuth) -> APIRouter:
    """The dashboard's pages, login and actions over ``container``."""
    svc = DashboardService(container)
    tpl = templates()
    r = APIRouter(include_in_schema=False)

    def render(request: Request, name: str, ctx: dict[str, Any], status_code: int = 200) -> HTMLResponse:
        ctx = {**ctx, "request": request, "qs": lambda **o: _qs(request, **o), "nav": name.split(".")[0]}
        return tpl.TemplateResponse(request, name, ctx, status_code=status_code, headers=PAGE_HEADERS)

    def page(request: Request, name: str, build: Any) -> HTMLResponse:
        try:
            return render(request, name, build())
        except MemlaneError as exc:
            return render(request, "error.html", {"error": exc}, status_code=exc.status)

    # -- login ------------------------------------------------------------------------------
    @r.post("/api/dashboard/login-code", tags=["dashboard"], include_in_schema=True, response_model=LoginCodeOut)
    def login_code(request: Request) -> Any:
        """A one-time login code (valid 120 s, once) and its URL; needs the token itself, not a
        dashboard session."""
        if getattr(request.state, "auth", None) != "token" and container.settings.require_token:
            raise LoginNeedsToken(
                "a login code needs the daemon's token (memlane dashboard sends it), not a dashboard session"
            )
        code, ttl = auth.issue_code()
        return LoginCodeOut(code=code, url=f"{str(request.base_url).rstrip('/')}/login?code={code}", expires_in_s=ttl)

    @r.get("/login")
    def login(request: Request, code: str | None = None) -> Response:
        """Redeem a login code: set the session cookie and go to the Health page."""
        sid = auth.redeem(code)
        if sid is None:
            return HTMLResponse(
                UNAUTHORIZED_PAGE.format(
                    reason="This sign-in link is not valid: it is expired, already used, or mistyped."
                ),
                status_code=401,
                headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
            )
        resp = RedirectResponse(
            "/", status_code=303, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        )
        resp.headers.append("Set-Cookie", session_cookie(sid))
        return resp

    @r.post("/api/dashboard/logout", tags=["dashboard"])
    def logout(request: Request) -> Response:
        """End this browser's dashboard session."""
        ended = auth.end(cookie_value(request.headers.get("cookie", "")))
        resp = JSONResponse({"ended": ended})
        resp.headers.append("Set-Cookie", expired_cookie())
        return resp

    # -- actions ----------------------------------------------------------------------------
    @r.post("/api/dashboard/memories/{memory_id}/flag-wrong", tags=["dashboard"], include_in_schema=True)
    def flag_wrong(memory_id: str, body: FlagWrongIn) -> dict[str, Any]:
        """Flag a memory wrong: supersede it by the correction (or forget it), and give every
        session that injected it the negative training label."""
        return svc.flag_wrong(
            memory_id, reason=body.reason, corrected=body.corrected, original_id=body.original_id, note=body.note
        )

    @r.post("/api/dashboard/review/{memory_id}", tags=["dashboard"], include_in_schema=True)
    def review(memory_id: str, body: ReviewIn) -> dict[str, Any]:
        """Approve, edit or reject a memory the pipeline inferred from a session."""
        return svc.review(memory_id, action=body.action, content=body.content)

    # -- pages ------------------------------------------------------------------------------
    @r.get("/", response_class=HTMLResponse)
    def health_page(request: Request) -> HTMLResponse:
        return page(request, "health.html", svc.health)

    @r.get("/memories", response_class=HTMLResponse)
    def memories_page(request: Request) -> HTMLResponse:
        source = _opt(request, "source")
        filters: dict[str, Any] = {
            "q": _opt(request, "q"),
            "project": _opt(request, "project"),
            "type_": _opt(request, "type"),
            "source_type": None if source in (None, "any") else "" if source == "none" else source,
            "pinned": {"yes": True, "no": False}.get(_opt(request, "pinned") or ""),
            "state": _opt(request, "state") or "live",
            "flagged": {"flagged": True, "trusted": False}.get(_opt(request, "drift") or ""),
        }
        return page(
            request,
            "memories.html",
            lambda: {
                **svc.memories(page=page_number(request.query_params.get("page")), **filters),
                "facets": svc.facets(),
                "filters": filters,
            },
        )

    @r.get("/memories/{memory_id}", response_class=HTMLResponse)
    def memory_page(request: Request, memory_id: str) -> HTMLResponse:
        return page(request, "memory.html", lambda: svc.memory_card(memory_id))

    @r.get("/sessions", response_class=HTMLResponse)
    def sessions_page(request: Request) -> HTMLResponse:
        return page(
            request,
            "sessions.html",
            lambda: svc.sessions(project=_opt(request, "project"), page=page_number(request.query_params.get("page"))),
        )

    @r.get("/sessions/{session_key:path}", response_class=HTMLResponse)
    def session_page(request: Request, session_key: str) -> HTMLResponse:
        return page(
            request,
            "session.html",
            lambda: svc.session(session_key, page=page_number(request.query_params.get("page"))),
        )

    @r.get("/predictor", response_class=HTMLResponse)
    def predictor_page(request: Request) -> HTMLResponse:
        return page(
            request, "predictor.html", lambda: svc.predictor(page=page_number(request.query_params.get("page")))
        )

    @r.get("/logs", response_class=HTMLResponse)
    def logs_page(request: Request) -> HTMLResponse:
        return page(
            request,
            "logs.html",
            lambda: svc.logs(
                kind=_opt(request, "kind") or "events",
                category=_opt(request, "category"),
                level=_opt(request, "level"),
                q=_opt(request, "q"),
                stage=_opt(request, "stage"),
                page=page_number(request.query_params.get("page")),
            ),
        )

    @r.get("/knowledge", response_class=HTMLResponse)
    def knowledge_page(request: Request) -> HTMLResponse:
        return page(
            request,
            "knowledge.html",
            lambda: svc.knowledge(
                q=_opt(request, "q"),
                entity_type=_opt(request, "type"),
                page=page_number(request.query_params.get("page")),
                jobs_status=_opt(request, "jobs"),
                jobs_page=page_number(request.query_params.get("jobs_page")),
            ),
        )

    @r.get("/knowledge/entities/{entity_id}", response_class=HTMLResponse)
    def entity_page(request: Request, entity_id: str) -> HTMLResponse:
        return page(
            request,
            "entity.html",
            lambda: svc.entity(
                entity_id,
                page=page_number(request.query_params.get("page")),
                mentions_page=page_number(request.query_params.get("mentions_page")),
            ),
        )

    return r


__all__ = ["CSP", "install", "router", "templates"]
