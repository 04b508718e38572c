"""#34: serve's upstream mode against a real `vllm serve` (the deployment people run): each LoRA version is pushed
through vLLM's runtime LoRA API (`/v1/load_lora_adapter`, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) by the openai
engine with `push_lora`, and the next request, which names the version's adapter, is answered with token ids
and logprobs. Skipped, with the reason, where there is no CUDA device or no vllm (still owed on a GPU machine
that has vllm: tests/gpu/README.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch

from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.lora import from_payload, version_payload, wrap
from rftbus.producers.engines.openai import OpenAIEngine
from tests.gpu.models import saved_small


def test_vllm_serve_receives_each_lora_version_and_serves_it(tmp_path):
    from rftbus.producers.engines.vllm import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        pytest.skip(f"the vLLM upstream is not testable here: {reason}")
    folder = tmp_path / "model"
    cfg, tok, lm = saved_small(folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                               "--served-model-name", "tiny", "--port", str(port), "--enable-lora",
                               "--max-lora-rank", "8", "--max-loras", "2", "--gpu-memory-utilization", "0.3",
                               "--enforce-eager"], env=env)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "vllm serve did not start"
            time.sleep(1)
        ecfg = cfg.model_copy(update={"state_dir": tmp_path, "explorer": cfg.explorer.model_copy(update={
            "engine": cfg.explorer.engine.model_copy(update={"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1",
                                                             "push_lora": True, "lora_dir": str(tmp_path / "lora")})})})
        engine = OpenAIEngine(ecfg, tok)
        peft = wrap(lm, LoraSpec(r=8, alpha=16))
        prompt = tok("37+45=")["input_ids"]
        for v in (1, 2, 3):
            with torch.no_grad():
                for prm in peft.parameters():
                    if prm.requires_grad:
                        prm.add_(torch.randn_like(prm) * 0.05)
            engine.load_weights(from_payload(*version_payload(peft)), v)
            assert engine.served == f"tiny-v{v}" and engine.version == v
            [c] = engine.generate([prompt], SamplingConfig(temperature=1.0, max_new_tokens=8))
            assert c.response_ids and len(c.logprobs) == len(c.response_ids)
        assert engine.loaded == ["tiny-v1", "tiny-v2", "tiny-v3"][-ecfg.explorer.engine.keep_adapters:]
    finally:
        server.terminate()
        server.wait(60)
