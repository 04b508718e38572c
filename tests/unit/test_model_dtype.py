"""model.dtype auto (rftbus/ground/models/loading.py::dtype_name): the checkpoint's own dtype where a model generates on a
GPU, float32 on the CPU and in the trainer; a dtype set is kept. Reads config.json only: no GPU, no broker."""

from __future__ import annotations

from transformers import LlamaConfig

from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.loading import dtype_name, load_policy


def test_auto_is_the_checkpoints_dtype_on_a_gpu_and_float32_elsewhere(tmp_path):
    conf = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, dtype="bfloat16")
    conf.save_pretrained(tmp_path)
    auto = ModelConfig(path=str(tmp_path))
    assert auto.dtype == "auto"
    assert dtype_name(auto, "cuda:0") == "bfloat16" and dtype_name(auto, "mps") == "bfloat16"
    assert dtype_name(auto, "cpu") == "float32" and dtype_name(auto, None) == "float32"  # None: the trainer
    assert dtype_name(ModelConfig(path=str(tmp_path), dtype="float16"), "cpu") == "float16"
    assert dtype_name(ModelConfig(), "cuda") == "float32"  # the built-in tiny model


def test_the_tiny_model_loads_in_float32_under_auto():
    lm = load_policy(ModelConfig())
    assert next(lm.parameters()).dtype.__str__() == "torch.float32"
