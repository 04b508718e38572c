"""A run's prompt format: the model's one renderer (models/prompt.py) with, for a vision-language model, its Vision
bound to the run's image rules (rftbus/ground/images/), so a task's images are read hash-checked and within bounds.

Here, not in models/: the image rules need the run's config and the weight store, which import the models' config.
"""

from __future__ import annotations

from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.images import images_refusal, pil_images
from rftbus.ground.models.prompt import PromptFormat, prompt_format
from rftbus.ground.models.vision import Vision, is_vision, load_processor


def vision_for(cfg: Config, tokenizer: Any) -> Vision | None:
    """The run's Vision when its model reads images, else None."""
    if not is_vision(cfg.model):
        return None
    return Vision(load_processor(cfg.model, tokenizer), read=lambda images: pil_images(images, cfg),
                  refuse=lambda images: images_refusal(images, cfg))


def run_prompt_format(tokenizer: Any, cfg: Config) -> PromptFormat:
    """The model's PromptFormat, showing a task's images when the model reads them."""
    fmt = prompt_format(tokenizer, cfg.model)
    fmt.vision = vision_for(cfg, tokenizer)
    return fmt
