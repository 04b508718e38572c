"""rftbus/trainer/deepspeed_patches.py: upstream DeepSpeed builds its shared-memory inference op at every CPU process
group start; the trainer's engine does not. Each half runs in its own process (a process group starts once per
process), on the real DeepSpeed engine of a one-layer model, with an empty torch extensions folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, os, sys
from rftbus.trainer.dist import prepare_env
prepare_env("cpu")
import torch
from deepspeed.ops.op_builder import builder as ds_builder
built = []
def jit_load(self, verbose=True):  # what upstream would compile (~60 CPU-s): recorded instead
    built.append(self.NAME)
    raise RuntimeError("not compiled in this test")
ds_builder.OpBuilder.jit_load = jit_load
from transformers import LlamaConfig, LlamaForCausalLM
from rftbus.ground.config import load_config
from rftbus.trainer.engine import build_engine
if sys.argv[1] == "upstream":
    os.environ["DS_ACCELERATOR"] = "cpu-unpatched"  # build_engine patches only for "cpu"
    from deepspeed.accelerator import set_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
    set_accelerator(CPU_Accelerator())
model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, vocab_size=64))
try:
    engine = build_engine(model, load_config(environ={}).trainer)
    ids = torch.randint(0, 64, (1, 8))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    stepped = True
except RuntimeError:  # upstream: the recorded build refused
    stepped = False
print(json.dumps({"built": built, "stepped": stepped, "folder": os.listdir(os.environ["TORCH_EXTENSIONS_DIR"])}))
"""


def _run(mode: str, tmp_path) -> dict:
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / mode)}
    (tmp_path / mode).mkdir()
    env.pop("DS_ACCELERATOR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_upstream_builds_the_shm_op_and_the_trainer_does_not(tmp_path):
    import deepspeed

    from rftbus.trainer.deepspeed_patches import WRITTEN_FOR

    assert deepspeed.__version__ == WRITTEN_FOR, "the patch is written for one DeepSpeed version: re-check it"
    upstream = _run("upstream", tmp_path)
    assert upstream["built"] == ["deepspeed_shm_comm"], upstream  # what the patch is for
    patched = _run("patched", tmp_path)
    assert patched == {"built": [], "stepped": True, "folder": []}, patched
