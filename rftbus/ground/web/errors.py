"""Errors the proxy answers with, in the OpenAI error shape (`{"error": {message, type, param, code}}`),
so OpenAI client libraries surface the message and the offending field as they would from OpenAI."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An HTTP error with a one-line message that names what was wrong (`param`: the field)."""

    status = 400
    type = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code
        if status is not None:
            self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401
    type = "authentication_error"


class Forbidden(ApiError):
    status = 403
    type = "permission_error"


class NotFound(ApiError):
    status = 404
    type = "not_found_error"


class TooLarge(ApiError):
    status = 413


class TooManyRequests(ApiError):
    """Over a limit of this client or of the server (a rate, concurrent sandboxes): try again later."""

    status = 429
    type = "rate_limit_error"


class EngineFailed(ApiError):
    """The rollout engine (or the upstream endpoint it forwards to) failed on this request's batch."""

    status = 502
    type = "engine_error"


class Unavailable(ApiError):
    """Kafka did not acknowledge in time, or the record buffer is full: nothing was claimed."""

    status = 503
    type = "service_unavailable"


def field_path(loc: tuple | list) -> str:
    """pydantic's ("body", "messages", 0, "content") -> "messages.0.content"."""
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def bad_request(e: ValidationError, note: str = "") -> BadRequest:
    """A pydantic validation error as the 400 that names its first field."""
    err = e.errors(include_url=False)[0]
    if err["type"] == "json_invalid":
        return BadRequest(f"body is not valid JSON: {err['msg']}", code="invalid_json")
    where = field_path(err["loc"])
    msg = err["msg"].removeprefix("Value error, ") + note
    return BadRequest(f"{where}: {msg}" if where != "body" else msg, param=where if where != "body" else None,
                      code="invalid_field")


async def parse(request: Request, model: type[M]) -> M:
    """The body as `model`, or a 400 naming the field that was wrong (after authentication: see app.py)."""
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise bad_request(e) from None


BODY_METHODS = {"POST", "PUT", "PATCH"}


class BodyLimit:
    """Pure ASGI middleware: a body over `max_bytes` is answered 413 before the app sees any of it (serve, and the
    studio on its own: it read a 100 MB body before refusing it, #36)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, int(declared))
            return
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":  # client went away
                return
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            more = msg.get("more_body", False)
            if size > self.max_bytes:
                await self._refuse(send, size, at_least=True)
                return
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        await self.app(scope, replay, send)

    async def _refuse(self, send, size: int, at_least: bool = False) -> None:
        err = TooLarge(f"request body is {'over ' if at_least else ''}{size} bytes; serve.max_body_bytes is "
                       f"{self.max_bytes}", code="body_too_large")
        data = json.dumps(err.body()).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})
