"""Generation for several tasks in one engine call, handed to their workflows one task at a time.

Why: a tiny model on CPU spends most of a `generate` call on per-call overhead, so one call for 8
groups of 8 makes about three times the samples per second of 8 calls for one group each (figures
in docs/BENCHMARKS.md). Workflows keep their one-task interface: the explorer `prime`s this wrapper
with the requests it expects, and a workflow's `generate` call that matches a primed request
(same prompt ids, same count, same sampling) gets those completions; anything else, a retry
included, goes to the real engine. Nothing primed outlives the batch (`clear`), so a weight swap
never mixes versions.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Sequence

import torch

from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.lora import Adapter
from rftbus.ground.models.vision import Pixels
from rftbus.producers.engines.base import Completion, StepCallback, RolloutEngine, generate

Request = tuple[tuple[int, ...], int]  # (prompt ids, how many samples)


class PrimedEngine(RolloutEngine):
    name = "primed"

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        # (request, the sampling as JSON, the images' key): completions ready for a workflow's call
        self._ready: dict[tuple[Request, str, str], deque[list[Completion]]] = defaultdict(deque)
        self.primed_calls = 0  # engine calls made by `prime`
        self.hits = 0  # workflow calls answered from a primed batch

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.engine.version

    @property
    def max_context(self) -> int | None:  # type: ignore[override]
        return self.engine.max_context

    @property
    def reads_images(self) -> bool:  # type: ignore[override]
        return self.engine.reads_images

    def prime(self, requests: list[Request], sampling: SamplingConfig,
              images: Sequence[Pixels | None] | None = None) -> None:
        """Generate every request in one engine call (`images`: per request, the images its prompt shows)."""
        prompts = [list(p) for p, n in requests for _ in range(n)]
        if not prompts:
            return
        shown = list(images) if images is not None else [None] * len(requests)
        rows = [px for (_, n), px in zip(requests, shown, strict=True) for _ in range(n)]
        t0 = time.perf_counter()
        out = generate(self.engine, prompts, sampling, images=rows)
        dt = time.perf_counter() - t0
        self.primed_calls += 1
        meta = {"batch_generation_ms": f"{dt * 1000:.3f}", "batch_groups": str(len(requests)),
                "batch_samples": str(len(prompts))}
        i, key = 0, sampling.model_dump_json()
        for req, px in zip(requests, shown):
            group = out[i:i + req[1]]
            for c in group:
                c.metadata.update(meta)
            self._ready[(req, key, px.key if px is not None else "")].append(group)
            i += req[1]

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None,
                 images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        first = images[0] if images else None
        same_images = not images or all((i.key if i else "") == (first.key if first else "") for i in images)
        if prompts and max_new_tokens is None and same_images and all(p == prompts[0] for p in prompts):
            waiting = self._ready.get(((tuple(prompts[0]), len(prompts)), sampling.model_dump_json(),
                                       first.key if first is not None else ""))
            if waiting:
                self.hits += 1
                return waiting.popleft()
        return generate(self.engine, prompts, sampling, max_new_tokens, images=images)

    def clear(self) -> int:
        """Drop what no workflow asked for (a task that failed to decode, a workflow that sampled
        differently); returns how many groups that was."""
        left = sum(len(q) for q in self._ready.values())
        self._ready.clear()
        return left

    def load_weights(self, state_dict: dict[str, torch.Tensor] | Adapter, version: int) -> None:
        self.clear()
        self.engine.load_weights(state_dict, version)

    def close(self) -> None:
        self.engine.close()
