"""The OpenAI request bodies the proxy accepts, and turning them into prompt token ids.

Fields a client may send that rftbus does not act on (`seed`, `user`, ...) are accepted; fields that
would change the answer in a way rftbus cannot honour (penalties, logit_bias, echo, best_of, a forced
tool_choice) are refused by name rather than silently ignored. `tools` are rendered by the model's chat
template and tool calls parsed from the answer (rftbus/ground/models/tool_calls.py). `task_id` (an rftbus
extension, e.g. `extra_body={"task_id": ...}` in the OpenAI SDK) groups live prompts for the
baseline; by default it is a hash of the prompt's token ids.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rftbus.ground.errors import RftbusError
from rftbus.ground.models.prompt import PromptFormat
from rftbus.ground.models.tool_calls import ToolCallError
from rftbus.ground.web.errors import BadRequest

# field -> the value meaning "off"; anything else is refused.
UNSUPPORTED = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None,
               "functions": None, "function_call": None, "echo": False, "suffix": None,
               "best_of": None, "top_logprobs": None, "audio": None, "prediction": None}
MAX_METADATA = 16


def refuse_unless_text(fmt: Any, param: str) -> None:
    """An output format other than plain text (JSON mode, a JSON schema) is refused, not ignored: answers are
    sampled unconstrained, so it could not be kept."""
    if fmt in (None, {}) or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else fmt
    raise BadRequest(f"{param} {kind!r} is not supported by rftbus serve: answers are sampled unconstrained, so "
                     "JSON mode could not be kept (send {\"type\": \"text\"} or leave it out)", param=param,
                     code="unsupported")


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI keeps adding fields; unknown ones are not errors

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, description="vLLM extension; 0 = off")
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None  # accepted; best-effort in OpenAI, not honoured here
    user: str | None = Field(None, max_length=256)
    metadata: dict[str, str] | None = None
    task_id: str | None = Field(None, min_length=1, max_length=200)

    def refuse_unsupported(self) -> None:
        extra = self.model_extra or {}  # none of UNSUPPORTED is a declared field: they arrive as extras
        for name, off in UNSUPPORTED.items():
            value = extra.get(name, off)
            if value not in (off, None, [], {}) and not (name == "top_logprobs" and value == 0):
                raise BadRequest(f"{name} is not supported by rftbus serve", param=name, code="unsupported")
        refuse_unless_text(extra.get("response_format"), "response_format")
        if self.metadata and len(self.metadata) > MAX_METADATA:
            raise BadRequest(f"metadata has {len(self.metadata)} keys; at most {MAX_METADATA}", param="metadata")

    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise BadRequest("stop takes at most 4 non-empty strings", param="stop")
        return stops


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    arguments: str | dict[str, Any] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=200)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    type: Literal["function"]
    function: FunctionSpec


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    tools: list[ToolSpec] | None = Field(None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def tools_in_play(self) -> list[dict] | None:
        """The tools to render and parse calls for: none with tool_choice "none"; a forced call ("required", a
        named function) is refused: nothing constrains the model's sampling to produce one."""
        if not self.tools or self.tool_choice == "none":
            return None
        if self.tool_choice not in (None, "auto"):
            raise BadRequest(f"tool_choice {self.tool_choice!r} is not supported (only auto and none: the sampler is "
                             "not constrained to call a tool)", param="tool_choice", code="unsupported")
        return [t.model_dump(exclude_none=True) for t in self.tools]


class CompletionRequest(_Request):
    prompt: str | list[int] | list[str] = Field(description="one prompt: text, token ids, or a one-item list")
    logprobs: int | None = Field(None, ge=0, le=5)
    return_tokens_as_token_ids: bool = Field(False, description="vLLM extension: tokens as 'token_id:N'")

    def limit(self) -> int | None:
        return self.max_tokens


class LoadAdapter(BaseModel):
    """vLLM's `/v1/load_lora_adapter` body."""

    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$")
    lora_path: str = Field(min_length=1, max_length=4096)


