"""Rollout through any OpenAI-compatible `/v1/completions` endpoint (vLLM, SGLang, TGI, ...).

Prompts are sent as token-id arrays and `logprobs=1` is requested with vLLM's
`return_tokens_as_token_ids`, so tokens come back as "token_id:N" and the ids are exact; an endpoint
that returns token strings instead is mapped back through the local tokenizer's vocabulary.
The endpoint owns its weights: this engine cannot hot-swap them, so `supports_weight_sync` is False
and experiences carry version 0 unless the endpoint is restarted with newer weights
(a serving concern: `explorer.engine.served_version` pins what is stamped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import httpx

from rftbus.config import Config
from rftbus.errors import RftbusError
from rftbus.config.explorer import SamplingConfig
from rftbus.producers.engines.base import Completion, StepCallback, RolloutEngine


class EndpointError(RftbusError):
    """The endpoint answered with an error or without the logprobs rollouts need."""


class OpenAIEngine(RolloutEngine):
    name = "openai"
    supports_weight_sync = False

    def __init__(self, cfg: Config, tokenizer):
        e = cfg.explorer.engine
        self.tok = tokenizer
        self.model = e.model or cfg.model.name
        self.client = httpx.Client(base_url=e.base_url.rstrip("/"), timeout=e.request_timeout_s,
                                   headers={"Authorization": f"Bearer {e.api_key.get_secret_value()}"})
        self.version = e.served_version

    def _token_id(self, token: str) -> int:
        if token.startswith("token_id:"):
            return int(token.split(":", 1)[1])
        tid = self.tok.convert_tokens_to_ids(token)
        if tid is None or tid == self.tok.unk_token_id:
            raise EndpointError(f"endpoint returned token {token!r} that the local tokenizer does not know")
        return tid

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None) -> list[Completion]:
        by_prompt: dict[tuple[int, ...], list[Completion]] = {}
        for prompt, count in Counter(tuple(p) for p in prompts).items():
            body = {"model": self.model, "prompt": list(prompt), "n": count,
                    "max_tokens": max_new_tokens or sampling.max_new_tokens, "temperature": sampling.temperature,
                    "top_p": sampling.top_p, "logprobs": 1, "return_tokens_as_token_ids": True}
            if sampling.top_k:
                body["top_k"] = sampling.top_k
            if sampling.min_new_tokens:
                body["min_tokens"] = sampling.min_new_tokens  # a vLLM-server extension of the OpenAI API
            if sampling.seed is not None:
                body["seed"] = sampling.seed
            try:
                resp = self.client.post("/completions", json=body)
            except httpx.HTTPError as err:
                raise EndpointError(f"{self.client.base_url}/completions: {err}") from None
            if resp.status_code != 200:
                raise EndpointError(f"{self.client.base_url}/completions answered {resp.status_code}: {resp.text[:200]}")
            by_prompt[prompt] = [self._parse(c, sampling) for c in resp.json()["choices"]]
        return [by_prompt[tuple(p)].pop(0) for p in prompts]

    def _parse(self, choice: dict, sampling: SamplingConfig) -> Completion:
        lp = choice.get("logprobs") or {}
        tokens, values = lp.get("tokens"), lp.get("token_logprobs")
        if tokens is None or values is None or len(tokens) != len(values):
            raise EndpointError("endpoint returned no per-token logprobs (it must support `logprobs`)")
        ids = [self._token_id(t) for t in tokens]
        finish = "stop" if choice.get("finish_reason") == "stop" else "length"
        return Completion(ids, [float(v) for v in values], finish, choice.get("text", ""),
                          {"logprob_kind": "endpoint", "logprob_temperature": repr(sampling.temperature)})

    def load_weights(self, state_dict, version: int) -> None:
        raise RftbusError("the openai engine cannot load weights: the endpoint serves its own")

    def close(self) -> None:
        self.client.close()
