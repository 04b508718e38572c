"""The transformers engine reads a prompt that several rows share once (engines/transformers.shared_prefill):
the same seed samples the same tokens with the same logprobs as reading every row's prompt, with prompts of
different lengths (left padding) in one call. The real model's figures: docs/BENCHMARKS.md, "explore"."""

from __future__ import annotations

import pytest
import torch

from rftbus.ground.config import Config
from rftbus.ground.models.loading import load_tokenizer
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.ground.tasksets import get_taskset


def _sample(eng: TransformersEngine, prompts, sampling, shared: bool):
    if not shared:
        eng.shared_prefill = lambda ids, mask: None  # type: ignore[method-assign]
    torch.manual_seed(7)
    return eng.generate(prompts, sampling)


@pytest.mark.parametrize("groups", [(4, 4), (3, 1, 2)])
def test_shared_prompts_sample_what_every_row_read_would(groups):
    cfg = Config.model_validate({"explorer": {"sampling": {"max_new_tokens": 6, "temperature": 1.0}}})
    tok = load_tokenizer(cfg.model)
    texts = ["abc", "abcdefgh", "abcde"][: len(groups)]  # different lengths: left padding inside one call
    eng = TransformersEngine(cfg, tok)
    prompts = [eng.prompt.task(t) for t, n in zip(texts, groups) for _ in range(n)]
    cache = eng.shared_prefill(*_ids(eng, prompts))
    assert cache is not None and cache.get_seq_length() == max(len(p) for p in prompts) - 1
    s = cfg.explorer.sampling
    once, every = _sample(eng, prompts, s, True), _sample(TransformersEngine(cfg, tok), prompts, s, False)
    assert [c.response_ids for c in once] == [c.response_ids for c in every]
    for a, b in zip(once, every):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_no_repeat_reads_every_prompt_as_generate_does():
    cfg = Config()
    tok = load_tokenizer(cfg.model)
    eng = TransformersEngine(cfg, tok)
    tasks = list(get_taskset("reverse").tasks("train", 3))
    assert eng.shared_prefill(*_ids(eng, [eng.prompt.task(t.prompt) for t in tasks])) is None


def _ids(eng, prompts):
    width = max(len(p) for p in prompts)
    pad = eng.tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask
