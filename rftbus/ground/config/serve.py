"""The `serve:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from rftbus.ground.config.explorer import EngineConfig


class ServeConfig(BaseModel):
    """`rftbus serve`: the OpenAI-compatible server for live traffic, and its feedback endpoint."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    host: str = Field("127.0.0.1", description="listen address (0.0.0.0 to accept remote agents)")
    port: int = Field(8000, ge=1, le=65535, description="the OpenAI-compatible server's HTTP port")
    inference_tokens: list[SecretStr] = Field(
        default_factory=list, description="bearer tokens for /v1/models and /v1/*completions; "
        "env: comma-separated. Empty = that scope is open (only allowed on a loopback host unless allow_open)")
    feedback_tokens: list[SecretStr] = Field(
        default_factory=list, description="bearer tokens for /v1/feedback (a separate scope: an agent that "
        "may call the model cannot grade itself); env: comma-separated. Empty = open, as above")
    read_tokens: list[SecretStr] = Field(
        default_factory=list, description="bearer tokens for the studio's dashboard, experience browser and SQL "
        "(a grader's feedback token cannot read them); env: comma-separated. Empty = open, as above")
    weights_tokens: list[SecretStr] = Field(
        default_factory=list, description="bearer tokens for /v1/load_lora_adapter (serve.accept_lora_pushes); "
        "env: comma-separated. Empty = open, as above")
    accept_lora_pushes: bool = Field(False, description="be the upstream of another serve or explorer: LoRA adapters "
                                     "loaded through /v1/load_lora_adapter (vLLM's API) are served by name, and the "
                                     "weights topic is not followed")
    allow_open: bool = Field(False, description="serve a scope without tokens on a non-loopback address")
    id: str | None = Field(None, description="producer id stamped as Experience.explorer_id; default host-pid")
    served_model: str | None = Field(None, description="model name in /v1/models and accepted in requests; "
                                     "default model.name")
    engine: EngineConfig | None = Field(None, description="rollout engine; unset = explorer.engine. kind openai "
                                        "forwards to an upstream endpoint (which must return logprobs)")
    default_max_tokens: int | None = Field(None, ge=1, description="max_tokens when a request sets none; "
                                           "default explorer.sampling.max_new_tokens")
    max_tokens_limit: int = Field(1024, ge=1, description="largest max_tokens a request may ask for")
    max_n: int = Field(16, ge=1, description="largest n (choices per request; one request = one group)")
    max_batch: int = Field(32, ge=1, description="prompts per engine call: concurrent requests are batched")
    batch_wait_ms: float = Field(5.0, ge=0, description="how long the engine thread gathers requests into a batch")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="larger request bodies are answered 413")
    record: bool = Field(True, description="record every answer on topics.raw, to be graded and trained (false: a "
                         "plain model server, e.g. when its calls reach training through the agents' traces: otel)")
    record_ack: Literal["kafka", "buffered"] = Field(
        "kafka", description="kafka: a completion is answered only after Kafka acknowledged its Experience; "
        "buffered: answered once the record is in the bounded buffer (lower latency; lost if the process "
        "dies before the buffer drains)")
    buffer_max_bytes: int = Field(64 << 20, ge=1024, description="encoded records awaiting Kafka's ack; "
                                  "a request that would exceed it is answered 503")
    ack_timeout_s: float = Field(15.0, gt=0, description="how long a request waits for Kafka's ack before 503")
    recent_experiences: int = Field(10_000, ge=0, description="recorded prompts remembered, so a correction "
                                    "can become an expert experience without resending the prompt")
    episode_credit: Literal["same", "discounted"] = Field(
        "same", description="a session's grade on each of its calls: the same, or discounted by "
        "episode_discount per call before the last")
    episode_discount: float = Field(0.9, gt=0, le=1, description="discounted credit: call t of T gets "
                                    "grade * episode_discount^(T-1-t)")
    max_sessions: int = Field(10_000, ge=1, description="sessions whose calls are remembered for episode feedback")
    max_calls_per_session: int = Field(256, ge=1, description="calls one session may record")
    weights_wait_s: float = Field(15.0, ge=0, description="at start, how long to wait for the weights topic "
                                  "to be read (so the first answers use the newest version)")
    rate_limit_requests_per_minute: int = Field(0, ge=0, description="completion requests per minute per client "
                                                "(its bearer token, else its address); over it: 429 with "
                                                "Retry-After. 0 = no limit")
    rate_limit_tokens_per_minute: int = Field(0, ge=0, description="prompt + completion tokens per minute per "
                                              "client (a request is charged prompt + max_tokens, the unused part "
                                              "refunded); 0 = no limit")
    metrics: bool = Field(True, description="Prometheus /metrics (latency, time to first token, tokens, "
                          "rejections, version; no request content)")
    status_interval_s: float = Field(1.0, gt=0, description="seconds between status-file writes")

    @field_validator("inference_tokens", "feedback_tokens", "read_tokens", "weights_tokens", mode="before")
    @classmethod
    def _split(cls, v):
        # RFTBUS_SERVE__INFERENCE_TOKENS=a,b arrives as one string. An empty token (",", "a,,b", [""]) is refused:
        # a list that came out empty would open the scope without anyone saying so (#63).
        items = v.split(",") if isinstance(v, str) and v.strip() else v
        if isinstance(items, list):
            for t in items:
                raw = t.get_secret_value() if isinstance(t, SecretStr) else t
                if isinstance(raw, str) and not raw.strip():
                    raise ValueError(f"an empty token in {v!r}: give each token, or none to leave the scope "
                                     "open (loopback only unless serve.allow_open)")
            return [t.strip() if isinstance(t, str) else t for t in items]
        return [] if isinstance(v, str) else v
