"""Devices per role on CUDA: a trainer on `cuda:N` is shown that GPU alone (DeepSpeed's rank 0 lands on it),
and the held-out eval on an engine of the explorers' kind on the GPU gives the policy's greedy answers."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from tests.gpu.models import SMALL, config

SHOW = """
import json, os, torch
from rftbus.trainer.dist import prepare_env
prepare_env({spec!r})
print(json.dumps({{"visible": os.environ["CUDA_VISIBLE_DEVICES"], "count": torch.cuda.device_count(),
                   "accelerator": os.environ["DS_ACCELERATOR"]}}))
"""


def _shown(spec: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SHOW.format(spec=spec)], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items() if k != "CUDA_VISIBLE_DEVICES"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_trainer_on_a_named_gpu_sees_that_gpu_alone():
    last = torch.cuda.device_count() - 1
    assert _shown(f"cuda:{last}") == {"visible": str(last), "count": 1, "accelerator": "cuda"}
    assert _shown("cpu") == {"visible": "", "count": 0, "accelerator": "cpu"}


def test_eval_on_a_gpu_engine_gives_the_policy_s_greedy_answers():
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.producers.engines import make_engine
    from rftbus.ground.tasksets import get_taskset
    from rftbus.trainer.evaluate import engine_greedy, policy_greedy

    cfg = config(SMALL, **{"explorer": {"engine": {"device": "cuda:0"}}, "run": {"eval_device": "cuda:0"}})
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    fmt = prompt_format(tok, cfg.model)
    prompts = [fmt.of_task(t) for t in get_taskset("addition").tasks("eval", 16, seed=0)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    by_policy = [fmt.cut(r)[0] for r in policy_greedy(engine.model, pad, fmt.stop_ids)(prompts, 8)]
    by_engine = [fmt.cut(r)[0] for r in engine_greedy(engine)(prompts, 8)]
    same = sum(a == b for a, b in zip(by_policy, by_engine))
    assert same >= 14, (by_policy[:3], by_engine[:3])  # bf16/fp32 ties on a GPU may flip a rare argmax
