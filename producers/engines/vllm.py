"""vLLM rollout engine (GPU only; `pip install 'rftbus[vllm]'`). Imported lazily by `make_engine`.

Written against vLLM 0.33 (V1 engine) through its supported API only:
- weights are swapped in place by a worker extension (`worker_extension_cls`, vllm_worker.py) called
  through `LLM.collective_rpc`, the mechanism vLLM documents for RL weight updates, and the prefix cache
  is reset after each swap (cached KV of the old weights must not be reused);
- a group of n samples of one prompt is one request with `SamplingParams(n=n)` (the prompt is prefilled
  once);
- LoRA versions (trainer.lora) are served as vLLM LoRA adapters: each version is written as a PEFT folder and
  requested by its own `LoRARequest` (one adapter id per version, room for η + 1 of them on the GPU, vLLM's
  LRU evicting older ones); the base weights never move;
- behaviour logprobs are the *processed* ones (`logprobs_mode="processed_logprobs"`: after temperature,
  top-k and top-p), the distribution actually sampled, as the transformers engine's "sampling" kind.
  vLLM's default ("raw_logprobs") is the model's plain softmax, which is not what an importance ratio at
  temperature != 1 needs.
Not exercised on the CPU-only development machine: tests/gpu/ runs it where CUDA is, and skips with the
reason elsewhere.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from rftbus.config import Config
from rftbus.config.explorer import SamplingConfig
from rftbus.errors import RftbusError
from rftbus.models.lora import Adapter
from rftbus.producers.engines.base import Completion, StepCallback, RolloutEngine

WRITTEN_FOR = ((0, 11), (0, 34))  # vLLM versions [from, to): logprobs_mode, worker extensions, reset_prefix_cache
EXTENSION = "rftbus.producers.engines.vllm_worker.WeightSwap"


def vllm_unavailable_reason() -> str | None:
    """Why the vllm engine cannot run here, or None when it can."""
    try:
        import vllm
    except ImportError:
        return "vllm is not installed (pip install 'rftbus[vllm]')"
    parts = tuple(int(x) for x in vllm.__version__.split(".")[:2] if x.isdigit())
    if not (WRITTEN_FOR[0] <= parts < WRITTEN_FOR[1]):
        return (f"vllm {vllm.__version__} is outside the versions this engine was written for "
                f"(>= {'.'.join(map(str, WRITTEN_FOR[0]))}, < {'.'.join(map(str, WRITTEN_FOR[1]))})")
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU and none is visible"
    return None


def runs_of(prompts: Sequence[list[int]]) -> list[tuple[list[int], int]]:
    """Consecutive equal prompts as (prompt, n): a group's n copies become one request with n samples."""
    runs: list[tuple[list[int], int]] = []
    for p in prompts:
        if runs and runs[-1][0] == list(p):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((list(p), 1))
    return runs


