"""The studio's pages: server-rendered templates; the queue needs the `feedback` scope, the dashboard and
the experience browser `read`. A refused page call renders the error page; a refused /api call answers JSON."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

from rftbus.ground.web.auth import Scope
from rftbus.ground.web.errors import ApiError, BadRequest, NotFound

from . import access, data
from .state import GRADER, HERE, READER, studio_of

STATIC = {"studio.js": "text/javascript", "studio.css": "text/css"}
router = APIRouter(include_in_schema=False)


def page(request: Request, template: str, code: int = 200, **ctx) -> HTMLResponse:
    st = studio_of(request)
    allowed = access.scopes(st.auth, request)
    return st.templates.TemplateResponse(request, template, {"can_grade": Scope.feedback in allowed,
                                                             "can_read": Scope.read in allowed,
                                                             "cfg": st.cfg.studio, **ctx}, status_code=code)


def refused(request: Request, err: ApiError) -> Response:
    """An ApiError as the caller can read it: JSON under /api/, the error page elsewhere."""
    path, root = request.url.path, request.scope.get("root_path", "")
    if (path[len(root):] if root and path.startswith(root) else path).startswith("/api/"):
        return JSONResponse(err.body(), status_code=err.status)
    return page(request, "error.html", err.status, message=err.message, status=err.status)


@router.get("/")
async def home(request: Request):
    allowed = access.scopes(studio_of(request).auth, request)
    target = "queue" if Scope.feedback in allowed else "dashboard" if Scope.read in allowed else "login"
    return RedirectResponse(str(request.url_for(target)), status_code=303)


@router.get("/login", name="login")
async def login_page(request: Request):
    return page(request, "login.html", name=access.clean_name(request.cookies.get(access.NAME_COOKIE)))


@router.get("/queue", name="queue", dependencies=[GRADER])
async def queue_page(request: Request):
    return page(request, "queue.html", me=access.annotator(request))


@router.get("/dashboard", name="dashboard", dependencies=[READER])
def dashboard_page(request: Request, window: str = "run"):
    return page(request, "dashboard.html", d=studio_of(request).dashboard(window), window=window)


@router.get("/fragments/dashboard", name="dashboard_fragment", dependencies=[READER])
def dashboard_fragment(request: Request, window: str = "run"):
    return page(request, "panels.html", d=studio_of(request).dashboard(window))


@router.get("/experience", name="experience", dependencies=[READER])
def experience_page(request: Request, id: str = ""):  # noqa: A002 - the query parameter's name
    if not id.strip():
        return page(request, "experience.html", p=None, q="")
    if len(id) > 200:
        raise BadRequest("an id is at most 200 characters", param="id")
    with data.reading(studio_of(request).cfg) as r:
        p = data.path(r, id)
    return page(request, "experience.html", 200 if p.found else 404, p=p, q=id.strip())


@router.get("/static/{name}", name="static")
async def static(name: str):
    if name not in STATIC:
        raise NotFound(f"no such file {name}")
    return FileResponse(HERE / "static" / name, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})
