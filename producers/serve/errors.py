"""Errors the proxy answers with, in the OpenAI error shape (`{"error": {message, type, param, code}}`),
so OpenAI client libraries surface the message and the offending field as they would from OpenAI."""

from __future__ import annotations

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


async def parse(request: Request, model: type[M]) -> M:
    """The body as `model`, or a 400 naming the field that was wrong (after authentication: see app.py)."""
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        if err["type"] == "json_invalid":
            raise BadRequest(f"body is not valid JSON: {err['msg']}", code="invalid_json") from None
        where = field_path(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise BadRequest(f"{where}: {msg}" if where != "body" else msg, param=where if where != "body" else None,
                         code="invalid_field") from None
