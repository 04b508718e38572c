"""LoRA adapters as weight versions (models/lora.py) on SmolLM2's architecture (two layers, random weights): an
adapter version is a small file, swaps into a reader's base model in place and computes what the trainer's
model computes; bad adapters and targets fail in one line naming what is wrong."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from rftbus.ground.models.config import LoraSpec, ModelConfig
from rftbus.ground.models.lora import Adapter, apply, base_fingerprint, is_peft, load_version, version_payload, wrap
from rftbus.ground.models.loading import load_policy
from rftbus.ground.models.source import ModelError
from rftbus.ground.weights import WeightStore, load_weights

SPEC = LoraSpec(r=8, alpha=16)


def _trained(folder) -> torch.nn.Module:
    """A wrapped model whose adapter moved off its zero start (as a few optimizer steps would)."""
    m = wrap(AutoModelForCausalLM.from_pretrained(folder), SPEC)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    return m.eval()


def test_an_adapter_version_is_small_and_swaps_in_place(smollm2_two_layers, tmp_path):
    trained = _trained(smollm2_two_layers)
    assert all(("lora_" in n) == p.requires_grad for n, p in trained.named_parameters())
    store = WeightStore(tmp_path / "store")
    tensors, meta = version_payload(trained)
    full = store.save("m", 0, version_payload(load_policy(ModelConfig(path=str(smollm2_two_layers))))[0])
    saved = store.save("m", 1, tensors, meta)
    assert saved.bytes < 0.01 * full.bytes, (saved.bytes, full.bytes)
    payload = load_weights(saved.uri, saved.sha256)
    assert isinstance(payload, Adapter) and payload.spec == SPEC.model_copy(update={"target_modules": sorted(SPEC.target_modules)})
    reader = AutoModelForCausalLM.from_pretrained(smollm2_two_layers).eval()
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253]])
    base_out = reader(ids).logits
    reader = load_version(reader, payload)
    assert is_peft(reader)
    with torch.no_grad():
        assert torch.allclose(reader(ids).logits, trained(ids).logits, atol=1e-5)
        assert not torch.allclose(reader(ids).logits, base_out, atol=1e-3)
    # the next version's tensors are copied into the same wrapper (no second wrap, no reload)
    with torch.no_grad():
        for n, p in trained.named_parameters():
            if "lora_B" in n:
                p.mul_(2)
    again = load_version(reader, load_weights(*_saved(store, 2, trained)))
    assert again is reader
    with torch.no_grad():
        assert torch.allclose(reader(ids).logits, trained(ids).logits, atol=1e-5)


def _saved(store, version, model):
    s = store.save("m", version, *version_payload(model))
    return s.uri, s.sha256


def test_bad_adapters_and_targets_are_one_line(smollm2_two_layers):
    with pytest.raises(ModelError, match=r"target_modules: qkv_proj not in the model .*q_proj"):
        wrap(AutoModelForCausalLM.from_pretrained(smollm2_two_layers), LoraSpec(target_modules=["q_proj", "qkv_proj"]))
    trained = _trained(smollm2_two_layers)
    tensors, meta = version_payload(trained)
    adapter = Adapter(SPEC, meta["rftbus.base"], tensors)
    tiny = load_policy(ModelConfig())
    with pytest.raises(ModelError, match="a different base model"):
        apply(tiny, adapter)
    assert base_fingerprint(tiny) != adapter.base
    with pytest.raises(ModelError, match="full weights cannot load"):
        load_version(trained, tiny.state_dict())


def test_export_writes_the_merged_model_and_the_adapter_folder(smollm2_two_layers, tmp_path):
    from peft import PeftModel

    from rftbus.ground.config import load_config
    from rftbus.ground.weights.export import export_weights

    cfg = load_config(overrides={"state_dir": str(tmp_path / "state"), "model": {"name": "two",
                                 "path": str(smollm2_two_layers)}}, environ={})
    trained = _trained(smollm2_two_layers)
    store = WeightStore(cfg.state_dir / "weights")
    store.save("two", 3, *version_payload(trained))
    r = export_weights(cfg, tmp_path / "out", version=3)
    assert r.adapter == "adapter" and r.version == 3
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253]])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    again = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(smollm2_two_layers), tmp_path / "out" / "adapter").eval()
    with torch.no_grad():
        want = trained(ids).logits
        assert torch.allclose(merged(ids).logits, want, atol=1e-4)
        assert torch.allclose(again(ids).logits, want, atol=1e-5)


def test_lora_dropout_reaches_the_adapter(smollm2_two_layers):
    """trainer.lora.dropout sat after a comment and was never passed (#45): peft then built no dropout at all."""
    m = wrap(AutoModelForCausalLM.from_pretrained(smollm2_two_layers), LoraSpec(r=4, alpha=8, dropout=0.25))
    assert m.peft_config["default"].lora_dropout == 0.25
    drops = [mod for n, mod in m.named_modules() if n.endswith("lora_dropout.default")]
    assert drops and all(isinstance(d, torch.nn.Dropout) and d.p == 0.25 for d in drops)
    assert json.loads(version_payload(m)[1]["rftbus.lora"])["dropout"] == 0.25


def test_an_adapter_folded_into_the_base_weights_computes_what_peft_does(smollm2_two_layers):
    """merged_state (vLLM's CPU build serves LoRA versions as full weights): W + alpha/r·B·A loaded into a plain model
    gives the PEFT model's logits."""
    from rftbus.ground.models.lora import adapter_payload, from_payload, merged_state

    trained = _trained(smollm2_two_layers)
    adapter = from_payload(*adapter_payload(trained))
    plain = AutoModelForCausalLM.from_pretrained(smollm2_two_layers).eval()
    base = {k: v.clone() for k, v in plain.state_dict().items()}
    folded = merged_state(base, adapter)
    changed = [k for k in base if not torch.equal(base[k], folded[k])]
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"))
                           for k in changed)
    plain.load_state_dict(folded)
    ids = torch.tensor([[1, 5, 9, 33, 70]])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, trained(ids).logits, atol=1e-4)
    with pytest.raises(ModelError, match="no base weight"):
        merged_state({k: v for k, v in base.items() if "q_proj" not in k}, adapter)
