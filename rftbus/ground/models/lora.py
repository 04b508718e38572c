"""LoRA adapters (PEFT) as weight versions: what the trainer trains, publishes and every reader swaps in.

A version is the adapter's tensors (`get_peft_model_state_dict`) in a safetensors file whose header metadata
carries the adapter's shape (r, alpha, dropout, target modules) and the base model's fingerprint. A reader
that holds the base model wraps it the first time an adapter arrives and afterwards only copies the new
adapter's tensors in place (`set_peft_model_state_dict`): no reload of the 540 MB model per version. An
adapter trained on another base model is refused with a line naming both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.source import ModelError

FORMAT = "peft-lora"  # WeightVersion.format of an adapter version ("safetensors": full weights)
_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings")


@dataclass
class Adapter:
    """One adapter version as read from the store."""

    spec: LoraSpec
    base: str  # base_fingerprint of the model it was trained on
    state: dict[str, torch.Tensor]


def base_fingerprint(model: Any) -> str:
    """What makes two base models interchangeable for an adapter: architecture and shapes (its config)."""
    conf = getattr(model, "get_base_model", lambda: model)().config.to_dict()
    key = {k: conf.get(k) for k in _KEYS}
    key["architectures"] = conf.get("architectures")
    for part in ("text_config", "vision_config"):  # a VLM's shapes are in its parts' configs
        if isinstance(conf.get(part), dict):
            key[part] = {k: conf[part].get(k) for k in _KEYS}
    return f"{conf.get('model_type')}-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}"


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def wrap(model: Any, spec: LoraSpec) -> Any:
    """The model with a fresh adapter (B = 0, so it computes exactly the base model); only the adapter trains."""
    from peft import LoraConfig, get_peft_model

    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    missing = [t for t in spec.target_modules if t not in linear]
    if missing:
        raise ModelError(f"trainer.lora.target_modules: {', '.join(missing)} not in the model "
                         f"({type(model).__name__} has Linear modules {', '.join(linear)})")
    conf = LoraConfig(r=spec.r, lora_alpha=spec.alpha,  # type: ignore[arg-type]  # peft scales by a float
                      lora_dropout=spec.dropout, target_modules=list(spec.target_modules), bias="none",
                      task_type="CAUSAL_LM")
    return get_peft_model(model, conf)


def adapter_payload(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, safetensors metadata) of a wrapped model's adapter: what one weight version holds."""
    from peft import get_peft_model_state_dict

    conf = model.peft_config["default"]
    spec = LoraSpec(r=conf.r, alpha=conf.lora_alpha, dropout=conf.lora_dropout,
                    target_modules=sorted(conf.target_modules))
    return stored({k: v.detach() for k, v in get_peft_model_state_dict(model).items()}, spec, base_fingerprint(model))


