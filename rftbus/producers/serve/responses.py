"""OpenAI response bodies and stream chunks for an Answer, with the experience ids attached.

Where the ids are: the `X-Rftbus-Experience-Id` header (comma-separated, one per choice), each
choice's `experience_id`, and a top-level `rftbus` object (experience_ids, group_id, model_version).
OpenAI SDKs keep unknown fields, so `choice.experience_id` works there too.

Streams send text as the engine samples it (engines that stream tokens; others' answers arrive whole), then,
once the answer is recorded, each choice's finish chunk with its experience id, optional usage, `[DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

from rftbus.ground.web.errors import ApiError
from rftbus.producers.serve.records import RecordIds
from rftbus.producers.serve.service import Answer

ID_HEADER = "X-Rftbus-Experience-Id"
GROUP_HEADER = "X-Rftbus-Group-Id"
VERSION_HEADER = "X-Rftbus-Model-Version"


def headers(a: Answer) -> dict[str, str]:
    return {ID_HEADER: ",".join(a.group.experience_ids()), GROUP_HEADER: a.group.group_id,
            VERSION_HEADER: str(a.version)}


def _meta(a: Answer) -> dict:
    return {"experience_ids": a.group.experience_ids(), "group_id": a.group.group_id, "model_version": a.version}


def _usage(a: Answer) -> dict:
    p = len(a.group.prompt_ids)
    c = sum(len(e.response_ids) for e in a.group.samples)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _head(a: Answer, kind: str, model: str) -> dict:
    prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
    return {"id": f"{prefix}-{a.group.group_id}", "object": kind, "created": int(time.time()),
            "model": model, "system_fingerprint": f"rftbus-v{a.version}"}


def chat_body(a: Answer, model: str, tokenizer, logprobs: bool) -> dict:
    choices = []
    for i, (e, text) in enumerate(zip(a.group.samples, a.texts)):
        lp = None
        if logprobs:
            lp = {"content": [{"token": tokenizer.decode([t]), "logprob": v, "top_logprobs": []}
                              for t, v in zip(e.response_ids, e.logprobs)]}
        message: dict = {"role": "assistant", "content": text}
        if a.tool_calls and a.tool_calls[i]:
            message.update(content=text or None, tool_calls=a.tool_calls[i])
        choices.append({"index": i, "message": message, "logprobs": lp, "finish_reason": a.finish_reason(i),
                        "experience_id": e.experience_id})
    return {**_head(a, "chat.completion", model), "choices": choices, "usage": _usage(a), "rftbus": _meta(a)}


def completion_logprobs(e, tokenizer, as_ids: bool) -> dict:
    tokens = [f"token_id:{t}" if as_ids else tokenizer.convert_ids_to_tokens(t) for t in e.response_ids]
    offsets, pos = [], 0
    for t in e.response_ids:
        offsets.append(pos)
        pos += len(tokenizer.decode([t], skip_special_tokens=True))
    return {"tokens": tokens, "token_logprobs": list(e.logprobs), "top_logprobs": None, "text_offset": offsets}


def completion_body(a: Answer, model: str, tokenizer, logprobs: int | None, as_ids: bool) -> dict:
    choices = []
    for i, (e, text) in enumerate(zip(a.group.samples, a.texts)):
        lp = completion_logprobs(e, tokenizer, as_ids) if logprobs is not None else None
        choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": e.finish_reason,
                        "experience_id": e.experience_id})
    return {**_head(a, "text_completion", model), "choices": choices, "usage": _usage(a), "rftbus": _meta(a)}


class Events:
    """A TokenListener that hands the engine thread's events to the request's event loop, in order:
    ("version", v), ("token", choice, id)..., then None once the answer task is done."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()

    def started(self, version: int) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, ("version", version))

    def token(self, choice: int, token: int) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, ("token", choice, token))

    def close(self, _task: object = None) -> None:
        self.queue.put_nowait(None)  # (a done callback: already on the loop)

    async def get(self):
        return await self.queue.get()


