"""Who is asking: the studio uses serve's bearer tokens and scopes (rftbus/ground/web/auth.py).

A browser sends its token as an HttpOnly cookie set by the login form (SameSite=Strict, so another site
cannot make the browser use it; every state-changing call is also a JSON POST, which a form on another
site cannot send); scripts may send `Authorization: Bearer` as they do to serve.
"""

from __future__ import annotations

import hashlib
import re

from fastapi import Request

from rftbus.ground.web.auth import Scope, TokenAuth

TOKEN_COOKIE = "rftbus_studio"
NAME_COOKIE = "rftbus_grader"
_NAME = re.compile(r"[^A-Za-z0-9 ._@-]")


def authorization(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        return header
    token = request.cookies.get(TOKEN_COOKIE)
    return f"Bearer {token}" if token else None


def scopes(auth: TokenAuth, request: Request) -> set[Scope]:
    return auth.allowed(authorization(request))


def check(auth: TokenAuth, request: Request, scope: Scope) -> None:
    auth.check(authorization(request), scope)


def clean_name(name: str | None) -> str:
    return _NAME.sub("", (name or "").strip())[:40]


def annotator(request: Request) -> str:
    """The grader, as stamped on each Feedback: the name they gave, and with a token, its fingerprint (so two
    graders with one name but different tokens stay apart, and a name cannot borrow another token's grades)."""
    name = clean_name(request.cookies.get(NAME_COOKIE)) or "grader"
    auth = authorization(request)
    if auth:
        token = auth.partition(" ")[2].strip()
        return f"studio:{name}#{hashlib.sha256(token.encode()).hexdigest()[:8]}"
    return f"studio:{name}"