def stored(tensors: dict[str, torch.Tensor], spec: LoraSpec, base: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, safetensors metadata) as a version stores an adapter; `Adapter` is what reading it gives back."""
    return tensors, {"rftbus.format": FORMAT, "rftbus.lora": spec.model_dump_json(), "rftbus.base": base}


def from_payload(state: dict[str, torch.Tensor], meta: dict[str, str]) -> Adapter:
    try:
        return Adapter(LoraSpec.model_validate_json(meta["rftbus.lora"]), meta["rftbus.base"], state)
    except (KeyError, ValueError) as e:
        raise ModelError(f"adapter metadata is incomplete or invalid: {e}") from None


def apply(model: Any, adapter: Adapter) -> Any:
    """`model` serving `adapter`: wrapped on the first adapter, tensors copied in place after. Returns the model
    to keep (the wrapper, the first time). Raises ModelError for an adapter of another base model."""
    from peft import set_peft_model_state_dict

    have = base_fingerprint(model)
    if adapter.base != have:
        raise ModelError(f"adapter for base model {adapter.base} cannot load into {have} (a different base model)")
    if not is_peft(model):
        model = wrap(model, adapter.spec)
        model.eval()
    result = set_peft_model_state_dict(model, adapter.state)
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise ModelError(f"adapter tensors do not fit the model: {unexpected[:3]}")
    return model


def load_version(model: Any, payload: dict[str, torch.Tensor] | Adapter) -> Any:
    """One weight version into `model`: an adapter swapped in (see `apply`), or full weights loaded strictly.
    Returns the model to keep using (the PEFT wrapper after a first adapter)."""
    if isinstance(payload, Adapter):
        return apply(model, payload)
    if is_peft(model):
        raise ModelError("full weights cannot load into a model that serves LoRA adapters (the trainer's "
                         "trainer.lora changed mid-run?)")
    own = model.state_dict()
    wrong = [k for k in payload if k not in own or tuple(own[k].shape) != tuple(payload[k].shape)]
    missing = [k for k in own if k not in payload]
    if wrong or missing:  # checked first: load_state_dict copies what fits before it raises for what does not
        raise ModelError(f"weights do not fit the model: {len(wrong)} tensors of another name or shape "
                         f"({wrong[:3]}), {len(missing)} missing ({missing[:3]})")
    model.load_state_dict(payload, strict=True)
    return model


def version_payload(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    """What a weight version of `model` holds: its adapter (with metadata) when it serves one, else every weight."""
    if is_peft(model):
        return adapter_payload(model)
    return {k: v.detach() for k, v in model.state_dict().items()}, None


def write_peft_folder(adapter: Adapter, folder: Any) -> None:
    """The adapter as PEFT saves one (adapter_config.json + adapter_model.safetensors): what vLLM's LoRA loading
    (`LoRARequest`, `/v1/load_lora_adapter`) and `PeftModel.from_pretrained` read."""
    from pathlib import Path

    from peft import LoraConfig
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    s = adapter.spec
    LoraConfig(r=s.r, lora_alpha=s.alpha, lora_dropout=s.dropout,  # type: ignore[arg-type]
               target_modules=list(s.target_modules), bias="none", task_type="CAUSAL_LM").save_pretrained(str(folder))
    save_file({k: v.detach().contiguous().cpu() for k, v in adapter.state.items()},
              str(folder / "adapter_model.safetensors"), metadata={"rftbus.base": adapter.base})


def read_peft_folder(folder: Any, base: str) -> Adapter:
    """A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) as an Adapter; `base` is the
    fingerprint assumed when the folder does not name one (a folder PEFT wrote, not rftbus)."""
    from pathlib import Path

    from safetensors import safe_open

    folder = Path(folder)
    try:
        conf = json.loads((folder / "adapter_config.json").read_text())
        spec = LoraSpec(r=conf["r"], alpha=conf["lora_alpha"], dropout=conf.get("lora_dropout", 0.0),
                        target_modules=sorted(conf["target_modules"]))
        with safe_open(str(folder / "adapter_model.safetensors"), framework="pt") as f:
            state = {k: f.get_tensor(k) for k in f.keys()}
            named = (f.metadata() or {}).get("rftbus.base")
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ModelError(f"{folder} is not a PEFT LoRA adapter folder: {type(e).__name__}: {e}") from None
    return Adapter(spec, named or base, state)


def merged_state(base: dict[str, torch.Tensor], adapter: Adapter) -> dict[str, torch.Tensor]:
    """The base weights with the adapter folded in (W + alpha/r · B·A per target module): what an engine that serves
    full weights only (vLLM's CPU build, whose LoRA kernels are slow) loads for a LoRA version. Raises ModelError for
    an adapter module the base has not."""
    scale = adapter.spec.alpha / adapter.spec.r
    out = dict(base)
    for key, a in adapter.state.items():
        if not key.endswith(".lora_A.weight"):
            continue
        stem = key.removesuffix(".lora_A.weight")
        name = stem.removeprefix("base_model.model.") + ".weight"
        w = base.get(name)
        if w is None:
            raise ModelError(f"adapter module {stem} has no base weight {name}")
        b = adapter.state[stem + ".lora_B.weight"]
        out[name] = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
    return out
