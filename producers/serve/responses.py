"""OpenAI response bodies and stream chunks for an Answer, with the experience ids attached.

Where the ids are: the `X-Rftbus-Experience-Id` header (comma-separated, one per choice), each
choice's `experience_id`, and a top-level `rftbus` object (experience_ids, group_id, model_version).
OpenAI SDKs keep unknown fields, so `choice.experience_id` works there too.

Streams are framed after the completion was generated and recorded (the engine interface returns
whole completions), one chunk per token, then the finish chunk, optional usage, `[DONE]`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

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
        choices.append({"index": i, "message": {"role": "assistant", "content": text}, "logprobs": lp,
                        "finish_reason": e.finish_reason, "experience_id": e.experience_id})
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


def pieces(tokenizer, ids: list[int], text: str) -> Iterator[str]:
    """The answer text split at token boundaries (a partial multi-byte character waits for the next token)."""
    sent = 0
    for k in range(1, len(ids) + 1):
        cur = tokenizer.decode(ids[:k], skip_special_tokens=True)[:len(text)]
        if cur.endswith("\ufffd") or len(cur) <= sent:
            continue
        yield cur[sent:]
        sent = len(cur)
    if sent < len(text):
        yield text[sent:]


def _sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def stream(a: Answer, model: str, tokenizer, chat: bool, include_usage: bool) -> Iterator[bytes]:
    head = _head(a, "chat.completion.chunk" if chat else "text_completion", model)
    meta = _meta(a)

    def chunk(i: int, piece: str | None, finish: str | None = None, first: bool = False, **extra) -> bytes:
        if chat:
            delta = {} if piece is None else {"content": piece}
            if first:
                delta["role"] = "assistant"
            choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        else:
            choice = {"index": i, "text": piece or "", "logprobs": None, "finish_reason": finish, **extra}
        return _sse({**head, "choices": [choice], "rftbus": meta})

    for i, (e, text) in enumerate(zip(a.group.samples, a.texts)):
        if chat:
            yield chunk(i, "", first=True)
        for piece in pieces(tokenizer, e.response_ids, text):
            yield chunk(i, piece)
        yield chunk(i, None, e.finish_reason, experience_id=e.experience_id)
    if include_usage:
        yield _sse({**head, "choices": [], "usage": _usage(a), "rftbus": meta})
    yield b"data: [DONE]\n\n"