class VllmEngine(RolloutEngine):
    name = "vllm"

    def __init__(self, cfg: Config, tokenizer):
        # vLLM (and the worker processes it starts) take the GPUs they are shown: show only explorer.engine.device's,
        # before anything here starts CUDA (vllm_unavailable_reason counts the devices)
        from rftbus.models.devices import indices, show_only

        spec = cfg.explorer.engine.device
        if spec == "cpu":
            raise RftbusError("explorer.engine.kind=vllm runs on CUDA GPUs: explorer.engine.device cannot be cpu")
        if indices(spec) and len(indices(spec)) != cfg.explorer.engine.tensor_parallel_size:
            raise RftbusError(f"explorer.engine.device {spec} lists {len(indices(spec))} GPU(s) for "
                              f"tensor_parallel_size {cfg.explorer.engine.tensor_parallel_size}: list one per shard")
        show_only(spec)
        reason = vllm_unavailable_reason()
        if reason:
            raise RftbusError(f"explorer.engine.kind=vllm: {reason}")
        from rftbus.models.prompt import prompt_format
        from rftbus.models.source import model_folder

        folder = model_folder(cfg.model)  # a preset or GGUF: its converted folder
        if folder is None:
            raise RftbusError("explorer.engine.kind=vllm needs a Hugging Face model (model.path, a preset or a "
                              "gguf_file): vLLM loads folders, not the built-in tiny model")
        from vllm import LLM

        ec = cfg.explorer.engine
        self.tok = tokenizer
        self.prompt = prompt_format(tokenizer, cfg.model)  # stop ids: the same as the transformers engine's
        lora = cfg.trainer.lora
        self.lora_request = None  # the adapter of the version served (None: the base weights, v0)
        self._lora_slots = cfg.rl.max_staleness + 1  # versions an admitted group may still be generating with
        extra = {"enable_lora": True, "max_loras": self._lora_slots, "max_lora_rank": lora.r} if lora else {}
        self.llm = LLM(model=folder, dtype=cfg.model.dtype, revision=cfg.model.revision, **extra,
                       trust_remote_code=cfg.model.trust_remote_code,
                       gpu_memory_utilization=ec.gpu_memory_utilization,
                       tensor_parallel_size=ec.tensor_parallel_size, max_model_len=ec.max_model_len,
                       enforce_eager=ec.enforce_eager, enable_prefix_caching=True,
                       logprobs_mode="processed_logprobs", worker_extension_cls=EXTENSION,
                       seed=cfg.explorer.sampling.seed or 0)
        self.version = 0
        self.max_context = int(self.llm.llm_engine.model_config.max_model_len)
        # the swap file: local disk of this explorer, read by its own vLLM workers
        self._swap_dir = Path(tempfile.mkdtemp(prefix="rftbus-vllm-swap-"))

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        limit = self.budget(prompts, max_new_tokens or sampling.max_new_tokens)
        runs = runs_of(prompts)
        params = [SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                                 top_k=sampling.top_k or 0, max_tokens=limit,
                                 min_tokens=min(sampling.min_new_tokens, limit), logprobs=0, seed=sampling.seed,
                                 stop_token_ids=list(self.prompt.stop_ids), skip_special_tokens=True)
                  for _, n in runs]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p, _ in runs], params, use_tqdm=False,
                                 lora_request=self.lora_request)
        meta = {"logprob_kind": "sampling", "logprob_temperature": repr(sampling.temperature)}
        results = []
        for out in outs:
            for c in out.outputs:
                ids = list(c.token_ids)
                if c.logprobs is None or len(c.logprobs) != len(ids):
                    raise RftbusError(f"vllm returned {0 if c.logprobs is None else len(c.logprobs)} logprobs "
                                      f"for {len(ids)} tokens")
                lps = [float(step[tok].logprob) for tok, step in zip(ids, c.logprobs)]
                results.append(Completion(ids, lps, "stop" if c.finish_reason == "stop" else "length", c.text,
                                          dict(meta)))
        return results

    def load_weights(self, state_dict: dict[str, torch.Tensor] | Adapter, version: int) -> None:
        from safetensors.torch import save_file

        if isinstance(state_dict, Adapter):  # a LoRA version: a new adapter id, the base weights untouched
            self._load_adapter(state_dict, version)
            return
        path = self._swap_dir / f"v{version}.safetensors"
        save_file({k: v.detach().contiguous().cpu() for k, v in state_dict.items()}, str(path))
        try:
            self.llm.collective_rpc("rftbus_load_weights", args=(str(path),))
        finally:
            path.unlink(missing_ok=True)
        self.llm.reset_prefix_cache()
        self.version = version

    def _load_adapter(self, adapter: Adapter, version: int) -> None:
        import shutil

        from vllm.lora.request import LoRARequest

        from rftbus.models.lora import write_peft_folder

        folder = self._swap_dir / f"lora-v{version}"
        write_peft_folder(adapter, folder)
        self.lora_request = LoRARequest(f"v{version}", version + 1, str(folder))  # ids must be > 0
        for old in self._swap_dir.glob("lora-v*"):  # vLLM reads a folder when a request first names it
            if int(old.name.removeprefix("lora-v")) < version - self._lora_slots:
                shutil.rmtree(old, ignore_errors=True)
        self.version = version

    def close(self) -> None:
        import shutil

        shutil.rmtree(self._swap_dir, ignore_errors=True)