class UnloadAdapter(BaseModel):
    model_config = ConfigDict(extra="allow")  # vLLM's also takes lora_int_id
    lora_name: str = Field(min_length=1, max_length=128)


def message_text(i: int, m: ChatMessage, images: list[str] | None = None) -> str:
    """A message's text; its `image_url` parts' URLs are appended to `images` (None: image parts are refused)."""
    if m.content is None or isinstance(m.content, str):
        return m.content or ""
    texts = []
    for j, part in enumerate(m.content):
        if part.type == "image_url" and images is not None and m.role == "user":
            url = (part.model_extra or {}).get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise BadRequest("an image_url part needs image_url.url (a base64 data URI)",
                                 param=f"messages.{i}.content.{j}.image_url")
            images.append(url)
            continue
        if part.type != "text" or part.text is None:
            raise BadRequest(f"content part type {part.type!r} is not supported (text, and image_url in a user "
                             "message to a vision-language model)", param=f"messages.{i}.content.{j}.type")
        texts.append(part.text)
    return "".join(texts)


def chat_prompt(fmt: PromptFormat, req: ChatRequest, images: Any = None) -> tuple[list[int], str, list]:
    """(prompt ids, prompt text, Image records), rendered by the model's one prompt format (models/prompt.py): a
    lone user message gives exactly the ids an explorer sends for the same task; tools, tool calls and `role: tool`
    results are rendered by the chat template. `images`: url -> Image record (a VLM's serve records them by
    reference, rftbus/ground/images/); None: image parts are refused."""
    msgs: list[dict[str, Any]] = []
    urls: list[str] = []
    for i, m in enumerate(req.messages):
        msg: dict[str, Any] = {"role": m.role, "content": message_text(i, m, urls if images is not None else None)}
        if m.tool_calls:
            if m.role != "assistant":
                raise BadRequest("only an assistant message has tool_calls", param=f"messages.{i}.tool_calls")
            msg["tool_calls"] = [c.model_dump(exclude_none=True) for c in m.tool_calls]
        if m.role == "tool":
            if not m.tool_call_id:
                raise BadRequest("a tool message needs tool_call_id", param=f"messages.{i}.tool_call_id")
            msg["tool_call_id"] = m.tool_call_id
        msgs.append(msg)
    if urls:
        shown = [images(u) for u in urls]
        try:
            ids, text = fmt.with_images(msgs, shown)
        except RftbusError as e:
            raise BadRequest(str(e), param="messages") from None
        return ids, text, shown
    try:
        return (*fmt.messages(msgs, req.tools_in_play()), [])
    except ToolCallError as e:
        raise BadRequest(str(e), param="messages") from None


def completion_prompt(fmt: PromptFormat, req: CompletionRequest) -> tuple[list[int], str]:
    p = req.prompt
    if isinstance(p, list) and p and isinstance(p[0], str):
        if len(p) != 1:
            raise BadRequest("only one prompt per request (send several requests)", param="prompt")
        p = p[0]
    if isinstance(p, str):
        return fmt.text(p), p
    tokenizer = fmt.tokenizer
    vocab = len(tokenizer)
    ids = [t for t in p if isinstance(t, int)]
    bad = next((t for t in p if not isinstance(t, int) or not 0 <= t < vocab), None)
    if bad is not None:
        raise BadRequest(f"prompt: token id {bad} is outside the vocabulary (size {vocab})", param="prompt")
    return ids, tokenizer.decode(ids, skip_special_tokens=False)


def cut_at_stop(tokenizer, ids: list[int], stops: list[str]) -> tuple[int, str] | None:
    """(tokens to keep, answer text) when a stop string occurs; the kept tokens end with the token that
    completed the stop string (what the policy sampled), the answer text ends before it (as OpenAI's)."""
    if not stops:
        return None
    text = tokenizer.decode(ids, skip_special_tokens=True)
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return None
    at, stop = min(hits)
    for k in range(1, len(ids) + 1):
        if stop in tokenizer.decode(ids[:k], skip_special_tokens=True):
            return k, text[:at]
    return None
