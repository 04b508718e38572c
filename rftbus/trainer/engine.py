"""Building the DeepSpeed engine from the config: ZeRO stage, AdamW, linear warm-up, clipping.

The optimizer and scheduler are plain torch objects handed to `deepspeed.initialize` (no fused
op to compile on CPU); DeepSpeed wraps the optimizer for ZeRO and checkpoints both.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rftbus.ground.config.trainer import TrainerConfig


def use_bf16(cfg: TrainerConfig) -> bool:
    """trainer.precision resolved on this machine: bf16 needs a CUDA device that has it."""
    if cfg.precision == "fp32":
        return False
    cuda = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if cfg.precision == "bf16" and not cuda:
        from rftbus.ground.errors import RftbusError

        raise RftbusError("trainer.precision=bf16 needs a CUDA GPU with bf16 (none here); use auto or fp32")
    return cuda


def ds_config(cfg: TrainerConfig) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        "bf16": {"enabled": use_bf16(cfg)},
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }


def lr_factor(step: int, cfg: TrainerConfig) -> float:
    """The learning rate's multiplier at optimizer step `step` (0-based): linear warm-up over
    `warmup_steps`, then a cosine from 1 to `lr_min_ratio` over `lr_decay_steps`, flat after. A
    constant rate kept MIX oscillating to its last minute (best eval 0.967, final 0.835 in one run)."""
    warm, decay = cfg.warmup_steps, cfg.lr_decay_steps
    if warm > 0 and step < warm:
        return (step + 1) / warm
    if not decay:
        return 1.0
    done = min(1.0, (step - warm) / decay)
    return cfg.lr_min_ratio + (1 - cfg.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * done))


def build_engine(module: torch.nn.Module, cfg: TrainerConfig):
    import os

    import deepspeed

    if os.environ.get("DS_ACCELERATOR") == "cpu":  # (rftbus/trainer/dist.py sets it)
        from rftbus.trainer.deepspeed_patches import no_shm_inference_op

        no_shm_inference_op()
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    engine, _, _, _ = deepspeed.initialize(
        model=module, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config(cfg),
        dist_init_required=True)
    return engine


def policy_state_dict(engine) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    """What a weight version holds, with its safetensors metadata: the LM's full weights (gathered under ZeRO-3),
    keyed as a plain transformers model's, or with trainer.lora the adapter alone (models/lora.py)."""
    from rftbus.ground.models.lora import version_payload

    if engine.zero_optimization_stage() == 3:  # (no LoRA: the config refuses it with ZeRO-3)
        full = engine._zero3_consolidated_16bit_state_dict()  # every rank must call; rank 0 gets it
        if full is None:
            return {}, None
        return {k[len("lm."):]: v for k, v in full.items() if k.startswith("lm.")}, None
    return version_payload(engine.module.lm)
