"""Vision-language models (#62): which models read images, their processor, and the one place a prompt's images
become expanded prompt ids and pixel values.

The explorer and the trainer both call `Vision.pixels` on the same Image records (the task's, copied into the
group) and the explorer's prompt ids are recorded already expanded (each image placeholder repeated as many times
as the model has image features), so the trainer's forward reads the same token layout and the same pixel values
the rollout generated from; tests/integration/test_vision.py asserts both.

Written for LLaVA-family models (`LlavaForConditionalGeneration`: llava-hf/llava-1.5-7b-hf,
llava-hf/llava-interleave-qwen-0.5b-hf, ...) and any image-text-to-text model whose processor returns only
`input_ids` and fixed-size `pixel_values` per image. Processors that return more per image (Qwen2-VL's
`image_grid_thw`, Idefics3/SmolVLM's `pixel_attention_mask`) load, but are refused with that reason: the trainer's
batch carries pixel values only. The tiny VLM (model.tiny.vision) is a LLaVA built from config: a CLIP vision tower,
the projector and the tiny Llama, with the character tokenizer plus one `<image>` token.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rftbus.ground.errors import RftbusError
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.source import ModelError, model_folder

Image = Any  # rftbus.ground.schemas.Image (not imported: the schemas import the config, which imports models/)

IMAGE_TOKEN = "<image>"


@dataclass(frozen=True)
class Pixels:
    """A prompt's images as an engine takes them: which images (their sha256s, so two prompts with the same text
    and other images never share completions) and their pixel values, [n_images, C, H, W]."""

    key: str
    values: Any


def stacked(images: Sequence[Pixels | None] | None) -> Any:
    """The pixel values of a batch's prompts' images in row order (a VLM fills its image tokens with them in that
    order), or None when no prompt shows one."""
    shown = [i.values for i in images or () if i is not None]
    if not shown:
        return None
    import torch

    return torch.cat(shown)


def pixel_inputs(model: Any, values: Any) -> dict[str, Any]:
    """The model's `pixel_values` keyword, on its device and in its dtype; {} when no image is shown."""
    if values is None:
        return {}
    p = next(model.parameters())
    return {"pixel_values": values.to(p.device, dtype=p.dtype)}


EXTRA_KEYS_REFUSED = ("image_grid_thw", "pixel_attention_mask", "image_sizes", "aspect_ratio_ids")


def image_token_of(model: Any) -> int | None:
    """The id a VLM's prompt holds where an image's features go (None: a text model). Generation suppresses it: an
    answer that sampled it would hold one more image token than the prompt has images, and the trainer's forward
    would fail on the record (seen in `make demo-vision` after 180 steps)."""
    conf = getattr(model, "config", None)
    if conf is None or getattr(conf, "vision_config", None) is None:
        return None
    for name in ("image_token_id", "image_token_index"):
        tid = getattr(conf, name, None)
        if isinstance(tid, int):
            return tid
    return None


def is_vision(cfg: ModelConfig) -> bool:
    """Whether the configured model reads images: the tiny VLM, or a folder whose config has a vision tower."""
    folder = model_folder(cfg)
    if folder is None:
        return cfg.tiny.vision is not None
    from transformers import AutoConfig

    try:
        conf = AutoConfig.from_pretrained(folder, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError):
        return False
    return getattr(conf, "vision_config", None) is not None