class TextStream:
    """One choice's text as its tokens arrive: each `add` returns the text that is now safe to send. Held back:
    a partial multi-byte character, and the tail that could still become a stop string (OpenAI's answer ends
    before the stop). `finish` returns what the final answer adds to what was sent."""

    def __init__(self, tokenizer, stops: list[str]):
        self.tok, self.stops = tokenizer, stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.ids: list[int] = []
        self.sent = ""
        self.stopped = False

    def add(self, token: int) -> str:
        self.ids.append(token)
        if self.stopped:
            return ""
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        if any(s in text for s in self.stops):
            self.stopped = True  # the final answer says where it ends
            return ""
        safe = text[:max(0, len(text) - self.hold)]
        return self._send(safe)

    def finish(self, final: str) -> str:
        return self._send(final)

    def _send(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        piece, self.sent = text[len(self.sent):], text
        return piece


def _sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def stream_headers(ids: RecordIds, version: int) -> dict[str, str]:
    return {ID_HEADER: ",".join(ids.experience_ids), GROUP_HEADER: ids.group_id, VERSION_HEADER: str(version)}


async def stream(events: Events, done: asyncio.Future, ids: RecordIds, model: str, tokenizer, chat: bool,
                 include_usage: bool, stops: list[str], on_first: Callable[[], None] | None = None
                 ) -> AsyncIterator[bytes]:
    """SSE frames as tokens arrive (after the "version" event, which the caller consumed for the headers).
    The finish chunk of each choice carries its experience_id once the answer is recorded; an answer that could
    not be recorded ends the stream with an `error` frame naming why, never a half record. A client that goes
    away stops only this generator: the answer is still generated and recorded."""
    n = len(ids.experience_ids)
    head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{ids.group_id}", "object": "chat.completion.chunk" if chat
            else "text_completion", "created": int(time.time()), "model": model}
    texts = [TextStream(tokenizer, stops) for _ in range(n)]
    started = [False] * n

    def chunk(i: int, piece: str | None, finish: str | None = None, **extra) -> dict:
        if chat:
            delta = {} if piece is None else {"content": piece}
            if not started[i]:
                delta["role"], started[i] = "assistant", True
            choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        else:
            choice = {"index": i, "text": piece or "", "logprobs": None, "finish_reason": finish, **extra}
        return {**head, "choices": [choice]}

    while (event := await events.get()) is not None:
        _, i, token = event
        piece = texts[i].add(token)
        if piece and on_first is not None:
            on_first()  # the first token the client sees
            on_first = None
        if piece or (chat and not started[i]):
            yield _sse(chunk(i, piece))
    try:
        a: Answer = done.result()
    except ApiError as err:
        yield _sse(err.body())
        return
    except Exception as err:  # noqa: BLE001 - the stream already started: the error is its last frame
        yield _sse({"error": {"message": f"the answer failed: {type(err).__name__}: {err}", "type": "server_error",
                              "param": None, "code": "internal_error"}})
        raise
    head["system_fingerprint"] = f"rftbus-v{a.version}"
    meta = _meta(a)
    for i, (e, text) in enumerate(zip(a.group.samples, a.texts)):
        rest = texts[i].finish(text)
        if rest or (chat and not started[i]):
            yield _sse(chunk(i, rest))
        if a.tool_calls and a.tool_calls[i]:
            calls = [{"index": k, **c} for k, c in enumerate(a.tool_calls[i])]
            yield _sse({**head, "choices": [{"index": i, "delta": {"tool_calls": calls}, "logprobs": None,
                                             "finish_reason": None}]})
        yield _sse({**chunk(i, None, a.finish_reason(i), experience_id=e.experience_id), "rftbus": meta})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": _usage(a), "rftbus": meta})
    yield b"data: [DONE]\n\n"
