"""One rollout engine as a bench worker (`python -m rftbus.apps.bench.engine_worker CONFIG KIND`): it loads the engine
the config names with `explorer.engine.kind` KIND, says `ready` with its load time, then answers each `go` line on
stdin with one batch of the taskset's first prompts (rendered by the one prompt renderer) as a JSON line; with
`lora` and trainer.lora set it first loads an adapter version (as explorers serve from the first step on). Run
under the Python the engine needs (vLLM's environment for vllm), so `rftbus bench engines` can alternate two."""

from __future__ import annotations

import json
import sys
import time


def adapter_version(cfg, tok):
    """A version as the trainer publishes one under trainer.lora: the config's adapter with B drawn at random (a
    trained adapter's cost: an adapter of zeros may be skipped by an engine)."""
    import torch

    from rftbus.ground.models.loading import load_policy
    from rftbus.ground.models.lora import adapter_payload, from_payload, wrap

    peft = wrap(load_policy(cfg.model, tok), cfg.trainer.lora)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)
    return from_payload(*adapter_payload(peft))


def main(config_path: str, kind: str, groups: int, n: int, max_new_tokens: int, lora: bool) -> None:
    t0 = time.perf_counter()
    from rftbus.ground.config import load_config
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.producers.engines import make_engine
    from rftbus.ground.tasksets.data import open_taskset

    cfg = load_config(config_path)
    cfg.explorer.engine.kind = kind
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    tasks = list(open_taskset(cfg.taskset).tasks("train", groups, seed=0))
    prompts = [fmt.of_task(t) for t in tasks for _ in range(n)]
    engine = make_engine(cfg, tok)
    if lora and cfg.trainer.lora is not None:  # serving a LoRA version, as explorers do after the first step
        engine.load_weights(adapter_version(cfg, tok), 1)
    sampling = cfg.explorer.sampling.model_copy(update={"max_new_tokens": max_new_tokens})
    print(json.dumps({"ready": True, "load_s": round(time.perf_counter() - t0, 2)}), flush=True)
    for i, line in enumerate(sys.stdin):
        if line.strip() != "go":
            break
        t = time.perf_counter()
        comps = engine.generate(prompts, sampling.model_copy(update={"seed": i}))
        dt = time.perf_counter() - t
        tokens = sum(len(c.response_ids) for c in comps)
        print(json.dumps({"round": i, "answers": len(comps), "tokens": tokens, "seconds": round(dt, 3),
                          "tokens_per_s": round(tokens / dt, 1)}), flush=True)
    engine.close()


if __name__ == "__main__":  # (vLLM's engine core may be a spawned process: it re-imports this module)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "lora")
