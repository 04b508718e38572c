"""How `rftbus run` splits the machine's cores between its explorers and its trainer, so no two share one.

Measured on the real-times config (SmolLM2-135M + LoRA, 64 answers of 16 tokens a step, 2 cores): the
answers a step needs take an explorer about 11 s on one thread (8.2 s per 64, ~27 % of groups dropped for zero
reward variance) and the trainer's step 10.9 s on one thread; on two threads the step takes 8.1 s, a 1.35x gain
for a second core that the explorer would have had to give up (docs/BENCHMARKS.md, "Trainer step" and "explore").
So by default the explorers get half the cores between them and the trainer the rest; the streams worker, the
broker and the run's own eval (niced, run.eval_nice) use what they leave.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rftbus.ground.config import Config


@dataclass(frozen=True)
class Threads:
    trainer: int
    explorer: int  # each explorer's
    cores: int
    auto: bool


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split(cfg: Config, cores: int | None = None) -> Threads:
    cores = cores or usable_cores()
    n = max(1, cfg.run.explorers)
    explorer = cfg.explorer.threads or max(1, cores // (2 * n))
    trainer = cfg.trainer.threads or max(1, cores - n * explorer)
    return Threads(trainer, explorer, cores, cfg.explorer.threads is None or cfg.trainer.threads is None)
