"""Rollout through any OpenAI-compatible `/v1/completions` endpoint (vLLM, SGLang, TGI, ...).

Prompts are sent as token-id arrays and `logprobs=1` is requested with vLLM's
`return_tokens_as_token_ids`, so tokens come back as "token_id:N" and the ids are exact; an endpoint
that returns token strings instead is mapped back through the local tokenizer's vocabulary.
By default the endpoint owns its weights: `supports_weight_sync` is False and experiences carry
`explorer.engine.served_version`. With `push_lora`, each published LoRA version is written as a PEFT folder
(`lora_dir`, which the endpoint must be able to read) and loaded at the endpoint through vLLM's runtime LoRA API
(`POST /v1/load_lora_adapter {"lora_name", "lora_path"}`, https://docs.vllm.ai/en/latest/features/lora.html),
one adapter name per version; requests then name it as their `model`, so a batch is pinned to the version it
started on, and versions older than the newest `keep_adapters` are unloaded (`/v1/unload_lora_adapter`). An
endpoint that does not answer defers the version (retried), one that refuses it refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import httpx

from rftbus.ground.weights.store import sha256_hex, state_bytes
from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError, SwapDeferred
from rftbus.ground.models.lora import Adapter, write_peft_folder
from rftbus.ground.config.explorer import SamplingConfig
if TYPE_CHECKING:
    from rftbus.ground.models.vision import Pixels
from rftbus.producers.engines.base import Completion, StepCallback, RolloutEngine


class EndpointError(RftbusError):
    """The endpoint answered with an error or without the logprobs rollouts need."""


RETRY_S = 2.0  # a push that found the endpoint down is tried again after this


class OpenAIEngine(RolloutEngine):
    name = "openai"

    def __init__(self, cfg: Config, tokenizer):
        e = cfg.explorer.engine
        self.tok = tokenizer
        self.model = e.model or cfg.model.name
        self.client = httpx.Client(base_url=e.base_url.rstrip("/"), timeout=e.request_timeout_s,
                                   headers={"Authorization": f"Bearer {e.api_key.get_secret_value()}"})
        self.version = e.served_version
        self.supports_weight_sync = e.push_lora
        self.served = self.model  # the name requests ask for: the base model, or the newest pushed adapter
        self.lora_dir = Path(e.lora_dir) if e.lora_dir else Path(cfg.state_dir) / "upstream-lora"
        self.keep = e.keep_adapters
        self.loaded: list[str] = []  # pushed and not unloaded, least recently served first
        self.pushed: dict[str, str] = {}  # adapter name -> sha256 of what was pushed under it
        self._retry_at = 0.0

    def _token_id(self, token: str) -> int:
        if token.startswith("token_id:"):
            return int(token.split(":", 1)[1])
        tid = self.tok.convert_tokens_to_ids(token)
        if tid is None or tid == self.tok.unk_token_id:
            raise EndpointError(f"endpoint returned token {token!r} that the local tokenizer does not know")
        return tid

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None,
                 images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        self.refuse_images(images)
        by_prompt: dict[tuple[int, ...], list[Completion]] = {}
        for prompt, count in Counter(tuple(p) for p in prompts).items():
            body = {"model": self.served, "prompt": list(prompt), "n": count,
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
        if not self.supports_weight_sync:
            raise RftbusError("the openai engine cannot load weights: the endpoint serves its own (explorer.engine."
                              "push_lora pushes LoRA versions to it)")
        if not isinstance(state_dict, Adapter):
            raise RftbusError("explorer.engine.push_lora pushes LoRA adapter versions only (trainer.lora); a "
                              "full-weight version needs the endpoint restarted on it")
        if time.monotonic() < self._retry_at:
            raise SwapDeferred(f"{self.client.base_url} did not answer the last push; trying again shortly")
        name = f"{self.model}-v{version}"
        digest = sha256_hex(state_bytes(state_dict.state))
        if self.pushed.setdefault(name, digest) != digest:  # another trainer's v<version> (run.trainers, behind the
            name = f"{name}-{digest[:8]}"                     # gate): its own name, never the other's adapter
            self.pushed[name] = digest
        if name in self.loaded:  # still loaded there (serve behind the gate switches between two): no new push
            self.loaded.remove(name)
            self.loaded.append(name)
            self.served, self.version = name, version
            return
        folder = self.lora_dir / name
        write_peft_folder(state_dict, folder)
        resp = self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(folder.resolve())})
        if resp.status_code != 200 and "already" not in resp.text:  # (vLLM: 400 for a name already loaded)
            raise RftbusError(f"{self.client.base_url}/load_lora_adapter refused {name}: {resp.status_code} "
                              f"{resp.text[:200]}")
        self.loaded.append(name)
        self.served, self.version = name, version
        while len(self.loaded) > self.keep:
            old = self.loaded.pop(0)
            try:
                self._post("/unload_lora_adapter", {"lora_name": old})
            except SwapDeferred:
                pass  # the endpoint's LRU evicts it anyway
            shutil.rmtree(self.lora_dir / old, ignore_errors=True)

    def _post(self, path: str, body: dict) -> httpx.Response:
        try:
            resp = self.client.post(path, json=body)
        except httpx.HTTPError as err:
            self._retry_at = time.monotonic() + RETRY_S
            raise SwapDeferred(f"{self.client.base_url}{path}: {err}") from None
        if resp.status_code >= 500:
            self._retry_at = time.monotonic() + RETRY_S
            raise SwapDeferred(f"{self.client.base_url}{path} answered {resp.status_code}: {resp.text[:200]}")
        return resp

    def close(self) -> None:
        self.client.close()