def tiny_vlm(cfg: ModelConfig, tok: Any) -> Any:
    """The tiny LLaVA from model.seed: every process builds the identical version 0."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    t, v = cfg.tiny, cfg.tiny.vision
    assert v is not None
    text = LlamaConfig(
        vocab_size=len(tok), hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_attention_heads, max_position_embeddings=t.max_position_embeddings,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True)
    vision = CLIPVisionConfig(hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
                              num_hidden_layers=v.num_hidden_layers, num_attention_heads=v.num_attention_heads,
                              image_size=v.image_size, patch_size=v.patch_size, projection_dim=v.hidden_size)
    conf = LlavaConfig(vision_config=vision, text_config=text, image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
                       vision_feature_layer=-1, vision_feature_select_strategy="default",
                       image_seq_length=(v.image_size // v.patch_size) ** 2, tie_word_embeddings=True)
    conf.pad_token_id, conf.eos_token_id, conf.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    state = torch.random.get_rng_state()
    torch.manual_seed(cfg.seed)
    try:
        return LlavaForConditionalGeneration(conf)
    finally:
        torch.random.set_rng_state(state)


def load_processor(cfg: ModelConfig, tok: Any) -> Any:
    """The model's processor: the folder's own (AutoProcessor), or the tiny VLM's LLaVA processor."""
    folder = model_folder(cfg)
    if folder is None:
        from transformers import CLIPImageProcessorPil, LlavaProcessor

        v = cfg.tiny.vision
        assert v is not None
        side = {"height": v.image_size, "width": v.image_size}
        images = CLIPImageProcessorPil(size={"shortest_edge": v.image_size}, crop_size=side)
        return LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=v.patch_size,
                              vision_feature_select_strategy="default", num_additional_image_tokens=1,
                              image_token=IMAGE_TOKEN)
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(folder, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelError(f"model {folder}: no processor could be loaded ({str(e).splitlines()[0]})") from None


class Vision:
    """A VLM's processor with the run's image rules: images in, expanded prompt ids and pixel values out."""

    def __init__(self, processor: Any, read: Callable[[list[Image]], list[Any]],
                 refuse: Callable[[list[Image]], Exception | None], cache: int = 256):
        """`read`: Image records -> PIL images, hash-checked (the run's image rules: rftbus/ground/images/);
        `refuse`: why a record's images are not admitted (its `reason`), or None."""
        self.processor, self.read, self.refuse = processor, read, refuse
        self.token = getattr(processor, "image_token", None) or IMAGE_TOKEN
        self.token_id = int(processor.tokenizer.convert_tokens_to_ids(self.token))
        self._pixels: OrderedDict[str, Any] = OrderedDict()  # sha256 -> pixel values (a task's group of n reuses it)
        self._cache = cache

    def pil(self, images: list[Image]) -> list[Any]:
        return self.read(images)

    def content(self, text: str, n: int) -> list[dict[str, Any]]:
        """A user turn's content parts for a chat template: the images, then the text."""
        return [*({"type": "image"} for _ in range(n)), {"type": "text", "text": text}]

    def plain(self, text: str, n: int) -> str:
        """A prompt without a chat template: one placeholder per image before the text."""
        return self.token * n + text

    def expand(self, text: str, images: list[Image]) -> list[int]:
        """The prompt ids of `text` (its placeholders in place) with each placeholder expanded as the model needs."""
        pils = self.pil(images)
        enc = self.processor(text=[text], images=pils or None, return_tensors="pt", add_special_tokens=False)
        extra = [k for k in EXTRA_KEYS_REFUSED if k in enc]
        if extra:
            raise ModelError(f"the model's processor returns {', '.join(extra)} per image; rftbus carries pixel "
                             "values only (rftbus/ground/models/vision.py names the models it is written for)")
        ids = [int(i) for i in enc["input_ids"][0]]
        if ids.count(self.token_id) == 0 and images:
            raise ModelError("the processor wrote no image tokens for the prompt's images")
        for img, pv in zip(images, enc["pixel_values"]):  # (the same values `pixels` gives: cached once)
            self._remember(img.sha256, pv.unsqueeze(0))
        return ids

    def pixels(self, images: list[Image]) -> Any:
        """[n_images, C, H, W] float pixel values of a prompt's images, in order (cached by sha256)."""
        import torch

        parts = []
        for img in images:
            pv = self._pixels.get(img.sha256)
            if pv is None:
                pv = self.processor.image_processor(self.pil([img]), return_tensors="pt")["pixel_values"]
                self._remember(img.sha256, pv)
            else:
                self._pixels.move_to_end(img.sha256)
            parts.append(pv)
        return torch.cat(parts) if parts else None

    def token_count(self, images: list[Image]) -> int:
        """How many image tokens a prompt showing `images` holds once expanded (the processor says, per image)."""
        enc = self.processor(text=[self.token * len(images)], images=self.pil(images), return_tensors="pt",
                             add_special_tokens=False)
        return int((enc["input_ids"][0] == self.token_id).sum())

    def problem(self, images: list[Image], prompt_ids: list[int]) -> tuple[str, str] | None:
        """(reason, detail) when a group's images cannot be trained with its prompt ids: refused images (too large,
        forged: rftbus/ground/images/), or a token layout that is not the processor's (image tokens in the prompt
        that do not match the images' features, which would fail the forward). None when they can."""
        bad = self.refuse(images)
        if bad is not None:
            return getattr(bad, "reason", "image_refused"), str(bad)
        try:
            self.pixels(images)  # read and hash-checked (then cached for the batch)
            want = self.token_count(images)
        except RftbusError as e:  # (an ImageRefusal: its reason)
            return getattr(e, "reason", "image_refused"), str(e)
        got = prompt_ids.count(self.token_id)
        if got != want:
            return "image_tokens_mismatch", (f"the prompt holds {got} image tokens; its {len(images)} image(s) "
                                             f"expand to {want} (the processor's layout)")
        return None

    def inputs(self, images: list[Image]) -> Pixels | None:
        """What an engine generates from for a prompt showing `images` (None: it shows none)."""
        if not images:
            return None
        return Pixels(",".join(i.sha256 for i in images), self.pixels(images))

    def _remember(self, sha: str, pv: Any) -> None:
        self._pixels[sha] = pv
        while len(self._pixels) > self._cache:
            self._pixels.popitem(last=False)


