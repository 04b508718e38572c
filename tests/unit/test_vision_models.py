"""Vision-language models beyond the built-in tiny one (#62): an image-text-to-text folder loads through its own
processor and chat template, and LoRA versions of a VLM travel and swap in as for text. No broker."""

from __future__ import annotations

import torch

from rftbus.ground.config import Config
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.models.lora import adapter_payload, base_fingerprint, from_payload, load_version, wrap
from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.vision import load_processor
from rftbus.ground.prompting import run_prompt_format
from rftbus.ground.tasksets import get_taskset
from rftbus.trainer.batch import collate, rows_of
from rftbus.trainer.policy import PolicyWithValue

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}"
            "{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_a_vlm_folder_loads_with_its_processor_and_renders_images_through_its_chat_template(tmp_path):
    tiny = Config(state_dir=tmp_path, model={"tiny": {"vision": {}, "max_position_embeddings": 128}})
    tok = load_tokenizer(tiny.model)
    tok.chat_template = TEMPLATE
    proc = load_processor(tiny.model, tok)
    proc.chat_template = TEMPLATE
    folder = tmp_path / "tiny-llava"
    load_policy(tiny.model, tok).save_pretrained(folder)
    proc.save_pretrained(folder)
    cfg = Config(state_dir=tmp_path, model={"name": "tiny-llava", "path": str(folder)})
    tok2 = load_tokenizer(cfg.model)
    fmt = run_prompt_format(tok2, cfg)
    assert fmt.template and fmt.vision is not None and type(fmt.vision.processor).__name__ == "LlavaProcessor"
    task = next(get_taskset("shapes").tasks("train", 1))
    ids, text = fmt.with_images([{"role": "user", "content": task.prompt}], task.images)
    assert text == f"<user><image>{task.prompt}<assistant>"  # the template placed the image part
    assert ids.count(fmt.vision.token_id) == 16 and fmt.of_task(task) == ids
    lm = load_policy(cfg.model, tok2)
    assert type(lm).__name__ == "LlavaForConditionalGeneration"
    from rftbus.producers.engines.transformers import TransformersEngine

    out = TransformersEngine(cfg, tok2, lm, fmt).generate([ids] * 2, cfg.explorer.sampling, 4,
                                                         images=[fmt.vision.inputs(task.images)] * 2)
    assert len(out) == 2 and all(fmt.vision.token_id not in c.response_ids for c in out)


def test_a_vlm_lora_version_swaps_in_and_reads_the_picture_as_the_trainer_did(tmp_path):
    cfg = Config(state_dir=tmp_path, model={"tiny": {"vision": {}}})
    tok = load_tokenizer(cfg.model)
    fmt = run_prompt_format(tok, cfg)
    spec = LoraSpec(r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    trained = wrap(load_policy(cfg.model, tok), spec)
    names = [n for n, _ in trained.named_parameters() if "lora_B" in n]
    assert any("vision_tower" in n for n in names) and any("language_model" in n for n in names)
    with torch.no_grad():
        for n, p in trained.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)  # a trained adapter: not the identity
    tensors, meta = adapter_payload(trained)
    served = load_version(load_policy(cfg.model, tok).eval(), from_payload(tensors, meta))
    task = next(get_taskset("shapes").tasks("train", 1))
    from rftbus.producers.experience import expert_group

    batch = collate(rows_of(expert_group(task, task.answer, fmt, "t")), tok.pad_token_id, 64, fmt.vision)
    with torch.no_grad():
        a, _ = PolicyWithValue(trained.eval(), False)(batch.input_ids, batch.attention_mask, 0, None, batch.shown_pixels())
        b, _ = PolicyWithValue(served, False)(batch.input_ids, batch.attention_mask, 0, None, batch.shown_pixels())
        base, _ = PolicyWithValue(load_policy(cfg.model, tok).eval(), False)(
            batch.input_ids, batch.attention_mask, 0, None, batch.shown_pixels())
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, base, atol=1e-3)
    # an adapter of a VLM of another shape is refused by its fingerprint (the vision tower's width differs)
    other = Config(state_dir=tmp_path, model={"tiny": {"vision": {"hidden_size": 32, "intermediate_size": 64}}})
    assert base_fingerprint(load_policy(other.model, load_tokenizer(other.model))) != base_fingerprint(served)
