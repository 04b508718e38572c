"""The default rollout engine: Hugging Face `generate` on CPU or GPU, one batch per group
(prompts left-padded, as decoder-only generation needs).

Logprobs. With `sampling.logprobs = "sampling"` (default) each token's logprob is taken from the
*processed* scores `generate` sampled from, i.e. after temperature, top-k and top-p: the exact
behaviour distribution, which is what importance ratios need. The trainer must score with the same
temperature (it is stamped in metadata["logprob_temperature"]); with top-k/top-p on, the truncated
distribution is not something the trainer can recompute, so keep them off for RL or use "raw"
(plain softmax of the model's logits, temperature 1).

Shared prompts are read once. A group is n samples of one prompt, and `generate` reads every row's prompt
(the prefill): for 8 short answers to a 40-token prompt that is most of the call's compute on CPU. When rows
repeat a prompt, the unique prompts (all but their last token) are read once and the cache is copied to every
row that shares them; `generate` then reads only the last prompt token of each row (`shared_prefill`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.generation.streamers import BaseStreamer

from rftbus.ground.config import Config
from rftbus.ground.models.loading import context_of, load_policy, takes_logits_to_keep
from rftbus.ground.models.lora import Adapter, load_version
from rftbus.ground.models.prompt import PromptFormat, prompt_format
from rftbus.ground.models.devices import resolve
from rftbus.ground.models.vision import Pixels, image_token_of, pixel_inputs, stacked
from rftbus.ground.profile import phase
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.producers.engines.base import Completion, RolloutEngine, StepCallback


class _Steps(BaseStreamer):
    """transformers' streamer hook, for a batch: the first `put` is the prompt, then one per decoding step
    with every row's new token (its TextStreamer takes one row only)."""

    def __init__(self, on_step: StepCallback):
        self.on_step, self.prompt_seen = on_step, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.on_step([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        pass


class TransformersEngine(RolloutEngine):
    name = "transformers"
    streams_tokens = True
    reads_images = True

    def __init__(self, cfg: Config, tokenizer, model: torch.nn.Module | None = None, prompt: PromptFormat | None = None):
        self.tok = tokenizer
        self.prompt = prompt or prompt_format(tokenizer, cfg.model)  # its stop ids end a response
        self.device = resolve(cfg.explorer.engine.device)
        self.model: Any = (model or load_policy(cfg.model, tokenizer, str(self.device))).to(self.device).eval()
        self.version = 0
        self.max_context = context_of(self.model)
        token = image_token_of(self.model)
        self.suppress = [token] if token is not None else None  # never sampled: only an image's features go there
        if cfg.explorer.sampling.seed is not None:
            torch.manual_seed(cfg.explorer.sampling.seed)

    @torch.inference_mode()
    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None,
                 images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        limit = self.budget(prompts, max_new_tokens or sampling.max_new_tokens)  # before any work
        with phase("generate"):
            return self._generate(prompts, sampling, limit, on_step, images)

    def _generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, limit: int,
                  on_step: StepCallback | None, images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        width = max(len(p) for p in prompts)
        pad = self.tok.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        raw = sampling.logprobs == "raw"
        seen = pixel_inputs(self.model, stacked(images))
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attention, **seen,
            past_key_values=None if seen else self.shared_prefill(input_ids, attention),
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            max_new_tokens=limit, return_dict_in_generate=True,
            min_new_tokens=min(sampling.min_new_tokens, limit) or None,
            output_scores=not raw, output_logits=raw, pad_token_id=self.tok.pad_token_id,
            eos_token_id=self.prompt.stop_ids, streamer=_Steps(on_step) if on_step else None,
            suppress_tokens=self.suppress,
        )
        new = out.sequences[:, input_ids.shape[1]:]
        steps = torch.stack(out.logits if raw else out.scores, dim=1).float()  # [batch, new, vocab]
        lps = torch.log_softmax(steps, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        meta = {"logprob_kind": sampling.logprobs,
                "logprob_temperature": "1.0" if raw else repr(sampling.temperature)}
        results = []
        for ids, lp in zip(new.tolist(), lps.tolist()):
            ids, finish = self.prompt.cut(ids)  # the stop token stays (the loss learns to end), not in the text
            text = self.prompt.decode(ids)
            results.append(Completion(ids, lp[: len(ids)], finish, text, dict(meta)))
        return results

    def shared_prefill(self, input_ids: torch.Tensor, attention: torch.Tensor) -> DynamicCache | None:
        """The cache of every row's prompt but its last token, computed once per distinct prompt and copied to the
        rows that repeat it; None when no prompt repeats (generate reads them all, as it would anyway)."""
        rows = [tuple(r) for r in input_ids.tolist()]
        first: dict[tuple[int, ...], int] = {}
        index = [first.setdefault(r, len(first)) for r in rows]
        if len(first) == len(rows) or input_ids.shape[1] < 2:
            return None
        pick = torch.tensor([rows.index(r) for r in first], device=input_ids.device)
        ids, mask = input_ids[pick, :-1], attention[pick, :-1]
        cache = DynamicCache(config=self.model.config)
        keep = {"logits_to_keep": 1} if takes_logits_to_keep(self.model) else {}
        self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                   past_key_values=cache, use_cache=True, **keep)
        copies: Any = torch.tensor(index, dtype=torch.long, device=input_ids.device)  # a LongTensor
        cache.reorder_cache(copies)  # one copy per row
        return cache

    def load_weights(self, state_dict: dict[str, torch.Tensor] | Adapter, version: int) -> None:
        """Full weights in place, or a LoRA adapter swapped in (models/lora.py)."""
        self.model = load_version(self.model, state_dict)
        self.version = version
