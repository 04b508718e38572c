"""vLLM rollout engine (GPU only; `pip install rftbus[vllm]`). Imported lazily by `make_engine`.

Weights are swapped with vLLM's `load_weights` on the driver's model, between generations.
Not exercised on the CPU-only development machine: tests skip it with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rftbus.config import Config
from rftbus.errors import RftbusError
from rftbus.config.explorer import SamplingConfig
from rftbus.producers.engines.base import Completion, RolloutEngine


def vllm_unavailable_reason() -> str | None:
    """Why the vllm engine cannot run here, or None when it can."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "vllm is not installed (pip install 'rftbus[vllm]')"
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU and none is visible"
    return None


class VllmEngine(RolloutEngine):
    name = "vllm"

    def __init__(self, cfg: Config, tokenizer):
        reason = vllm_unavailable_reason()
        if reason:
            raise RftbusError(f"explorer.engine.kind=vllm: {reason}")
        if cfg.model.path is None:
            raise RftbusError("explorer.engine.kind=vllm needs model.path (vLLM loads Hugging Face folders)")
        from vllm import LLM
        self.tok = tokenizer
        self.llm = LLM(model=cfg.model.path, dtype=cfg.model.dtype,
                       gpu_memory_utilization=cfg.explorer.engine.gpu_memory_utilization,
                       seed=cfg.explorer.sampling.seed or 0)
        self.version = 0
        self.max_context = int(self.llm.llm_engine.model_config.max_model_len)

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k or -1,
                                max_tokens=self.budget(prompts, max_new_tokens or sampling.max_new_tokens),
                                min_tokens=sampling.min_new_tokens, logprobs=0, seed=sampling.seed)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        results = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[tok].logprob) for tok, step in zip(ids, c.logprobs)]
            results.append(Completion(ids, lps, "stop" if c.finish_reason == "stop" else "length", c.text,
                                      {"logprob_kind": "vllm", "logprob_temperature": repr(sampling.temperature)}))
        return results

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(state_dict.items())
        self.version = version
